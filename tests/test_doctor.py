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

# code, severity, trigger, clean twin, the statement the finding must point at (file, text)
PAIRS = [
    ("TI001", "error", "pitfall-layer-list", "doctor-layer-modulelist",
     ("pitfalls.py", "self.layers = [nn.Linear(a, b)")),
    ("TI002", "warning", "pitfall-tensor-attr", "doctor-tensor-buffer",
     ("pitfalls.py", "self.scale = torch.full(")),
    ("TI003", "warning", "pitfall-unused-branch", "doctor-used-branch",
     ("pitfalls.py", "self.aux_head = nn.Sequential(")),
    ("TI004", "error", "pitfall-functional-dropout", "doctor-mode-dropout",
     ("pitfalls.py", "x = F.dropout(F.relu(self.fc1(x)), p=self.p)")),
    ("TI005", "error", "doctor-nan-grad", "doctor-safe-distance",
     ("doctor.py", "return torch.sqrt((diff * diff).sum(-1) + self.eps)")),
    ("TI006", "info", "doctor-misaligned", "doctor-aligned",
     ("doctor.py", "self.fc1 = nn.Linear(dims[0], dims[1])")),
    ("TI007", "info", "doctor-oversized", "doctor-gap-head",
     ("doctor.py", "self.classifier = nn.Sequential(nn.Linear(width, 1024)")),
    ("TI008", "warning", "doctor-frozen-bn", "doctor-trainable-ln",
     ("doctor.py", "self.norm = nn.BatchNorm1d(hidden)")),
    ("TI009", "warning", "doctor-dropped-rows", "doctor-padded-pool",
     ("doctor.py", "self.pool2 = nn.MaxPool2d(2)")),
    ("TI010", "error", "pitfall-inplace-sigmoid", "doctor-outofplace-sigmoid",
     ("mistakes.py", "h = self.gate(h)")),
    ("TI011", "error", "pitfall-wrong-width", "doctor-right-width",
     ("mistakes.py", "return self.head(h)  # mistake")),
    ("TI012", "error", "pitfall-parameter-in-forward", "doctor-parameter-in-init",
     ("mistakes.py", "else nn.Parameter(torch.randn(HIDDEN, CLASSES) * 0.1)  # mistake")),
    ("TI013", "warning", "pitfall-log-softmax", "doctor-log-softmax",
     ("mistakes.py", "return torch.log(F.softmax(logits, dim=-1))  # mistake")),
    ("TI014", "warning", "pitfall-host-tensor", "doctor-device-tensor",
     ("mistakes.py", "ramp = torch.arange(IN, dtype=x.dtype) / IN  # mistake")),
    ("TI015", "warning", "pitfall-item-in-forward", "doctor-clamp-in-forward",
     ("mistakes.py", "elif h.max().item() > 10.0:  # mistake")),
    ("TI016", "info", "pitfall-conv-bias-bn", "doctor-conv-no-bias-bn",
     ("mistakes.py", "self.conv = nn.Conv2d(3, HIDDEN, 3, padding=1, bias=fixed is False)")),
    ("TI017", "error", "pitfall-repeated-layer", "doctor-distinct-layers",
     ("mistakes.py", "self.blocks = nn.ModuleList([layer] * 4)  # mistake")),
    ("TI018", "warning", "pitfall-data-in-forward", "doctor-no-data",
     ("mistakes.py", "scale = self.scale if self.fixed else self.scale.data  # mistake")),
    ("TI019", "warning", "pitfall-constant-init", "doctor-random-init",
     ("mistakes.py", "nn.init.constant_(self.fc.weight, 0.01)  # mistake")),
    ("TI020", "warning", "pitfall-float64", "doctor-float32",
     ("mistakes.py", "self.fc = nn.Linear(IN, HIDDEN, dtype=dtype)")),
    ("TI021", "warning", "pitfall-trainable-buffer", "doctor-temperature-parameter",
     ("mistakes.py", 'self.register_buffer("temperature", torch.ones(1, requires_grad=True))')),
]


def line_of(file: str, text: str) -> str:
    """``file:line`` of the one line of the zoo file that holds ``text``."""
    lines = (ZOO / file).read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (file, text, hits)
    return f"{(ZOO / file).relative_to(Path.cwd()) if (ZOO / file).is_relative_to(Path.cwd()) else ZOO / file}:{hits[0]}"


def test_every_rule_has_a_zoo_pair() -> None:
    assert sorted(code for code, *_ in PAIRS) == sorted(rules())
    for _, _, trigger, clean, _ in PAIRS:
        assert trigger in models_zoo.REGISTRY and clean in models_zoo.REGISTRY


@pytest.mark.parametrize(("code", "severity", "trigger", "clean", "where"), PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_trigger_at_its_line_and_clean_twin(code: str, severity: str, trigger: str, clean: str,
                                            where: tuple[str, str]) -> None:
    found = diagnose(f"zoo:{trigger}")
    mine = [f for f in found.findings if f.code == code]
    assert mine, found.findings
    assert (mine[0].severity.value, mine[0].location) == (severity, line_of(*where)), mine[0]
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
    assert {(f.severity.value, f.module) for f in by["TI008"]} == {("info", "backbone"),
                                                                   ("warning", "norm")}
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
