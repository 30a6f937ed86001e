"""Where one eager forward's GPU time goes, per kernel and per aten op (torch.profiler), for
DEVELOPMENT-set models only (looking inside a validation model would tune to it).

Usage on a GPU host: ``python benchmarks/latency_profile.py OUT.jsonl MODEL:DTYPE:BATCH ...``
(bf16 / fp32; the model's default input, re-batched). One JSON line per item: kernels, their
summed µs, the 20 costliest kernel names and aten ops with µs and counts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from latency_measure import MODELS  # noqa: E402


def profile_one(spec: str, dtype: str, batch: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from torchinspect.inputs import rebatch
    from torchinspect.sources.case import ModelOptions, make_case, materialize

    entry = next((m for m in MODELS if m[1] == spec), None)
    if entry is None or entry[0] != "dev":
        raise SystemExit(f"{spec}: not a development-set model (benchmarks/latency_measure.py)")
    opts = ModelOptions(inputs=[entry[2]] if entry[2] else None, args=entry[3] or None,
                        device="meta")
    case = make_case(spec, options=opts, device="meta")
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    model = case.real_model("cuda").to(dt).eval()
    args, kwargs = materialize(rebatch(case.example, batch), "cuda")

    def cast(t: Any) -> Any:
        return t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    args = tuple(cast(a) for a in args)
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for _ in range(5):
            model(*args, **kwargs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(*args, **kwargs)
            torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            k = kernels.setdefault(e.name[:90], [0, 0.0])
            k[0] += 1
            k[1] += float(getattr(e, "device_time", 0.0) or 0.0)
    ops = [(e.key, e.count, float(getattr(e, "device_time_total", 0.0) or 0.0))
           for e in prof.key_averages() if e.key.startswith("aten::")]
    top_k = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:20]
    top_o = sorted(ops, key=lambda o: -o[2])[:20]
    return {"model": spec, "dtype": dtype, "batch": batch, "gpu": torch.cuda.get_device_name(),
            "kernels": sum(v[0] for v in kernels.values()),
            "kernel_us": round(sum(v[1] for v in kernels.values()), 2),
            "top_kernels": [{"name": n, "count": c, "us": round(us, 2)} for n, (c, us) in top_k],
            "top_ops": [{"op": k, "count": c, "us": round(us, 2)} for k, c, us in top_o]}


def main() -> None:
    out = sys.argv[1]
    for item in sys.argv[2:]:
        spec, dtype, batch = item.rsplit(":", 2)
        try:
            row = profile_one(spec, dtype, int(batch))
        except Exception as exc:  # noqa: BLE001 - one model must not end the run
            row = {"model": spec, "dtype": dtype, "batch": batch, "error": repr(exc)[:300]}
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(item, row.get("kernel_us"), row.get("error", ""), flush=True)


if __name__ == "__main__":
    main()
