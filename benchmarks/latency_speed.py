"""How long `inspect bench resnet50 --predict h100 --dtype bf16 --batch 1,32` takes on this
CPU (whole process, the issue's target: under 3 s) and `inspect bench resnet50 --predict h100
--train --amp --dtype bf16` (a training step: under 6 s), beside `inspect summary resnet50` (the
same start-up and model build, one meta trace) and `python -c "import torch"` (the floor
every command pays) for scale. Interleaved runs (A B C A B C ...), medians, with the
host-cost cache warm (the first --predict on a machine adds its ~0.1 s probe); wall and CPU
seconds of each child, every run kept in the raw data with the machine record
(``benchmarks/machine.py``; a loaded machine is marked so: wall times are then upper bounds).
One extra in-process run says which heavy modules the prediction imported (TorchDynamo:
none; see ``src/torchinspect/privtorch.py``).

Writes ``benchmarks/results/latency-predict-speed.json`` (``machine.save``: the machine and its
load); ``pages_latency.py`` puts it on RESULTS-latency.md.
Usage: ``python benchmarks/latency_speed.py [--runs 7]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
INSPECT = [sys.executable, "-m", "torchinspect"]
COMMANDS = {
    "predict": [*INSPECT, "bench", "resnet50", "--predict", "h100", "--dtype", "bf16",
                "--batch", "1,32"],
    "train": [*INSPECT, "bench", "resnet50", "--predict", "h100", "--train", "--amp", "--dtype",
              "bf16"],
    "summary": [*INSPECT, "summary", "resnet50"],
    "import_torch": [sys.executable, "-c", "import torch"],
}
LABELS = {"predict": "inspect bench resnet50 --predict h100 --dtype bf16 --batch 1,32",
          "train": "inspect bench resnet50 --predict h100 --train --amp --dtype bf16",
          "summary": "inspect summary resnet50", "import_torch": 'python -c "import torch"'}
MODULES = ("torch._dynamo", "sympy", "triton", "transformers", "scipy")
PROBE = ("import sys\nfrom torchinspect.cli.app import app\ntry:\n    app(sys.argv[1:])\n"
         "except SystemExit:\n    pass\nprint(','.join(m for m in {mods!r} if m in sys.modules))")


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) for one run."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=ROOT)
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    return wall, cpu


def imported_modules() -> list[str]:
    """The heavy modules one in-process prediction imports."""
    code = PROBE.format(mods=MODULES)
    out = subprocess.run([sys.executable, "-c", code, *COMMANDS["predict"][3:]], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()
    return [m for m in (out[-1].split(",") if out else []) if m]


def main() -> None:
    from machine import describe, save

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    machine = describe()
    timed(COMMANDS["predict"])  # warm the file cache and the host-cost cache
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in COMMANDS}
    for i in range(a.runs):
        for name, cmd in COMMANDS.items():
            w, c = timed(cmd)
            runs[name].append({"round": i, "wall_s": round(w, 4), "cpu_s": round(c, 4)})
            print(f"{name:13s} round {i}: wall {w:.2f} s, CPU {c:.2f} s", flush=True)
    rows = [{"command": LABELS[k], "runs": a.runs,
             "wall_s": round(statistics.median(r["wall_s"] for r in v), 3),
             "cpu_s": round(statistics.median(r["cpu_s"] for r in v), 3), "raw": v}
            for k, v in runs.items()]
    save("latency-predict-speed", {"rows": rows, "imported": imported_modules(),
                                   "load_after": round(os.getloadavg()[0], 1)}, machine=machine)
    print(json.dumps([{k: r[k] for k in ("command", "wall_s", "cpu_s")} for r in rows], indent=1))


if __name__ == "__main__":
    main()
