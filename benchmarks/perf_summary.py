"""Whole-process timings of `inspect summary` against a hand-written torchinfo script.

1. `inspect summary resnet18 --input 3,224,224` vs `import torch, torchvision, torchinfo;
   torchinfo.summary(resnet18(), (1,3,224,224))`, run alternately; median ratio (bar <= 0.85).
2. `inspect summary zoo:llama-70b --input long:1,2048`: wall time (< 5 s), peak RSS (< 1 GB),
   and MACs against FlopCounterMode / 2 on a meta copy (within 0.1%).

    .venv/bin/python benchmarks/perf_summary.py [--runs N]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BASELINE = ("import torch, torchvision, torchinfo; "
            "torchinfo.summary(torchvision.models.resnet18(), (1, 3, 224, 224))")
ENV = {**os.environ, "COLUMNS": "160"}


def timed(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV, cwd=ROOT)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, max(peak, before) * 1024


def resnet18_ratio(runs: int) -> dict:
    ours_cmd = [str(BIN / "inspect"), "summary", "resnet18", "--input", "3,224,224"]
    base_cmd = [sys.executable, "-c", BASELINE]
    timed(ours_cmd), timed(base_cmd)  # warm the file cache
    ours, base, ratios = [], [], []
    for _ in range(runs):
        a, _ = timed(ours_cmd)
        b, _ = timed(base_cmd)
        ours.append(a), base.append(b), ratios.append(a / b)
    print(f"resnet18 summary: inspect median {statistics.median(ours):.3f}s "
          f"(min {min(ours):.3f}, max {max(ours):.3f}); torchinfo script median "
          f"{statistics.median(base):.3f}s (min {min(base):.3f}, max {max(base):.3f}); "
          f"median ratio {statistics.median(ratios):.3f} over {runs} alternating runs (bar <= 0.85)")
    return {"inspect_s": ours, "torchinfo_s": base, "ratios": ratios}


def llama70b() -> dict:
    cmd = [str(BIN / "inspect"), "summary", "zoo:llama-70b", "--input", "long:1,2048",
           "--format", "json"]
    script = (
        "import resource, subprocess, sys, time, json;"
        f"t=time.perf_counter(); out=subprocess.run({cmd!r}, check=True, capture_output=True, text=True).stdout;"
        "dt=time.perf_counter()-t; rss=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss*1024;"
        "print(json.dumps({'wall': dt, 'rss': rss, 'macs': json.loads(out)['totals']['macs']}))"
    )
    res = json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                    text=True, env=ENV, cwd=ROOT).stdout)
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from torchinspect.sources import load_model

    loaded = load_model("zoo:llama-70b", device="meta")
    ids = torch.zeros(1, 2048, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        loaded.model.eval()(ids)
    ref = fc.get_total_flops() / 2
    rel = (res["macs"] - ref) / ref
    print(f"llama-70b summary: wall {res['wall']:.2f}s (bar < 5 s), peak RSS "
          f"{res['rss'] / 1e6:.0f} MB (bar < 1000 MB), MACs {res['macs']:,} vs FlopCounterMode/2 "
          f"{int(ref):,} ({100 * rel:+.4f}%, bar 0.1%)")
    return {**res, "flop_counter_macs": int(ref)}


if __name__ == "__main__":
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 7
    from machine import describe, save

    machine = describe()  # the load before the runs
    save("trace-perf-summary", {"runs": runs, "resnet18": resnet18_ratio(runs),
                                "llama70b": llama70b()}, machine=machine)
