"""timm: and Hugging Face sources (small configs built offline), dict inputs on real
transformers models, the meta fallback for a module given on meta, and mixture-of-experts.

MACs are cross-checked against torch.utils.flop_counter.FlopCounterMode on CPU."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import torchinspect as ti
import torchinspect.analysis
from torchinspect.errors import InspectError

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings(
    "ignore::FutureWarning:transformers.*", "ignore::UserWarning:transformers.*",
    "ignore::DeprecationWarning:transformers.*", "ignore::UserWarning:timm.*",
)

TINY_TEXT = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
             "num_attention_heads": 4, "vocab_size": 1000}


def flop_counter_macs(model: torch.nn.Module, *args: object, **kwargs: object) -> int:
    """FlopCounterMode's MACs on CPU, attention left out (it has no formula for the CPU
    attention kernels; ours is checked against the formula separately)."""
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(*args, **kwargs)
    counts = fc.get_flop_counts()["Global"]
    return sum(n for op, n in counts.items() if "attention" not in str(op)) // 2


def dense_macs(summary: ti.analysis.Summary) -> int:
    return summary.totals.macs - summary.trace.macs_by_op.get("scaled_dot_product_attention", 0)


def sdpa_macs(layers: int, batch: int, heads: int, q_len: int, k_len: int, head_dim: int) -> int:
    return layers * batch * heads * q_len * k_len * 2 * head_dim  # QKᵀ and AV


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------ timm:NAME


def test_timm_model_summary_matches_flop_counter(invoke) -> None:
    r = invoke("summary", "timm:test_resnet", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    model = timm.create_model("test_resnet", pretrained=False).eval()
    size = model.pretrained_cfg["input_size"]
    assert data["input"] == ",".join(map(str, (1, *size)))
    assert data["totals"]["params"] == n_params(model)
    assert data["totals"]["macs"] == flop_counter_macs(model, torch.randn(1, *size))


def test_timm_args_reach_create_model_and_the_input() -> None:
    s = ti.summarize("timm:test_vit", options=ti.ModelOptions(args=["num_classes=7", "img_size=64"]),
                     depth=1)
    model = timm.create_model("test_vit", pretrained=False, num_classes=7, img_size=64)
    assert s.totals.params == n_params(model)
    assert s.input == "1,3,64,64"


def test_unknown_timm_name_suggests_close_ones(invoke) -> None:
    r = invoke("summary", "timm:resnet_50")
    assert r.exit_code == 2
    assert "unknown timm model 'resnet_50'" in r.output and "did you mean timm:resnet50" in r.output


def test_missing_timm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(InspectError, match="timm package") as err:
        ti.count_params("timm:resnet18")
    assert "torchinspect[models]" in err.value.hint


# ------------------------------------------------------------------ Hugging Face


def tiny_bert() -> torch.nn.Module:
    cfg = transformers.BertConfig(**TINY_TEXT)
    return transformers.BertModel(cfg).eval()


def test_dict_inputs_on_a_transformers_model_match_flop_counter() -> None:
    model = tiny_bert()
    inputs = {"input_ids": torch.randint(0, 1000, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    s = ti.summarize(model, inputs)
    assert s.totals.params == n_params(model)
    assert dense_macs(s) == flop_counter_macs(model, **inputs)
    assert s.trace.macs_by_op["scaled_dot_product_attention"] == sdpa_macs(2, 2, 4, 16, 16, 16)
    assert ti.count_flops(model, inputs, device="cpu").macs == s.totals.macs


def test_model_folder_builds_from_config_json(tmp_path, invoke) -> None:
    cfg = transformers.LlamaConfig(num_key_value_heads=2, architectures=["LlamaForCausalLM"],
                                   **TINY_TEXT)
    cfg.save_pretrained(tmp_path)
    r = invoke("summary", str(tmp_path), "--format", "json", "--depth", "1")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    model = transformers.LlamaForCausalLM(cfg).eval()
    assert data["totals"]["params"] == n_params(model)
    assert data["input"] == "input_ids=int64:1,128"
    ids = torch.randint(0, 1000, (1, 128))
    attention = data["macs_by_op"].get("scaled_dot_product_attention", 0)
    assert attention == sdpa_macs(2, 1, 4, 128, 128, 16)
    assert data["totals"]["macs"] - attention == flop_counter_macs(model, input_ids=ids)
    assert any("built from config.json" in n for n in data["notes"])


def test_hf_arch_and_class_with_config_args() -> None:
    args = ["num_hidden_layers=1", "hidden_size=32", "intermediate_size=64", "num_attention_heads=2"]
    base = ti.count_params("hf:bert", options=ti.ModelOptions(args=args))
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                  num_attention_heads=2)
    assert base.total == n_params(transformers.BertModel(cfg))
    lm = ti.count_params("hf:BertForMaskedLM", options=ti.ModelOptions(args=args))
    assert lm.total == n_params(transformers.BertForMaskedLM(cfg))


def test_hf_default_inputs_follow_the_modality() -> None:
    vit = ti.make_case("hf:vit", options=ti.ModelOptions(args={"num_hidden_layers": 1, "image_size": 64}))
    assert vit.describe_inputs() == "pixel_values=1,3,64,64"
    whisper = ti.make_case("hf:whisper", options=ti.ModelOptions(args={"encoder_layers": 1, "decoder_layers": 1}))
    assert whisper.describe_inputs() == "input_features=1,80,3000 decoder_input_ids=int64:1,128"


def test_hf_errors_are_one_line(invoke, tmp_path) -> None:
    r = invoke("summary", "hf:lama")
    assert r.exit_code == 2 and "did you mean hf:llama" in r.output
    r = invoke("summary", "hf:bert", "--arg", "num_layer=2")
    assert r.exit_code == 2 and "num_hidden_layers" in r.output
    (tmp_path / "config.json").write_text('{"model_type": "no-such-type"}')
    r = invoke("summary", str(tmp_path))
    assert r.exit_code == 2 and "model_type 'no-such-type'" in r.output


def test_module_given_on_meta_with_item_in_forward_traces_with_fake_tensors() -> None:
    """BART's forward calls .item() on meta (a causal-mask shortcut); transformers skips it on
    fake tensors, so it traces without weights (a forward needing real values still runs on a
    CPU copy: tests/test_trace.py)."""
    cfg = transformers.BartConfig(encoder_layers=1, decoder_layers=1, d_model=32, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, encoder_attention_heads=2,
                                  decoder_attention_heads=2, vocab_size=500)
    with torch.device("meta"):
        model = transformers.BartModel(cfg)
    ids = torch.randint(0, 500, (1, 12))
    s = ti.summarize(model, {"input_ids": ids})
    assert s.device == "meta" and s.fallback_reason is None
    assert any("traced with fake tensors" in n and "item()" in n for n in s.notes)
    real = transformers.BartModel(cfg).eval()
    assert s.totals.params == n_params(real)
    assert dense_macs(s) == flop_counter_macs(real, input_ids=ids)
    assert all(p.is_meta for p in model.parameters())


def test_mixture_of_experts_counts_grouped_matmuls_and_active_params() -> None:
    cfg = transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                     num_key_value_heads=2, **TINY_TEXT)
    with torch.device("meta"):
        meta_model = transformers.MixtralForCausalLM(cfg)
    ids = torch.randint(0, 1000, (1, 16))
    s = ti.summarize(meta_model, {"input_ids": ids})
    assert s.device == "meta"
    grouped = s.trace.macs_by_op["_grouped_mm"]
    h, inter, tokens = 64, 128, 16
    assert grouped == 2 * tokens * 2 * (h * 2 * inter + inter * h)  # layers x tokens x k x expert
    real = transformers.MixtralForCausalLM(cfg).eval()
    cpu = ti.summarize(real, {"input_ids": ids}, device="cpu")
    assert cpu.totals.macs == s.totals.macs
    assert dense_macs(s) - grouped == flop_counter_macs(real, input_ids=ids)  # the rest: dense ops
    experts = sum(n_params(layer.mlp.experts) for layer in real.model.layers)
    active = n_params(real) - experts // 2
    assert any(f"{n_params(real):,} parameters in total, {active:,} active per token" in n
               for n in s.notes)
