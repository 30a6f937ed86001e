"""Summarize every architecture of ``timm.list_models()`` through ``timm:NAME`` (meta).

    .venv/bin/python benchmarks/sweep_timm.py [--limit N] [--max-seconds S] [--out FILE] [PATTERN]

One JSON record per model is appended to ``--out`` (default
``benchmarks/results/models-timm.jsonl``): name, ok, wall and CPU seconds of
``summarize(depth=1)``, params, MACs, the input and the device the trace ran on, the error's
first line, and the run's machine and versions (``machine.run_header``). Models already in the
file are skipped, so a capped run (``--limit`` models or ``--max-seconds``) is resumed by
running the script again. The models run in a fixed shuffled order (seed 0) of the whole
list, so a partial file is a spread sample of the list, not its first letters. One process,
one torch thread; the trace runs on meta (CPU fallback where meta cannot run).
``benchmarks/pages_models.py`` renders RESULTS-models.md from the file, saying how many of
the listed models it covers. At the end the script prints the count, failures and the time
distribution.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

from machine import RESULTS, run_header


def summarize_one(name: str) -> dict[str, Any]:
    import torchinspect as ti
    from torchinspect.errors import InspectError

    row: dict[str, Any] = {"name": name, "ok": True}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        s = ti.summarize(f"timm:{name}", depth=1)
        row.update(params=s.totals.params, macs=s.totals.macs, device=s.device, input=s.input)
    except InspectError as exc:
        row.update(ok=False, error=f"InspectError: {exc}"[:300])
    except Exception as exc:  # a crash is a finding, not a reason to stop
        first = str(exc).splitlines()[0] if str(exc) else ""
        row.update(ok=False, error=f"{type(exc).__name__}: {first}"[:300])
    row["seconds"] = round(time.perf_counter() - t0, 3)
    row["cpu_seconds"] = round(time.process_time() - c0, 3)
    return row


def report(out: Path, listed: int) -> int:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r["ok"]]
    secs = sorted(r["seconds"] for r in rows)
    print(f"{len(rows)} of {listed} timm architectures run; {len(ok)} ok, "
          f"{len(rows) - len(ok)} failed; CPU fallback {sum(r.get('device') == 'cpu' for r in ok)}")
    if secs:
        print(f"seconds per model: median {statistics.median(secs):.2f}, "
              f"p90 {secs[int(0.9 * (len(secs) - 1))]:.2f}, max {secs[-1]:.2f}, "
              f"total {sum(secs):.0f}")
    for r in rows:
        if not r["ok"]:
            print(f"  FAIL {r['name']}: {r['error']}")
    return 0 if len(ok) == len(rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern", nargs="?", default="")
    ap.add_argument("--limit", type=int, default=0, help="stop after N new models (0: all)")
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop after S s (0: never)")
    ap.add_argument("--out", default=str(RESULTS / "models-timm.jsonl"))
    opts = ap.parse_args()

    import timm
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        done = {json.loads(line)["name"] for line in out.read_text().splitlines() if line.strip()}
    names = timm.list_models(opts.pattern) if opts.pattern else timm.list_models()
    order = sorted(names)
    random.Random(0).shuffle(order)
    header = {**run_header("timm"), "listed": len(names), "pattern": opts.pattern}
    start, new = time.perf_counter(), 0
    with out.open("a") as fh:
        for name in order:
            if name in done:
                continue
            if (opts.limit and new >= opts.limit) or (
                    opts.max_seconds and time.perf_counter() - start > opts.max_seconds):
                break
            row = summarize_one(name)
            fh.write(json.dumps({**row, "run": header}) + "\n")
            fh.flush()
            new += 1
    return report(out, len(names))


if __name__ == "__main__":
    raise SystemExit(main())
