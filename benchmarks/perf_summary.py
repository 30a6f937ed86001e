"""Whole-process timings of `inspect summary` against hand-written peers (issues 11 and 32).

1. `inspect summary resnet18 --input 3,224,224` against a torchinfo script (`import torch,
   torchvision, torchinfo; torchinfo.summary(resnet18(), (1, 3, 224, 224))`): bar <= 0.85.
2. `inspect summary zoo:llama-70b --input long:1,2048` against a bare
   `torch.utils.flop_counter.FlopCounterMode` script on the same meta model (the zoo's
   builder under `torch.device("meta")`, one no-grad forward, FlopCounterMode's own table
   printed): bar <= 1.0. Also its MACs against FlopCounterMode / 2 (within 0.1%).

Both with the memory line on (the default: the predicted inference peak, logged during the
trace's own forward, `memory/watch.py`), and `--memory none` beside them (what the line costs).

Method: each command in a fresh process; a round runs each of a case's commands once, in an
order that rotates from round to round (no command always first on a warming cache); the
ratio is taken per round, and the page gives medians. Per process: wall time (around the
child), CPU time and peak RSS (user+sys and ``ru_maxrss`` of that one child from
``os.wait4``; this parent never imports torch, so a child's peak is its own: the machine
record is taken in a child too). On a shared machine the CPU-time ratio is the steadier one.

    .venv/bin/python benchmarks/perf_summary.py [--runs N]
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
BIN = Path(sys.executable).parent
ENV = {**os.environ, "COLUMNS": "160"}
TORCHINFO = ("import torch, torchvision, torchinfo; "
             "torchinfo.summary(torchvision.models.resnet18(), (1, 3, 224, 224))")
FLOP_COUNTER = """import torch
from torch.utils.flop_counter import FlopCounterMode
from torchinspect.zoo.llama import llama
with torch.device("meta"):
    model = llama("llama-70b")
ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
with FlopCounterMode() as counter, torch.no_grad():
    model.eval()(ids)
"""
INSPECT = str(BIN / "inspect")
CASES: dict[str, dict[str, Any]] = {
    "resnet18": {
        "bar": 0.85, "peer": "torchinfo",
        "commands": {
            "inspect": [INSPECT, "summary", "resnet18", "--input", "3,224,224"],
            "inspect_memory_none": [INSPECT, "summary", "resnet18", "--input", "3,224,224",
                                    "--memory", "none"],
            "torchinfo": [sys.executable, "-c", TORCHINFO],
        },
    },
    "llama70b": {
        "bar": 1.0, "peer": "flop_counter",
        "commands": {
            "inspect": [INSPECT, "summary", "zoo:llama-70b", "--input", "long:1,2048"],
            "inspect_memory_none": [INSPECT, "summary", "zoo:llama-70b", "--input",
                                    "long:1,2048", "--memory", "none"],
            "flop_counter": [sys.executable, "-c", FLOP_COUNTER],
        },
    },
}


def run_child(cmd: list[str]) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak RSS (bytes) of one child process."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=ENV, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {child.returncode}:\n"
                             + err.read().decode(errors="replace")[-2000:])
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_bytes": usage.ru_maxrss * 1024}


def measure(case: dict[str, Any], runs: int) -> dict[str, Any]:
    names = list(case["commands"])
    for name in names:  # warm the file cache
        run_child(case["commands"][name])
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for i in range(runs):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            samples[name].append(run_child(case["commands"][name]))
    peer = samples[case["peer"]]
    out: dict[str, Any] = {"bar": case["bar"], "peer": case["peer"], "samples": samples,
                           "commands": {n: " ".join(Path(c[0]).name if j == 0 else c
                                                    for j, c in enumerate(cmd))
                                        for n, cmd in case["commands"].items()}}
    for name in names:
        if name == case["peer"]:
            continue
        mine = samples[name]
        out[f"{name}_wall_ratios"] = [a["wall_s"] / b["wall_s"] for a, b in zip(mine, peer, strict=True)]
        out[f"{name}_cpu_ratios"] = [a["cpu_s"] / b["cpu_s"] for a, b in zip(mine, peer, strict=True)]
    return out


def show(name: str, result: dict[str, Any]) -> None:
    med = statistics.median
    for cmd, rows in result["samples"].items():
        print(f"{name} {cmd}: wall {med(r['wall_s'] for r in rows):.2f} s, CPU "
              f"{med(r['cpu_s'] for r in rows):.2f} s, peak RSS "
              f"{max(r['rss_bytes'] for r in rows) / 1e6:.0f} MB")
    for key in ("inspect", "inspect_memory_none"):
        print(f"{name} {key} / {result['peer']}: wall {med(result[key + '_wall_ratios']):.3f}, "
              f"CPU {med(result[key + '_cpu_ratios']):.3f} (bar <= {result['bar']})")


def llama_macs() -> dict[str, int]:
    """Our MACs (JSON output) and FlopCounterMode's / 2 on the same meta model."""
    ours = subprocess.run([INSPECT, "summary", "zoo:llama-70b", "--input", "long:1,2048",
                           "--format", "json"], check=True, capture_output=True, text=True,
                          env=ENV, cwd=ROOT).stdout
    peer = subprocess.run([sys.executable, "-c", FLOP_COUNTER.replace(
        "FlopCounterMode()", "FlopCounterMode(display=False)")
        + "print(counter.get_total_flops() // 2)"], check=True, capture_output=True,
        text=True, env=ENV, cwd=ROOT).stdout
    return {"macs": json.loads(ours)["totals"]["macs"], "flop_counter_macs": int(peer)}


def machine_record() -> dict[str, Any]:
    """``machine.describe()`` in a child (it imports torch, which this parent must not)."""
    code = "import json, machine; print(json.dumps(machine.describe()))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).parent).stdout
    return json.loads(out)


if __name__ == "__main__":
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 7
    from machine import save

    machine = machine_record()  # the load before the runs
    data: dict[str, Any] = {"runs": runs}
    for name, case in CASES.items():
        data[name] = measure(case, runs)
        show(name, data[name])
    data["llama70b"].update(llama_macs())
    save("trace-perf-summary", data, machine=machine)
