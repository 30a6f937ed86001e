"""Prediction time of `inspect memory`, this tree against another (issue 32's "no worse than
today"), and the 70B AdamW step's time and memory on a CPU.

1. `inspect memory densenet121 --batch 32` (inference and an AdamW training step, CUDA target).
2. `predict_memory("zoo:llama-70b", input long:4096, dtype bf16, AdamW, training only)`: bars
   under 30 s and under 2 GB, the child's own VmHWM (read by the child at its end; the
   parent never imports torch, so ``ru_maxrss`` from ``os.wait4`` is the child's too).

Each command in a fresh process; a round runs each tree once, alternating which goes first.
``--baseline-src DIR``: the ``src`` folder of the other tree (e.g. ``git archive main src |
tar -x -C /tmp/main``), run through ``PYTHONPATH``; without it, this tree alone.

    .venv/bin/python benchmarks/perf_predict.py [--runs N] [--baseline-src /tmp/main/src]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DENSENET = ["-m", "torchinspect", "memory", "densenet121", "--batch", "32", "--format", "json"]
LLAMA = """
import json, time
t0 = time.perf_counter()
from torchinspect import predict_memory
from torchinspect.sources.case import ModelOptions
r = predict_memory("zoo:llama-70b", options=ModelOptions(inputs=["long:4096"]), dtype="bf16",
                   optimizer="adamw", inference=False)
print(json.dumps({"peak": r.training.peak, "seconds_in_process": time.perf_counter() - t0,
                  "vmhwm_bytes": 1024 * int(next(line.split()[1] for line in
                                                open("/proc/self/status")
                                                if line.startswith("VmHWM:")))}))
"""


def run_child(args: list[str], src: str | None) -> dict[str, Any]:
    env = {**os.environ, "COLUMNS": "160"}
    if src:
        env["PYTHONPATH"] = src
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        child = subprocess.Popen([sys.executable, *args], stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(f"{args} exited {child.returncode}:\n"
                             + err.read().decode(errors="replace")[-2000:])
        text = out.read().decode()
    row: dict[str, Any] = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                           "rss_bytes": usage.ru_maxrss * 1024}
    if args[0] == "-c":
        row.update(json.loads(text.strip().splitlines()[-1]))
    else:
        row["peaks"] = [json.loads(text)["inference"]["peak"], json.loads(text)["training"]["peak"]]
    return row


def main(argv: list[str]) -> dict[str, Any]:
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 3
    base = argv[argv.index("--baseline-src") + 1] if "--baseline-src" in argv else None
    trees = {"this": None, **({"baseline": base} if base else {})}
    data: dict[str, Any] = {"runs": runs, "baseline_src": base}
    for case, args in (("densenet121_b32", DENSENET), ("llama70b_bf16_adamw", ["-c", LLAMA])):
        rows: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
        for i in range(runs):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for tree in order:
                rows[tree].append(run_child(args, trees[tree]))
        data[case] = rows
        for tree, samples in rows.items():
            print(f"{case} {tree}: wall {statistics.median(r['wall_s'] for r in samples):.2f} s, "
                  f"CPU {statistics.median(r['cpu_s'] for r in samples):.2f} s, peak RSS "
                  f"{max(r['rss_bytes'] for r in samples) / 1e6:.0f} MB")
    return data


if __name__ == "__main__":
    from machine import save
    from perf_summary import machine_record

    machine = machine_record()
    save("memory-predict-perf", main(sys.argv[1:]), machine=machine)
