"""Where a CUDA-graph replay's time goes: resnet18 batch 1 fp32 (see RESULTS-bench.md).

Times one replay between CUDA events, one event pair around 1/10/100/1,000 replays, and the
host wall clock over 2,000 back-to-back replays; then profiles eager forwards and graph
replays (torch.profiler) for the kernel count, kernel names, the summed kernel time and the
GPU's gaps between consecutive kernels (by the kind of kernel that waits). Last, graphs of
as many dependent element-wise kernels (``null_chain``), one element and 2**20 elements
each: their replay minus their kernel sum is the time a graph adds between two dependent
kernels that do almost nothing, for a single thread block and for a grid over every SM.
Measured twice by default: with PyTorch's default math (cuDNN convolutions in TF32) and in
IEEE fp32 (TF32 off, as ``inspect bench --no-tf32`` does); ``--tf32`` or ``--no-tf32``
measures one. The raw data goes to ``benchmarks/results/graph-gap.json``
(``graph-gap-channels-last.json`` with ``--channels-last``), rendered into RESULTS-bench.md
by ``benchmarks/report.py``. Needs a CUDA GPU:

    python benchmarks/graph_gap.py [--tf32 | --no-tf32] [--channels-last] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile


def kernels(fn, n: int = 20) -> dict:
    """Kernel count, summed kernel time, gaps and span per call of ``fn`` (microseconds)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        trace = json.load(fh)["traceEvents"]
    # other GPU work than kernels (memsets, copies) in one call, by category and name
    other: dict[str, int] = {}
    for e in trace:
        if e.get("cat") in ("gpu_memset", "gpu_memcpy"):
            key = f'{e["cat"]}: {e.get("name", "")[:40]}'
            other[key] = other.get(key, 0) + 1
    ev = [e for e in trace if e.get("cat") == "kernel"]
    ev.sort(key=lambda e: e["ts"])
    per = len(ev) // n
    gaps = [ev[i + 1]["ts"] - (ev[i]["ts"] + ev[i]["dur"]) for i in range(len(ev) - 1) if (i + 1) % per]
    # the gap before each kind of kernel (median, count): which kernels the GPU waits for
    before: dict[str, list[float]] = {}
    for i in range(len(ev) - 1):
        if (i + 1) % per:
            kind = _kind(ev[i + 1]["name"])
            before.setdefault(kind, []).append(ev[i + 1]["ts"] - (ev[i]["ts"] + ev[i]["dur"]))
    spans = [ev[(k + 1) * per - 1]["ts"] + ev[(k + 1) * per - 1]["dur"] - ev[k * per]["ts"] for k in range(n)]
    names: dict[str, int] = {}
    for e in ev[:per]:
        names[e["name"][:60]] = names.get(e["name"][:60], 0) + 1
    return {"kernel_sum_us": sum(e["dur"] for e in ev) / n, "kernels": per,
            "gap_median_us": st.median(gaps) if gaps else 0.0, "gap_sum_us": sum(gaps) / n,
            "span_median_us": st.median(spans), "names": names,
            "other_gpu_work_per_call": {k: v / n for k, v in other.items()},
            "gap_before_kind_us": {k: {"median": round(st.median(v), 3), "per_call": len(v) / n,
                                       "sum_per_call": round(sum(v) / n, 2)}
                                   for k, v in sorted(before.items())}}


def _kind(name: str) -> str:
    """A short class for a kernel name: layout conversion, convolution, batch norm, ..."""
    low = name.lower()
    for key, kind in (("nchwtonhwc", "layout"), ("nhwctonchw", "layout"), ("batch_norm", "batch norm"),
                      ("bn_fw", "batch norm"), ("conv", "convolution"), ("gemm", "gemm/conv"), ("gemv", "gemv"),
                      ("xmma", "gemm/conv"), ("sm90", "gemm/conv"), ("pool", "pooling"),
                      ("reduce", "reduction"), ("elementwise", "element-wise"), ("add", "add")):
        if key in low:
            return kind
    return name[:40]


def capture(model, x) -> torch.cuda.CUDAGraph:
    """One forward captured in a CUDA graph after a warm-up on a side stream (the recipe of
    the torch.cuda.graphs docs; call under ``torch.inference_mode``), replayed 200 times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x)
    for _ in range(200):
        g.replay()
    torch.cuda.synchronize()
    return g


def null_chain(n: int, numel: int = 1) -> dict:
    """A CUDA graph of ``n`` dependent element-wise kernels (``t.add_(1)`` on ``numel``
    elements): the time a graph adds between two dependent kernels that do almost nothing.

    Its replay time minus its summed kernel time, divided by ``n``, is that time. With one
    element each kernel is a single thread block; with 2**20 elements a grid over every SM
    (about 2 us of work), like the short kernels of a small CNN at batch 1.
    """
    t = torch.zeros(numel, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            t.add_(1)
    for _ in range(200):
        g.replay()
    torch.cuda.synchronize()
    vals = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(100):
            g.replay()
        b.record()
        b.synchronize()
        vals.append(a.elapsed_time(b) * 1e3 / 100)
    replay = st.median(vals)
    k = kernels(g.replay)
    return {"kernels": n, "numel": numel, "replay_us": replay, "kernel_sum_us": k["kernel_sum_us"],
            "between_kernels_us": (replay - k["kernel_sum_us"]) / n,
            "replay_over_kernel_sum_pct": 100 * (replay / k["kernel_sum_us"] - 1),
            "profiled_gap_median_us": k["gap_median_us"]}


def measure(tf32: bool, channels_last: bool) -> dict:
    """One resnet18 b1 fp32 graph under one math (cuDNN TF32 on or off) and layout."""
    torch.backends.cudnn.allow_tf32 = tf32
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    m = torchvision.models.resnet18().cuda().eval().to(memory_format=fmt)
    x = torch.randn(1, 3, 224, 224, device="cuda").to(memory_format=fmt)
    res: dict = {"math": "tf32" if tf32 else "ieee", "channels_last": channels_last}
    with torch.inference_mode():
        for _ in range(20):
            m(x)
        g = capture(m, x)
        pairs = []
        for _ in range(2000):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize()
        res["per_replay_events_median_us"] = st.median(a.elapsed_time(b) * 1e3 for a, b in pairs)
        for k in (1, 10, 100, 1000):
            vals = []
            for _ in range(max(5, 2000 // k)):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(k):
                    g.replay()
                b.record()
                b.synchronize()
                vals.append(a.elapsed_time(b) * 1e3 / k)
            res[f"events_around_{k}_replays_median_us"] = st.median(vals)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(2000):
            g.replay()
        torch.cuda.synchronize()
        res["host_wall_per_replay_us"] = (time.perf_counter() - t) / 2000 * 1e6
        res["eager"] = kernels(lambda: m(x))
        res["graph"] = kernels(g.replay)
    # the floor for this many kernels, and what the 5% target would allow between two kernels
    n, ksum = res["graph"]["kernels"], res["graph"]["kernel_sum_us"]
    res["null_chain"] = null_chain(n)
    res["null_chain_wide"] = null_chain(n, 2**20)
    res["floor_for_this_kernel_count_us"] = res["null_chain"]["between_kernels_us"] * n
    res["floor_over_kernel_sum_pct"] = 100 * res["floor_for_this_kernel_count_us"] / ksum
    res["target_5pct_allows_between_kernels_us"] = 0.05 * ksum / n
    return res


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from machine import save

    from torchinspect.bench.environment import capture_environment

    ap = argparse.ArgumentParser()
    ap.add_argument("--no-tf32", action="store_true", help="only IEEE fp32 convolutions")
    ap.add_argument("--tf32", action="store_true", help="only TF32 convolutions (PyTorch's default)")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--note", action="append", default=[], help="a note kept in the data")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    maths = [m for m, off in ((True, args.no_tf32), (False, args.tf32)) if not off] or [True, False]
    runs = []
    for tf32 in maths:
        runs.append(measure(tf32, args.channels_last))
        print(json.dumps(runs[-1], indent=1), flush=True)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default, as the environment records it
    save("graph-gap" + "-channels-last" * args.channels_last, {
        "model": "resnet18", "batch": 1, "dtype": "fp32", "runs": runs,
        "environment": capture_environment("cuda"), "niceness": os.nice(0), "notes": args.note})


if __name__ == "__main__":
    main()
