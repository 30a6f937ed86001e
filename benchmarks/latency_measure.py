"""Measure what the latency prediction is calibrated and validated on, on one GPU.

Phases (each appends JSON lines to its file as it goes, so a cut-off run keeps its data):

* ``probes``  the per-kernel time of tiny kernels under CUDA-graph replay and eager, and
  this host's dispatch cost (torchinspect.latency.host.probe_host);
* ``tables``  every op of benchmarks/latency_ops.py in bf16/fp16/fp32, timed as CUDA-graph
  replays of ``reps`` back-to-back calls (CUDA events; per-call time = replay / reps); with
  ``--sweep N`` only that sweep's ops, each also profiled for the kernels one call launches;
* ``kernels`` the kernels one call of each sweep-1 op at batch 1 launches (torch.profiler);
* ``models``  the development and validation sets through torchinspect's own bench
  (``run_bench``, eager and ``cuda_graphs=True``, batch 1 and 32, bf16 and fp32, PyTorch's
  default TF32 settings, cuDNN autotuning on), plus one profiled eager forward per model
  and batch (kernels launched, their summed GPU time).

Usage on a GPU host: ``python benchmarks/latency_measure.py OUTDIR [--budget S] [--phases
probes,tables,kernels,models] [--sweep N] [--models A,B]``;
``--dry-run`` runs a few items of each phase on the CPU (no timing worth keeping).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency_ops  # noqa: E402

ZOO = "benchmarks/latency_zoo.py"  # relative: the run starts in the checkout root

# (set, spec, --input or None, --arg list). The validation set is never used for fitting.
MODELS: list[tuple[str, str, str | None, list[str]]] = [
    ("dev", "resnet50", None, []),
    ("val", "resnet18", None, []),
    ("dev", "vit_b_16", None, []),
    ("val", "efficientnet_b0", None, []),
    ("dev", "swin_t", None, []),
    ("val", "convnext_tiny", None, []),
    ("dev", "mobilenet_v2", None, []),
    ("val", "hf:gpt2", None, []),
    ("dev", "hf:bert", None, []),
    ("val", "r3d_18", "3,16,112,112", []),
    ("dev", f"{ZOO}:GRUNet", None, []),
    ("val", "vit_b_32", None, []),
    ("val", "regnet_y_1_6gf", None, []),
    ("val", "mobilenet_v3_large", None, []),
    ("dev", "zoo:gpt-tiny", None, []),
    ("val", "zoo:lstm-classifier", None, []),
    ("val", f"{ZOO}:TextEncoder", None, []),
    ("val", "hf:llama", None, ["num_hidden_layers=4"]),
    ("val", "wide_resnet50_2", None, []),
    ("val", "shufflenet_v2_x1_0", None, []),
    ("val", "googlenet", None, []),
    ("val", "vgg16", None, []),
    ("val", "maxvit_t", None, []),
    ("val", "hf:distilbert", None, []),
    ("dev", "densenet121", None, []),
    ("val", "mnasnet1_0", None, []),
    ("dev", "resnext50_32x4d", None, []),
    ("val", "squeezenet1_1", None, []),
    # added in session 7 (sweep 2): kinds the development set lacked; development only
    ("dev", "r2plus1d_18", "3,16,112,112", []),
    ("dev", f"{ZOO}:FastEncoder", None, []),
    ("dev", "mc3_18", "3,16,112,112", []),
]
BATCHES = (1, 32)
MODEL_DTYPES = ("bf16", "fp32")


def _write(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_replay(fn: Any, device: str, target_s: float = 2e-4) -> dict[str, float]:
    """Per-call microseconds of ``fn`` as CUDA-graph replays of ``reps`` calls (CPU: wall)."""
    for _ in range(3):  # warm-up; cuDNN autotuning happens here
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    _sync(device)
    est = max((time.perf_counter() - t0) / 3, 1e-6)
    reps = int(min(max(target_s / est, 1), 50))
    if not device.startswith("cuda"):
        return {"us": est * 1e6, "reps": 1, "replays": 3}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    replays = 5
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    del graph
    times.sort()
    return {"us": times[len(times) // 2], "min_us": times[0], "reps": reps, "replays": replays}


def probes(device: str, out: Path) -> None:
    from torchinspect.latency.host import probe_host

    x = torch.zeros(1, device=device)
    row: dict[str, Any] = {"host": probe_host().to_dict()}
    if device.startswith("cuda"):
        with torch.inference_mode():
            for n in (1, 200):
                def tiny(n: int = n) -> None:
                    for _ in range(n):
                        x.add_(1)
                r = time_replay(tiny, device, target_s=1e-3)
                row[f"graph_tiny_kernel_us_x{n}"] = r["us"] / n
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                x.add_(1)
            enq = time.perf_counter() - t0
            torch.cuda.synchronize()
            row["eager_enqueue_us"] = enq / 2000 * 1e6
            row["eager_tiny_kernel_us"] = (time.perf_counter() - t0) / 2000 * 1e6
    _write(out, row)


def kernels_of(fn: Any, device: str) -> dict[str, Any]:
    """Kernels one call launches (torch.profiler): count, and the names of the first few."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(device)
    names = [e.name for e in prof.events() if getattr(e, "device_type", None) is not None
             and str(e.device_type).endswith("CUDA")]
    return {"kernels": len(names), "kernel_names": [n[:80] for n in names[:8]]}


def _small(spec: dict[str, Any]) -> bool:
    """Sweep-1 specs at batch 1 (or 1-8 rows): whose kernel counts set the batch-1 floors."""
    return spec.get("n") == 1 or spec.get("m") in (1, 8) or spec.get("b") == 1 \
        or spec.get("rows") in (1, 32, 197) or spec.get("numel") == 1 << 10


def tables(device: str, out: Path, deadline: float, limit: int | None,
           sweep: int | None = None) -> None:
    specs = latency_ops.SPECS if limit is None else latency_ops.SPECS[::max(len(latency_ops.SPECS) // limit, 1)]
    if sweep is not None:
        specs = [s for s in specs if s.get("sweep", 1) == sweep]
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for spec in specs:
            for dtype in latency_ops.dtypes_for(spec):
                if time.monotonic() > deadline:
                    _write(out, {"stopped": "deadline"})
                    return
                try:
                    fn = latency_ops.build(spec, device, dtype)
                    r = time_replay(fn, device)
                    if sweep is not None:
                        r.update(kernels_of(fn, device))
                    _write(out, {"spec": spec, "dtype": dtype, **r})
                except Exception as exc:  # noqa: BLE001 - one op must not end the sweep
                    _write(out, {"spec": spec, "dtype": dtype, "error": repr(exc)[:300]})
                    if device.startswith("cuda"):
                        torch.cuda.empty_cache()


def kernel_counts(device: str, out: Path, deadline: float) -> None:
    """Kernels per call of the sweep-1 ops at batch 1 (their times are in tables.jsonl)."""
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for spec in latency_ops.SPECS:
            if spec.get("sweep", 1) != 1 or not _small(spec):
                continue
            for dtype in ("bf16", "fp32"):
                if time.monotonic() > deadline:
                    _write(out, {"stopped": "deadline"})
                    return
                try:
                    fn = latency_ops.build(spec, device, dtype)
                    _write(out, {"spec": spec, "dtype": dtype, **kernels_of(fn, device)})
                except Exception as exc:  # noqa: BLE001 - one op must not end the sweep
                    _write(out, {"spec": spec, "dtype": dtype, "error": repr(exc)[:300]})


def _profile(case: Any, device: str, dtype: str, batch: int) -> dict[str, Any]:
    """Kernels one eager forward launches and their summed GPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    from torchinspect.inputs import rebatch
    from torchinspect.sources.case import materialize

    dt = latency_ops.DTYPES[dtype]
    model = case.real_model(device).to(dt).eval()
    args, kwargs = materialize(rebatch(case.example, batch), device)
    def cast(t: Any) -> Any:
        return t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    args = tuple(cast(a) for a in args)
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    with torch.inference_mode():
        for _ in range(3):
            model(*args, **kwargs)
        _sync(device)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            model(*args, **kwargs)
            _sync(device)
    kernels = [e for e in prof.events() if getattr(e, "device_type", None) is not None
               and str(e.device_type).endswith("CUDA")]
    names: dict[str, int] = {}
    for e in kernels:
        names[e.name[:60]] = names.get(e.name[:60], 0) + 1
    by_op: dict[str, int] = {}
    for e in prof.key_averages():
        if e.key.startswith("aten::"):
            by_op[e.key] = int(e.count)
    del model
    return {"kernels": len(kernels),
            "kernel_us": sum(float(getattr(e, "device_time", 0.0) or 0.0) for e in kernels),
            "aten_calls": by_op,
            "kernel_names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:25])}


def models(device: str, out: Path, deadline: float, limit: int | None,
           only: list[str] | None = None) -> None:
    from torchinspect.bench.run import BenchOptions, run_bench
    from torchinspect.bench.timing import TimingConfig
    from torchinspect.sources.case import ModelOptions, make_case

    cuda = device.startswith("cuda")
    timing = TimingConfig(warmup_s=0.15, warmup_iters=5, min_time=0.2, max_time=0.5,
                          min_iters=10, target_cov=0.01)
    chosen = MODELS if limit is None else MODELS[:limit]
    if only:
        chosen = [m for m in chosen if m[1] in only]
    for set_name, spec, inputs, args in chosen:
        if time.monotonic() > deadline:
            _write(out, {"stopped": "deadline"})
            return
        row: dict[str, Any] = {"set": set_name, "model": spec, "input": inputs, "args": args}
        t0 = time.monotonic()
        try:
            opts = ModelOptions(inputs=[inputs] if inputs else None, args=args or None,
                                device="meta")
            case = make_case(spec, options=opts, device="meta")
            for graphs in ((False, True) if cuda else (False,)):
                res = run_bench(case, BenchOptions(
                    device=device, batches=BATCHES, dtypes=MODEL_DTYPES, cuda_graphs=graphs,
                    timing=timing))
                row["graphs" if graphs else "eager"] = [
                    {"dtype": c.dtype, "batch": c.batch, "status": c.status, "error": c.error,
                     "median_ms": c.timing.stats.median * 1e3 if c.timing else None,
                     "host_enqueue_ms": (c.timing.host_stats.median * 1e3
                                         if c.timing and c.timing.host_stats else None)}
                    for c in res.configs]
                row.setdefault("environment", {k: res.environment.get(k) for k in
                                               ("gpu", "torch", "cuda", "cudnn", "cpu")})
            row["profile"] = {}
            for batch in BATCHES[:1]:  # kernels launched: the same at batch 32
                if time.monotonic() < deadline:
                    row["profile"][f"bf16/{batch}"] = _profile(case, device, "bf16", batch)
        except Exception as exc:  # noqa: BLE001 - one model must not end the sweep
            row["error"] = repr(exc)[:400]
            row["traceback"] = traceback.format_exc()[-1500:]
        row["seconds"] = round(time.monotonic() - t0, 2)
        _write(out, row)
        if cuda:
            torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--budget", type=float, default=520.0, help="seconds for the whole run")
    p.add_argument("--tables-budget", type=float, default=150.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--phases", default="probes,tables,kernels,models")
    p.add_argument("--sweep", type=int, default=None, help="only the op specs of this sweep")
    p.add_argument("--models", default="", help="comma-separated specs: only these models")
    p.add_argument("--kernels-budget", type=float, default=40.0)
    a = p.parse_args()
    start = time.monotonic()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if a.dry_run else "cuda"
    limit = 3 if a.dry_run else None
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    _write(out / "probes.jsonl", {"gpu": name, "torch": torch.__version__,
                                  "cudnn": torch.backends.cudnn.version(),
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    phases = a.phases.split(",")
    if "probes" in phases:
        probes(device, out / "probes.jsonl")
        print(f"probes done {time.monotonic() - start:.0f}s", flush=True)
    if "tables" in phases:
        tables(device, out / "tables.jsonl", min(start + a.tables_budget, start + a.budget), limit,
               a.sweep)
        print(f"tables done {time.monotonic() - start:.0f}s", flush=True)
    if "kernels" in phases:
        kernel_counts(device, out / "kernels.jsonl",
                      min(time.monotonic() + a.kernels_budget, start + a.budget))
        print(f"kernels done {time.monotonic() - start:.0f}s", flush=True)
    if "models" in phases:
        models(device, out / "models.jsonl", start + a.budget, limit,
               [m for m in a.models.split(",") if m] or None)
        print(f"models done {time.monotonic() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
