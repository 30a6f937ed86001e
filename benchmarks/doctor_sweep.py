"""`inspect doctor` on models nobody wrote a mistake into: no warning or error expected, and
no "never ran" note unless a module truly never ran.

Three sets, one JSON line per model in ``benchmarks/results/doctor-sweep.jsonl`` (resumable:
models already there are skipped; delete the file to measure afresh):

* ``torchvision``: the 80 classifiers of ``torchvision.models.list_models``, on meta (the
  module-tree and trace checks; the real-number checks are skipped on meta);
* ``hf``: the 20 architectures of ``benchmarks/sweep_hf.py`` at its shrunk configs, every check
  with the real runs on CPU (CLIP, which has no shrunk config there, on meta at full size);
* ``timm``: one model of each timm module (family), the smallest of the models sweep
  (``results/models-timm.jsonl``); real runs on CPU below ``--max-params`` (default 25M),
  meta above.

Per model: the findings (code, severity, module, what), the modules the trace says never ran
(``trace.tree.never_ran``: the "never ran" note) and those used by their parent or a tie
(``tied_runs``), checks that could not finish, the seconds.

    .venv/bin/python benchmarks/doctor_sweep.py [--sets torchvision hf timm] [--max-params N]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

from machine import RESULTS, run_header

OUT = RESULTS / "doctor-sweep.jsonl"


def doctor_one(name: str, device: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    import torchinspect as ti
    from torchinspect.analysis.doctor import diagnose_case
    from torchinspect.trace.policy import trace_model
    from torchinspect.trace.tree import never_ran, tied_runs

    row: dict[str, Any] = {"name": name, "device": device}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            case = ti.make_case(name, options=ti.ModelOptions(args=args or {}, device=device),
                                device="meta")
            case.requested = device
            trace = trace_model(case.model, case.require_example(), device="meta",
                                rebuild=case.rebuild)
            r = diagnose_case(case, trace=trace)
        row.update(
            params=trace.params.total, input=case.describe_inputs(),
            findings=[{"code": f.code, "severity": str(f.severity), "module": f.module,
                       "what": f.what} for f in r.findings],
            never_ran=[{"module": n, "type": trace.modules[n].type,
                        "params": trace.modules[n].total_params} for n in never_ran(trace)],
            used_by=len(tied_runs(trace)), broken=r.broken, skipped=sorted(r.skipped),
            run_device=r.run_device)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be built is listed, not fatal
        row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"[:300]
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def torchvision_models() -> list[tuple[str, str, dict[str, Any] | None]]:
    import torchvision

    return [(n, "meta", None) for n in torchvision.models.list_models(module=torchvision.models)]


def hf_models() -> list[tuple[str, str, dict[str, Any] | None]]:
    from sweep_hf import ARCHS

    return [(f"hf:{arch}", "cpu" if small else "meta", small or None)
            for arch, (_, small) in ARCHS.items()]


def timm_models(max_params: float) -> list[tuple[str, str, dict[str, Any] | None]]:
    from timm.models import _registry

    rows = [json.loads(line) for line in (RESULTS / "models-timm.jsonl").read_text().splitlines()
            if line.strip()]
    smallest: dict[str, dict[str, Any]] = {}
    for r in rows:
        module = _registry._model_to_module.get(r["name"])
        if not r.get("ok") or module is None:
            continue
        if module not in smallest or r["params"] < smallest[module]["params"]:
            smallest[module] = r
    return [(f"timm:{r['name']}", "cpu" if r["params"] <= max_params else "meta", None)
            for _, r in sorted(smallest.items())]


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", nargs="+", default=["torchvision", "hf", "timm"])
    ap.add_argument("--max-params", type=float, default=25e6,
                    help="timm: real runs on CPU up to this many parameters, meta above")
    ap.add_argument("--out", type=Path, default=OUT)
    opts = ap.parse_args()
    torch.set_num_threads(1)
    done = set()
    if opts.out.exists():
        done = {(r["set"], r["name"]) for r in map(json.loads, opts.out.read_text().splitlines())}
    header = run_header("torchvision", "timm", "transformers")
    todo = {"torchvision": torchvision_models, "hf": hf_models,
            "timm": lambda: timm_models(opts.max_params)}
    with opts.out.open("a") as fh:
        for which in opts.sets:
            for name, device, args in todo[which]():
                if (which, name) in done:
                    continue
                row = {"set": which, **doctor_one(name, device, args), "run": header}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                noisy = [f"{f['code']} {f['severity']} {f['module']}: {f['what'][:80]}"
                         for f in row.get("findings", []) if f["severity"] != "info"]
                print(f"{which:11s} {name:40s} {row['seconds']:6.1f} s {device:4s} "
                      f"{row.get('error') or '; '.join(noisy) or 'clean'}"
                      + (f"  never ran: {row['never_ran']}" if row.get("never_ran") else ""),
                      flush=True)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of one set for the page."""
    ok = [r for r in rows if "error" not in r]
    noisy = [r for r in ok if any(f["severity"] != "info" for f in r["findings"])]
    return {"models": len(rows), "ran": len(ok), "real": sum(r["device"] == "cpu" for r in ok),
            "warn_err": len(noisy), "never_ran": sum(bool(r["never_ran"]) for r in ok),
            "used_by": sum(r["used_by"] for r in ok), "broken": sum(bool(r["broken"]) for r in ok),
            "failed": [r["name"] for r in rows if "error" in r], "noisy": noisy,
            "never": [r for r in ok if r["never_ran"]]}


if __name__ == "__main__":
    main()
