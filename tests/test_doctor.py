"""`inspect doctor`: every check fires on its zoo trigger and stays silent on its clean twin,
the model is left untouched, and the numbers behind TI007/TI009 match direct computations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchinspect.zoo as models_zoo
from torchinspect.analysis.doctor import diagnose, rules
from torchinspect.analysis.doctor.shapes import dropped_edges

ZOO = Path(models_zoo.__file__).parent

# code, severity, trigger, clean twin, and the statement the finding must point at (the zoo
# file and a text found on one line of it): the development set (benchmarks/doctor_pitfalls.py
# reports it beside the held-out tests/data/doctor_validation/)
PAIRS = [(p["code"], p["severity"], p["trigger"], p["clean"], (p["file"], p["statement"]))
         for p in json.loads((Path(__file__).parent / "data" / "doctor_dev_pairs.json").read_text())]


def line_of(file: str, text: str) -> str:
    """``zoo/FILE:LINE`` of the one line of the zoo file that holds ``text``."""
    lines = (ZOO / file).read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (file, text, hits)
    return f"zoo/{file}:{hits[0]}"


def test_every_rule_has_a_zoo_pair() -> None:
    assert sorted(code for code, *_ in PAIRS) == sorted(rules())
    for _, _, trigger, clean, _ in PAIRS:
        assert trigger in models_zoo.REGISTRY and clean in models_zoo.REGISTRY


@pytest.mark.parametrize(("code", "severity", "trigger", "clean", "where"), PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_trigger_at_its_line_and_clean_twin(code: str, severity: str, trigger: str, clean: str,
                                            where: tuple[str, str]) -> None:
    found = diagnose(f"zoo:{trigger}")
    mine = [f for f in found.findings if f.code == code
            and (f.location or "").endswith(line_of(*where))]
    assert mine, found.findings
    assert mine[0].severity.value == severity, mine[0]
    twin = diagnose(f"zoo:{clean}")
    assert twin.findings == [], twin.findings  # the twin is clean for every check
    assert twin.skipped == {} and twin.checked == list(rules())


def test_trigger_details() -> None:
    by = {}
    for code, _, trigger, _, _ in PAIRS[:9]:
        by[code] = [f for f in diagnose(f"zoo:{trigger}", select=[code]).findings]
    assert by["TI001"][0].module == "layers" and by["TI001"][0].data["modules"] == 3
    lost = sum(p.numel() for layer in models_zoo.get("pitfall-layer-list").build().layers
               for p in layer.parameters())
    assert by["TI001"][0].data["parameters"] == lost
    assert by["TI002"][0].module == "scale"
    aux = models_zoo.get("pitfall-unused-branch").build().aux_head
    assert by["TI003"][0].module == "aux_head"
    assert by["TI003"][0].data["count"] == sum(p.numel() for p in aux.parameters())
    assert by["TI004"][0].module == ""  # F.dropout is called in the root's own forward
    assert by["TI005"][0].module == "distance"  # where the NaN gradient is born
    assert by["TI005"][0].data["parameters"] == ["embed.weight", "embed.bias"]
    assert by["TI005"][0].data["backward_node"] in ("MulBackward0", "SqrtBackward0")
    assert {f.module for f in by["TI006"]} == {"fc1", "fc2", "head"}
    assert by["TI006"][0].data["suggested"] == {"in_features": 104, "out_features": 256}
    assert [f.module for f in by["TI007"]] == ["classifier.0"]
    # one value per channel at the example's batch of 1: info (a real batch works)
    assert {(f.severity.value, f.module) for f in by["TI008"]} == {("info", "backbone"),
                                                                   ("info", "norm")}
    assert by["TI008"][-1].data["batch_of_one"] is True
    assert [f.module for f in by["TI009"]] == ["pool2"]
    assert by["TI009"][0].data["dropped"] == [{"axis": "H", "size": 13, "dropped": 1},
                                              {"axis": "W", "size": 13, "dropped": 1}]


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.fc(x), 0.5)  # the bug, one level down


class _Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(16, 16)
        self.block = _Block()
        self.head = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.bn(self.stem(x))))


def test_eval_randomness_names_the_inner_module() -> None:
    f = diagnose(_Nested(), torch.randn(4, 16), select=["TI004"]).findings
    assert [(x.code, x.module) for x in f] == [("TI004", "block")]


def test_model_is_left_untouched() -> None:
    torch.manual_seed(1)
    model = _Nested().train()
    model.block.eval()  # mixed flags must come back exactly
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {n: m.training for n, m in model.named_modules()}
    x = torch.randn(4, 16)
    rng = torch.get_rng_state()
    result = diagnose(model, x)
    assert result.run_device == "cpu" and not result.skipped
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BN stats, counters too
    assert flags == {n: m.training for n, m in model.named_modules()}
    assert all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert torch.equal(rng, torch.get_rng_state())
    # the statement watch and the construction recorder leave no global hook or mode behind
    from torch.nn.modules import module as torch_module
    from torch.overrides import _get_current_function_mode_stack

    diagnose("zoo:pitfall-layer-list")
    for hooks in ("_global_parameter_registration_hooks", "_global_buffer_registration_hooks",
                  "_global_module_registration_hooks", "_global_forward_hooks",
                  "_global_forward_pre_hooks"):
        assert not getattr(torch_module, hooks), hooks
    assert _get_current_function_mode_stack() == []
    assert not torch.is_anomaly_enabled()


def test_nan_in_parameters_and_forward() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    with torch.no_grad():
        model[1].weight[0, 0] = float("nan")
    f = diagnose(model, torch.randn(2, 8), select=["TI005"]).findings
    texts = " | ".join(x.what for x in f)
    assert "1 parameter/buffer tensor(s) hold NaN/Inf: 1.weight" in texts
    fwd = [x for x in f if x.data.get("stage") == "forward"]
    assert fwd and fwd[0].module == "1"  # the first module whose output is not finite


class _Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - 10)  # negative -> NaN


def test_nan_forward_located() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _Log(), nn.Linear(4, 2))
    res = diagnose(model, torch.randn(1, 4), select=["TI005"])
    fwd = [x for x in res.findings if x.data.get("stage") == "forward"]
    assert [(x.code, x.module) for x in fwd] == [("TI005", "1")]


def test_gradients_with_batch_one_batchnorm() -> None:
    """Training-mode BatchNorm on (1, C) raises; the check retries with batch 2."""
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2), nn.Linear(8, 2))
    model.forward = lambda x: model[2](model[1](model[0](x)))  # type: ignore[method-assign]
    res = diagnose(model, torch.randn(1, 4), select=["TI003"])
    assert [(x.code, x.module) for x in res.findings] == [("TI003", "3")]
    assert res.skipped == {} and not any("gradient checks ran in" in n for n in res.notes)


@pytest.mark.parametrize("cls", [nn.Conv1d, nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d])
def test_dropped_edges_match_input_gradient(cls: type) -> None:
    """TI009's formula against the truth: input rows whose gradient is zero were never read."""
    for size in (7, 8, 13, 28, 31):
        for k, s, p, d in [(3, 2, 0, 1), (2, 2, 0, 1), (3, 2, 1, 1), (5, 3, 2, 1), (3, 1, 0, 2),
                           (7, 2, 3, 1), (3, 3, 1, 1)]:
            if cls in (nn.Conv1d, nn.Conv2d):
                layer = cls(1, 1, k, stride=s, padding=p, dilation=d, bias=False)
                nn.init.constant_(layer.weight, 1.0)
            elif cls is nn.MaxPool2d:
                if p > k // 2:
                    continue
                layer = cls(k, stride=s, padding=p, dilation=d)
            else:
                if p > k // 2 or d != 1:
                    continue
                layer = cls(k, stride=s, padding=p)
            shape = (1, 1, size) if cls is nn.Conv1d else (1, 1, size, size)
            # increasing along every axis: a max-pool window's max is its last element,
            # so the last row read always gets a gradient (conv/avg: every row read does)
            ramp = torch.arange(size, dtype=torch.float32) + 1
            x = (ramp if cls is nn.Conv1d else ramp[:, None] + ramp[None, :]).reshape(shape)
            x.requires_grad_(True)
            if size + 2 * p < d * (k - 1) + 1:
                continue
            (g,) = torch.autograd.grad(layer(x).sum(), x)
            line = g[0, 0] if cls is nn.Conv1d else g[0, 0].sum(0)  # per W column
            used = torch.nonzero(line).flatten()
            truth = size - 1 - int(used.max())  # columns after the last one read
            got = {axis: dropped for axis, _, dropped in dropped_edges(layer, tuple(shape))}
            if d * (k - 1) + 1 < s:  # strided skip by design: not reported
                assert got == {}
                continue
            assert got.get(len(shape) - 3, 0) == truth, (cls.__name__, size, k, s, p, d)
            assert got.get(0, 0) == truth  # H and W alike on a square input


def test_vgg16_first_classifier_share() -> None:
    import torchvision

    with torch.device("meta"):
        model = torchvision.models.vgg16()
    total = sum(p.numel() for p in model.parameters())
    layer = model.classifier[0]
    result = diagnose(model, torch.empty(1, 3, 224, 224, device="meta"),
                      select=["TI007"], device="meta")
    (f,) = result.findings
    assert f.module == "classifier.0"
    assert f.data["share"] == pytest.approx(layer.weight.numel() / total + layer.bias.numel() / total)
    assert f.data["bytes"] == (layer.weight.numel() + layer.bias.numel()) * 4
    assert 0.74 < f.data["share"] < 0.75  # "about 74%"


@pytest.mark.parametrize("name", [pytest.param("resnet18", marks=pytest.mark.slow),
                                  "mobilenet_v3_small"])
def test_no_false_positives_torchvision(name: str) -> None:
    result = diagnose(name)
    assert result.skipped == {}
    assert [f for f in result.findings if f.code not in ("TI006", "TI007")] == []
    assert all(f.severity.value == "info" for f in result.findings)


@pytest.mark.slow
def test_no_false_positives_vit() -> None:
    result = diagnose("vit_b_16")
    assert result.skipped == {}
    assert [f for f in result.findings if f.code not in ("TI006", "TI007")] == []


def test_select_ignore_and_meta() -> None:
    r = diagnose("zoo:pitfall-layer-list", select=["ti1", "TI006"], ignore=["tensor-core-alignment"])
    assert r.checked == ["TI001"] and [f.code for f in r.findings] == ["TI001"]
    r = diagnose("zoo:pitfall-unused-branch", device="meta")
    assert set(r.skipped) == {c for c, r in rules().items() if r.needs == "run"}
    assert r.run_device is None


def test_cli_doctor_counts_its_checks_in_words(invoke) -> None:
    r = invoke("doctor", "zoo:pitfall-layer-list", "--select", "TI001", "--fail-on", "never")
    assert r.exit_code == 0, r.output
    assert ": 1 check, " in r.output, r.output
    r = invoke("doctor", "zoo:pitfall-layer-list", "--select", "TI001,TI002", "--fail-on", "never")
    assert ": 2 checks, " in r.output, r.output


def test_cli_doctor_table_json_and_fail_on(invoke) -> None:
    # like a linter: an error-severity finding fails the run by default
    r = invoke("doctor", "zoo:pitfall-layer-list")
    assert r.exit_code == 1, r.output
    assert "TI001" in r.output and "nn.ModuleList" in r.output and "Why it matters" in r.output
    r = invoke("doctor", "zoo:pitfall-layer-list", "--fail-on", "never")
    assert r.exit_code == 0, r.output
    assert "TI001" in r.output
    r = invoke("doctor", "zoo:pitfall-layer-list", "--fail-on", "error", "--format", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/doctor/v1"
    assert data["counts"]["error"] == 1 and data["findings"][0]["code"] == "TI001"
    assert {"what", "why", "fix", "module", "severity", "location"} <= set(data["findings"][0])
    r = invoke("doctor", "zoo:doctor-aligned", "--fail-on", "info")
    assert r.exit_code == 0 and "no findings" in r.output
    # warnings and infos pass by default; --fail-on warning makes them count
    r = invoke("doctor", "zoo:doctor-dropped-rows", "--select", "TI009")
    assert r.exit_code == 0 and "TI009" in r.output
    assert invoke("doctor", "zoo:doctor-dropped-rows", "--select", "TI009",
                  "--fail-on", "warning").exit_code == 1


MODEL_FILE = """\
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = [nn.Linear(16, 16), nn.Linear(16, 16)]
        self.fc = nn.Linear(16, 100)
        self.out = nn.Linear(100, 10)

    def forward(self, x):
        return self.out(self.fc(F.dropout(x, p=0.5)))
"""


def test_findings_in_the_users_file_have_file_and_line(invoke, tmp_path, monkeypatch) -> None:
    path = tmp_path / "mynet.py"
    path.write_text(MODEL_FILE)
    lines = MODEL_FILE.splitlines()
    list_line = next(i for i, line in enumerate(lines) if "self.blocks = [" in line) + 1
    fc_line = next(i for i, line in enumerate(lines) if "self.fc = nn.Linear" in line) + 1
    dropout_line = next(i for i, line in enumerate(lines) if "F.dropout(" in line) + 1
    monkeypatch.chdir(tmp_path)
    r = invoke("doctor", "mynet.py:Net", "--input", "16", "--format", "json")
    assert r.exit_code == 1, r.output  # TI001 and TI004 are errors
    found = json.loads(r.stdout)["findings"]
    where = {f["code"]: f["location"] for f in found}
    assert where["TI001"] == f"mynet.py:{list_line}"  # the statement that builds the list
    assert where["TI004"] == f"mynet.py:{dropout_line}"  # the F.dropout call
    # TI006 names an nn.Linear: the line that built it
    assert [f["location"] for f in found if f["module"] == "fc"] == [f"mynet.py:{fc_line}"]
    table = invoke("doctor", "mynet.py:Net", "--input", "16")
    assert "Source" in table.stdout and f"mynet.py:{dropout_line}" in table.stdout
    # outside the current folder: the absolute path
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = invoke("doctor", f"{path}:Net", "--input", "16", "--select", "TI001", "-f", "json")
    assert json.loads(r.stdout)["findings"][0]["location"] == f"{path}:{list_line}"


def test_findings_in_library_code_have_no_location(invoke) -> None:
    """torchvision's own layers are not the user's to edit: no file:line, no Source column."""
    r = invoke("doctor", "squeezenet1_1", "--device", "meta", "--format", "json")
    assert r.exit_code == 0, r.output
    findings = json.loads(r.stdout)["findings"]
    assert findings and all(f["location"] is None for f in findings)
    assert "Source" not in invoke("doctor", "squeezenet1_1", "--device", "meta").stdout


def test_findings_table_fits_a_ci_log(invoke) -> None:
    """Without a terminal and without COLUMNS the What/Fix columns fold at 100 columns."""
    r = invoke("doctor", "zoo:llama-tiny", "--device", "meta", env={"COLUMNS": None})
    assert r.exit_code == 0, r.output
    table = r.stdout.split("Findings")[1].split("Why it matters")[0].splitlines()
    assert table and max(len(line) for line in table) <= 100
    assert any("layers.0.mlp.gate_proj" in line for line in table)  # names stay whole


def test_a_model_too_big_for_the_device_still_gets_the_static_checks(invoke, monkeypatch) -> None:
    """Like a 70B model on a laptop: the module-tree and meta-trace checks run, TI003-TI005
    say why they did not, and nothing is allocated up front."""
    from torchinspect import device as devices

    monkeypatch.setattr(devices, "available_bytes", lambda device: 1000)
    r = invoke("doctor", "zoo:pitfall-layer-list", "--format", "json")
    assert r.exit_code == 1, r.output  # TI001 is an error: found without a real run
    data = json.loads(r.stdout)
    assert "TI001" in [f["code"] for f in data["findings"]]  # the static checks ran
    assert set(data["skipped"]) == {c for c, r in rules().items() if r.needs == "run"}
    assert all("but only 1.00 KB is available" in why for why in data["skipped"].values())


@pytest.mark.cuda
def test_cli_doctor_real_checks_on_cuda(invoke) -> None:
    r = invoke("doctor", "zoo:pitfall-unused-branch", "--device", "cuda", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["run_device"].startswith("cuda") and data["skipped"] == {}
    assert [f["module"] for f in data["findings"] if f["code"] == "TI003"] == ["aux_head"]


def test_cli_doctor_bad_options(invoke) -> None:
    r = invoke("doctor", "zoo:convnet", "--select", "TI042")
    assert r.exit_code == 2 and "error: --select 'TI042' is not a doctor check" in r.output
    r = invoke("doctor", "zoo:convnet", "--fail-on", "sometimes")
    assert r.exit_code == 2 and "hint: use never, info, warning or error" in r.output


def test_api_twin() -> None:
    import torchinspect

    assert torchinspect.diagnose is diagnose


def test_a_given_trace_is_reused_not_traced_again(monkeypatch) -> None:
    """`inspect report` hands the doctor its own trace: same findings, no second forward."""
    import torchinspect.trace as trace_pkg
    from torchinspect.analysis.doctor import diagnose_case
    from torchinspect.sources.case import ModelOptions, make_case
    from torchinspect.trace import trace_case

    case = make_case("squeezenet1_1", options=ModelOptions(device="meta"))
    expected = diagnose_case(case)
    trace = trace_case(case)

    def no_second_trace(*a, **k):
        raise AssertionError("traced again")

    monkeypatch.setattr(trace_pkg, "trace_model", no_second_trace)
    again = diagnose_case(case, trace=trace)
    assert [f.to_dict() for f in again.findings] == [f.to_dict() for f in expected.findings]
    assert any(f.code == "TI009" for f in again.findings)  # the shape check used that trace


def test_tensor_core_advice_is_conditional_on_half_precision_gpu_runs():
    # the model is inspected on meta/CPU in fp32: the advice must say when it applies
    r = diagnose("zoo:doctor-misaligned", select=["TI006"])
    assert r.findings
    for f in r.findings:
        assert f.fix.startswith("only if it runs in fp16/bf16 on a GPU"), f.fix
        assert "no effect on fp32 or CPU runs" in f.fix


# ------------------------------------------------------------------ the registry


def test_registry_refuses_a_taken_code_or_name_and_takes_a_new_check(monkeypatch) -> None:
    import importlib

    from torchinspect.analysis.doctor import Finding, Severity, doctor_check
    from torchinspect.analysis.doctor.rules import RULES

    rules_module = importlib.import_module("torchinspect.analysis.doctor.rules")
    from torchinspect.report.doctor import checks_reference

    meta = dict(title="t", trigger="x", why="y", fix="z")
    with pytest.raises(ValueError, match="TI001 .* registered twice"):
        doctor_check("TI001", "something-else", "info", "static", **meta)(lambda ctx: [])
    with pytest.raises(ValueError, match="registered twice .*TI001 unregistered-submodule"):
        doctor_check("TI099", "unregistered-submodule", "info", "static", **meta)(lambda ctx: [])
    with pytest.raises(ValueError, match="three digits"):
        doctor_check("X1", "bad-code", "info", "static", **meta)(lambda ctx: [])
    with pytest.raises(ValueError, match=r"needs='gpu', expected one of \('static', 'trace', 'run'\)"):
        doctor_check("TI098", "bad-needs", "info", "gpu", **meta)(lambda ctx: [])
    assert "TI099" not in RULES and "X1" not in RULES and "TI098" not in RULES
    assert {type(r.needs) for r in RULES.values()} == {rules_module.Needs}  # a closed vocabulary

    monkeypatch.setattr(rules_module, "RULES", dict(RULES))  # the new check lives in the test

    @doctor_check("TI099", "many-linears", "info", "static", title="more than two Linear layers",
                  trigger="three or more nn.Linear", why="an example", fix="none needed")
    def many_linears(ctx):
        n = sum(isinstance(m, nn.Linear) for m in ctx.model.modules())
        return [Finding("TI099", Severity.info, "", f"{n} Linear layers")] if n > 2 else []

    r = diagnose("zoo:pitfall-unused-branch", select=["many-linears"], device="meta")
    assert r.checked == ["TI099"] and [f.what for f in r.findings] == ["4 Linear layers"]
    assert "| [TI099](#ti099) | `many-linears` | info |" in checks_reference()


def test_docs_page_lists_every_check_from_the_registry() -> None:
    from torchinspect.report.doctor import checks_reference

    text = checks_reference()
    for code, rule in rules().items():
        assert f"### {code}" in text and rule.why in text and rule.fix in text
    page = (Path(__file__).parents[1] / "docs" / "commands" / "doctor.md").read_text()
    assert "<!-- doctor-checks -->" in page


# ------------------------------------------------------------------ the user's bugs


class _InplaceAndList(nn.Module):
    """An in-place op on a tensor the backward needs, plus a plain list and a tensor attribute:
    the backward fails, the other checks must still report."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 64)
        self.extra = [nn.Linear(64, 64)]
        self.scale = torch.ones(64)
        self.head = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.exp(self.fc(x))
        h.mul_(self.scale)
        return self.head(h)


def test_inplace_on_saved_tensor_is_a_finding_and_the_other_checks_still_report() -> None:
    import inspect as pyinspect

    r = diagnose(_InplaceAndList(), torch.randn(2, 8))
    codes = {f.code: f for f in r.findings}
    assert {"TI001", "TI002", "TI010"} <= set(codes), r.findings
    lines, first = pyinspect.getsourcelines(_InplaceAndList.forward)
    exp_line = first + next(i for i, t in enumerate(lines) if "torch.exp(" in t)
    mul_line = first + next(i for i, t in enumerate(lines) if "h.mul_(" in t)
    f = codes["TI010"]
    assert f.severity.value == "error" and f.location.endswith(f"test_doctor.py:{mul_line}")
    assert f.data["made_by"] == "Exp" and f.data["saved_at"].endswith(f"test_doctor.py:{exp_line}")
    assert f.data["inplace_op"] == "Tensor.mul_"
    assert "modified by an inplace operation" in f.what
    assert set(r.skipped) == {"TI003", "TI005", "TI024"}  # they needed the backward


def test_cli_a_failing_forward_is_one_finding_with_its_line_not_exit_70(invoke) -> None:
    r = invoke("doctor", "zoo:pitfall-wrong-width", "--format", "json")
    assert r.exit_code == 1, r.output  # an error finding, not an internal error
    data = json.loads(r.stdout)
    errors = [f for f in data["findings"] if f["code"] == "TI011"]
    assert len(errors) == 1 and errors[0]["location"].endswith(line_of("mistakes.py",
                                                                       "return self.head(h)  #"))
    assert "mat1 and mat2 shapes cannot be multiplied" in errors[0]["what"]
    assert "TI001" in data["checked"] and "TI017" in data["checked"]  # structure still checked


@pytest.mark.parametrize("name", [n for n in models_zoo.names()
                                  if n.startswith("pitfall-") or n == "doctor-nan-grad"])
def test_cli_no_exit_70_on_any_pitfall(invoke, name: str) -> None:
    r = invoke("doctor", f"zoo:{name}", "--fail-on", "never", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["findings"]


# ------------------------------------------------------------------ less noise, clear words


class _Classifier(nn.Module):
    def __init__(self, tie: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(1001, 96)
        self.small = nn.Linear(96, 50)  # under 64: never flagged
        self.mid = nn.Linear(50, 100)  # 100 -> 104
        self.head = nn.Linear(100 if not tie else 96, 10 if not tie else 1001)
        if tie:
            self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.mid(self.small(self.emb(ids))) if not self.tie else self.emb(ids))

    @property
    def tie(self) -> bool:
        return self.head.weight is self.emb.weight


def test_tensor_core_advice_leaves_small_sizes_and_the_classes_alone() -> None:
    r = diagnose(_Classifier(), torch.zeros(1, 4, dtype=torch.long), select=["TI006"])
    changes = {f.module: f.data["suggested"] for f in r.findings}
    # mid's out 100 and head's in 100 are GEMM sizes; head's 10 classes, small's 50 and the
    # untied embedding (a lookup, no GEMM) are not
    assert changes == {"mid": {"out_features": 104}, "head": {"in_features": 104}}
    r = diagnose(_Classifier(tie=True), torch.zeros(1, 4, dtype=torch.long), select=["TI006"])
    changes = {f.module: f.data["suggested"] for f in r.findings}
    assert changes["emb"] == {"num_embeddings": 1024}  # the LM head's N, rounded to 64
    assert "head" not in changes or "out_features" not in changes["head"]
    assert all("Tensor Cores" in f.fix for f in r.findings)


def test_no_finding_says_model_twice() -> None:
    for name in ("pitfall-functional-dropout", "pitfall-parameter-in-forward"):
        for f in diagnose(f"zoo:{name}").findings:
            assert "(model) (" not in f.what and "(model)" not in f.what, f.what


class _Shared(nn.Module):
    """Deliberate sharing written out: one encoder used for both inputs."""

    def __init__(self) -> None:
        super().__init__()
        enc = nn.Linear(16, 64)
        self.left = enc
        self.right = enc
        self.pair = nn.ModuleList([enc, enc])
        self.head = nn.Linear(64, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.left(x) + self.right(x) + self.pair[0](x))


def test_deliberate_sharing_is_not_a_repeated_module() -> None:
    assert diagnose(_Shared(), torch.randn(1, 16), select=["TI017"]).findings == []
