"""Text generation on one GPU (issue 43): memory and time of ``model.generate`` for small
decoders, the data its predictor is developed (``dev``) and validated (``val``) on.

Every model is an ``hf:ClassName`` spec with ``--arg`` overrides (random weights from the
config, no download), built through torchinspect's own source (``make_case``), so a predictor
builds exactly the same model from the same spec. bf16 weights, eval, the attention
implementation transformers picks (``sdpa``). For each model, batch (1, 8) and prompt length
(512, 2048), with weights already resident:

* ``peak``: ``max_memory_allocated`` over the whole ``generate(ids, attention_mask,
  do_sample=False, max_new_tokens=129, min_new_tokens=129)`` with the default cache, peak
  stats reset just before; ``allocated_before`` (weights and nothing else) and
  ``allocated_after`` beside it;
* ``prefill_ms``: one forward over the prompt with ``use_cache=True`` (encoder-decoders: the
  encoder over the prompt and one decoder position), CUDA events, median of ``--repeats``;
  ``prefill_peak`` its ``max_memory_allocated`` (all positions' logits: a plain forward);
* ``generate_1_ms``, ``generate_129_ms``: wall time of ``generate`` for 1 and 129 new
  tokens (synchronized), each run's value and the median; ``decode_ms_per_token`` =
  (median 129 - median 1) / 128;
* ``graph_decode_ms_per_token``: the serving-engine floor: one decode step with a
  ``StaticCache`` (``max_cache_len`` = prompt + 130) captured in a CUDA graph *by this script*
  (no ``torch.compile``: it would not fit the lease), replayed at cache position = prompt
  length (a static cache's attention reads the whole cache, masked, at every position);
  ``static_eager_ms_per_token`` the same step without the graph. Where the step cannot be
  captured (a host sync in the model's code, e.g. mixture-of-experts routing), the error is
  kept and the eager static step stands alone.

The measuring code is torchinspect's own (``torchinspect.bench.generate``: what ``inspect
bench --generate`` and ``inspect memory --generate --verify`` run), with ``logits="all"``
for the prefill. Between cases the caching allocator and the cuBLAS workspaces are released
(``release``) and one side stream serves every capture: in the first campaign each capture's
new stream kept a cuBLAS workspace of 32 MiB for the process, so ``allocated_before`` grew
from case to case (``peak_above_before`` was not affected).

One JSON line per (model, batch, prompt), appended as it goes, each with the run header
(machine, versions incl. transformers); a rerun skips what its output holds. ``--dry-run``
runs on the CPU with tiny prompts and few tokens (and reports whether a decode step would
synchronise the host, i.e. could not be captured, through a dispatch mode).

    python benchmarks/generate_measure.py OUT.jsonl [--sets val,dev] [--models NAME,...]
        [--budget S] [--repeats 3] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (set, name, spec, --arg list). Chosen and committed before any measurement; the validation
# set is never tuned on. All under 1 B parameters.
DECODERS: list[tuple[str, str, str, list[str]]] = [
    # development: one of each kind the validation set has, other shapes
    ("dev", "llama-mha-12l", "hf:LlamaForCausalLM",
     ["hidden_size=768", "intermediate_size=2048", "num_hidden_layers=12",
      "num_attention_heads=12", "num_key_value_heads=12", "vocab_size=32000",
      "max_position_embeddings=4096"]),
    ("dev", "qwen2-gqa-sliding-8l", "hf:Qwen2ForCausalLM",
     ["hidden_size=512", "intermediate_size=1408", "num_hidden_layers=8",
      "num_attention_heads=8", "num_key_value_heads=2", "vocab_size=16000",
      "use_sliding_window=True", "sliding_window=512", "max_window_layers=4",
      "max_position_embeddings=4096"]),
    ("dev", "gpt2-small-4k", "hf:GPT2LMHeadModel",
     ["n_embd=768", "n_layer=12", "n_head=12", "n_positions=4096"]),
    ("dev", "qwen2moe-8e-4l", "hf:Qwen2MoeForCausalLM",
     ["hidden_size=512", "intermediate_size=1408", "moe_intermediate_size=704",
      "shared_expert_intermediate_size=1408", "num_experts=8", "num_experts_per_tok=2",
      "num_hidden_layers=4", "num_attention_heads=8", "num_key_value_heads=4",
      "vocab_size=16000", "max_position_embeddings=4096"]),
    ("dev", "t5-small-shape", "hf:T5ForConditionalGeneration",
     ["d_model=512", "d_ff=2048", "d_kv=64", "num_layers=6", "num_decoder_layers=6",
      "num_heads=8", "vocab_size=32128"]),
    # validation: 10 decoders of 9 families; GQA, sliding window, MoE, encoder-decoder, MQA
    ("val", "llama-gqa-16l", "hf:LlamaForCausalLM",
     ["hidden_size=1024", "intermediate_size=2816", "num_hidden_layers=16",
      "num_attention_heads=16", "num_key_value_heads=4", "vocab_size=32000",
      "max_position_embeddings=4096"]),
    ("val", "qwen2-0.5b-shape", "hf:Qwen2ForCausalLM",
     ["hidden_size=896", "intermediate_size=4864", "num_hidden_layers=24",
      "num_attention_heads=14", "num_key_value_heads=2", "vocab_size=151936",
      "tie_word_embeddings=True", "max_position_embeddings=32768"]),
    ("val", "mistral-sliding-12l", "hf:MistralForCausalLM",
     ["hidden_size=1024", "intermediate_size=3584", "num_hidden_layers=12",
      "num_attention_heads=16", "num_key_value_heads=8", "vocab_size=32000",
      "sliding_window=1024", "max_position_embeddings=8192"]),
    ("val", "mixtral-8e-8l", "hf:MixtralForCausalLM",
     ["hidden_size=768", "intermediate_size=1536", "num_hidden_layers=8",
      "num_attention_heads=12", "num_key_value_heads=4", "num_local_experts=8",
      "num_experts_per_tok=2", "vocab_size=32000", "sliding_window=None",
      "max_position_embeddings=8192"]),
    ("val", "t5-base-gated", "hf:T5ForConditionalGeneration",
     ["d_model=768", "d_ff=2048", "d_kv=64", "num_layers=12", "num_decoder_layers=12",
      "num_heads=12", "feed_forward_proj='gated-gelu'", "vocab_size=32128",
      "tie_word_embeddings=False"]),
    ("val", "gpt2-medium-4k", "hf:GPT2LMHeadModel",
     ["n_embd=1024", "n_layer=24", "n_head=16", "n_positions=4096"]),
    ("val", "phi-12l", "hf:PhiForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=12",
      "num_attention_heads=16", "partial_rotary_factor=0.5", "vocab_size=51200",
      "max_position_embeddings=4096"]),
    ("val", "gemma-mqa-12l", "hf:GemmaForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=12",
      "num_attention_heads=8", "num_key_value_heads=1", "head_dim=256", "vocab_size=256000",
      "max_position_embeddings=8192"]),
    ("val", "gptneox-410m-shape", "hf:GPTNeoXForCausalLM",
     ["hidden_size=1024", "intermediate_size=4096", "num_hidden_layers=24",
      "num_attention_heads=16", "vocab_size=50304",
      "max_position_embeddings=4096"]),
    ("val", "qwen2moe-16e-6l", "hf:Qwen2MoeForCausalLM",
     ["hidden_size=768", "intermediate_size=2048", "moe_intermediate_size=512",
      "shared_expert_intermediate_size=2048", "num_experts=16", "num_experts_per_tok=4",
      "num_hidden_layers=6", "num_attention_heads=12", "num_key_value_heads=4",
      "vocab_size=32000", "max_position_embeddings=4096"]),
]
BATCHES = (1, 8)
PROMPTS = (512, 2048)
NEW_TOKENS = 129
DRY = {"batches": (1, 2), "prompts": (16, 32), "new": 5}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")


def dry_args(args: list[str]) -> list[str]:
    """``--dry-run``: the same config with 2 layers (the code paths, on a CPU's time)."""
    return [f"{a.split('=')[0]}=2" if a.split("=")[0] in LAYER_KEYS else a for a in args]


def _write(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _done(path: Path) -> set[tuple[str, int, int]]:
    """(model, batch, prompt) already measured (without an error) in ``path``."""
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if "model" in r and "error" not in r:
                out.add((r["model"], r["batch"], r["prompt"]))
    return out


def build(spec: str, args: list[str], device: str) -> Any:
    """The model as ``inspect ... hf:CLASS --arg ...`` builds it, bf16, eval, on ``device``."""
    import torch

    from torchinspect.sources.case import ModelOptions, make_case

    case = make_case(spec, options=ModelOptions(args=args, device="meta"), device="meta")
    model = case.real_model(device).to(torch.bfloat16).eval()
    return model


def describe(model: Any, spec: str, args: list[str]) -> dict[str, Any]:
    cfg = model.config
    text = cfg.get_text_config(decoder=True)
    return {"spec": spec, "args": args, "params": sum(p.numel() for p in model.parameters()),
            "model_type": cfg.model_type, "attn_implementation": cfg._attn_implementation,
            "is_encoder_decoder": bool(cfg.is_encoder_decoder),
            "layer_types": sorted(set(getattr(text, "layer_types", None) or [])),
            "sliding_window": getattr(text, "sliding_window", None),
            "num_key_value_heads": getattr(text, "num_key_value_heads", None)}


def main() -> None:
    from machine import run_header

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sets", default="val,dev")
    ap.add_argument("--models", default="", help="comma-separated names: only these")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; stops between cases")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny prompts, few tokens")
    a = ap.parse_args()
    import torch

    from torchinspect.bench.generate import measure_generate, release

    deadline = time.monotonic() + a.budget
    device = "cpu" if a.dry_run else "cuda"
    batches, prompts, new = ((DRY["batches"], DRY["prompts"], DRY["new"]) if a.dry_run
                             else (BATCHES, PROMPTS, NEW_TOKENS))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    header = run_header("transformers")
    header["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    side = torch.cuda.Stream() if device == "cuda" else None  # one capture stream for the run
    sets = a.sets.split(",")
    only = [m for m in a.models.split(",") if m]
    chosen = [d for s in sets for d in DECODERS if d[0] == s and (not only or d[1] in only)]
    for set_name, name, spec, args in chosen:
        todo = [(b, p) for b in batches for p in prompts if (name, b, p) not in done]
        if not todo:
            continue
        if time.monotonic() > deadline:
            print(f"deadline: stopped before {name}", flush=True)
            return
        t0 = time.monotonic()
        try:
            model = build(spec, dry_args(args) if a.dry_run else args, device)
        except Exception as exc:  # noqa: BLE001 - one model must not end the run
            _write(out, {"run": header, "set": set_name, "model": name, "batch": None,
                         "prompt": None, "error": f"build: {exc!r}"[:400]})
            continue
        info = describe(model, spec, args)
        for batch, prompt in todo:
            if time.monotonic() > deadline:
                break
            row: dict[str, Any] = {"run": header, "set": set_name, "model": name,
                                   "batch": batch, "prompt": prompt, **info}
            t1 = time.monotonic()
            try:
                row.update(measure_generate(model, batch, prompt, new, repeats=a.repeats,
                                            device=device, logits="all", side_stream=side))
            except Exception as exc:  # noqa: BLE001 - out of memory, a model's limit
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                row["traceback"] = traceback.format_exc()[-1500:]
            row["seconds"] = round(time.monotonic() - t1, 2)
            _write(out, row)
            print(f"{name} b{batch} p{prompt}: {row.get('decode_ms_per_token', '-')} ms/token "
                  f"graph {row.get('graph_decode_ms_per_token', row.get('graph_error', '-'))} "
                  f"({row['seconds']} s)", flush=True)
            release(device)
        del model
        release(device)
        print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
