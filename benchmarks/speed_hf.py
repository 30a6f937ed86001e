"""Issue 13 item 8: `summary` of full-size Hugging Face configs, each in a fresh process.

    .venv/bin/python benchmarks/speed_hf.py [--limit N] [--out FILE] [--profile DIR] [ARCH ...]

For each architecture (``hf:ARCH`` with transformers' default config) and for a local
Llama-3-70B ``config.json`` folder (``llama3-70b``): a new Python process imports torch,
torchinspect, transformers and the model's modeling module (timed apart: ``import_seconds``),
then times ``summarize(spec, depth=1)`` (build on meta, trace, report data: what
``inspect summary`` does minus rendering) in wall and CPU seconds, and records where it ran
(meta, or the CPU fallback) and the process's peak RSS: its own ``VmHWM`` from
/proc/self/status (``ru_maxrss`` would also count the parent's pages, since Linux carries
it over fork and exec). ``llama3-70b-cli`` times the whole console command
``inspect summary FOLDER --depth 1`` (imports and rendering included) the same way.

One JSON record per model is appended to ``--out`` (default
``benchmarks/results/models-hf-speed.jsonl``) with the run's machine and versions; models
already in the file are skipped, so ``--limit N`` runs are resumed by running the script again
(delete the file to measure afresh). ``--profile DIR`` writes a cProfile of each timed call
instead (nothing is recorded). ``benchmarks/pages_models.py`` renders RESULTS-models.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from machine import PEAK_RSS, RESULTS, run_cli, run_header

HF_ARCHS = ["llama", "mistral", "qwen2", "gemma", "phi", "mixtral", "qwen2_moe", "bert", "roberta",
         "gpt2", "t5", "whisper", "wav2vec2", "vit", "swin", "convnext", "clip", "mamba", "bart",
         "deberta-v2"]
ARCHS = [*HF_ARCHS, "llama3-70b", "llama3-70b-cli"]

#: Llama-3-70B (meta-llama/Meta-Llama-3-70B config.json, the fields that set the shapes)
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "bos_token_id": 128000,
    "eos_token_id": 128001,
}

CHILD = PEAK_RSS + r"""
import time
t_start = time.perf_counter()
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
torch.set_num_threads(1)
import torchinspect as ti
from torchinspect.sources.hf import import_transformers
spec, profile = sys.argv[1], sys.argv[2]
tr = import_transformers()
if spec.startswith("hf:"):
    tr.MODEL_MAPPING[type(tr.AutoConfig.for_model(spec[3:]))]  # import its modeling module
else:
    tr.MODEL_MAPPING[type(tr.AutoConfig.from_pretrained(spec))]
t0, c0 = time.perf_counter(), time.process_time()
if profile:
    import cProfile
    prof = cProfile.Profile()
    s = prof.runcall(ti.summarize, spec, depth=1)
    prof.dump_stats(profile)
else:
    s = ti.summarize(spec, depth=1)
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                  "import_seconds": t0 - t_start, "device": s.device, "input": s.input,
                  "params": s.totals.params, "macs": s.totals.macs, "peak_rss": peak_rss()}))
"""


def run(spec: str, profile: str = "") -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", CHILD, spec, profile], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return {k: round(v, 3) if isinstance(v, float) else v
            for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def run_folder_cli(folder: str) -> dict[str, Any]:
    r = run_cli(["summary", folder, "--depth", "1"])
    if r["exit"] != 0 or r["peak_rss"] is None:
        return {"error": (r["stderr"].strip().splitlines() or ["?"])[-1][:200]}
    return {"seconds": r["seconds"], "cpu_seconds": round(r["cpu_seconds"], 3),
            "peak_rss": r["peak_rss"], "exit": r["exit"],
            "output_lines": len(r["stdout"].splitlines())}


def measure(arch: str, folder: Path, profile: str) -> dict[str, Any]:
    if arch == "llama3-70b-cli":
        return {"name": arch, "spec": "inspect summary FOLDER --depth 1", **run_folder_cli(str(folder))}
    spec = str(folder) if arch == "llama3-70b" else f"hf:{arch}"
    label = "Llama-3-70B config.json folder" if arch == "llama3-70b" else spec
    return {"name": arch, "spec": label, **run(spec, profile)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("archs", nargs="*", default=ARCHS)
    ap.add_argument("--limit", type=int, default=0, help="stop after N new models (0: all)")
    ap.add_argument("--out", default=str(RESULTS / "models-hf-speed.jsonl"))
    ap.add_argument("--profile", default="", help="write a cProfile per model to this folder")
    opts = ap.parse_args(argv)
    out = Path(opts.out)
    done = set()
    if out.exists() and not opts.profile:
        done = {json.loads(line)["name"] for line in out.read_text().splitlines() if line.strip()}
    todo = [a for a in opts.archs if a not in done][:opts.limit or None]
    header = {**run_header("transformers"), "listed": len(ARCHS)}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "Meta-Llama-3-70B"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(LLAMA3_70B))
        for arch in todo:
            prof = ""
            if opts.profile:
                Path(opts.profile).mkdir(parents=True, exist_ok=True)
                prof = str(Path(opts.profile) / f"{arch}.prof")
            row = measure(arch, folder, prof)
            failed += "error" in row
            print(json.dumps(row), flush=True)
            if not opts.profile:
                with out.open("a") as fh:
                    fh.write(json.dumps({**row, "run": header}) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
