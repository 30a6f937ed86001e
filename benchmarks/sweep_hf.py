"""Hugging Face architectures through ``hf:ARCH``: speed at full size on meta, and MACs
cross-checked against torch.utils.flop_counter.FlopCounterMode on CPU at a shrunk size.

    .venv/bin/python benchmarks/sweep_hf.py [--limit N] [--out FILE] [ARCH ...]

For each architecture (text, vision, speech, encoder-decoder, MoE, state-space):

1. full size: ``summarize("hf:ARCH")`` with transformers' default config, on meta (CPU
   fallback where meta cannot run); wall time after imports (transformers and the model's modeling module are
   imported first; each number is the first summarize of that architecture).
2. shrunk config (few layers, narrow): the same model built for real on CPU, our MACs
   (``device="cpu"``) against FlopCounterMode on the same inputs. FlopCounterMode has no
   formula for the CPU attention kernels or ``_grouped_mm`` (MoE experts): those are
   compared to their closed forms in tests/, so here the rest ("dense") must match exactly.

One JSON record per architecture is appended to ``--out`` (default
``benchmarks/results/models-hf.jsonl``) with the run's machine and versions
(``machine.run_header``); architectures already in the file are skipped, so ``--limit N``
runs are resumed by running the script again (delete the file to measure afresh).
``benchmarks/pages_models.py`` renders RESULTS-models.md from it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

SMALL_TEXT = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4}
SMALL_ED = {"encoder_layers": 1, "decoder_layers": 1, "d_model": 64, "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128, "encoder_attention_heads": 2, "decoder_attention_heads": 2}

# arch -> (kind, shrunk config overrides)
ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("text encoder", SMALL_TEXT),
    "roberta": ("text encoder", SMALL_TEXT),
    "deberta-v2": ("text encoder", SMALL_TEXT),
    "gpt2": ("decoder", {"n_layer": 2, "n_embd": 64, "n_head": 4}),
    "llama": ("decoder", {**SMALL_TEXT, "num_key_value_heads": 2}),
    "mistral": ("decoder", {**SMALL_TEXT, "num_key_value_heads": 2}),
    "qwen2": ("decoder", {**SMALL_TEXT, "num_key_value_heads": 2}),
    "gemma": ("decoder", {**SMALL_TEXT, "num_key_value_heads": 2, "head_dim": 16}),
    "phi": ("decoder", {**SMALL_TEXT, "num_key_value_heads": 4}),
    "mixtral": ("MoE decoder", {**SMALL_TEXT, "num_key_value_heads": 2, "num_local_experts": 4}),
    "qwen2_moe": ("MoE decoder", {**SMALL_TEXT, "num_key_value_heads": 2, "num_experts": 4,
                                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}),
    "t5": ("encoder-decoder", {"num_layers": 1, "num_decoder_layers": 1, "d_model": 64,
                               "d_ff": 128, "num_heads": 2, "d_kv": 32}),
    "bart": ("encoder-decoder", SMALL_ED),
    "whisper": ("speech enc-dec", SMALL_ED),
    "wav2vec2": ("speech encoder", {**SMALL_TEXT, "conv_dim": (32, 32), "conv_kernel": (10, 3),
                                    "conv_stride": (5, 2), "num_conv_pos_embeddings": 16,
                                    "num_feat_extract_layers": 2}),
    "vit": ("vision", {**SMALL_TEXT, "image_size": 64}),
    "swin": ("vision", {"embed_dim": 32, "depths": [1, 1], "num_heads": [2, 4], "image_size": 64}),
    "convnext": ("vision", {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2}),
    "mamba": ("state-space", {"num_hidden_layers": 2, "hidden_size": 64}),
    "clip": ("vision+text", {}),  # nested text/vision configs: full size only
}


def dense_ops(counts: dict[Any, int]) -> int:
    return sum(n for op, n in counts.items()
               if "attention" not in str(op) and "grouped_mm" not in str(op))


def cross_check(arch: str, small: dict[str, Any]) -> tuple[int, int, int]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import torchinspect as ti

    case = ti.make_case(f"hf:{arch}", options=ti.ModelOptions(args=small), device="cpu")
    ours = ti.summarize(case.model, case.inputs_on("cpu")[1], device="cpu", depth=0)
    by_op = ours.trace.macs_by_op
    ours_dense = sum(n for op, n in by_op.items()
                     if op not in ("scaled_dot_product_attention", "_grouped_mm"))
    args, kwargs = case.inputs_on("cpu")
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        case.model.eval()(*args, **kwargs)
    theirs = dense_ops(fc.get_flop_counts()["Global"]) // 2
    return ours.totals.macs, ours_dense, theirs


def full_size(arch: str) -> dict[str, Any]:
    """``summarize("hf:ARCH")`` at transformers' default config: wall and CPU seconds after
    importing transformers and the model's modeling module."""
    import torchinspect as ti
    from torchinspect.sources.hf import import_transformers

    tr = import_transformers()
    tr.MODEL_MAPPING[type(tr.AutoConfig.for_model(arch))]  # import its modeling module
    t0, c0 = time.perf_counter(), time.process_time()
    s = ti.summarize(f"hf:{arch}", depth=1)
    return {"params": s.totals.params, "macs": s.totals.macs, "device": s.device,
            "seconds": round(time.perf_counter() - t0, 3),
            "cpu_seconds": round(time.process_time() - c0, 3)}


def shrunk(arch: str, small: dict[str, Any]) -> dict[str, Any] | None:
    if not small:
        return None  # nested configs (CLIP): full size only
    total, ours, theirs = cross_check(arch, small)
    return {"config": small, "macs": total, "dense_ours": ours, "dense_flop_counter": theirs}


def first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"[:200]


def one(arch: str) -> dict[str, Any]:
    kind, small = ARCHS.get(arch, ("?", {}))
    row: dict[str, Any] = {"name": arch, "kind": kind}
    for part, measure in (("full", lambda: full_size(arch)), ("shrunk", lambda: shrunk(arch, small))):
        try:
            row[part] = measure()
        except Exception as exc:  # a crash is a finding, not a reason to stop
            row[part] = {"error": first_line(exc)}
    return row


def main(argv: list[str]) -> int:
    import torch
    from machine import RESULTS, run_header

    from torchinspect.sources.hf import import_transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("archs", nargs="*", default=list(ARCHS))
    ap.add_argument("--limit", type=int, default=0, help="stop after N new models (0: all)")
    ap.add_argument("--out", default=str(RESULTS / "models-hf.jsonl"))
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import_transformers()
    out = Path(opts.out)
    done = set()
    if out.exists():
        done = {json.loads(line)["name"] for line in out.read_text().splitlines() if line.strip()}
    header = {**run_header("transformers"), "listed": len(ARCHS)}
    todo = [a for a in opts.archs if a not in done][:opts.limit or None]
    failed = 0
    with out.open("a") as fh:
        for arch in todo:
            row = one(arch)
            sh = row["shrunk"]
            failed += "error" in row["full"] or (sh is not None and (
                "error" in sh or sh["dense_ours"] != sh["dense_flop_counter"]))
            fh.write(json.dumps({**row, "run": header}) + "\n")
            fh.flush()
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
