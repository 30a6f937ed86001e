"""How long `inspect bench resnet50 --predict h100 --dtype bf16 --batch 1,32` takes on this
CPU (whole process, the issue's target: under 3 s), beside `inspect summary resnet50` (the
same start-up, model build and one meta trace) for scale. Alternating runs, medians, with
the host-cost cache warm (the first --predict on a machine adds its ~0.1 s probe).

Writes ``benchmarks/results/latency/speed.json``; ``latency_tables.py`` puts it on the page.
Usage: ``python benchmarks/latency_speed.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSPECT = [sys.executable, "-m", "torchinspect"]
COMMANDS = {
    "predict": ["bench", "resnet50", "--predict", "h100", "--dtype", "bf16", "--batch", "1,32"],
    "summary": ["summary", "resnet50"],
}


def wall(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) for one run."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run([*INSPECT, *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd=ROOT)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    return time.perf_counter() - t0, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    wall(COMMANDS["predict"])  # warm the file cache and the host-cost cache
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in COMMANDS}
    for _ in range(a.runs):
        for name, args in COMMANDS.items():
            times[name].append(wall(args))
    import torch

    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "python":
           platform.python_version(), "torch": torch.__version__, "runs": a.runs,
           "commands": {k: " ".join(["inspect", *v]) for k, v in COMMANDS.items()},
           "wall_s": {k: round(statistics.median(w for w, _ in v), 3) for k, v in times.items()},
           "cpu_s": {k: round(statistics.median(c for _, c in v), 3) for k, v in times.items()}}
    path = ROOT / "benchmarks" / "results" / "latency" / "speed.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
