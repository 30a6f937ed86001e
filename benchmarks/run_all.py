"""`make bench`: every benchmark script in turn, then `make bench-report`.

Each script prints its table and (where a RESULTS page is rendered from it) saves its raw
data under ``benchmarks/results/`` with the machine named (``machine.py``). Scripts that
need a GPU (or two) run only where one is present; on a CPU machine they are listed as
skipped, never silently left out. ``--only NAME`` runs the scripts whose name contains NAME.
The checkpoint benchmark writes ~6 GB of temporary files (deleted afterwards); the timm and
Hugging Face sweeps take an hour on a 2-core machine.

    .venv/bin/python benchmarks/run_all.py [--only NAME ...]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# (script, arguments, GPUs it needs): every measuring script of this folder
SCRIPTS: list[tuple[str, list[str], int]] = [
    ("accuracy_torchvision.py", [], 0),
    ("perf_summary.py", [], 0),
    ("perf_predict.py", [], 0),
    ("perf_report.py", [], 0),
    ("perf_doctor.py", [], 0),
    ("perf_export.py", [], 0),
    ("bench_checkpoints.py", [], 0),
    ("pt2_read.py", [], 0),
    ("bench_accuracy.py", [], 0),
    ("bench_features.py", ["cpu"], 0),
    ("bench_features.py", ["gpu"], 1),
    ("bench_features.py", ["memory"], 0),
    ("memory_accuracy.py", ["--predict-only"], 0),
    ("memory_accuracy.py", [], 1),
    ("memory_fsdp.py", ["--predict-only"], 0),
    ("memory_fsdp.py", [], 2),
    ("cudnn_rnn_memory.py", [], 1),
    ("fit_check.py", ["resnet50", "3,224,224", "80GB"], 1),
    ("fit_report.py", ["predict", "benchmarks/results/fit-resnet50-h100.json", "3,224,224"], 0),
    ("graph_gap.py", [], 1),
    ("sweep_timm.py", [], 0),
    ("sweep_hf.py", [], 0),
    ("speed_hf.py", [], 0),
    ("doctor_pitfalls.py", [], 0),
    ("doctor_sweep.py", [], 0),
    ("cudnn_workspace_sweep.py", ["check", "benchmarks/results/cudnn-workspace-h100.jsonl.gz"], 0),
    ("memory_heldout.py", ["predict", "--set", "all", "--out",
                           "benchmarks/results/memory-heldout-predicted"], 0),
    ("memory_heldout.py", ["measure", "--set", "all", "--out",
                           "benchmarks/results/memory-heldout-rerun"], 1),
    ("memory_optrace.py", ["gpu", "--out", "benchmarks/results/memory-optrace-rerun"], 1),
    ("latency_speed.py", [], 0),
    ("startup.py", ["--tree", "now=src", "--out", "startup-help-rerun"], 0),
    ("latency_measure.py", ["benchmarks/results/latency-rerun"], 1),
    # issue 40's campaign (benchmarks/results/latency-h100-v2/README.md says what each holds)
    ("latency_measure.py", ["benchmarks/results/latency-v2-rerun", "--phases",
                            "probes,floors,tables,replays,models,train", "--sweep", "3", "--sets",
                            "val,dev-new,dev", "--isolate", "--budget", "3600"], 1),
    ("cudnn_rnn_memory.py", ["--proj", "benchmarks/results/cudnn-rnn-proj-rerun.jsonl"], 1),
    ("memory_validation.py", ["measure", "benchmarks/results/memory-validation-rerun.jsonl"], 1),
    ("generate_measure.py", ["benchmarks/results/generate-rerun.jsonl"], 1),
    ("generate_predict.py", ["benchmarks/results/generate-predicted-rerun.jsonl", "--sets",
                             "dev,val"], 0),
    ("generate_speed.py", [], 0),
    ("latency_profile.py", ["benchmarks/results/latency-rerun/profiles.jsonl",
                            "hf:bert:bf16:32", "resnet50:bf16:1"], 1),
    ("latency_tables.py", [], 0),
]


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main(argv: list[str]) -> int:
    only = [argv[i + 1] for i, a in enumerate(argv) if a == "--only" and i + 1 < len(argv)]
    have = gpus()
    failed, skipped = [], []
    for name, args, need in SCRIPTS:
        label = " ".join([name, *args])
        if only and not any(o in name for o in only):
            continue
        if need > have:
            skipped.append(f"{label} (needs {need} GPU{'s' * (need > 1)})")
            continue
        print(f"\n=== {label}", flush=True)
        env_cmd = [sys.executable, str(HERE / name), *args]
        if subprocess.run(env_cmd, cwd=ROOT).returncode != 0:
            failed.append(label)
    report = subprocess.run([sys.executable, str(HERE / "report.py")], cwd=ROOT).returncode
    if skipped:
        print(f"\nskipped here: {'; '.join(skipped)}")
    if failed or report:
        print(f"\nfailed: {', '.join(failed + ['report.py'] * bool(report))}")
    return 1 if failed or report else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
