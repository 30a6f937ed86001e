"""Issue 13 item 8: `summary` of full-size Hugging Face configs, each in a fresh process.

    .venv/bin/python benchmarks/speed_hf.py [--profile DIR] [ARCH ...]

For each architecture (``hf:ARCH`` with transformers' default config) and for a local
Llama-3-70B ``config.json`` folder: a new Python process imports torchinspect, transformers
and the model's modeling module (not timed), then times ``summarize(spec, depth=1)``
(build on meta, trace, report data: what ``inspect summary`` does minus rendering), and
reports that time, where it ran (meta, or the CPU fallback) and the process's peak RSS.
``--profile DIR`` also writes a cProfile of the timed call per architecture.

Prints a markdown table (for benchmarks/RESULTS-models.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHS = ["llama", "mistral", "qwen2", "gemma", "phi", "mixtral", "qwen2_moe", "bert", "roberta",
         "gpt2", "t5", "whisper", "wav2vec2", "vit", "swin", "convnext", "clip", "mamba", "bart",
         "deberta-v2"]

#: Llama-3-70B (meta-llama/Meta-Llama-3-70B config.json, the fields that set the shapes)
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "bos_token_id": 128000,
    "eos_token_id": 128001,
}

CHILD = r"""
import json, resource, sys, time, warnings
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
t0 = time.perf_counter()
if profile:
    import cProfile
    prof = cProfile.Profile()
    s = prof.runcall(ti.summarize, spec, depth=1)
    prof.dump_stats(profile)
else:
    s = ti.summarize(spec, depth=1)
secs = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"secs": secs, "device": s.device, "params": s.totals.params,
                  "macs": s.totals.macs, "rss": rss}))
"""


def run(spec: str, profile: str = "") -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", CHILD, spec, profile], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:100]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    profile_dir = None
    if argv[:1] == ["--profile"]:
        profile_dir, argv = Path(argv[1]), argv[2:]
        profile_dir.mkdir(parents=True, exist_ok=True)
    archs = argv or [*ARCHS, "llama3-70b"]
    print("| model | params | MACs | ran on | seconds after imports | peak RSS |")
    print("|---|---:|---:|---|---:|---:|")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "Meta-Llama-3-70B"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(LLAMA3_70B))
        for arch in archs:
            spec = str(folder) if arch == "llama3-70b" else f"hf:{arch}"
            prof = str(profile_dir / f"{arch}.prof") if profile_dir else ""
            r = run(spec, prof)
            label = "Llama-3-70B config.json folder" if arch == "llama3-70b" else f"hf:{arch}"
            if "error" in r:
                failed += 1
                print(f"| {label} | error: {r['error']} | | | | |", flush=True)
                continue
            print(f"| {label} | {r['params']:,} | {r['macs']:,} | {r['device']} | {r['secs']:.2f} "
                  f"| {int(r['rss']) / 2**20:,.0f} MB |", flush=True)  # type: ignore[call-overload]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
