"""Start-up: how long `inspect --help` and `inspect CMD --help` take, in a fresh interpreter.

Each sample is one new process running what the console script runs (``from
torchinspect.cli.app import main; main()``) with ``--help`` (or ``CMD --help``), wall time from
the parent, interpreter start and imports included. The trees compared are source trees put on
``PYTHONPATH`` (so one installed environment times both): ``--tree LABEL=PATH``, e.g. the
working tree and a ``git archive`` of the commit before a change. The samples of all trees and
commands are interleaved (round-robin), so a change in the machine's load falls on all of them
alike; the load average is recorded before and after. Bytecode is written and used, as in an
installed package (``PYTHONDONTWRITEBYTECODE`` is dropped for the children; the warm-up round
writes the ``.pyc`` files). The median of many runs is the figure;
on a shared machine the minimum says what the code costs without the neighbours.

    git archive e957d20 | tar -x -C /tmp/before
    .venv/bin/python benchmarks/startup.py --tree before=/tmp/before/src --tree after=src \\
        --runs 21 --out startup-help
    .venv/bin/python benchmarks/report.py   # RESULTS-startup.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import describe, save

HERE = Path(__file__).resolve().parent
CHILD = "import sys; from torchinspect.cli.app import main; sys.argv[0] = 'inspect'; main()"


def commands(src: Path) -> list[str]:
    """The subcommands of the tree at ``src`` (its table, cli/commands.py)."""
    code = "from torchinspect.cli.commands import COMMANDS; print(' '.join(c.name for c in COMMANDS))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_env(src))
    return out.stdout.split()


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(src), "COLUMNS": "80"}


def sample(src: Path, args: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, check=False,
                          env=_env(src))
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{src}: inspect {' '.join(args)} exited {done.returncode}: "
                         f"{done.stderr.decode()[-500:]}")
    return round(seconds, 4)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH",
                        help="a source tree to time (the folder holding torchinspect/)")
    parser.add_argument("--runs", type=int, default=21, help="samples per tree and command")
    parser.add_argument("--out", default="startup-help", help="benchmarks/results/OUT.json")
    ns = parser.parse_args(argv)
    trees = {label: Path(path).resolve() for label, _, path in (t.partition("=") for t in ns.tree)}
    names = commands(next(iter(trees.values())))
    cases = [[], *([name, ] for name in names)]
    for src in trees.values():  # warm the file cache and the .pyc files once
        for args in cases:
            sample(src, [*args, "--help"])
    machine = describe()
    load_before = os.getloadavg()
    seconds: dict[str, dict[str, list[float]]] = {
        label: {" ".join(["inspect", *args, "--help"]): [] for args in cases} for label in trees}
    for _ in range(ns.runs):
        for args in cases:
            for label, src in trees.items():
                seconds[label][" ".join(["inspect", *args, "--help"])].append(
                    sample(src, [*args, "--help"]))
    load_after = os.getloadavg()
    for label, per in seconds.items():
        every = [s for values in per.values() for s in values]
        print(f"{label}: median {statistics.median(every):.3f} s over {len(every)} runs "
              f"(--help {statistics.median(per['inspect --help']):.3f} s)")
    save(ns.out, {"runs": ns.runs, "trees": list(trees), "seconds": seconds,
                  "load_average_before": [round(v, 2) for v in load_before],
                  "load_average_after": [round(v, 2) for v in load_after]}, machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
