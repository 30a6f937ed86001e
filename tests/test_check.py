"""`inspect check`: budgets in human units, config files, several models, JUnit XML, exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import torchvision

from torchinspect.analysis.check import Metric, check_budgets, parse_budget
from torchinspect.errors import InspectError


@pytest.mark.parametrize(("text", "metric", "value"), [
    ("25M", "params", 25e6), ("5G", "macs", 5e9), ("1.5e9", "macs", 1.5e9), ("100k", "params", 1e5),
    ("30000000", "params", 3e7), (100, "size-mb", 100.0), ("12.5", "activation-mb", 12.5),
    ("2B", "params", 2e9),
])
def test_parse_budget(text, metric, value) -> None:
    assert parse_budget(text, metric) == value


@pytest.mark.parametrize(("text", "metric"), [("25X", "params"), ("100M", "size-mb"), ("-3", "macs"),
                                              ("", "params")])
def test_parse_budget_rejects(text, metric) -> None:
    with pytest.raises(InspectError, match="is not a budget"):
        parse_budget(text, metric)


def _resnet18_facts() -> tuple[int, int, int]:
    model = torchvision.models.resnet18()
    params = sum(p.numel() for p in model.parameters())
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model.eval()(torch.randn(1, 3, 224, 224))
    return params, size, fc.get_total_flops() // 2


def test_measured_values_match_references() -> None:
    params, size, macs = _resnet18_facts()
    r = check_budgets("resnet18", max_params=params, max_macs=macs, max_size_mb=size / 1e6)
    got = {x.metric: x.value for x in r.models[0].results}
    assert got[Metric.params] == params and got[Metric.macs] == macs
    assert got[Metric.size_mb] == pytest.approx(size / 1e6)
    assert r.passed  # value == limit passes
    r = check_budgets("resnet18", max_params=params - 1)
    assert not r.passed and r.failures == 1


def test_cli_pass_fail_and_json(invoke) -> None:
    r = invoke("check", "resnet18", "--max-params", "12M", "--max-macs", "2G")
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and "FAIL" not in r.output and "11.69M" in r.output
    r = invoke("check", "resnet18", "zoo:convnet", "--max-params", "1M", "--format", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/check/v1" and data["failures"] == 1
    assert [m["passed"] for m in data["models"]] == [False, True]


def test_cli_usage_errors(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = invoke("check", "resnet18")
    assert r.exit_code == 2 and "error: resnet18: no budget to check" in r.output
    r = invoke("check")
    assert r.exit_code == 2 and "no MODEL given" in r.output
    r = invoke("check", "resnet18", "--max-macs", "lots")
    assert r.exit_code == 2 and "hint: use a number like 25M" in r.output
    r = invoke("check", "resnet18", "--max-latency-ms", "-5")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_latency_budget_is_measured_like_bench(invoke, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    import json

    from torchinspect.analysis import check as check_mod
    from torchinspect.bench import timing

    monkeypatch.chdir(tmp_path)
    fast = timing.TimingConfig(warmup_s=0.05, warmup_iters=2, min_time=0.1, max_time=0.3,
                               min_iters=5)
    measure_latency = check_mod._latency_ms
    monkeypatch.setattr(check_mod, "_latency_ms", lambda case: measure_latency(case, fast))
    r = invoke("check", "zoo:convnet", "--max-latency-ms", "60000", "--format", "json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["models"][0]["results"][0]
    assert res["metric"] == "latency-ms" and 0 < res["value"] < 60000 and res["passed"]
    monkeypatch.setattr(check_mod, "_latency_ms", lambda case: 12.5)
    r = invoke("check", "zoo:convnet", "--max-latency-ms", "10")
    assert r.exit_code == 1 and "12.5" in r.output


PYPROJECT = """
[project]
name = "demo"

[tool.torchinspect.check]
max-params = "30M"

[[tool.torchinspect.check.models]]
model = "resnet18"
max-macs = "1G"

[[tool.torchinspect.check.models]]
model = "zoo:convnet"
input = "1,28,28"
max-params = "100K"
"""


def test_pyproject_config_several_models(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    monkeypatch.chdir(tmp_path)
    r = invoke("check", "--format", "json", "--junit", "report.xml")
    assert r.exit_code == 1, r.output  # resnet18 is 1.81G MACs > 1G
    data = json.loads(r.stdout)
    assert data["config"].endswith("pyproject.toml")
    limits = {(m["model"], x["metric"]): (x["limit"], x["passed"]) for m in data["models"]
              for x in m["results"]}
    assert limits == {("resnet18", "params"): (30e6, True), ("resnet18", "macs"): (1e9, False),
                      ("zoo:convnet", "params"): (1e5, True)}
    suites = ET.parse(tmp_path / "report.xml").getroot()
    assert suites.tag == "testsuites" and suites.get("tests") == "3" and suites.get("failures") == "1"
    failure = suites.find("testsuite[@name='resnet18']/testcase[@name='max-macs']/failure")
    assert failure is not None and "macs 1.81G > budget 1G" in failure.get("message")
    # the command line wins over the config, for the models it names
    r = invoke("check", "resnet18", "--max-macs", "2G")
    assert r.exit_code == 0, r.output


def test_config_file_option_and_errors(invoke, tmp_path: Path) -> None:
    cfg = tmp_path / "budgets.toml"
    cfg.write_text('[check]\nmax-params = "1M"\n[[check.models]]\nmodel = "zoo:convnet"\n')
    r = invoke("check", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    r = invoke("check", "--config", str(cfg), "--junit", str(cfg))
    assert r.exit_code == 2 and "refusing to overwrite the input file" in r.output
    assert "model" in cfg.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text('[tool.torchinspect.check]\nmax-parms = "1M"\n')
    r = invoke("check", "resnet18", "--config", str(bad))
    assert r.exit_code == 2 and "unknown budget 'max-parms'" in r.output
    r = invoke("check", "resnet18", "--config", str(tmp_path / "missing.toml"))
    assert r.exit_code == 2 and "no such file" in r.output


def test_api_twin() -> None:
    import torchinspect

    assert torchinspect.check_budgets is check_budgets
