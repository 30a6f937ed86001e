"""Summarize every architecture of ``timm.list_models()`` through ``timm:NAME`` (meta).

    .venv/bin/python benchmarks/sweep_timm.py [--max-seconds 3000] [--out benchmarks/results/timm.jsonl] [PATTERN]

One line of JSON per model is appended to ``--out`` (name, ok, seconds, params, MACs, the
device the trace ran on, the error's first line); models already in the file are skipped,
so a capped run can be resumed. One process, one torch thread, ``summarize(depth=1)``
(build on meta + one traced forward; CPU fallback where meta cannot run). At the end it
prints the count, failures and the time distribution.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern", nargs="?", default="")
    ap.add_argument("--max-seconds", type=float, default=3000.0)
    ap.add_argument("--out", default="benchmarks/results/timm.jsonl")
    opts = ap.parse_args()

    import timm
    import torch

    import torchinspect as ti
    from torchinspect.errors import InspectError

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        done = {json.loads(line)["name"] for line in out.read_text().splitlines() if line.strip()}
    names = timm.list_models(opts.pattern) if opts.pattern else timm.list_models()
    start = time.perf_counter()
    with out.open("a") as fh:
        for name in names:
            if name in done:
                continue
            if time.perf_counter() - start > opts.max_seconds:
                break
            t0 = time.perf_counter()
            row = {"name": name, "ok": True}
            try:
                s = ti.summarize(f"timm:{name}", depth=1)
                row.update(params=s.totals.params, macs=s.totals.macs, device=s.device,
                           input=s.input)
            except InspectError as exc:
                row.update(ok=False, error=f"InspectError: {exc}"[:300])
            except Exception as exc:  # a crash is a finding, not a reason to stop
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
            row["seconds"] = round(time.perf_counter() - t0, 3)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r["ok"]]
    secs = [r["seconds"] for r in rows]
    print(f"{len(rows)} of {len(timm.list_models())} timm architectures run; {len(ok)} ok, "
          f"{len(rows) - len(ok)} failed; CPU fallback {sum(r.get('device') == 'cpu' for r in ok)}")
    if secs:
        print(f"seconds per model: median {statistics.median(secs):.2f}, "
              f"p90 {sorted(secs)[int(0.9 * (len(secs) - 1))]:.2f}, max {max(secs):.2f}, "
              f"total {sum(secs):.0f}")
    for r in rows:
        if not r["ok"]:
            print(f"  FAIL {r['name']}: {r['error']}")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
