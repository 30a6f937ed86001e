"""`inspect check`: budgets in human units, config files, several models, JUnit XML, exit codes."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import torchvision

from torchinspect.check import Metric, check_budgets, parse_budget
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
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)  # 40 frozen, 18 trainable
    r = check_budgets(model, budgets={"trainable": 17})
    assert [(x.metric, x.value, x.passed) for x in r.models[0].results] == [(Metric.trainable, 18, False)]
    with pytest.raises(InspectError, match="unknown metric 'trainables'"):
        check_budgets(model, budgets={"trainables": 17})


# ---------------------------------------------------------------- a team's project

NETS = '''
import torch.nn as nn


class Tiny(nn.Module):
    example_input = "1,8"

    def __init__(self, extra: int = 0):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)
        self.more = nn.Sequential(*[nn.Linear(4, 4) for _ in range(extra)])

    def forward(self, x):
        return self.more(self.out(self.fc(x).relu()))


class Broken(nn.Module):
    example_input = "3,16,16"  # written as for --input: the batch is missing

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


class Unbuildable(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("missing config file")
'''

PROJECT = """
[project]
name = "team"

[tool.torchinspect.check]
max-macs = "1G"

[[tool.torchinspect.check.models]]
model = "models/nets.py:Tiny"

[[tool.torchinspect.check.models]]
model = "models/nets.py:Broken"

[[tool.torchinspect.check.models]]
model = "zoo:convnet"
"""


def _project(root: Path, config: str = PROJECT) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "nets.py").write_text(NETS)
    (root / "pyproject.toml").write_text(config)
    return root


def _suites(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return root


@pytest.mark.slow
def test_broken_model_is_an_error_and_the_others_are_checked(invoke, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    r = invoke("check", "--junit", "budgets.xml")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert re.search(r"^models/nets.py:Tiny +macs .* PASS", r.stdout, flags=re.M)
    assert re.search(r"^models/nets.py:Broken +- .* ERROR", r.stdout, flags=re.M)
    assert re.search(r"^zoo:convnet +macs .* PASS", r.stdout, flags=re.M)
    root = _suites(tmp_path / "budgets.xml")
    cases = list(root.iter("testcase"))
    assert len(cases) == 3
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "0", "1")
    broken = root.find("testsuite[@name='models/nets.py:Broken']")
    assert broken is not None and broken.get("errors") == "1" and broken.get("tests") == "1"
    error = broken.find("testcase/error")
    assert error is not None
    message = error.get("message")
    assert message.startswith("models/nets.py:Broken: ") and "example_input 3,16,16" in message
    assert "no batch dimension is added" in message
    hint = error.text.split("hint: ", 1)[1]
    assert "--input" not in hint and 'example_input with its batch dimension ("1,3,16,16")' in hint
    assert 'input = "1,3,16,16" and no-batch = true' in hint
    # the good models were measured
    for name in ("models/nets.py:Tiny", "zoo:convnet"):
        suite = root.find(f"testsuite[@name='{name}']")
        assert suite is not None and suite.find("testcase[@name='max-macs']/system-out") is not None
    data = json.loads(invoke("check", "-f", "json").stdout)
    assert (data["errors"], data["failures"], data["passed"]) == (1, 0, False)
    assert [m["error"] is None for m in data["models"]] == [True, False, True]
    # a baseline keeps the error; the fix the hint names works, and the comparison says why
    # the model has nothing to compare with
    assert invoke("check", "--save-baseline", "main.json").exit_code == 1
    saved = json.loads((tmp_path / "main.json").read_text())["models"]["models/nets.py:Broken"]
    assert "example_input" in saved["error"] and saved["metrics"] == {}
    config = tmp_path / "pyproject.toml"
    config.write_text(config.read_text().replace('model = "models/nets.py:Broken"\n',
                                                 'model = "models/nets.py:Broken"\n'
                                                 'input = "1,3,16,16"\nno-batch = true\n'))
    r = invoke("check", "--baseline", "main.json")
    assert r.exit_code == 0, r.output
    assert "models/nets.py:Broken: the baseline has no numbers for it: it failed there" in r.output


def test_a_model_that_cannot_be_built_is_an_error(tmp_path: Path) -> None:
    _project(tmp_path)
    nets = tmp_path / "models" / "nets.py"
    r = check_budgets([f"{nets}:Unbuildable", "zoo:convnet"], max_params="1M")
    assert [m.error is not None for m in r.models] == [True, False]
    assert "missing config file" in r.models[0].error and r.errors == 1 and not r.passed
    import torchinspect.zoo as models_zoo

    assert r.models[1].results[0].value == sum(p.numel() for p in models_zoo.get("convnet").build().parameters())


def test_junit_written_when_the_config_is_wrong(invoke, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.torchinspect.check]\nmax-parms = "1M"\n')
    r = invoke("check", "--junit", "budgets.xml")
    assert r.exit_code == 2 and "unknown budget 'max-parms'" in r.output
    root = _suites(tmp_path / "budgets.xml")
    assert (root.get("tests"), root.get("errors")) == ("1", "1")
    assert "parms" in root.find(".//error").get("message")


def _tiny_params(extra: int) -> int:
    import importlib.util

    spec = importlib.util.spec_from_loader("nets", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(NETS, module.__dict__)  # noqa: S102 - the test's own model code
    return sum(p.numel() for p in module.Tiny(extra).parameters())


@pytest.mark.slow
def test_baseline_catches_a_model_grown_by_one_linear(invoke, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path, PROJECT.replace('model = "models/nets.py:Broken"\n', "")
                               .replace("[[tool.torchinspect.check.models]]\n\n", "")))
    r = invoke("check", "--save-baseline", "main.json")
    assert r.exit_code == 0, r.output
    saved = json.loads((tmp_path / "main.json").read_text())
    assert saved["schema"] == "torchinspect/check-baseline/v1"
    tiny = saved["models"]["models/nets.py:Tiny"]
    assert set(tiny["metrics"]) == {m.value for m in Metric  # predicted ones need --gpu
                                    if m not in (Metric.latency_ms, Metric.predicted_ms,
                                                 Metric.step_ms)}
    assert tiny["metrics"]["params"] == _tiny_params(0) and tiny["inputs"] == "1,8"
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []  # atomic, no leftovers
    # the pull request: one more Linear(4, 4)
    text = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace(
        'model = "models/nets.py:Tiny"\n', 'model = "models/nets.py:Tiny"\narg = {extra = 1}\n'))
    r = invoke("check", "--baseline", "main.json", "--max-increase", "params=0.5%,macs=5%",
               "--junit", "pr.xml")
    assert r.exit_code == 1, r.output
    old, new = _tiny_params(0), _tiny_params(1)
    growth = f"params grew {(new - old) / old * 100:.2f}% ({old:,} -> {new:,}), limit 0.5%"
    assert growth in r.output
    failure = _suites(tmp_path / "pr.xml").find(
        "testsuite[@name='models/nets.py:Tiny']/testcase[@name='increase-params']/failure")
    assert failure is not None and failure.get("message") == growth
    # one unit for the allowance: "limit 0.5%" in the message, "allowed +0.50%" beside it
    assert f"baseline {old:,}, change {(new - old) / old * 100:+.2f}%, allowed +0.50%" \
        in (failure.text or "") and "0.005" not in (failure.text or "")
    convnet = _suites(tmp_path / "pr.xml").find("testsuite[@name='zoo:convnet']")
    assert convnet.get("failures") == "0" and convnet.get("tests") == "3"  # max-macs + 2 increases
    # a Markdown summary for the pull request
    md = invoke("check", "--baseline", "main.json", "--max-increase", "params=0.5%", "-f", "markdown")
    assert md.exit_code == 1
    assert md.stdout.startswith("## torchinspect check: FAIL (2 model(s), ")
    # what did not change is folded away under the table; the change that failed is not
    loud, _, folded = md.stdout.partition("<details><summary>")
    assert "unchanged row(s)</summary>" in folded and "| zoo:convnet | macs |" in folded
    assert f"| models/nets.py:Tiny | params | {new} | {old} |" in loud
    assert "### Failures" in md.stdout and growth in md.stdout
    assert "| Model | Metric | Measured | Baseline | Change | Limit | Headroom | Budget | Result |" in md.stdout
    assert f"| {(new - old) / old * 100:+.2f}% | +0.5% |" in md.stdout
    # the allowance can live in pyproject.toml
    text = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace(
        'max-macs = "1G"\n', 'max-macs = "1G"\n\n[tool.torchinspect.check.increase]\nparams = "50%"\n'))
    r = invoke("check", "--baseline", "main.json", "-f", "json")
    assert r.exit_code == 0, r.output
    rows = [x for m in json.loads(r.stdout)["models"] for x in m["results"] if x["check"] == "increase"]
    assert {(x["metric"], x["origin"], x["limit"]) for x in rows} == {
        ("params", "pyproject.toml [increase]", 0.5)}


@pytest.mark.slow
def test_baseline_models_new_and_gone_are_reported(invoke, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert invoke("check", "zoo:convnet", "--save-baseline", "b.json").exit_code == 0
    r = invoke("check", "zoo:mnist-net", "--baseline", "b.json", "--max-increase", "params=1%")
    assert r.exit_code == 0, r.output
    assert "zoo:mnist-net: not in the baseline b.json (a new model)" in r.output
    assert "zoo:convnet: in the baseline but not checked now" in r.output


def test_baseline_and_increase_usage_errors(invoke, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = invoke("check", "zoo:convnet", "--max-increase", "params=2%")
    assert r.exit_code == 2 and "--max-increase needs --baseline" in r.output
    (tmp_path / "bench.json").write_text('{"schema": "torchinspect/bench/v1"}')
    r = invoke("check", "zoo:convnet", "--baseline", "bench.json")
    assert r.exit_code == 2 and "not a check baseline" in r.output
    (tmp_path / "b.json").write_text("{oops")
    assert invoke("check", "zoo:convnet", "--baseline", "b.json").exit_code == 2
    assert invoke("check", "zoo:convnet", "--save-baseline", "b.json").exit_code == 0
    r = invoke("check", "zoo:convnet", "--baseline", "b.json", "--max-increase", "params=2")
    assert r.exit_code == 2 and "is not an allowed increase" in r.output
    r = invoke("check", "zoo:convnet", "--baseline", "b.json", "--save-baseline", "b.json")
    assert r.exit_code == 2 and "refusing to overwrite" in r.output
    r = invoke("check", "zoo:convnet", "--max-params", "1M", "--junit", "x.xml", "--save-baseline", "x.xml")
    assert r.exit_code == 2 and "name the same file" in r.output


def test_config_found_from_a_subfolder_with_paths_relative_to_it(invoke, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    config = PROJECT.replace('model = "models/nets.py:Broken"\n', 'model = "zoo:mnist-net"\n')
    _project(tmp_path, config.replace('max-macs = "1G"', 'max-macs = "1G"\nmax-params = "25K"'))
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    (tmp_path / "src" / "pyproject.toml").write_text('[project]\nname = "inner"\n')  # no table: passed over
    monkeypatch.chdir(sub)
    r = invoke("check")
    assert r.exit_code == 1, r.output  # zoo:convnet has 29,034 parameters > 25K
    assert f"budgets from {os.path.join('..', '..', 'pyproject.toml')}" in r.output
    data = json.loads(invoke("check", "-f", "json").stdout)
    assert data["config"] == str(tmp_path / "pyproject.toml")
    tiny = data["models"][0]
    assert tiny["model"] == "models/nets.py:Tiny" and tiny["error"] is None
    assert tiny["results"][0]["value"] == _tiny_params(0)  # loaded from the config's folder
    # the Budget column says where each budget came from
    r = invoke("check", "--max-params", "30K", "-f", "json", "--config", "../../pyproject.toml")
    assert r.exit_code == 0, r.output
    origins = {(m["model"], x["metric"]): x["origin"] for m in json.loads(r.stdout)["models"]
               for x in m["results"]}
    assert origins[("zoo:convnet", "params")] == "--max-params"
    assert origins[("zoo:convnet", "macs")] == "pyproject.toml"
    r = invoke("check", "--max-params", "30K")
    assert "--max-params" in r.stdout and "pyproject.toml" in r.stdout


def _fake_latency(median: float, iqr: float, cov: float, median_cov: float):
    from torchinspect.check import Noise, Reading
    from torchinspect.check.measure import Sample

    return lambda case, gpu: Sample(
        {Metric.latency_ms: Reading(median, Noise(iqr, cov, median_cov, 50))},
        {"device": "cpu", "torch_threads": 1})


@pytest.mark.slow
def test_latency_is_measured_like_bench_with_its_noise(invoke, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from torchinspect.bench import timing
    from torchinspect.check import COLLECTORS, Need, time_forward

    monkeypatch.chdir(tmp_path)
    fast = timing.TimingConfig(warmup_s=0.02, warmup_iters=2, min_time=0.05, max_time=3.0,
                               min_iters=5)
    monkeypatch.setitem(COLLECTORS, Need.timing, lambda case, gpu: time_forward(case, fast))
    r = invoke("check", "zoo:convnet", "--max-latency-ms", "60000", "--format", "json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["models"][0]["results"][0]
    assert res["metric"] == "latency-ms" and 0 < res["value"] < 60000 and res["passed"]
    assert res["noise"]["n"] >= 5 and res["noise"]["iqr"] >= 0 and res["noise"]["cov"] >= 0
    # 12.5 ms against 10 ms with a 1% standard error: a real breach
    monkeypatch.setitem(COLLECTORS, Need.timing, _fake_latency(12.5, 0.4, 0.03, 0.01))
    r = invoke("check", "zoo:convnet", "--max-latency-ms", "10")
    assert r.exit_code == 1 and "12.5 ms (IQR 0.4 ms, CoV 3.00%)" in r.output and "FAIL" in r.output
    # 10.2 ms against 10 ms with a 5% standard error: inside the noise, noted and passed
    monkeypatch.setitem(COLLECTORS, Need.timing, _fake_latency(10.2, 2.0, 0.2, 0.05))
    r = invoke("check", "zoo:convnet", "--max-latency-ms", "10")
    assert r.exit_code == 0, r.output
    assert "PASS (noise)" in r.output
    from torchinspect.bench.compare import significance

    _, band, verdict = significance(10.0, None, 10.2, 10.2 * 0.05)
    assert verdict == "same"
    assert (f"latency-ms 10.2 ms (IQR 2 ms, CoV 20.00%) > budget 10 ms, inside the measurement "
            f"noise (±{band * 100:.2f}%): not a failure") in r.output


@pytest.mark.slow
def test_latency_baseline_uses_bench_significance(invoke, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from torchinspect.bench.compare import significance
    from torchinspect.check import COLLECTORS, Need

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(COLLECTORS, Need.timing, _fake_latency(10.0, 1.0, 0.1, 0.02))
    r = invoke("check", "zoo:convnet", "--latency", "--save-baseline", "b.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "b.json").read_text())["models"]["zoo:convnet"]["noise"][
        "latency-ms"] == {"iqr": 1.0, "cov": 0.1, "median_cov": 0.02, "n": 50}
    assert "latency-ms" in r.stdout  # measured and shown, not judged
    monkeypatch.setitem(COLLECTORS, Need.timing, _fake_latency(10.8, 1.0, 0.1, 0.02))
    _, band, verdict = significance(10.0, 0.2, 10.8, 0.216)
    assert verdict == "same"  # 8% growth, inside 3 combined standard errors
    r = invoke("check", "zoo:convnet", "--baseline", "b.json", "--max-increase", "latency-ms=5%")
    assert r.exit_code == 0, r.output
    assert f"latency-ms grew 8.00% (10 ms -> 10.8 ms), limit 5%, inside the measurement noise " \
           f"(±{band * 100:.2f}%)" in r.output
    monkeypatch.setitem(COLLECTORS, Need.timing, _fake_latency(14.0, 0.1, 0.01, 0.001))
    r = invoke("check", "zoo:convnet", "--baseline", "b.json", "--max-increase", "latency-ms=5%")
    assert r.exit_code == 1 and "latency-ms grew 40.00%" in r.output


# ---------------------------------------------------------------- documentation


DOCS = Path(__file__).resolve().parents[1] / "docs" / "commands" / "check.md"
ROOT = Path(__file__).resolve().parents[1]


def _fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def test_documented_pyproject_example_runs(invoke, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    example = next(b for b in _fenced(DOCS.read_text(), "toml") if "[[tool.torchinspect.check.models]]" in b)
    (tmp_path / "pyproject.toml").write_text(example)
    monkeypatch.chdir(tmp_path)
    r = invoke("check", "--junit", "budgets.xml", "-f", "json")
    assert r.exit_code in (0, 1), r.output  # budgets judged, no usage error
    data = json.loads(r.stdout)
    assert data["errors"] == 0 and data["models"] and all(m["results"] for m in data["models"])
    assert _suites(tmp_path / "budgets.xml").get("tests") == str(
        sum(len([x for x in m["results"] if x["check"] != "change"]) for m in data["models"]))


def test_readme_and_docs_install_what_exists() -> None:
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    placeholder = "/" + "OWNER" + "/"  # github.com/<that>/torchinspect (not spelled here)
    for name in tracked:  # no placeholder URL anywhere
        path = ROOT / name
        if path.is_file() and path.suffix in {".md", ".yml", ".yaml", ".toml", ".py", ""}:
            assert placeholder not in path.read_text(errors="replace"), name
    for page in (ROOT.joinpath("README.md"), ROOT.joinpath("docs/getting-started.md")):
        text = page.read_text()
        assert not re.search(r"pip install torchinspect\s*$", text, flags=re.M)  # not published
        assert "pip install ." in text and "pip wheel --no-deps -w dist ." in text
        assert "source .venv/bin/activate" in text  # `inspect` on PATH after make demo
    makefile = ROOT.joinpath("Makefile").read_text()
    demo = makefile[makefile.index("\ndemo:"):].split("\n\n")[0]
    assert "chromium" not in demo and "browser" not in demo.splitlines()[1]


def test_the_ci_workflow_is_a_real_file_the_docs_include() -> None:
    import yaml  # PyYAML comes with the dev extra (transformers, timm)

    path = ROOT / ".github/workflows/model-size.yml"
    flow = yaml.safe_load(path.read_text())
    # a workflow others can copy: torchinspect itself is installed (never `pip install .` of
    # the project it is copied into), and the two things to set are variables at its top
    assert set(flow["env"]) == {"CONFIG", "TORCHINSPECT"}
    install = next(s["run"] for s in flow["jobs"]["size"]["steps"]
                   if s.get("name", "").startswith("install"))
    assert 'pip install "$TORCHINSPECT"' in install and "\npip install .\n" not in install
    assert 'grep -qs \'^name = "torchinspect"\' pyproject.toml' in install  # own repo: its wheel
    assert all("$CONFIG" in s.get("run", "") for s in flow["jobs"]["size"]["steps"]
               if "inspect check" in s.get("run", ""))
    assert flow["permissions"] == {"contents": "read", "actions": "read", "checks": "write",
                                   "pull-requests": "write"}
    steps = {s.get("name", s.get("uses")): s for s in flow["jobs"]["size"]["steps"]}
    fetch = steps["fetch main's baseline"]["run"]
    assert "::error title=no baseline::" in fetch and fetch.count("exit 1") == 2  # loud, not silent
    assert "--baseline model-baseline.json" in steps["compare"]["run"]
    assert "--save-baseline" in steps["save the baseline"]["run"]
    # the page shows the file whole, written in by docs/hooks.py (test_docs keeps it equal)
    assert "<!-- workflow .github/workflows/model-size.yml -->" in DOCS.read_text()
    assert path.read_text().rstrip() in "".join(_fenced(DOCS.read_text(), "yaml"))
    assert "actionlint" in ROOT.joinpath("Makefile").read_text()


def test_pre_commit_hook_names_a_real_command(invoke) -> None:
    import tomllib

    import yaml  # PyYAML comes with the dev extra (transformers, timm)

    hooks = yaml.safe_load(ROOT.joinpath(".pre-commit-hooks.yaml").read_text())
    assert isinstance(hooks, list) and hooks
    scripts = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]["scripts"]
    for hook in hooks:
        assert {"id", "name", "entry", "language"} <= set(hook)
        program, *args = hook["entry"].split()
        assert program in scripts and args[0] == "check"
        assert hook.get("pass_filenames") is False  # file names would be read as models
        r = invoke(*args, "--help")
        assert r.exit_code == 0 and "--baseline" in r.output


@pytest.mark.slow
def test_memory_budgets_are_inspect_memorys_predictions(invoke, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig
    from torchinspect.sources.case import make_case

    want = predict_case(make_case("zoo:mnist-net", None), StepConfig(), make_target("cuda"))
    infer, train = want.inference.peak / 1e6, want.training.peak / 1e6
    assert train > infer
    r = check_budgets("zoo:mnist-net", max_infer_mb=infer, max_train_mb=train)
    got = {x.metric: x.value for x in r.models[0].results}
    assert got == {Metric.infer_mb: pytest.approx(infer), Metric.train_mb: pytest.approx(train)}
    assert r.passed  # value == limit passes
    fail = invoke("check", "zoo:mnist-net", "--max-train-mb", f"{train * 0.99:.3f}")
    assert fail.exit_code == 1 and "train-mb" in fail.output and "FAIL" in fail.output
    assert invoke("check", "zoo:mnist-net", "--max-infer-mb", "lots").exit_code == 2
    # config keys and baselines pick them up
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchinspect.check]\nmax-infer-mb = 1000\n\n[[tool.torchinspect.check.models]]\n'
        f'model = "zoo:mnist-net"\nmax-train-mb = {train / 2:.3f}\n')
    r = invoke("check", "-f", "json")
    assert r.exit_code == 1, r.output
    results = {x["metric"]: x["passed"] for x in json.loads(r.stdout)["models"][0]["results"]}
    assert results == {"infer-mb": True, "train-mb": False}
    (tmp_path / "pyproject.toml").write_text('[[tool.torchinspect.check.models]]\nmodel = "zoo:mnist-net"\n')
    assert invoke("check", "--save-baseline", "base.json").exit_code == 0
    saved = json.loads((tmp_path / "base.json").read_text())["models"]["zoo:mnist-net"]["metrics"]
    assert saved["train-mb"] == pytest.approx(train) and saved["infer-mb"] == pytest.approx(infer)
    r = invoke("check", "--baseline", "base.json", "--max-increase", "train-mb=1%")
    assert r.exit_code == 0, r.output


def test_size_mb_is_shown_in_mb_like_its_budget(invoke) -> None:
    r = invoke("check", "zoo:convnet", "--max-size-mb", "1")
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "size-mb" in line)
    assert "0.117 MB" in row and "1 MB" in row and "KB" not in row


def test_a_train_mb_that_is_mostly_cublas_workspace_says_so(invoke) -> None:
    r = invoke("check", "zoo:convnet", "--max-train-mb", "100")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "train-mb is 99% cuBLAS workspace (65 MiB of 68.84 MB" in text  # with cuBLASLt's
    assert "infer-mb" not in text  # no note for a metric not checked


def test_config_models_as_a_list_of_names(invoke, tmp_path: Path) -> None:
    """models = ["zoo:convnet", "nets.py:Net"], as people write it first, beside the tables."""
    (tmp_path / "nets.py").write_text("import torch.nn as nn\nEXAMPLE_INPUT = '1,8'\n"
                                      "class Net(nn.Sequential):\n"
                                      "    def __init__(self):\n"
                                      "        super().__init__(nn.Linear(8, 4))\n")
    cfg = tmp_path / "budgets.toml"
    cfg.write_text('[check]\nmax-params = "1M"\nmodels = ["zoo:convnet", "nets.py:Net"]\n')
    r = invoke("check", "--config", str(cfg), "-f", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [m["model"] for m in data["models"]] == ["zoo:convnet", "nets.py:Net"]
    assert all(x["limit"] == 1e6 and x["passed"] for m in data["models"] for x in m["results"])
    cfg.write_text('[check]\nmodels = "zoo:convnet"\n')
    r = invoke("check", "--config", str(cfg))
    assert r.exit_code == 2 and 'models = ["resnet50", "nets.py:Net"]' in r.output


# ------------------------------------------------------------------ trust from the command line (issue 29)


def _evil_project(root: Path, marker: Path) -> Path:
    """A pyproject.toml above the user's folder naming a pickle payload as the weights of
    resnet18 with trust-pickle = true (the audit's item 4)."""
    from test_checkpoint_helpers import payloads

    evil = root / "evil.pt"
    torch.save({"state_dict": {}, "x": payloads(marker)["os_system"]}, evil)
    (root / "pyproject.toml").write_text(
        '[tool.torchinspect.check]\nmax-params = "20M"\n\n[[tool.torchinspect.check.models]]\n'
        'model = "zoo:mnist-net"\nweights = "evil.pt"\ntrust-pickle = true\n')
    return evil


def test_a_config_above_gives_budgets_only_to_a_model_named_here(invoke, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "PWNED"
    _evil_project(tmp_path, marker)
    sub = tmp_path / "work" / "project"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    r = invoke("check", "zoo:mnist-net")
    assert not marker.exists(), r.output
    assert r.exit_code == 0, r.output
    assert f"budgets from {os.path.join('..', '..', 'pyproject.toml')}" in r.output.splitlines()[0]
    # even with --trust-pickle: a config above never chooses the weights of a model named here
    r = invoke("check", "zoo:mnist-net", "--trust-pickle")
    assert not marker.exists(), r.output
    assert r.exit_code == 0, r.output


def test_trust_pickle_in_a_config_needs_the_flag(invoke, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """In the config's own folder the entry's weights are used, but its trust-pickle = true
    counts only when --trust-pickle is on the command line too."""
    marker = tmp_path / "PWNED"
    _evil_project(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    r = invoke("check")
    assert not marker.exists(), r.output
    assert r.exit_code == 1, r.output  # the model errors: refused to unpickle
    assert "--trust-pickle" in r.output and "refused to unpickle" in r.output


@pytest.mark.slow
def test_two_runs_saving_one_baseline_the_second_is_refused(invoke, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, item 8: while this run measures, another run writes the baseline: this one
    does not replace it (exit 2, one line) and does not say "wrote"."""
    from torchinspect import check as core

    out = tmp_path / "main.json"
    assert invoke("check", "zoo:mnist-net", "--save-baseline", out).exit_code == 0
    other = out.read_text()
    real = core.run_check

    def slow_run(*a, **kw):
        result = real(*a, **kw)
        out.write_text(other.replace('"created"', '"created_by_the_other_run": 1, "created"'))
        return result

    monkeypatch.setattr(core, "run_check", slow_run)
    r = invoke("check", "zoo:mnist-net", "--save-baseline", out)
    assert r.exit_code == 2, r.output
    assert "written by another run" in r.output and f"wrote {out}" not in r.output
    assert "created_by_the_other_run" in out.read_text()  # the other run's file is kept
    monkeypatch.setattr(core, "run_check", real)
    assert invoke("check", "zoo:mnist-net", "--save-baseline", out).exit_code == 0  # alone: fine


def test_a_memory_budget_may_name_a_gpus_memory(invoke, tmp_path, monkeypatch) -> None:
    """--max-train-mb 24GB is a 24 GB card, read as --fit reads it: 24 GiB less the CUDA
    context and the allocator's reserve; a note says so (issue 42)."""
    from torchinspect.check.metrics import Metric, parse_budget
    from torchinspect.memory.budget import gpu_memory

    assert parse_budget("24GB", Metric.train_mb) == gpu_memory("24GB").usable / 1e6
    assert parse_budget("100", Metric.train_mb) == 100  # a number is MB, as before
    with pytest.raises(InspectError):
        parse_budget("24GB", Metric.params)  # counts take no byte unit
    monkeypatch.chdir(tmp_path)
    result = invoke("check", "zoo:mnist-net", "--max-train-mb", "1GB", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    limit = next(r["limit"] for m in data["models"] for r in m["results"] if r["metric"] == "train-mb")
    assert limit == pytest.approx(gpu_memory("1GB").usable / 1e6)
    assert any("--max-train-mb 1GB: 1 GiB (GB on a GPU are GiB" in n for n in data["notes"])


@pytest.mark.slow
def test_a_memory_budget_may_name_a_gpu(invoke, tmp_path, monkeypatch) -> None:
    """--max-infer-mb a10 / max-train-mb = "a10": the card's usable memory, as --fit h100
    reads it, and the GPU that model's peaks are predicted for (issue 42); a number is MB."""
    from torchinspect.check.metrics import MemoryLimit, Metric, parse_budget
    from torchinspect.gpus import CATALOGUE

    limit = parse_budget("a10", Metric.train_mb)
    assert isinstance(limit, MemoryLimit) and limit.budget.gpu is CATALOGUE["a10"]
    assert limit == CATALOGUE["a10"].usable_bytes() / 1e6
    assert parse_budget("NVIDIA H100 80GB HBM3", Metric.infer_mb) == (
        CATALOGUE["h100"].usable_bytes() / 1e6)
    four = parse_budget("4090", Metric.train_mb)  # 4,090 MB, not the card
    assert four == 4090 and not isinstance(four, MemoryLimit)
    monkeypatch.chdir(tmp_path)

    def infer_mb(*args: str) -> tuple[float, list[str]]:
        r = invoke("check", "zoo:mnist-net", *args, "--format", "json")
        assert r.exit_code == 0, r.output
        data = json.loads(r.output)
        return data["models"][0]["readings"]["infer-mb"], data["notes"]

    on_a10, notes = infer_mb("--max-infer-mb", "a10")
    assert on_a10 == infer_mb("--max-infer-mb", "100", "--gpu", "a10")[0]
    assert on_a10 < infer_mb("--max-infer-mb", "100", "--gpu", "h100")[0]  # 8 vs 32 MiB cuBLAS
    assert any(n.startswith("--max-infer-mb a10: the a10 (NVIDIA A10)") and
               "as nvidia-smi reports it" in n and n.endswith("the peaks are predicted for the a10")
               for n in notes), notes
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchinspect.check]\nmodels = ["zoo:mnist-net"]\nmax-infer-mb = "a10"\n')
    r = invoke("check", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["models"][0]["readings"]["infer-mb"] == on_a10
    # --gpu, or another budget of the model, naming another card: a usage error
    for args in (["--gpu", "h100"], ["--max-train-mb", "t4"]):
        r = invoke("check", *args)
        assert r.exit_code == 2, r.output
        assert "name different GPUs" in r.output and "max-infer-mb a10" in r.output
    assert invoke("check", "--gpu", "a10").exit_code == 0  # the same card: fine
    r = invoke("check", "zoo:mnist-net", "--max-train-mb", "h10")
    assert r.exit_code == 2 and "did you mean h100?" in r.output
