"""torchinspect.zoo: every entry builds on meta and CPU, runs its example, and is what it claims."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

import torchinspect.zoo as models_zoo
from torchinspect.inputs import ExampleInputs, example_from_strings
from torchinspect.zoo import REGISTRY, ZooEntry

# llama-70b: 282 GB in float32, meta only; a "raises" pitfall's forward fails by design
CPU_ENTRIES = [name for name, e in REGISTRY.items()
               if name != "llama-70b" and "raises" not in e.tags]

LLAMA_70B_PARAMS = 70_553_706_496  # given by issue 2


def example_of(entry: ZooEntry) -> ExampleInputs:
    ex = entry.example
    return ex() if callable(ex) else example_from_strings(ex)


def build_on(entry: ZooEntry, device: str, **kwargs) -> nn.Module:
    with torch.device(device):
        return entry.build(**kwargs)


def all_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Parameters, buffers and tensor attributes, also those hidden in plain lists."""
    out: list[torch.Tensor] = []
    for m in model.modules():
        for value in vars(m).values():
            items = value if isinstance(value, (list, tuple)) else [value]
            for v in items:
                if isinstance(v, torch.Tensor):
                    out.append(v)
                elif isinstance(v, nn.Module):
                    out.extend(all_tensors(v))
        out.extend(p for p in m._parameters.values() if p is not None)
        out.extend(b for b in m._buffers.values() if b is not None)
    return out


def unique_numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() dedups tied weights


def tensors_in(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in tensors_in(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in tensors_in(v)]
    return []


class CallLog(TorchFunctionMode):
    """Records the torch functions a forward calls, with their keyword arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[object, dict]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


# ------------------------------------------------------------------ registry contract


def test_registry_contract():
    assert len(REGISTRY) >= 11
    for name, entry in REGISTRY.items():
        assert isinstance(entry, ZooEntry)
        assert entry.name == name
        assert callable(entry.build)
        assert entry.description
        assert isinstance(entry.tags, tuple)
        assert models_zoo.get(name) is entry
    assert models_zoo.get("zoo:convnet") is REGISTRY["convnet"]
    assert models_zoo.names() == sorted(REGISTRY)
    with pytest.raises(KeyError):
        models_zoo.get("no-such-model")


def test_required_entries_present():
    required = {"convnet", "mnist-net", "gpt-tiny", "lstm-classifier", "multi-input",
                "llama-tiny", "llama-70b"}
    assert required <= set(REGISTRY)
    pitfalls = {n for n, e in REGISTRY.items() if "pitfall" in e.tags}
    assert {"pitfall-layer-list", "pitfall-tensor-attr", "pitfall-functional-dropout",
            "pitfall-unused-branch", "pitfall-inplace-sigmoid"} <= pitfalls
    assert all(n.startswith("pitfall-") for n in pitfalls)


def test_import_is_light():
    code = "import sys, torchinspect.zoo as models_zoo; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_meta_build_is_cheap():
    """No builder runs an init whose meta kernel imports torch._dynamo (~1.5 s)."""
    code = (
        "import sys, torch, torchinspect.zoo as models_zoo\n"
        "with torch.device('meta'):\n"
        "    for e in models_zoo.REGISTRY.values(): e.build()\n"
        "assert 'torch._dynamo' not in sys.modules, 'a meta build imported torch._dynamo'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_example_is_declared(name):
    ex = example_of(REGISTRY[name])
    specs = ex.specs()
    assert specs, f"{name} declares no example input"
    for spec in specs:
        if not spec.dtype.startswith("float"):
            assert spec.high, f"{name}: integer input {spec} needs high= (token ids in range)"


# ------------------------------------------------------------------ meta and CPU


@pytest.mark.parametrize("name", list(REGISTRY))
def test_builds_on_meta_without_allocating(name):
    entry = REGISTRY[name]
    model = build_on(entry, "meta")
    tensors = all_tensors(model)
    assert tensors
    assert all(t.device.type == "meta" for t in tensors), f"{name} allocated a real tensor"
    if name != "llama-70b" and not {"raises", "host-only"} & set(entry.tags):
        args, kwargs = example_of(entry).materialize("meta")
        with torch.no_grad():
            out = model.eval()(*args, **kwargs)
        assert all(t.device.type == "meta" for t in tensors_in(out))


@pytest.mark.parametrize("name", CPU_ENTRIES)
def test_builds_and_runs_on_cpu(name):
    entry = REGISTRY[name]
    ex = example_of(entry)
    model = entry.build().eval()
    assert all(t.device.type == "cpu" for t in all_tensors(model))
    args, kwargs = ex.materialize("cpu")
    with torch.no_grad():
        out = model(*args, **kwargs)
    outs = tensors_in(out)
    assert outs
    batch = ex.specs()[0].shape[0]
    for t in outs:
        assert t.shape[0] == batch
        assert torch.isfinite(t).all(), f"{name} produced non-finite values"
    # the meta build has exactly the CPU build's parameter and buffer shapes
    meta = build_on(entry, "meta")
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert {k: v.shape for k, v in meta.state_dict().items()} == shapes


# ------------------------------------------------------------------ MNIST


def test_convnet_structure_and_params():
    model = REGISTRY["convnet"].build()
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(1, 16), (16, 32)]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 2
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2
    assert (model.fc.in_features, model.fc.out_features) == (7 * 7 * 32, 10)
    expected = sum(c.in_channels * c.out_channels * 25 + c.out_channels for c in convs)
    expected += 2 * (16 + 32)  # BN weight + bias
    expected += 7 * 7 * 32 * 10 + 10
    assert unique_numel(model) == expected
    assert REGISTRY["convnet"].build(num_classes=3)(torch.zeros(2, 1, 28, 28)).shape == (2, 3)


def test_mnist_net_is_the_classic_net():
    model = REGISTRY["mnist-net"].build().eval()
    assert (model.conv1.in_channels, model.conv1.out_channels, model.conv1.kernel_size) == (1, 10, (5, 5))
    assert (model.conv2.in_channels, model.conv2.out_channels, model.conv2.kernel_size) == (10, 20, (5, 5))
    assert isinstance(model.conv2_drop, nn.Dropout2d)
    assert (model.fc1.in_features, model.fc1.out_features) == (320, 50)
    assert (model.fc2.in_features, model.fc2.out_features) == (50, 10)
    expected = (1 * 10 * 25 + 10) + (10 * 20 * 25 + 20) + (320 * 50 + 50) + (50 * 10 + 10)
    assert unique_numel(model) == expected
    with torch.no_grad():
        out = model(torch.randn(3, 1, 28, 28))
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(3))  # log_softmax


# ------------------------------------------------------------------ GPT


def test_gpt_weights_are_tied():
    for device in ("meta", "cpu"):
        model = build_on(REGISTRY["gpt-tiny"], device)
        assert model.lm_head.weight is model.tok_emb.weight
        assert isinstance(model.lm_head.weight, nn.Parameter)
        per_module = sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False))
        assert per_module - unique_numel(model) == model.tok_emb.weight.numel()


def test_gpt_uses_causal_sdpa_and_is_causal():
    entry = REGISTRY["gpt-tiny"]
    torch.manual_seed(0)
    model = entry.build().eval()
    (ids,), _ = example_of(entry).materialize("cpu")
    with torch.no_grad(), CallLog() as log:
        logits = model(ids)
    sdpa = [kw for f, kw in log.calls if f is F.scaled_dot_product_attention]
    assert len(sdpa) == len(model.blocks)
    assert all(kw.get("is_causal") for kw in sdpa)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % model.tok_emb.num_embeddings
    with torch.no_grad():
        logits2 = model(changed)
    torch.testing.assert_close(logits2[:, :-1], logits[:, :-1])
    assert not torch.allclose(logits2[:, -1], logits[:, -1])


# ------------------------------------------------------------------ LSTM and multi-input


def test_lstm_classifier():
    model = REGISTRY["lstm-classifier"].build(num_classes=7).eval()
    assert any(isinstance(m, nn.LSTM) for m in model.modules())
    assert model.embedding.padding_idx == 0 and not model.embedding.weight[0].any()
    assert model.embedding.weight.requires_grad
    (tokens,), _ = example_of(REGISTRY["lstm-classifier"]).materialize("cpu")
    assert tokens.dtype == torch.int64
    with torch.no_grad():
        assert model(tokens).shape == (tokens.shape[0], 7)


def test_multi_input_takes_dict_and_keyword():
    ex = example_of(REGISTRY["multi-input"])
    assert len(ex.args) == 2 and isinstance(ex.args[1], dict)
    assert set(ex.kwargs) == {"mask"}
    model = REGISTRY["multi-input"].build().eval()
    args, kwargs = ex.materialize("cpu")
    with torch.no_grad():
        out = model(*args, **kwargs)
        out_no_mask = model(*args)
    assert set(out) == {"logits", "embedding"}
    assert not torch.allclose(out["embedding"], out_no_mask["embedding"])  # the keyword matters


# ------------------------------------------------------------------ Llama


def llama_param_formula(cfg) -> int:
    """Hand count from the config: embeddings, per-layer attention + SwiGLU + 2 norms, final norm."""
    d, kv = cfg.d_model, cfg.n_kv_heads * cfg.head_dim
    attn = 2 * d * d + 2 * d * kv
    mlp = 3 * d * cfg.ffn_dim
    per_layer = attn + mlp + 2 * d
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.n_layers * per_layer + d + head


def test_llama_70b_exact_param_count_on_meta():
    model = build_on(REGISTRY["llama-70b"], "meta")
    assert unique_numel(model) == LLAMA_70B_PARAMS
    assert llama_param_formula(model.config) == LLAMA_70B_PARAMS
    cfg = model.config
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size) == (
        80, 8192, 64, 8, 28672, 128256)
    assert len(model.layers) == 80
    assert model.lm_head.weight is not model.embed_tokens.weight  # untied
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]  # no biases
    assert sum(isinstance(m, nn.RMSNorm) for m in model.modules()) == 2 * 80 + 1
    assert not list(model.buffers())  # RoPE is computed in forward: no tables
    assert model.layers[0].attn.k_proj.weight.shape == (8 * 128, 8192)  # GQA


def test_llama_70b_example_and_meta_forward():
    entry = REGISTRY["llama-70b"]
    (spec,) = example_of(entry).specs()
    assert spec.dtype == "int64" and spec.shape == (1, 128)
    model = build_on(entry, "meta")
    assert spec.high == model.config.vocab_size
    args, _ = example_of(entry).materialize("meta")
    with torch.no_grad():
        out = model(*args)
    assert out.shape == (1, 128, model.config.vocab_size)


def test_llama_args_override_preset():
    entry = REGISTRY["llama-70b"]
    model = build_on(entry, "meta", n_layers=2, dtype="bfloat16")
    assert len(model.layers) == 2
    assert unique_numel(model) == llama_param_formula(model.config)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with pytest.raises(TypeError, match="n_layer"):
        entry.build(n_layer=2)
    with pytest.raises(ValueError, match="n_kv_heads"):
        build_on(entry, "meta", n_kv_heads=7)


def test_llama_tiny_runs_causally_on_cpu():
    entry = REGISTRY["llama-tiny"]
    torch.manual_seed(0)
    model = entry.build().eval()
    assert unique_numel(model) == llama_param_formula(model.config)
    assert model.config.n_kv_heads < model.config.n_heads  # exercises GQA
    (ids,), _ = example_of(entry).materialize("cpu")
    with torch.no_grad(), CallLog() as log:
        logits = model(ids)
    assert logits.shape == (*ids.shape, model.config.vocab_size)
    sdpa = [kw for f, kw in log.calls if f is F.scaled_dot_product_attention]
    assert len(sdpa) == model.config.n_layers and all(kw.get("is_causal") for kw in sdpa)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % model.config.vocab_size
    with torch.no_grad():
        logits2 = model(changed)
    torch.testing.assert_close(logits2[:, :-1], logits[:, :-1])
    # RoPE makes attention position-aware: the same token at two positions differs
    same = torch.full((1, 4), 7)
    with torch.no_grad():
        out = model(same)
    assert not torch.allclose(out[0, 1], out[0, 3])


def test_llama_tiny_matches_reference_attention():
    """GQA via enable_gqa equals attention over explicitly repeated K/V heads."""
    from torchinspect.zoo.llama import apply_rope, rope

    torch.manual_seed(0)
    model = REGISTRY["llama-tiny"].build().eval()
    attn, cfg = model.layers[0].attn, model.config
    x = torch.randn(2, 5, cfg.d_model)
    cos, sin = rope(torch.arange(5), cfg.head_dim, cfg.rope_theta, x.dtype)
    with torch.no_grad():
        got = attn(x, cos, sin)
        q = apply_rope(attn.q_proj(x).view(2, 5, cfg.n_heads, -1).transpose(1, 2), cos, sin)
        k = apply_rope(attn.k_proj(x).view(2, 5, cfg.n_kv_heads, -1).transpose(1, 2), cos, sin)
        v = attn.v_proj(x).view(2, 5, cfg.n_kv_heads, -1).transpose(1, 2)
        rep = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) / cfg.head_dim**0.5
        scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
        ref = attn.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, -1))
    torch.testing.assert_close(got, ref)
    assert asdict(cfg)["tie_embeddings"] is False


# ------------------------------------------------------------------ pitfalls


def test_pitfall_layer_list_hides_parameters():
    model = REGISTRY["pitfall-layer-list"].build()
    assert isinstance(model.layers, list) and model.layers
    seen = {id(p) for p in model.parameters()}
    hidden = [p for layer in model.layers for p in layer.parameters()]
    assert hidden and not any(id(p) in seen for p in hidden)
    assert not any(k.startswith("layers") for k in model.state_dict())
    model.double()
    assert all(p.dtype == torch.float32 for p in hidden)  # .to()/.double() skip them


def test_pitfall_tensor_attribute_is_not_a_buffer():
    model = REGISTRY["pitfall-tensor-attr"].build()
    assert isinstance(model.scale, torch.Tensor) and not isinstance(model.scale, nn.Parameter)
    assert "scale" not in model.state_dict()
    assert not any(b is model.scale for b in model.buffers())
    model.double()
    assert model.scale.dtype == torch.float32  # left behind by .to()


def test_pitfall_functional_dropout_drops_in_eval():
    entry = REGISTRY["pitfall-functional-dropout"]
    model = entry.build().eval()
    args, _ = example_of(entry).materialize("cpu")
    with torch.no_grad():
        outs = [model(*args) for _ in range(3)]
        clean = model.fc2(F.relu(model.fc1(args[0])))
    assert not torch.allclose(outs[0], outs[1]) or not torch.allclose(outs[1], outs[2])
    assert not torch.allclose(outs[0], clean)


def test_pitfall_unused_branch_never_runs():
    entry = REGISTRY["pitfall-unused-branch"]
    model = entry.build()
    ran: set[str] = set()
    handles = [m.register_forward_hook(lambda mod, i, o, n=n: ran.add(n))
               for n, m in model.named_modules() if n]
    try:
        args, _ = example_of(entry).materialize("cpu")
        model(*args).sum().backward()
    finally:
        for h in handles:
            h.remove()
    assert "head" in ran and not any(n.startswith("aux_head") for n in ran)
    assert all(p.grad is None for p in model.aux_head.parameters())
    assert all(p.grad is not None for p in model.head.parameters())
