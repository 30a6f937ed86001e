"""The kernels one op launches under CUDA-graph replay, timed one by one (a helper of
benchmarks/latency_measure.py's ``floors`` and ``tables --sweep 3`` phases).

``measure_op(fn, device)`` captures ``reps`` back-to-back calls of ``fn`` in one CUDA graph
and returns, beside the per-call time of the replay (CUDA events, median of 5 replays):

* ``kernels``: one entry per kernel of one call, in launch order: its name, its duration
  (median over every call of the profiled replays, and the minimum), its launch shape
  (``grid``, ``block``) and what the profiler says of its occupancy (registers per thread,
  shared memory, blocks and warps per SM, estimated achieved occupancy): with the grid,
  the number of waves on the GPU's SMs;
* ``gap_in_call_us``: the idle time between consecutive kernels of one call (median, per
  position), and ``gap_between_calls_us``: from the last kernel of one call to the first of
  the next, inside the graph (median): the launch floor a graph still pays per kernel;
* ``span_us``: first kernel start to last kernel end of one call (median).

On the CPU (``--dry-run``) there is no graph: the wall time of a few calls and no kernels.
"""

from __future__ import annotations

import json
import os
import statistics as st
import tempfile
import time
from typing import Any

import torch

#: profiler trace ``args`` of a kernel -> the key written here
KERNEL_ARGS = {"grid": "grid", "block": "block", "registers per thread": "regs",
               "shared memory": "smem", "blocks per SM": "blocks_per_sm",
               "warps per SM": "warps_per_sm", "est. achieved occupancy %": "occupancy_pct"}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def capture(fn: Any, reps: int) -> Any:
    """A CUDA graph of ``reps`` calls of ``fn`` (captured on a side stream after one call)."""
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
    return graph


def replay_us(graph: Any, reps: int, replays: int = 5) -> dict[str, float]:
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    times.sort()
    return {"us": times[len(times) // 2], "min_us": times[0], "reps": reps, "replays": replays}


def trace_kernels(run: Any) -> list[dict[str, Any]]:
    """The GPU kernels (chrome-trace events, sorted by start) while ``run()`` executes."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels.sort(key=lambda e: e["ts"])
    return kernels


def per_call(kernels: list[dict[str, Any]], calls: int) -> dict[str, Any]:
    """Kernels of one call (position-wise medians over ``calls`` calls) and the gaps."""
    if not kernels or len(kernels) % calls:
        return {"kernels_per_call": len(kernels) / max(calls, 1), "kernels": [],
                "note": "kernel count not a multiple of the calls profiled"}
    q = len(kernels) // calls
    out = []
    for j in range(q):
        same = [kernels[i * q + j] for i in range(calls)]
        durs = [float(e["dur"]) for e in same]
        args = same[0].get("args", {})
        entry: dict[str, Any] = {"name": same[0]["name"][:120], "us": st.median(durs),
                                 "min_us": min(durs)}
        entry.update({short: args[key] for key, short in KERNEL_ARGS.items() if key in args})
        out.append(entry)
    in_call = [[kernels[i * q + j + 1]["ts"] - (kernels[i * q + j]["ts"] + kernels[i * q + j]["dur"])
                for i in range(calls)] for j in range(q - 1)]
    between = [kernels[(i + 1) * q]["ts"] - (kernels[i * q + q - 1]["ts"] + kernels[i * q + q - 1]["dur"])
               for i in range(calls - 1)]
    spans = [kernels[i * q + q - 1]["ts"] + kernels[i * q + q - 1]["dur"] - kernels[i * q]["ts"]
             for i in range(calls)]
    return {"kernels_per_call": q, "kernels": out,
            "kernel_sum_us": sum(e["us"] for e in out),
            "gap_in_call_us": [round(st.median(g), 3) for g in in_call],
            "gap_between_calls_us": round(st.median(between), 3) if between else None,
            "span_us": st.median(spans)}


def measure_op(fn: Any, device: str, target_s: float = 2e-4, max_reps: int = 50,
               profile: bool = True, profile_calls: int = 20) -> dict[str, Any]:
    """Per-call time of ``fn`` as CUDA-graph replays, and (``profile``) its kernels."""
    for _ in range(3):  # warm-up; cuDNN autotuning happens here
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    _sync(device)
    est = max((time.perf_counter() - t0) / 3, 1e-6)
    if not device.startswith("cuda"):
        return {"us": est * 1e6, "reps": 1, "replays": 3, "dry_run": True}
    reps = int(min(max(target_s / est, 1), max_reps))
    graph = capture(fn, reps)
    row: dict[str, Any] = replay_us(graph, reps)
    del graph
    if profile:
        calls = max(min(profile_calls, reps), 2)
        small = capture(fn, calls)
        small.replay()
        torch.cuda.synchronize()
        row["profile"] = per_call(trace_kernels(small.replay), calls)
        row["profile"]["calls"] = calls
        del small
    return row
