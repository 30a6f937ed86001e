"""Model sources: torchvision, python specs, weights files, TorchScript, .pt2, pickles."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.sources import SourceKind, load_model
from torchinspect.sources.base import parse_kwargs


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------ torchvision


def test_torchvision_builds_on_meta_with_default_input():
    import torchvision

    lm = load_model("resnet18")
    assert lm.kind is SourceKind.torchvision
    assert lm.device == "meta" and next(lm.model.parameters()).is_meta
    assert _n_params(lm.model) == _n_params(torchvision.models.resnet18())
    assert lm.example.args[0].shape == (1, 3, 224, 224)


def test_inception_default_input_is_its_crop_size():
    assert load_model("inception_v3").example.args[0].shape == (1, 3, 299, 299)


def test_builder_kwargs_are_parsed_as_literals():
    lm = load_model("resnet18", args=["num_classes=10"])
    assert lm.model.fc.out_features == 10


def test_regnet_falls_back_to_cpu_and_says_so():
    lm = load_model("regnet_y_400mf")
    assert lm.device == "cpu"
    assert any("meta" in n for n in lm.notes)


def test_family_default_inputs():
    assert isinstance(load_model("fasterrcnn_resnet50_fpn").example.args[0], list)
    assert load_model("r3d_18").example.args[0].shape == (1, 3, 16, 112, 112)
    assert len(load_model("raft_small").example.args) == 2


def test_unknown_torchvision_name_suggests_closest():
    with pytest.raises(InspectError) as err:
        load_model("resnet19")
    assert "resnet18" in err.value.hint


def test_weights_arg_is_refused():
    with pytest.raises(InspectError, match="never downloads"):
        load_model("resnet18", args=["weights='IMAGENET1K_V1'"])


def test_weights_none_downloads_nothing_and_is_accepted():
    model = load_model("fcn_resnet50", args=["weights_backbone=None", "weights=None"])
    assert sum(p.numel() for p in model.model.parameters()) > 0
    with pytest.raises(InspectError, match=r"--arg weights_backbone='DEFAULT'"):
        load_model("fcn_resnet50", args=["weights_backbone='DEFAULT'"])


def test_suggestions_are_close_names_or_none():
    from torchinspect.sources.base import closest

    assert closest("notamodel", ["EvollaModel", "olmoe", "afmoe", "bert"]) == []
    assert closest("resnt18", ["resnet18", "vgg11"]) == ["resnet18"]
    assert closest("Bert", ["bert", "BertModel", "AlbertModel"]) == ["bert", "BertModel"]
    assert closest("num_layer", ["num_hidden_layers", "vocab_size"]) == ["num_hidden_layers"]
    pytest.importorskip("transformers")
    with pytest.raises(InspectError) as err:
        load_model("hf:notamodel")
    assert "did you mean" not in (err.value.hint or "")


def test_bad_builder_kwarg_is_a_user_error():
    with pytest.raises(InspectError, match="bogus"):
        load_model("resnet18", args=["bogus=1"])


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (["a=1", "b=0.5", "c=True", "d=None"], {"a": 1, "b": 0.5, "c": True, "d": None}),
        (["t=(3, 3)", "s='x'", "w=small"], {"t": (3, 3), "s": "x", "w": "small"}),
    ],
)
def test_parse_kwargs(pairs, expected):
    assert parse_kwargs(pairs) == expected


@pytest.mark.parametrize("bad", [["novalue"], ["=3"], ["a=[1,"], ["a=1", "a=2"]])
def test_parse_kwargs_errors(bad):
    with pytest.raises(InspectError):
        parse_kwargs(bad)


# ------------------------------------------------------------------ python specs

NET_PY = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Net(nn.Module):
        example_input = "1,4"

        def __init__(self, hidden=8):
            super().__init__()
            self.fc = nn.Linear(4, hidden)

        def forward(self, x):
            return self.fc(x)

    def make_model(hidden=3):
        return Net(hidden)

    instance = Net(2)
    not_a_model = 42

    def returns_int():
        return 1
    """
)


@pytest.fixture
def net_file(tmp_path: Path) -> Path:
    path = tmp_path / "mynet.py"
    path.write_text(NET_PY)
    return path


def test_python_file_class_with_kwargs(net_file: Path):
    lm = load_model(f"{net_file}:Net", args=["hidden=16"])
    assert lm.kind is SourceKind.python
    assert lm.model.fc.out_features == 16
    assert lm.example.args[0].shape == (1, 4)


def test_python_file_factory_and_instance(net_file: Path):
    assert load_model(f"{net_file}:make_model").model.fc.out_features == 3
    assert load_model(f"{net_file}:instance").model.fc.out_features == 2


def test_python_module_spec(net_file: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(net_file.parent)
    lm = load_model("mynet:make_model", args={"hidden": 5})
    assert lm.model.fc.out_features == 5


@pytest.mark.parametrize(
    ("attr", "message"),
    [("missing", "no attribute"), ("not_a_model", "not an nn.Module"), ("returns_int", "not an nn.Module")],
)
def test_python_spec_errors(net_file: Path, attr: str, message: str):
    with pytest.raises(InspectError, match=message):
        load_model(f"{net_file}:{attr}")


def test_python_spec_syntax_error(tmp_path: Path):
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n")
    with pytest.raises(InspectError, match="syntax error"):
        load_model(f"{bad}:f")


def test_python_spec_missing_file(tmp_path: Path):
    with pytest.raises(InspectError, match="no such file"):
        load_model(f"{tmp_path}/nope.py:Net")


# ------------------------------------------------------------------ weights files


SMALL_PY = textwrap.dedent(
    """
    from torch import nn

    class Small(nn.Module):
        example_input = "1,3,8,8"

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.bn(self.conv(x)).mean((2, 3)))
    """
)


# the same class here (reference weights) and in the file that the python spec imports
_namespace: dict = {}
exec(SMALL_PY, _namespace)
Small = _namespace["Small"]


@pytest.fixture
def small_spec(tmp_path: Path) -> str:
    path = tmp_path / "small.py"
    path.write_text(SMALL_PY)
    return f"{path}:Small"


def test_weights_load_into_meta_built_model(tmp_path: Path, small_spec: str):
    ref = Small()
    ckpt = tmp_path / "w.pth"
    torch.save(ref.state_dict(), ckpt)
    lm = load_model(small_spec, weights=str(ckpt))
    assert not any(t.is_meta for t in lm.model.state_dict().values())
    assert torch.equal(lm.model.conv.weight, ref.conv.weight)


def test_checkpoint_with_arch_unwraps_container_and_strips_prefix(tmp_path: Path, small_spec: str):
    ref = Small()
    sd = {f"module.{k}": v for k, v in ref.state_dict().items()}
    ckpt = tmp_path / "ddp.pth"
    torch.save({"epoch": 3, "state_dict": sd, "optimizer": {"state": {}}}, ckpt)
    lm = load_model(str(ckpt), arch=small_spec)
    assert lm.kind is SourceKind.python
    assert lm.weights_key == "state_dict"
    assert any("module." in n for n in lm.notes)
    assert torch.equal(lm.model.fc.bias, ref.fc.bias)


def test_weights_that_do_not_fit_name_the_fix(tmp_path: Path, small_spec: str):
    ckpt = tmp_path / "other.pth"
    torch.save(nn.Linear(3, 3).state_dict(), ckpt)
    with pytest.raises(InspectError) as err:
        load_model(str(ckpt), arch=small_spec)
    assert "inspect diff" in err.value.hint
    lm = load_model(str(ckpt), arch=small_spec, strict=False)
    assert any("strict=False" in n for n in lm.notes)


def test_weights_file_without_arch_asks_for_arch(tmp_path: Path):
    ckpt = tmp_path / "w.pth"
    torch.save(Small().state_dict(), ckpt)
    with pytest.raises(InspectError) as err:
        load_model(str(ckpt))
    assert "--arch" in err.value.hint


def test_torchvision_weights_round_trip(tmp_path: Path):
    import torchvision

    ref = torchvision.models.resnet18(num_classes=7)
    ckpt = tmp_path / "r18.pth"
    torch.save(ref.state_dict(), ckpt)
    lm = load_model(str(ckpt), arch="resnet18", args=["num_classes=7"])
    assert torch.equal(lm.model.fc.weight, ref.fc.weight)
    assert torch.equal(lm.model.bn1.running_var, ref.bn1.running_var)


def test_safetensors_weights(tmp_path: Path, small_spec: str):
    from safetensors.torch import save_file

    ref = Small()
    path = tmp_path / "w.safetensors"
    save_file(ref.state_dict(), str(path))
    lm = load_model(str(path), arch=small_spec)
    assert torch.equal(lm.model.conv.weight, ref.conv.weight)


def test_torchscript_archive(tmp_path: Path, small_spec: str):
    path = tmp_path / "m.pt"
    scriptable = load_model(small_spec, device="cpu").model  # from a file: its source is there
    torch.jit.save(torch.jit.script(scriptable), str(path))
    with pytest.raises(InspectError, match="TorchScript archive runs code"):
        load_model(str(path))  # torch.jit.load runs the archive's code: only when trusted
    lm = load_model(str(path), trust_pickle=True)
    assert lm.kind is SourceKind.torchscript
    assert _n_params(lm.model) == _n_params(Small())


def test_export_program_with_its_example(tmp_path: Path):
    path = tmp_path / "m.pt2"
    ep = torch.export.export(Small().eval(), (torch.randn(2, 3, 8, 8),))
    torch.export.save(ep, str(path))
    lm = load_model(str(path))
    assert lm.kind is SourceKind.export
    assert lm.example.args[0].shape == (2, 3, 8, 8)


def test_full_pickle_refused_then_trusted(tmp_path: Path, small_spec: str):
    from torchinspect.errors import UnsafeCheckpointError

    model = load_model(small_spec, device="cpu").model
    path = tmp_path / "full.pth"
    torch.save(model, path)
    with pytest.raises(UnsafeCheckpointError) as err:
        load_model(str(path))
    assert "--trust-pickle" in err.value.hint
    lm = load_model(str(path), trust_pickle=True)
    assert lm.kind is SourceKind.pickle


def test_missing_file_is_a_clean_error(tmp_path: Path):
    with pytest.raises(InspectError):
        load_model(str(tmp_path / "nope.pth"))


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_pt2_with_pickled_sample_inputs_is_refused(tmp_path: Path):
    """torch.export.load retries sample inputs without weights_only: we must refuse first."""
    import zipfile

    good = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(Small().eval(), (torch.randn(1, 3, 8, 8),)), str(good))
    evil = tmp_path / "evil.pt2"
    marker = tmp_path / "PWNED"
    import io
    import pickle

    buf = io.BytesIO()
    pickle.dump(_Payload(str(marker)), buf)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if "sample_inputs" in item.filename:
                data = buf.getvalue()
            dst.writestr(item, data)
    with pytest.raises(InspectError) as err:
        load_model(str(evil))
    assert "--trust-pickle" in err.value.hint
    assert not marker.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_device_without_cuda_is_a_clean_error(invoke):
    result = invoke("summary", "zoo:convnet", "--device", "cuda")
    assert result.exit_code == 2 and "CUDA is not available" in result.output
    assert "Traceback" not in result.output


def test_real_device_build_is_refused_when_weights_do_not_fit(tmp_path: Path):
    from torchinspect.device import available_bytes

    free = available_bytes("cpu")
    if free is None:
        pytest.skip("no /proc/meminfo here")
    side = int((free / 4) ** 0.5) + 1024  # one float32 Linear larger than free memory
    path = tmp_path / "huge.py"
    path.write_text(f"from torch import nn\n\ndef make():\n    return nn.Linear({side}, {side}, bias=False)\n")
    with pytest.raises(InspectError, match="needs .* for its weights on cpu") as err:
        load_model(f"{path}:make", device="cpu")
    assert "meta" in err.value.hint
    assert load_model(f"{path}:make").device == "meta"  # the default costs nothing


def _small_state(small_spec: str) -> dict:
    torch.manual_seed(0)
    lm = load_model(small_spec, device="cpu")
    return {k: v.clone() for k, v in lm.model.state_dict().items()}


def test_weights_with_infix_and_prefix_wrappers_load_like_diff_auto_prefix(tmp_path: Path,
                                                                            small_spec: str):
    """Per-block torch.compile (`conv._orig_mod.weight`) and a `model.` prefix: remapped as
    `inspect diff --auto-prefix` would, with a note, and the values land where they belong."""
    state = _small_state(small_spec)
    infix = {k.replace("conv.", "conv._orig_mod.").replace("fc.", "fc._orig_mod."): v
             for k, v in state.items()}
    prefixed = {f"model.{k}": v for k, v in state.items()}
    for name, sd in (("infix.pth", infix), ("prefixed.pth", prefixed)):
        torch.save(sd, tmp_path / name)
        lm = load_model(str(tmp_path / name), arch=small_spec, device="cpu")
        assert any("checkpoint keys remapped" in n for n in lm.notes), lm.notes
        for k, v in lm.model.state_dict().items():
            assert torch.equal(v, state[k]), k


def test_hint_never_offers_no_strict_when_nothing_would_load(tmp_path: Path, small_spec: str):
    ckpt = tmp_path / "unrelated.pth"
    torch.save({"encoder.layer.weight": torch.zeros(5, 5)}, ckpt)
    with pytest.raises(InspectError) as err:
        load_model(str(ckpt), arch=small_spec)
    assert "--no-strict" not in err.value.hint and "right model" in err.value.hint
    partial = dict(_small_state(small_spec))
    del partial["fc.bias"]
    torch.save(partial, tmp_path / "partial.pth")
    with pytest.raises(InspectError) as err:
        load_model(str(tmp_path / "partial.pth"), arch=small_spec)
    assert "--no-strict (it would load" in err.value.hint
