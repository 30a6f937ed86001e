"""The Python API's promises across commands: the caller's model is left as given (what its
forward assigns, its buffers, its lazy modules), one text is one item where several are
taken, and misuse is an InspectError naming the argument."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torchinspect as ti
from torchinspect.errors import InspectError


class Counter(nn.Module):
    """A forward with side effects: a buffer += 1, an attribute re-assigned, one added."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.steps += 1
        self.last_shape = tuple(x.shape)
        return self.fc(x)


X = torch.randn(3, 4)

SIDE_EFFECT_CALLS = {
    "summarize on cpu": lambda m, tmp: ti.summarize(m, X, device="cpu"),
    "graph autograd": lambda m, tmp: ti.build_graph(m, X, kind="autograd"),
    "graph autograd saved": lambda m, tmp: ti.build_graph(m, X, kind="autograd", saved=True),
    "graph module": lambda m, tmp: ti.build_graph(m, X, kind="module"),
    "export": lambda m, tmp: ti.export_onnx(m, tmp / "c.onnx", X, force=True),
    "diagnose": lambda m, tmp: ti.diagnose(m, X),
    "features": lambda m, tmp: ti.extract_features(m, [], layers="fc", output=tmp / "f", example=X,
                                                    workers=0),
}


@pytest.mark.parametrize("call", SIDE_EFFECT_CALLS, ids=list(SIDE_EFFECT_CALLS))
def test_what_a_forward_assigns_is_put_back(call, tmp_path):
    if call == "export":
        import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    m = Counter()
    weight = m.fc.weight.detach().clone()
    SIDE_EFFECT_CALLS[call](m, tmp_path)
    assert (m.calls, int(m.steps), hasattr(m, "last_shape")) == (0, 0, False)
    assert torch.equal(m.fc.weight, weight)


def _lazy() -> nn.Sequential:
    return nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 2))


LAZY_CALLS = {
    "graph autograd": lambda m, tmp: ti.build_graph(m, X, kind="autograd"),
    "export": lambda m, tmp: ti.export_onnx(m, tmp / "lz.onnx", X, force=True),
    "features": lambda m, tmp: ti.extract_features(m, [], layers=["2"], output=tmp / "f", example=X,
                                                    workers=0),
    "diagnose": lambda m, tmp: ti.diagnose(m, X),
}


@pytest.mark.parametrize("call", LAZY_CALLS, ids=list(LAZY_CALLS))
def test_lazy_modules_stay_lazy(call, tmp_path):
    if call == "export":
        import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    m = _lazy()
    result = LAZY_CALLS[call](m, tmp_path)
    assert type(m[0]) is nn.LazyLinear and m[0].has_uninitialized_params()
    if call == "export":
        assert result.verified
    if call == "diagnose":
        assert any("lazy parameters" in n for n in result.notes)


def test_lazy_spec_runs_doctor_graph_and_export(invoke, tmp_path):
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    spec = tmp_path / "lazy.py"
    spec.write_text("import torch.nn as nn\n"
                    "class Net(nn.Sequential):\n"
                    "    def __init__(self):\n"
                    "        super().__init__(nn.LazyConv2d(4, 3), nn.Flatten(), nn.LazyLinear(2))\n")
    for args in (("doctor", f"{spec}:Net", "--input", "3,12,12"),
                 ("graph", f"{spec}:Net", "--input", "3,12,12", "-o", tmp_path / "g.dot"),
                 ("export", f"{spec}:Net", "--input", "3,12,12", "-o", tmp_path / "l.onnx")):
        r = invoke(*args)
        assert r.exit_code == 0, (args[0], r.output)


def test_one_text_is_one_item():
    assert ti.parse_inputs("3,224,224").args[0].shape == (1, 3, 224, 224)
    assert ti.ModelOptions(inputs="3,64,64").inputs == ["3,64,64"]
    assert ti.load_model("resnet18", args="num_classes=10").model.fc.out_features == 10
    m = nn.Sequential(nn.Linear(4, 2))
    assert ti.diagnose(m, torch.randn(2, 4), select="TI003").checked == ["TI003"]
    s = ti.summarize("resnet18", options=ti.ModelOptions(inputs="3,64,64"))
    assert s.input == "1,3,64,64"


def test_convert_strips_one_prefix_given_as_text(tmp_path):
    src = tmp_path / "mix.pt"
    torch.save({"module.w": torch.ones(2), "mask_token": torch.zeros(3), "other": torch.zeros(1)}, src)
    r = ti.convert_checkpoint(src, tmp_path / "out.pt", strip_prefix="module.")
    assert sorted(ti.read_checkpoint(tmp_path / "out.pt").obj) == ["mask_token", "other", "w"]
    assert r.verified
    r = ti.convert_checkpoint(src, tmp_path / "o.safetensors", shard_size="5GB")
    assert r.shards == ["o-00001-of-00001.safetensors"]


def test_check_budgets_takes_one_module_as_one_model():
    seq = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))  # 58 parameters; iterable
    r = ti.check_budgets(seq, max_params=45)
    assert not r.passed and len(r.models) == 1 and r.models[0].results[0].value == 58
    assert r.models[0].model == "Sequential"
    json.dumps(r.to_dict())
    assert ti.check_budgets(Counter(), max_params=45).passed


def test_diff_takes_paths_state_dicts_and_modules(tmp_path):
    seq = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    torch.save(seq.state_dict(), tmp_path / "seq.pt")
    other = nn.Sequential(nn.Linear(4, 8))
    for a, b in ((tmp_path / "seq.pt", str(tmp_path / "seq.pt")), (seq.state_dict(), seq.state_dict()),
                 (seq, seq), (seq, tmp_path / "seq.pt")):
        r = ti.diff_state_dicts(a, b)
        assert len(r.matched) == 4 and not r.missing and not r.unexpected
    r = ti.diff_state_dicts(seq, other)
    assert r.missing == ["1.weight", "1.bias"]
    with pytest.raises(InspectError, match="diff side A"):
        ti.diff_state_dicts(3, seq)


@pytest.mark.parametrize("call, needle", [
    (lambda tmp: ti.convert_checkpoint(tmp / "a.pt", tmp / "b.safetensors", dtype="fp8"), "--dtype 'fp8'"),
    (lambda tmp: ti.convert_checkpoint(tmp / "a.pt", tmp / "b.safetensors", shard_size="5 parsecs"),
     "--shard-size"),
    (lambda tmp: ti.build_graph(nn.Linear(4, 2), X, kind="bogus"), "unknown graph kind"),
    (lambda tmp: ti.build_graph(nn.Linear(4, 2), X, kind="module", depth=-1), "depth=-1"),
    (lambda tmp: ti.read_checkpoint(nn.Linear(4, 2)), "expected a checkpoint path"),
    (lambda tmp: ti.load_model(nn.Linear(4, 2)), "load_model takes a MODEL text"),
])
def test_misuse_is_an_inspect_error(call, needle, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "a.pt")
    with pytest.raises(InspectError, match=needle.replace("(", r"\(")):
        call(tmp_path)


def test_features_api_forms(tmp_path):
    from torchinspect.features import FeatureFolder

    r = ti.extract_features("resnet18", [], layers="avgpool,fc", output=tmp_path / "a",
                            example="3,64,64", workers=0)
    assert set(r.layers) == {"avgpool", "fc"}
    with pytest.raises(InspectError, match="no layer 'nope'"):
        FeatureFolder.open(tmp_path / "a").rows("nope")
    # a module with ModelOptions(inputs=...): the sample shape of the tensor file
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    torch.save(torch.randn(5, 3, 16, 16), tmp_path / "xs.pt")
    r = ti.extract_features(cnn, str(tmp_path / "xs.pt"), layers=["2"], output=tmp_path / "b",
                            options=ti.ModelOptions(inputs=["3,16,16"]), workers=0)
    assert r.rows == 5 and r.layers["2"]["shape"] == [4]
    assert r.preprocess == {"mode": "tensors"}  # tensor files are fed as they are


def test_features_cli_on_tensor_files_shows_no_image_preprocessing(invoke, tmp_path):
    torch.save(torch.randn(2, 3, 32, 32), tmp_path / "x.pt")
    r = invoke("features", "resnet18", tmp_path / "x.pt", "-l", "layer4", "-o", tmp_path / "f")
    assert r.exit_code == 0, r.output
    assert "resize" not in r.output and "tensor files as they are" in r.output
    manifest = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert manifest["preprocess"] == {"mode": "tensors"}


def test_dir_lists_the_lazy_api():
    names = dir(ti)
    assert {"summarize", "count_params", "diagnose", "extract_features"} <= set(names)
