"""Whole-process wall time of `inspect report resnet50 -o FILE` (no --bench); bar: < 10 s.

Runs the console command N times (after one warm-up run for the file cache), prints the
median/min/max and the part timings the report itself records (``--format json``).

    .venv/bin/python benchmarks/perf_report.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "resnet50"


def inspect_cmd() -> list[str]:
    exe = BIN / "inspect"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torchinspect"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default=MODEL)
    args = ap.parse_args()
    from machine import describe, save

    machine = describe()  # the load before the runs
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        cmd = [*inspect_cmd(), "report", args.model, "-o", str(out)]
        env = {**os.environ}
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)  # warm-up
        times, cpu = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
            times.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        size = out.stat().st_size
        parts = json.loads(subprocess.run([*inspect_cmd(), "report", args.model, "--format", "json"],
                                          check=True, capture_output=True, text=True, env=env,
                                          cwd=ROOT).stdout)["models"][0]
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"inspect report {args.model}: median {statistics.median(times):.2f}s "
          f"(min {min(times):.2f}, max {max(times):.2f}) over {args.runs} runs; "
          f"page {size / 1e3:.0f} KB; bar < 10 s")
    print(f"CPU time (user+sys) median {statistics.median(cpu):.2f}s")
    print(f"in-process parts (s): {parts['seconds']}; missing: {parts['missing'] or 'none'}")
    save("report-perf", {"model": args.model, "runs": args.runs, "wall_s": times, "cpu_s": cpu,
                         "page_bytes": size, "parts_s": parts["seconds"],
                         "missing": parts["missing"]}, machine=machine)


if __name__ == "__main__":
    main()
