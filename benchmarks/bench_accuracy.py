"""How close `inspect bench`'s median is to reference timers, measured in the same process.

* CPU (always): resnet18 batch 1 fp32 and zoo:mnist-net batch 32, same thread count:
  our median vs ``torch.utils.benchmark.Timer(...).blocked_autorange()``. Target: within 10%.
* CUDA (when available): resnet50 batch 32 fp16 eager: our median vs ``blocked_autorange``
  and vs ``triton.testing.do_bench(return_mode="median")``, interleaved 3 times (median of
  each). Target: within 2%.
* CUDA: ``--cuda-graphs`` resnet18 batch 1 fp32 vs the sum of the GPU kernel durations that
  torch.profiler records for one forward (mean of 20 profiled forwards, kernels summed from
  its Chrome trace). Target: within 5%. Measured twice: with PyTorch's default math (cuDNN
  convolutions in TF32) and with ``--no-tf32`` (IEEE fp32 convolutions).

Prints a markdown table and saves the raw data (rows, each round's medians, the timing
settings, the versions and the machine) to ``benchmarks/results/bench-accuracy-gpu.json``
(``-cpu.json`` on a CPU or with ``--cpu-only``), rendered into RESULTS-bench.md by
``benchmarks/report.py``; exits 1 if a comparison misses its target.

    PYTHONPATH=src:. python benchmarks/bench_accuracy.py [--cpu-only] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def ours(spec: str, inp: str, device: str, batch: int, dtype: str, **kw) -> float:
    from torchinspect.bench import BenchOptions, run_bench
    from torchinspect.sources.case import make_case

    case = make_case(spec, inp, device="meta")
    r = run_bench(case, BenchOptions(device=device, batches=(batch,), dtypes=(dtype,), **kw))
    row = r.configs[0]
    if row.status != "ok":
        raise RuntimeError(f"{spec}: {row.status} {row.error}")
    return row.timing.stats.median


def model_and_input(spec: str, inp: str, device: str, batch: int, dtype: str):
    import dataclasses

    import torch

    from torchinspect.inputs import rebatch
    from torchinspect.sources.case import make_case

    case = make_case(spec, inp, device="meta")
    model = case.real_model(device).eval().to(getattr(torch, dtype))
    case = dataclasses.replace(case, example=rebatch(case.example, batch))
    args, _ = case.inputs_on(device)
    x = args[0].to(getattr(torch, dtype)) if args[0].is_floating_point() else args[0]
    return model, x


def timer_median(model, x, threads: int) -> float:
    import torch
    from torch.utils.benchmark import Timer

    with torch.inference_mode():
        t = Timer("model(x)", globals={"model": model, "x": x}, num_threads=threads)
        t.blocked_autorange(min_run_time=0.5)  # warm-up
        return t.blocked_autorange(min_run_time=3.0).median


def do_bench_median(model, x) -> float:
    import torch
    from triton.testing import do_bench

    with torch.inference_mode():
        return do_bench(lambda: model(x), warmup=500, rep=3000, return_mode="median") / 1000.0


def kernel_sum(model, x, n: int = 20) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                model(x)
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    total_us = sum(e.get("dur", 0) for e in events if e.get("cat") == "kernel")
    return total_us / 1e6 / n


def graph_wall_median(model, x, reps: int = 5, n: int = 2000) -> float:
    """Per-replay host wall time of ``n`` back-to-back replays of a CUDA graph of one forward
    (synchronized before and after), median of ``reps`` blocks: a timer that uses no CUDA
    event and cannot miss time between kernels or between replays."""
    import time

    import torch
    from graph_gap import capture  # benchmarks/ is the script's folder

    with torch.inference_mode():
        g = capture(model, x)
        vals = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                g.replay()
            torch.cuda.synchronize()
            vals.append((time.perf_counter() - t) / n)
    return sorted(vals)[reps // 2]


def graph_kernels(spec: str, inp: str, tf32: bool | None = None) -> tuple[float, float, float]:
    """(our median, kernels per forward, kernel time per forward) of ``--cuda-graphs
    --profile`` on resnet18 b1 fp32: what the tool itself tells a user."""
    from torchinspect.bench import BenchOptions, run_bench
    from torchinspect.sources.case import make_case

    case = make_case(spec, inp, device="meta")
    r = run_bench(case, BenchOptions(device="cuda", batches=(1,), dtypes=("fp32",), cuda_graphs=True,
                                     profile=True, tf32=tf32))
    return r.configs[0].timing.stats.median, r.profile.kernels_per_forward, r.profile.kernel_s


def main() -> int:
    import torch
    from machine import save

    from torchinspect.bench import TimingConfig
    from torchinspect.bench.environment import capture_environment

    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=5, help="CPU: interleaved rounds (odd)")
    ap.add_argument("--note", action="append", default=[],
                    help="a note on the conditions, kept in the data (repeatable)")
    a = ap.parse_args()
    gpu = torch.cuda.is_available() and not a.cpu_only
    rows: list[dict] = []
    rounds: dict[str, dict[str, list[float]]] = {}

    def add(model: str, kind: str, what: str, ref_name: str, mine: float, ref: float,
            target: float | None, math: str | None = None, **extra: float) -> None:
        diff = (mine - ref) / ref
        rows.append({"model": model, "kind": kind, "math": math, "case": what, "reference": ref_name,
                     "ours_ms": mine * 1e3, "reference_ms": ref * 1e3, "diff_pct": diff * 100,
                     "target_pct": None if target is None else target * 100,
                     "ok": None if target is None else abs(diff) <= target, **extra})

    threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    for spec, inp, batch in (() if gpu else (("resnet18", "3,224,224", 1), ("zoo:mnist-net", "1,28,28", 32))):
        # A/B interleaved --rounds times (a VM's clock and caches drift between runs): the
        # median of our medians against the median of the reference's.
        model, x = model_and_input(spec, inp, "cpu", batch, "float32")
        mine, refs = [], []
        for _ in range(a.rounds):
            refs.append(timer_median(model, x, threads))
            mine.append(ours(spec, inp, "cpu", batch, "fp32", threads=threads))
        rounds[f"{spec} b{batch} fp32 cpu"] = {"ours_ms": [v * 1e3 for v in mine],
                                              "Timer.blocked_autorange_ms": [v * 1e3 for v in refs]}
        add(spec, "cpu-timer", f"{spec} b{batch} fp32 cpu ({threads} threads, median of {a.rounds} "
            "interleaved runs)", "Timer.blocked_autorange", sorted(mine)[a.rounds // 2],
            sorted(refs)[a.rounds // 2], 0.10)
    if gpu:
        torch.backends.cudnn.benchmark = True
        # Eager ResNet-50 at batch 32 is close to launch-bound on these hosts (the host needs
        # about as long to enqueue a forward as the GPU to run it), so every timer follows the
        # host's speed, which drifts (page-cache writeback after a benchmark, turbo): A/B
        # interleaved 3 times, the median of each timer's 3 medians, as on the CPU
        model, x = model_and_input("resnet50", "3,224,224", "cuda", 32, "float16")
        mine, timer, dob = [], [], []
        for _ in range(3):
            mine.append(ours("resnet50", "3,224,224", "cuda", 32, "fp16"))
            timer.append(timer_median(model, x, threads))
            try:
                dob.append(do_bench_median(model, x))
            except ImportError as exc:
                print(f"triton missing: {exc}", file=sys.stderr)
        rounds["resnet50 b32 fp16 cuda eager"] = {
            "ours_ms": [v * 1e3 for v in mine], "Timer.blocked_autorange_ms": [v * 1e3 for v in timer],
            "triton do_bench_ms": [v * 1e3 for v in dob]}
        m = sorted(mine)[1]
        case = "resnet50 b32 fp16 cuda eager (median of 3 interleaved runs)"
        add("resnet50", "eager-timer", case, "Timer.blocked_autorange", m, sorted(timer)[1], 0.02)
        if dob:
            add("resnet50", "eager-do_bench", case, "triton do_bench (median)", m,
                sorted(dob)[len(dob) // 2], 0.02)
        del model, x
        torch.cuda.empty_cache()
        from torchinspect.bench.precision import tf32_switch

        # fp32 under PyTorch's default math (cuDNN convolutions in TF32) and in IEEE fp32
        # (--no-tf32): the same forward, different kernels (see RESULTS-bench.md)
        model, x = model_and_input("resnet18", "3,224,224", "cuda", 1, "float32")
        for tf32, name, math in ((None, "fp32", "tf32"), (False, "fp32 --no-tf32", "ieee")):
            m = ours("resnet18", "3,224,224", "cuda", 1, "fp32", cuda_graphs=True, tf32=tf32)
            with tf32_switch(tf32):
                ksum, wall = kernel_sum(model, x), graph_wall_median(model, x)
            case = f"resnet18 b1 {name} cuda --cuda-graphs"
            add("resnet18", "graph-kernel-sum", case, "profiler kernel sum (eager forward)", m, ksum,
                0.05, math)
            add("resnet18", "graph-wall", case, "host wall clock, 2000 back-to-back replays", m, wall,
                0.02, math)
            gm, kernels, ksum = graph_kernels("resnet18", "3,224,224", tf32)
            add("resnet18", "graph-profile", f"{case} --profile (info)",
                "kernel sum in our --profile of the replay", gm, ksum, None, math,
                kernels_per_forward=kernels)
        m_eager = ours("resnet18", "3,224,224", "cuda", 1, "fp32")
        add("resnet18", "eager-kernel-sum", "resnet18 b1 fp32 cuda eager (info)",
            "profiler kernel sum (eager forward)", m_eager, kernel_sum(model, x), None, "tf32")
    print("| case | reference | ours (ms) | reference (ms) | diff | target | ok |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        target = "-" if r["target_pct"] is None else f"{r['target_pct']:.0f}%"
        ok = "-" if r["ok"] is None else ("yes" if r["ok"] else "NO")
        print(f"| {r['case']} | {r['reference']} | {r['ours_ms']:.4f} | {r['reference_ms']:.4f} "
              f"| {r['diff_pct']:+.2f}% | {target} | {ok} |")
    device = "cuda" if gpu else "cpu"
    save(f"bench-accuracy-{'gpu' if gpu else 'cpu'}", {
        "device": device, "rows": rows, "rounds": rounds, "threads": threads,
        "timing_defaults": TimingConfig().to_dict(), "environment": capture_environment(device),
        "niceness": os.nice(0), "notes": a.note})
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
