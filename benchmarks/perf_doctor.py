"""Timings of `inspect doctor` / `inspect check`, and the torchvision false-positive sweep.

1. `inspect doctor resnet50` whole-process wall time (bar: < 15 s on a 2-core machine).
   `--compare-src DIR` times this checkout against another one's `src/` (e.g. the commit
   before a change, from `git archive`), run alternately so machine load hits both alike,
   and writes every run to `--out` (JSON: machine, load averages, each wall time).
2. `inspect check resnet50 --max-params 30M --max-macs 5G` vs `inspect summary resnet50`,
   run alternately; median of each (bar: check takes about the time of summary).
3. `--sweep`: `diagnose()` on every torchvision classification model at default settings;
   any warning or error is listed, infos by code (bar: none, or explained).

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


def wall(args: list[str], ok: tuple[int, ...] = (0,), src: Path | None = None) -> float:
    env = ENV if src is None else {**ENV, "PYTHONPATH": f"{src}:{ROOT}"}
    t0 = time.perf_counter()
    rc = subprocess.run([*INSPECT, *args], stdout=subprocess.DEVNULL, env=env, cwd=ROOT).returncode
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


def _timed(args: list[str], src: Path) -> dict[str, float]:
    """Wall and CPU seconds of one `inspect` process, and the doctor's own in-process time."""
    import json
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([*INSPECT, *args, "--format", "json"], capture_output=True, text=True,
                          env={**ENV, "PYTHONPATH": f"{src}:{ROOT}"}, cwd=ROOT)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"inspect {' '.join(args)} exited {done.returncode}: {done.stderr[-500:]}")
    return {"wall_s": round(wall_s, 3),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3),
            "doctor_s": json.loads(done.stdout)["seconds"]}


def compare(runs: int, other: Path, out: Path | None, model: str = "resnet50") -> None:
    """`inspect doctor MODEL` with this checkout's src/ and with ``other``, alternately."""
    import json
    import platform

    rows = []
    for i in range(runs):
        for label, src in (("this", ROOT / "src"), ("other", other)):
            load = os.getloadavg()[0]
            rows.append({"run": i, "src": label, "path": str(src), "load_before": load,
                         **_timed(["doctor", model, "--fail-on", "never"], src)})
            r = rows[-1]
            print(f"{label:5s} run {i}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s, "
                  f"doctor {r['doctor_s']:.2f} s (load {load:.1f})", flush=True)
    for label in ("this", "other"):
        mine = [r for r in rows if r["src"] == label]
        print(f"{label}: median wall {statistics.median(r['wall_s'] for r in mine):.2f} s, "
              f"cpu {statistics.median(r['cpu_s'] for r in mine):.2f} s, "
              f"doctor {statistics.median(r['doctor_s'] for r in mine):.2f} s")
    if out is not None:  # the record machine.save writes (the page reads its machine line)
        from machine import describe

        machine = {**describe(), "load_average": None, "loaded": True}  # each run has its load
        data = {"command": f"inspect doctor {model} --fail-on never", "node": {
            "node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "processor": platform.processor() or platform.machine()}, "runs": rows}
        record = {"machine": machine, "command": " ".join(["perf_doctor.py", *sys.argv[1:]]),
                  "date": time.strftime("%Y-%m-%d"), "data": data}
        out.write_text(json.dumps(record, indent=1) + "\n")


def sweep(max_params: float, start: str = "", only: list[str] | None = None) -> None:
    import torch
    import torchvision

    from torchinspect.analysis.doctor import diagnose
    from torchinspect.sources.case import ModelOptions

    torch.set_num_threads(os.cpu_count() or 1)
    names = only or torchvision.models.list_models(module=torchvision.models)
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
        other = [f for f in r.findings if f.severity != "info"]
        info = sorted({f.code for f in r.findings if f not in other})
        text = "; ".join(f"{f.code} {f.severity} {f.module or '(model)'}: {f.what}" for f in other)
        print(f"{name:24s} {time.perf_counter() - t0:6.1f} s  {device:4s} info={','.join(info) or '-'}"
              f"  {text or 'clean'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--only", nargs="+", default=None, help="--sweep: these models only")
    ap.add_argument("--from", dest="start", default="",
                    help="resume the sweep at this model name (alphabetical order)")
    ap.add_argument("--compare-src", type=Path, default=None,
                    help="time `doctor resnet50` against this other src/ folder, alternately")
    ap.add_argument("--out", type=Path, default=None, help="--compare-src: the raw runs (JSON)")
    ap.add_argument("--max-params", type=float, default=150e6,
                    help="models above this run the real-number checks on meta (skipped)")
    a = ap.parse_args()
    if a.compare_src is not None:
        compare(a.runs, a.compare_src, a.out)
    elif a.sweep:
        sweep(a.max_params, a.start, a.only)
    else:
        timings(a.runs)


if __name__ == "__main__":
    main()
