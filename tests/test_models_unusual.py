"""Valid but unusual models through every command: float64 and complex weights, forwards that
edit their input in place, TorchScript submodules, dataclass outputs, the legacy
weight_norm, a rank-1 example whose only dim the exporter fixes, dilated convolutions."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from torch import nn

import torchinspect as ti
from torchinspect.errors import InspectError


class InPlace(nn.Module):
    """Deterministic; edits its input in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2).add_(1)
        return torch.relu(self.fc(x))


def scripted(module: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated in new torch
        return torch.jit.script(module)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l(x))


class WithScripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.inner = scripted(Inner())
        self.post = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.inner(self.pre(x)))


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    n: int = 3


class DataOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> Out:
        return Out(self.a(x))


def test_doctor_on_float64_and_complex_models():
    m = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).double()
    r = ti.diagnose(m, torch.randn(2, 8, dtype=torch.float64))  # raised on a float32 norm
    assert not r.findings and "TI004" in r.checked

    class Complex(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4, dtype=torch.cfloat))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.to(torch.cfloat) @ self.w).abs()

    m = Complex()
    with torch.no_grad():
        m.w[0, 0] = complex(1.0, float("nan"))  # NaN in the imaginary part only
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "casting complex values to real" is not printed
        r = ti.diagnose(m, torch.randn(1, 4))
    assert any(f.code == "TI005" and "hold NaN/Inf: w" in f.what for f in r.findings)


def test_a_forward_editing_its_input_is_no_false_finding(tmp_path):
    r = ti.diagnose(InPlace(), torch.randn(1, 8))
    assert not [f for f in r.findings if f.code == "TI004"]  # the two runs saw equal inputs
    g = ti.build_graph(InPlace(), torch.randn(1, 8), kind="autograd")  # no "leaf Variable" error
    assert g.count("input") == 1 and any(n.type == "CloneBackward0" for n in g.nodes)
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    e = ti.export_onnx(InPlace(), tmp_path / "i.onnx", torch.randn(1, 8))
    assert e.verified  # onnxruntime got the inputs PyTorch got


def test_torchscript_submodule_is_one_row_and_stays_scripted():
    m = WithScripted()
    s = ti.summarize(m, torch.randn(1, 8))
    rows = {r.name: r for r in s.rows}
    assert rows["inner"].type == "Inner" and rows["inner"].macs == 64
    assert s.totals.macs == 64 + 64 + 16
    assert isinstance(m.inner, torch.jit.ScriptModule)  # the stand-in is gone
    assert not m._forward_hooks and not m.pre._forward_pre_hooks
    cpu = ti.summarize(m, torch.randn(1, 8), device="cpu")
    assert cpu.totals.macs == s.totals.macs
    assert ti.diagnose(m, torch.randn(1, 8)).findings == []


def test_dataclass_outputs_have_shapes_and_a_graph():
    s = ti.summarize(DataOut(), torch.randn(1, 8))
    assert s.rows[0].output == "{logits: [1, 4], n: 3}"
    g = ti.build_graph(DataOut(), torch.randn(1, 8), kind="autograd")
    assert g.count("output") == 1 and g.count("param") == 2


def test_legacy_weight_norm_is_not_a_tensor_attribute_finding():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of parametrizations
        conv = torch.nn.utils.weight_norm(nn.Conv1d(4, 4, 3))
    r = ti.diagnose(nn.Sequential(conv), torch.randn(1, 4, 16), select=["TI002"])
    assert r.findings == []
    plain = nn.Linear(2, 2)
    plain.cache = torch.zeros(3)  # a real plain tensor attribute is still found
    assert [f.code for f in ti.diagnose(plain, torch.randn(1, 2), select="TI002").findings] == ["TI002"]


def test_export_verifies_a_batch_dim_the_exporter_fixed_at_its_size(tmp_path):
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips

    class Rank1(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    r = ti.export_onnx(Rank1(), tmp_path / "r.onnx", torch.randn(8))
    assert r.verified and [v.batch for v in r.verify] == [8]
    assert any("x dim 0: kept fixed at 8 by the exporter" in n for n in r.notes)


def test_export_verification_cannot_load_is_a_failed_run(tmp_path, monkeypatch):
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips

    from torchinspect.export import onnx as ex

    def no_kernel(target, ort):
        raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : no Gemm(13) for bfloat16")

    monkeypatch.setattr(ex.verify, "_session", no_kernel)
    r = ti.export_onnx(nn.Linear(8, 2), tmp_path / "b.onnx", torch.randn(1, 8))
    assert r.verified is False and (tmp_path / "b.onnx").is_file()
    assert "onnxruntime (CPU) cannot run the file: [ONNXRuntimeError]" in r.verify[0].error


def test_kernel_column_shows_dilation_and_same_padding():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, dilation=2, padding=2), nn.Conv2d(4, 4, 3, padding="same"))
    rows = {r.name: r for r in ti.summarize(m, torch.randn(1, 3, 16, 16)).rows}
    assert rows["0"].kernel == "3×3 p2 d2" and rows["1"].kernel == "3×3 p=same"


class Aliased(nn.Module):
    """One TorchScript module registered under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = scripted(Inner())
        self.encoder = self.enc
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x))


class RopeCache(nn.Module):
    """Rotary tables cached in a plain dict by sequence length (filled in forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self._cache: dict[int, torch.Tensor] = {}
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if n not in self._cache:
            self._cache[n] = torch.arange(n, device=x.device, dtype=x.dtype).unsqueeze(-1)
        self.seen.append(n)
        return self.fc(x) * self._cache[n]


def test_a_scripted_module_registered_twice_keeps_its_weights():
    m = Aliased()
    x = torch.randn(1, 8)
    ref = m(x)
    assert ti.summarize(m, x).totals.macs == 64 + 16
    assert {p.device.type for p in m.parameters()} == {"cpu"}
    assert torch.equal(m(x), ref)


def test_a_cache_filled_in_forward_is_emptied_again():
    m = RopeCache()
    x = torch.randn(1, 5, 8)
    for run in (lambda: ti.summarize(m, x), lambda: ti.summarize(m, x, device="cpu"),
                lambda: ti.diagnose(m, x), lambda: ti.build_graph(m, x, kind="autograd")):
        run()
        assert m._cache == {} and m.seen == []
    m(x)  # the model still works (no meta tensor left in its cache)
    assert m._cache[5].device.type == "cpu"


LAZY_SPEC = ("import torch.nn as nn\n"
             "class Net(nn.Sequential):\n"
             "    example_input = '1,3,16,16'\n"
             "    def __init__(self):\n"
             "        super().__init__(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.Flatten(),\n"
             "                         nn.LazyLinear(2))\n")


def test_lazy_spec_on_a_device_with_weights_and_budgets(invoke, tmp_path):
    spec = tmp_path / "lazy.py"
    spec.write_text(LAZY_SPEC)
    total = 4 * 3 * 9 + 4 + 4 + 4 + 4 * 14 * 14 * 2 + 2  # conv, bn (w, b), linear
    for extra in ((), ("--device", "cpu"), ("--device", "cpu", "--train")):
        r = invoke("summary", f"{spec}:Net", *extra, "-f", "json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["totals"]["params"] == total, extra
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("lazy_spec", spec)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    net = mod.Net()
    net(torch.randn(1, 3, 16, 16))
    torch.save(net.state_dict(), tmp_path / "w.pt")
    r = invoke("params", f"{spec}:Net", "--weights", tmp_path / "w.pt")
    assert r.exit_code == 0 and f"{total:,}" in r.output, r.output
    r = invoke("check", f"{spec}:Net", "--max-params", "100")
    assert r.exit_code == 1 and "1.69K" in r.output, r.output  # lazy parameters counted


def test_lazy_batch_norm_models_copy_for_every_api(tmp_path):
    def lazy_bn() -> nn.Sequential:
        return nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.Flatten(), nn.LazyLinear(2))

    x = torch.randn(1, 3, 16, 16)
    for run in (lambda m: ti.build_graph(m, x, kind="autograd"), lambda m: ti.diagnose(m, x),
                lambda m: ti.extract_features(m, [], layers=["3"], output=tmp_path / "f", example=x,
                                              workers=0, restart=True)):
        m = lazy_bn()
        run(m)
        assert type(m[1]) is nn.LazyBatchNorm2d


def test_sixteen_bit_png_decodes_like_eight_bit(tmp_path):
    from PIL import Image

    from torchinspect.features.inputs import decode_cpu

    ramp = torch.arange(64 * 64, dtype=torch.int32).reshape(64, 64) * 16  # 0..65520
    Image.fromarray(ramp.numpy().astype("uint16")).save(tmp_path / "g16.png")
    Image.fromarray((ramp // 257).numpy().astype("uint8")).save(tmp_path / "g8.png")
    a = decode_cpu((tmp_path / "g16.png").read_bytes(), "g16.png")
    b = decode_cpu((tmp_path / "g8.png").read_bytes(), "g8.png")
    assert a.dtype == torch.uint8 and a.shape == b.shape == (3, 64, 64)
    assert (a.int() - b.int()).abs().max() <= 1


def test_features_of_a_dataclass_layer_and_a_scripted_layer(tmp_path):
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> Out:
            return Out(self.fc(x))

    net = nn.Sequential(Block())
    r = ti.extract_features(net, [], layers=["0"], output=tmp_path / "d", example=torch.randn(2, 8),
                            workers=0)
    assert r.layers["0.logits"]["shape"] == [4]
    with pytest.raises(InspectError, match="TorchScript module takes no forward hooks"):
        ti.extract_features(WithScripted(), [], layers=["inner"], output=tmp_path / "s",
                            example=torch.randn(1, 8), workers=0)
    from pathlib import Path

    torch.save(torch.randn(3, 8), tmp_path / "xs.pt")
    r = ti.extract_features(net, Path(tmp_path / "xs.pt"), layers="0", output=tmp_path / "p",
                            workers=0, example=torch.randn(1, 8))
    assert r.rows == 3  # one Path is one input


def test_sparse_buffers_and_scripted_layers_in_train_mode():
    class Graphy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("adj", torch.eye(4).to_sparse())
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(self.adj, self.fc(x))

    g = Graphy()
    assert ti.summarize(g, torch.randn(4, 4), device="cpu").totals.params == 20
    assert ti.build_graph(g, torch.randn(4, 4), kind="autograd").count("param") == 2

    class WithScriptedNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = scripted(nn.BatchNorm1d(8))
            self.shared = scripted(nn.Linear(8, 8))
            self.alias = self.shared

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared(self.norm(x))

    m = WithScriptedNorm()  # built in train mode; the trace runs eval mode, batch 1
    s = ti.summarize(m, "8")
    assert s.totals.macs == 64 and m.norm.training and m.training
    assert {p.device.type for p in m.parameters()} == {"cpu"}  # the shared scripted Linear too
    ti.summarize(m, "8", device="meta")
    assert m.shared.weight.device.type == "cpu"


def test_size_and_budget_texts():
    from torchinspect.check import Measured, Metric
    from torchinspect.io.writers import parse_size

    assert parse_size("1e9") == 10**9 and parse_size("2GiB") == 2 * 1024**3
    assert Measured(Metric.latency_ms, 12.5, 12.503, False, "").shown() == ("12.5030 ms", "12.5000 ms")
