"""The trace engine: MACs against hand formulas and FlopCounterMode, tied weights,
fallback from meta, and a model left exactly as it was."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.trace import trace_model


def spec(*shape: int, dtype: str = "float32") -> ExampleInputs:
    return ExampleInputs((TensorSpec(shape, dtype),))


class TinyGPT(nn.Module):
    """Embedding tied to the LM head, attention through F.scaled_dot_product_attention."""

    def __init__(self, vocab: int = 50, d: int = 16, heads: int = 2, causal: bool = True) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return self.lm_head(self.norm(x))


class FunctionalOnly(nn.Module):
    """Only functional ops: @, einsum, SDPA (plain and causal) — no Linear/Conv modules."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, 12))
        self.u = nn.Parameter(torch.randn(12, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w  # (B, T, 12)
        g = torch.einsum("btk,kd->btd", h, self.u)  # (B, T, d)
        q = g.view(2, 5, 2, 4).transpose(1, 2)  # (B=2, H=2, T=5, E=4)
        a = F.scaled_dot_product_attention(q, q, q)
        c = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return a + c


def test_tied_weights_counted_once() -> None:
    model = TinyGPT()
    trace = trace_model(model, spec(2, 7, dtype="int64"))
    distinct = {id(p): p for p in model.parameters()}  # parameters() deduplicates too
    assert trace.params.total == sum(p.numel() for p in distinct.values())
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive - trace.params.total == model.embed.weight.numel()
    assert ("lm_head.weight", "embed.weight") in trace.params.tied
    assert trace.modules["lm_head"].params == 0  # owned by the embedding


def test_functional_ops_against_hand_formulas() -> None:
    b, t, d = 2, 5, 8
    trace = trace_model(FunctionalOnly(d), spec(b, t, d))
    matmul = b * t * d * 12  # x @ w
    einsum = b * t * 12 * d  # h @ u via einsum
    # SDPA: QK^T (B*H*T*T*E) + AV (B*H*T*T*E), dense; counted twice (plain + causal)
    sdpa = 2 * (2 * 2 * 5 * 5 * 4)
    assert trace.total_macs == matmul + einsum + 2 * sdpa
    assert trace.macs_by_op["scaled_dot_product_attention"] == 2 * sdpa
    assert trace.op_calls["scaled_dot_product_attention"] == 2
    assert any("is_causal=True" in n for n in trace.notes)


def test_sdpa_gqa_and_cross_attention_shapes() -> None:
    class Cross(nn.Module):
        def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)

    q, kv = TensorSpec((1, 8, 3, 16)), TensorSpec((1, 2, 11, 16))
    trace = trace_model(Cross(), ExampleInputs((q, kv)))
    assert trace.total_macs == 8 * 3 * 11 * (16 + 16)


def test_agrees_with_flop_counter_mode() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = TinyGPT(causal=False).eval()
    ids = torch.zeros(2, 7, dtype=torch.long)
    # On meta, SDPA decomposes into bmm, which FlopCounterMode counts (on CPU it runs
    # _scaled_dot_product_flash_attention_for_cpu, which FlopCounterMode has no formula for).
    meta_model = TinyGPT(causal=False).to("meta").eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        meta_model(ids.to("meta"))
    for device in ("meta", "cpu"):
        trace = trace_model(model, (ids,), device=device)
        assert trace.total_macs * 2 == fc.get_total_flops()


def test_resnet18_matches_torchvision_published_and_flop_counter() -> None:
    import torchvision

    weights = torchvision.models.ResNet18_Weights.IMAGENET1K_V1
    with torch.device("meta"):
        model = torchvision.models.resnet18()
    trace = trace_model(model, spec(1, 3, 224, 224))
    assert trace.params.total == weights.meta["num_params"]
    assert math.isclose(trace.total_macs, weights.meta["_ops"] * 1e9, rel_tol=1e-3)
    assert trace.device == "meta" and trace.fallback_reason is None
    # attribution: conv1 ran one convolution, 64 out x 3*7*7 in x 112*112 positions
    conv1 = next(c for c in trace.calls if c.name == "conv1")
    assert conv1.macs == {"convolution": 64 * 3 * 7 * 7 * 112 * 112}
    assert conv1.outputs.shape == (1, 64, 112, 112)
    assert trace.uncounted["relu_"] == 17  # 1 stem + 2 per BasicBlock x 8
    assert "view" not in trace.uncounted and "t" not in trace.uncounted


def test_layer_settings_and_nested_outputs() -> None:
    class Multi(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3)
            self.pool = nn.MaxPool2d(2)

        def forward(self, x: torch.Tensor) -> dict:
            y = self.conv(x)
            return {"y": y, "pair": (self.pool(y), [y.sum()])}

    trace = trace_model(Multi(), spec(1, 3, 8, 8))
    info = trace.modules["conv"]
    assert info.layer == {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1],
                          "dilation": [1, 1], "groups": 3}
    root = trace.calls[0].outputs
    assert root["y"].shape == (1, 6, 4, 4)
    assert root["pair"][0].shape == (1, 6, 2, 2)
    assert root["pair"][1][0].shape == ()
    # grouped conv: each output sees in_channels/groups = 1 channel
    assert trace.calls[1].own_macs == 6 * 1 * 3 * 3 * 4 * 4


def _snapshot(model: nn.Module) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_model_unchanged_after_trace() -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    model.train()
    model.norm.eval()  # mixed flags must come back exactly
    before = _snapshot(model)
    attrs = {n: set(vars(m)) for n, m in model.named_modules()}
    flags = {n: m.training for n, m in model.named_modules()}
    global_hooks = (dict(nn.modules.module._global_forward_hooks),
                    dict(nn.modules.module._global_forward_pre_hooks))
    for device in ("meta", "cpu"):
        trace_model(model, spec(2, 7, dtype="int64"), device=device)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) and after[k].device.type == "cpu" for k in before)
    assert {n: m.training for n, m in model.named_modules()} == flags
    assert {n: set(vars(m)) for n, m in model.named_modules()} == attrs
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
        assert not m._forward_hooks_with_kwargs and not m._forward_pre_hooks_with_kwargs
    assert (dict(nn.modules.module._global_forward_hooks),
            dict(nn.modules.module._global_forward_pre_hooks)) == global_hooks
    assert model.lm_head.weight is model.embed.weight


def test_hooks_removed_and_flags_restored_when_forward_fails() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(5, 2))  # shapes do not chain
    model.train()
    with pytest.raises(InspectError, match="forward failed"):
        trace_model(model, spec(1, 4))
    assert model.training and all(m.training for m in model.modules())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_train_flag_traces_training_mode() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    seen = []
    model[1].register_forward_pre_hook(lambda m, a: seen.append(m.training))
    trace_model(model, spec(1, 4), train=True)
    trace_model(model, spec(1, 4))
    assert seen == [True, False] and not model.training


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = int(x.abs().sum().item() > -1) + 1  # .item(): impossible on meta
        for _ in range(steps):
            x = self.fc(x)
        return x


def test_meta_failure_falls_back_to_cpu_rebuild() -> None:
    with torch.device("meta"):
        model = DataDependent()
    built: list[str] = []

    def rebuild(device: str) -> nn.Module:
        built.append(device)
        with torch.device(device):
            return DataDependent()

    trace = trace_model(model, spec(1, 4), rebuild=rebuild)
    assert built == ["cpu"] and trace.device == "cpu"
    assert trace.fallback_reason and "meta forward failed" in trace.fallback_reason
    assert trace.total_macs == 2 * 4 * 4  # fc ran twice
    assert [c.call_number for c in trace.calls if c.name == "fc"] == [0, 1]


def test_meta_model_without_rebuild_runs_on_an_initialized_cpu_copy() -> None:
    with torch.device("meta"):
        model = DataDependent()
    trace = trace_model(model, spec(1, 4))
    assert trace.device == "cpu" and "meta forward failed" in trace.fallback_reason
    assert any("copy with initialized weights" in n for n in trace.notes)
    assert all(p.is_meta for p in model.parameters())  # the caller's module is untouched


def test_meta_model_too_big_for_a_cpu_copy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchinspect import device as devices

    with torch.device("meta"):
        model = DataDependent()
    monkeypatch.setattr(devices, "available_bytes", lambda device: 8)
    with pytest.raises(InspectError, match="only 8 B is available"):
        trace_model(model, spec(1, 4))


def test_plain_tensor_attribute_falls_back_on_real_model() -> None:
    class Attr(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.scale = torch.ones(4)  # not a buffer: stays on CPU during a meta trace

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * self.scale

    model = Attr()
    trace = trace_model(model, spec(1, 4))
    assert trace.device == "cpu" and trace.fallback_reason
    assert trace.total_macs == 16


def test_explicit_meta_does_not_fall_back() -> None:
    model = DataDependent()
    with pytest.raises(InspectError, match="cannot run on the meta device"):
        trace_model(model, spec(1, 4), fallback=False)


def test_regnet_builder_falls_back_from_meta_cleanly() -> None:
    import torchvision

    from torchinspect.sources import load_model

    loaded = load_model("regnet_y_400mf", device="meta")  # .tolist() at construction
    assert any("meta" in n for n in loaded.notes)
    trace = trace_model(loaded.model, loaded.example, rebuild=loaded.rebuild)
    weights = torchvision.models.RegNet_Y_400MF_Weights.IMAGENET1K_V1
    assert trace.params.total == weights.meta["num_params"]
    assert abs(trace.total_macs - weights.meta["_ops"] * 1e9) <= 1e-3 * weights.meta["_ops"] * 1e9
    assert trace.device == "meta"  # the real CPU model was traced through meta stand-ins


def test_tensor_inputs_and_kwargs() -> None:
    class KW(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor, *, extra: torch.Tensor) -> torch.Tensor:
            return self.fc(x) + extra

    ex = ExampleInputs((TensorSpec((4, 3)),), {"extra": TensorSpec((4, 2))})
    trace = trace_model(KW(), ex)
    assert trace.total_macs == 4 * 3 * 2
    assert trace.calls[0].inputs[-1]["extra"].shape == (4, 2)
    assert trace_model(KW().fc, torch.randn(5, 3)).total_macs == 5 * 3 * 2


def test_first_tensor_of_a_shape_tree() -> None:
    from torchinspect.shapes import TensorShape, first_tensor

    a, b = TensorShape((1, 3), "float32"), TensorShape((2,), "int64")
    assert first_tensor(a) is a
    assert first_tensor(("text", [None, {"k": b, "z": a}], a)) is b  # depth first, dict order
    assert first_tensor({"x": 1, "y": ["s"]}) is None and first_tensor(None) is None
    assert a.numel == 3 and TensorShape((), "float32").numel == 1
