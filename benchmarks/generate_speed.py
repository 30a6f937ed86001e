"""The time and memory of a ``--generate`` prediction for a 70B decoder on this CPU (issue 43:
``zoo:llama-70b`` at batch 8, prompt 8,192, under 30 s and 2 GB).

Each command runs in a fresh process through ``machine.run_cli`` (wall time from here with
the interpreter start and imports, the child's CPU time, its own peak RSS read from VmHWM
inside it), ``--runs`` times; the median run by wall time is kept with every run's figures.

    python benchmarks/generate_speed.py [--runs 3] [--new 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import run_cli, save  # noqa: E402

INPUT = ["--input", "long:8,8192", "--no-batch"]


def commands(new: int) -> list[list[str]]:
    common = ["zoo:llama-70b", *INPUT, "--generate", str(new), "--dtype", "bf16", "-f", "json"]
    return [["memory", *common], ["bench", *common, "--predict", "h100"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--new", type=int, default=128)
    a = ap.parse_args()
    runs = []
    for args in commands(a.new):
        timed = []
        for _ in range(a.runs):
            r = run_cli(args)
            timed.append({"wall_s": round(r["seconds"], 2), "cpu_s": round(r["cpu_seconds"] or 0, 2),
                          "peak_rss": r["peak_rss"] or 0, "exit": r["exit"]})
            print(f"inspect {' '.join(args)}: {timed[-1]}", flush=True)
        middle = sorted(timed, key=lambda t: t["wall_s"])[len(timed) // 2]
        runs.append({"args": args, **middle, "runs": timed,
                     "median_wall_s": statistics.median(t["wall_s"] for t in timed)})
    save("generate-speed", {"runs": runs, "new_tokens": a.new})


if __name__ == "__main__":
    main()
