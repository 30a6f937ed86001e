"""Timings of `inspect doctor` / `inspect check`, and the torchvision false-positive sweep.

1. `inspect doctor resnet50` whole-process wall time (bar: < 15 s on a 2-core machine).
2. `inspect check resnet50 --max-params 30M --max-macs 5G` vs `inspect summary resnet50`,
   run alternately; median of each (bar: check takes about the time of summary).
3. `--sweep`: `diagnose()` on every torchvision classification model at default settings;
   any finding other than TI006/TI007 info is listed (bar: none, or explained).

    python benchmarks/perf_doctor.py [--runs N] [--sweep] [--max-params 150e6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "160", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
INSPECT = [sys.executable, "-m", "torchinspect"]


def wall(args: list[str], ok: tuple[int, ...] = (0,)) -> float:
    t0 = time.perf_counter()
    rc = subprocess.run([*INSPECT, *args], stdout=subprocess.DEVNULL, env=ENV, cwd=ROOT).returncode
    if rc not in ok:
        raise SystemExit(f"inspect {' '.join(args)} exited {rc}")
    return time.perf_counter() - t0


def timings(runs: int) -> None:
    from machine import describe, save

    machine = describe()  # the load before the runs
    doctor = [wall(["doctor", "resnet50"]) for _ in range(runs)]
    print(f"doctor resnet50: median {statistics.median(doctor):.2f} s "
          f"(min {min(doctor):.2f}, max {max(doctor):.2f}, {runs} runs)")
    check, summary = [], []
    for _ in range(runs):
        check.append(wall(["check", "resnet50", "--max-params", "30M", "--max-macs", "5G"]))
        summary.append(wall(["summary", "resnet50"]))
    print(f"check resnet50: median {statistics.median(check):.2f} s; summary resnet50: median "
          f"{statistics.median(summary):.2f} s; ratio {statistics.median(check) / statistics.median(summary):.2f}")
    save("doctor-perf", {"runs": runs, "doctor_s": doctor, "check_s": check,
                         "summary_s": summary}, machine=machine)


def sweep(max_params: float, start: str = "") -> None:
    import torch
    import torchvision

    from torchinspect.analysis.doctor import diagnose
    from torchinspect.sources.case import ModelOptions

    torch.set_num_threads(os.cpu_count() or 1)
    names = torchvision.models.list_models(module=torchvision.models)
    print(f"{len(names)} torchvision classification models")
    for name in names:
        if start and name < start:
            continue
        device = "meta"  # real runs only below max_params
        if max_params > 0:
            try:
                with torch.device("meta"):
                    built = torchvision.models.get_model(name)
            except Exception:  # builders that read values at construction (regnet)
                built = torchvision.models.get_model(name)
            n = sum(p.numel() for p in built.parameters())
            device = "cpu" if n <= max_params else "meta"
        t0 = time.perf_counter()
        try:
            r = diagnose(name, options=ModelOptions(device=device))
        except Exception as exc:  # report and go on
            print(f"{name:24s} ERROR {type(exc).__name__}: {exc}")
            continue
        other = [f for f in r.findings if f.code not in ("TI006", "TI007") or f.severity != "info"]
        info = sorted({f.code for f in r.findings if f not in other})
        text = "; ".join(f"{f.code} {f.severity} {f.module or '(model)'}: {f.what}" for f in other)
        print(f"{name:24s} {time.perf_counter() - t0:6.1f} s  {device:4s} info={','.join(info) or '-'}"
              f"  {text or 'clean'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--from", dest="start", default="",
                    help="resume the sweep at this model name (alphabetical order)")
    ap.add_argument("--max-params", type=float, default=150e6,
                    help="models above this run the real-number checks on meta (skipped)")
    a = ap.parse_args()
    if a.sweep:
        sweep(a.max_params, a.start)
    else:
        timings(a.runs)


if __name__ == "__main__":
    main()
