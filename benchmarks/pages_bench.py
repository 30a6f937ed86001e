"""RESULTS-bench.md and its docs/results.md bullet, rendered from committed raw data only.

The data: ``bench_accuracy.py`` (``results/bench-accuracy-gpu.json`` on a GPU,
``bench-accuracy-cpu.json`` on a CPU) and ``graph_gap.py`` (``results/graph-gap.json``).
Each file present gets its section; a target the data misses is said so on the page. Both
renderers are registered in ``report.py``'s ``PAGES``; since report.py imports this module,
its helpers (``machine_line``, ``bar``) are imported inside the functions that use them.
"""

from __future__ import annotations

import textwrap
from typing import Any

import machine
from pagetext import bar, machine_line

GPU, CPU, GAP = "bench-accuracy-gpu", "bench-accuracy-cpu", "graph-gap"

# what each kind of comparison in bench_accuracy.py's rows compares (its target is in the row)
KINDS = {
    "cpu-timer": "CPU: our median against `torch.utils.benchmark.Timer.blocked_autorange` on "
                 "the same thread count, interleaved rounds",
    "eager-timer": "CUDA eager: our median against `Timer.blocked_autorange`, interleaved rounds",
    "eager-do_bench": "CUDA eager: our median against `triton.testing.do_bench` (its median)",
    "graph-kernel-sum": "`--cuda-graphs`: our median against the sum of the GPU kernel durations "
                        "torch.profiler records for one eager forward",
    "graph-wall": "`--cuda-graphs`: our median against the host wall clock over back-to-back "
                  "replays of a graph of the same forward (no CUDA event involved)",
}
KNOWN_KINDS = {"layout", "batch norm", "convolution", "gemm/conv", "gemv", "pooling", "reduction",
               "element-wise", "add"}  # graph_gap.py's kernel classes; other names are shown as code
SHORT = {"tf32": "TF32", "ieee": "`--no-tf32`"}
MATH = {"tf32": "TF32 convolutions (PyTorch's default)", "ieee": "IEEE fp32 convolutions (`--no-tf32`)"}


def have(name: str) -> bool:
    return (machine.RESULTS / f"{name}.json").exists()


def _pct(value: float) -> str:
    return f"{value:+.2f}%"


def _us(value: float) -> str:
    return f"{value:,.1f} us"


def conditions(record: dict[str, Any]) -> str:
    """The machine, the versions a GPU timing depends on, and the run's own notes."""
    data = record["data"]
    env = data.get("environment") or {}
    lines = [para(machine_line(record))]
    if env.get("gpu"):
        lines.append(para(f"GPU: {env['gpu']} (compute capability {env.get('capability')}), "
                          f"driver {env.get('driver')}, CUDA {env.get('cuda')}, cuDNN "
                          f"{env.get('cudnn')}; TF32 at the start: matmuls {env.get('tf32_matmul')}, "
                          f"cuDNN {env.get('tf32_cudnn')}; torch threads: {env.get('torch_threads')}."))
    elif env:
        lines.append(f"torch threads: {env.get('torch_threads')} of {env.get('cpu_count')} CPUs.")
    notes = list(data.get("notes") or [])
    if data.get("niceness"):
        notes.append(f"the process ran at niceness {data['niceness']}")
    if notes:
        lines.append(para("Notes: " + "; ".join(notes) + "."))
    return "\n\n".join(lines)


def _row_line(row: dict[str, Any]) -> str:
    target = "info" if row["target_pct"] is None else f"{row['target_pct']:g}%"
    met = "-" if row["ok"] is None else bar(row["ok"])
    return (f"| {row['case']} | {row['reference']} | {row['ours_ms']:.4f} | "
            f"{row['reference_ms']:.4f} | {_pct(row['diff_pct'])} | {target} | {met} |")


def missed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["ok"] is False]


def verdict(rows: list[dict[str, Any]]) -> str:
    gone = missed(rows)
    judged = [r for r in rows if r["ok"] is not None]
    if not gone:
        return f"**All {len(judged)} targets met in this run.**"
    text = "; ".join(f"{r['case']} against {r['reference']}: {_pct(r['diff_pct'])} "
                     f"(target {r['target_pct']:g}%)" for r in gone)
    return para(f"**{len(gone)} of {len(judged)} targets missed in this run:** {text}.")


def _gap_pointer(rows: list[dict[str, Any]]) -> str:
    if not any(r["kind"] == "graph-kernel-sum" for r in missed(rows)) or not have(GAP):
        return ""
    return ("\n\nThe graph-gap section below measures where a replay's time above its kernel sum "
            "goes.")


def accuracy_section(record: dict[str, Any]) -> str:
    data = record["data"]
    rows = data["rows"]
    table = "\n".join(_row_line(r) for r in rows)
    rounds = "\n".join(
        f"- {case}: " + "; ".join(f"{name.removesuffix('_ms')} "
                                  + " / ".join(f"{v:.4f}" for v in values)
                                  for name, values in timers.items() if values)
        for case, timers in data["rounds"].items())
    kernels = [f"{MATH.get(r['math'], r['math'])}: {r['kernels_per_forward']:g}"
               for r in rows if r.get("kernels_per_forward")]
    kernel_text = (f"\n\nGPU kernels per forward in our `--profile` of the replay: "
                   f"{'; '.join(kernels)}." if kernels else "")
    return f"""{conditions(record)}

| case | reference | ours (ms) | reference (ms) | diff | target | met |
|---|---|---:|---:|---:|---:|---|
{table}

{verdict(rows)}{_gap_pointer(rows)}

Each round's median (ms), in the order measured:

{rounds}{kernel_text}"""


def _graph_rows(run: dict[str, Any]) -> list[str]:
    label = MATH.get(run["math"], run["math"])
    graph, n = run["graph"], run["graph"]["kernels"]
    replay = run["events_around_1000_replays_median_us"]
    lines = [f"| resnet18 b1, {label} | {n} | {_us(replay)} | {_us(graph['kernel_sum_us'])} | "
             f"{_pct(100 * (replay / graph['kernel_sum_us'] - 1))} | "
             f"{(replay - graph['kernel_sum_us']) / n:.2f} us | {graph['gap_median_us']:.2f} us |"]
    for key in ("null_chain_wide", "null_chain"):
        c = run[key]
        lines.append(f"| `add_` x {c['kernels']}, {c['numel']:,} element{'s' * (c['numel'] > 1)} "
                     f"(same run) | {c['kernels']} | {_us(c['replay_us'])} | "
                     f"{_us(c['kernel_sum_us'])} | {_pct(c['replay_over_kernel_sum_pct'])} | "
                     f"{c['between_kernels_us']:.2f} us | {c['profiled_gap_median_us']:.2f} us |")
    return lines


def _timers_line(run: dict[str, Any]) -> str:
    events = " / ".join(_us(run[f"events_around_{k}_replays_median_us"]) for k in (1, 10, 100, 1000))
    return (f"| {MATH.get(run['math'], run['math'])} | {_us(run['per_replay_events_median_us'])} | "
            f"{events} | {_us(run['host_wall_per_replay_us'])} | "
            f"{_us(run['graph']['kernel_sum_us'])} / {_us(run['eager']['kernel_sum_us'])} |")


def _gap_reading(run: dict[str, Any]) -> str:
    """What the run says about the 5% target, in its own numbers."""
    graph, n = run["graph"], run["graph"]["kernels"]
    replay = run["events_around_1000_replays_median_us"]
    extra = replay - graph["kernel_sum_us"]
    allow = run["target_5pct_allows_between_kernels_us"]
    per = extra / n
    fits = per <= allow
    return para(f"- {MATH.get(run['math'], run['math'])}: {n} dependent kernels, {_us(graph['kernel_sum_us'])} "
            f"of kernel time. The 5% target leaves {allow:.2f} us between two kernels; the replay "
            f"spends {per:.2f} us per kernel beyond the kernel time ({_us(extra)} a forward, "
            f"{_pct(100 * extra / graph['kernel_sum_us'])}), "
            + ("within what the target leaves" if fits else "more than the target leaves")
            + f". A chain of as many trivial dependent kernels spends "
              f"{run['null_chain']['between_kernels_us']:.2f} us per kernel "
              f"({_us(run['floor_for_this_kernel_count_us'])}, "
              f"{_pct(run['floor_over_kernel_sum_pct'])} of this forward's kernel time).", "  ")


def _gap_kinds(run: dict[str, Any]) -> str:
    kinds = sorted(run["graph"]["gap_before_kind_us"].items(), key=lambda kv: -kv[1]["per_call"])
    return "; ".join(f"{kind if kind in KNOWN_KINDS else f'`{kind}`'} ({v['per_call']:g} per "
                     f"forward) {v['median']:.3f} us" for kind, v in kinds)


def gap_section(record: dict[str, Any]) -> str:
    runs = record["data"]["runs"]
    rows = "\n".join(line for run in runs for line in _graph_rows(run))
    timers = "\n".join(_timers_line(run) for run in runs)
    readings = "\n".join(_gap_reading(run) for run in runs)
    kinds = "\n".join(para(f"- {MATH.get(run['math'], run['math'])}: {_gap_kinds(run)}.", "  ")
                      for run in runs)
    return f"""{conditions(record)}

| graph | kernels | replay (events around 1,000 replays) | kernel sum (profiler, replay) | replay over kernel sum | per kernel | profiler's median gap |
|---|---:|---:|---:|---:|---:|---:|
{rows}

The same graph timed every way (per replay): if the timers agree, the time above the kernel
sum is the GPU's, not a timer's.

| math | one replay between events | events around 1 / 10 / 100 / 1,000 replays | host wall clock | kernel sum, replay / eager |
|---|---:|---|---:|---:|
{timers}

What the 5% target would need:

{readings}

Median gap before each kind of kernel in the replay (profiler):

{kinds}"""


def bench_page() -> tuple[str, list[str]]:
    files, parts = [], []
    timing = None
    if have(GPU):
        gpu = machine.load(GPU)
        files.append(f"{GPU}.json")
        timing = gpu["data"]["timing_defaults"]
        parts.append(f"## GPU (`benchmarks/bench_accuracy.py`)\n\n{accuracy_section(gpu)}")
    if have(GAP):
        files.append(f"{GAP}.json")
        parts.append("## Where the CUDA-graph gap comes from (`benchmarks/graph_gap.py`)\n\n"
                     + GAP_METHOD + "\n\n" + gap_section(machine.load(GAP)))
    if have(CPU):
        cpu = machine.load(CPU)
        files.append(f"{CPU}.json")
        timing = timing or cpu["data"]["timing_defaults"]
        parts.append(f"## CPU (`benchmarks/bench_accuracy.py --cpu-only`)\n\n{accuracy_section(cpu)}")
    kinds = {}
    for name in (GPU, CPU):
        if have(name):
            for row in machine.load(name)["data"]["rows"]:
                if row["target_pct"] is not None:
                    kinds[row["kind"]] = row["target_pct"]
    targets = "\n".join(para(f"- {KINDS.get(kind, kind)}: within {pct:g}%.", "  ")
                        for kind, pct in kinds.items())
    settings = ("" if timing is None else
                f" (warm-up {timing['warmup_s']:g} s, timed {timing['min_time']:g}-"
                f"{timing['max_time']:g} s, stopping once the median's relative standard error "
                f"is at most {100 * timing['target_cov']:g}%)")
    body = "\n\n".join(parts) or "No data yet: run `benchmarks/bench_accuracy.py`."
    method = para(f"""Method: `benchmarks/bench_accuracy.py` (`PYTHONPATH=src:. python
benchmarks/bench_accuracy.py` on a GPU machine, `--cpu-only` elsewhere) times each case with our
`run_bench` at its default settings{settings} and with the reference timers, in the same
process, cuDNN benchmark on for all. Timers that follow the host's speed (eager forwards, the
CPU) are interleaved in rounds and the median of each timer's round medians is compared. The
`--cuda-graphs` case is measured with PyTorch's default math (cuDNN convolutions in TF32) and
with `--no-tf32`; each reference is measured under the same switch. Rows marked "info" have no
target: they show what `inspect bench --profile` tells a user.""")
    text = f"""# `inspect bench` accuracy against reference timers

{method}

Targets:

{targets}

{body}
"""
    return text, files


GAP_METHOD = """A CUDA graph removes the host from the forward, not the GPU's own time between two
dependent kernels. `graph_gap.py` captures resnet18 at batch 1 in fp32 (under each math),
times the replay with CUDA events around one and many replays and with the host wall clock
over back-to-back replays, profiles eager forwards and replays for the kernels and the gaps
between consecutive kernels, and replays two graphs of as many dependent element-wise
kernels (`t.add_(1)`) as the forward has: on one element (one thread block) and on 2**20
elements (a grid over every SM). Their replay minus their kernel sum is what a graph spends
between kernels that do almost nothing; resnet18's own replay minus its kernel sum is what
it spends between its real kernels."""


def _kind(rows: list[dict[str, Any]], kind: str) -> str:
    """One kind's diffs, " / " between the maths (TF32 first) where it was measured twice."""
    return " / ".join(_pct(r["diff_pct"]) for r in rows if r["kind"] == kind)


def _target(rows: list[dict[str, Any]], kind: str) -> str:
    return next(f"{r['target_pct']:g}%" for r in rows if r["kind"] == kind)


def _short_verdict(rows: list[dict[str, Any]]) -> str:
    gone = missed(rows)
    if not gone:
        return f"All {sum(r['ok'] is not None for r in rows)} targets met."
    return "Missed: " + "; ".join(f"{r['case']} against {r['reference']} "
                                  f"({_pct(r['diff_pct'])}, target {r['target_pct']:g}%)"
                                  for r in gone) + "."


def bench_summary() -> tuple[str, list[str]]:
    """The docs/results.md bullet for RESULTS-bench.md."""
    files, parts = [], []
    if have(GPU):
        r = machine.load(GPU)
        files.append(f"{GPU}.json")
        env, rows = r["data"]["environment"], r["data"]["rows"]
        maths = " / ".join(SHORT[x["math"]] for x in rows if x["kind"] == "graph-wall")
        parts.append(
            f"{env['gpu']} (driver {env['driver']}, torch {r['machine']['torch']}, cuDNN "
            f"{env['cudnn']}): resnet50 b32 fp16 eager median {_kind(rows, 'eager-timer')} from "
            f"`Timer.blocked_autorange` and {_kind(rows, 'eager-do_bench')} from "
            f"`triton.testing.do_bench` (target {_target(rows, 'eager-timer')}); `--cuda-graphs` "
            f"resnet18 b1 ({maths}) {_kind(rows, 'graph-wall')} from an event-free wall clock over "
            f"back-to-back replays (target {_target(rows, 'graph-wall')}) and "
            f"{_kind(rows, 'graph-kernel-sum')} over the profiler's kernel sum (target "
            f"{_target(rows, 'graph-kernel-sum')}). {_short_verdict(rows)}")
    if have(GAP):
        files.append(f"{GAP}.json")
        runs = machine.load(GAP)["data"]["runs"]
        maths = " / ".join(SHORT[x["math"]] for x in runs)
        gaps = " / ".join(f"{x['graph']['gap_median_us']:.2f}" for x in runs)
        counts = " / ".join(str(x["graph"]["kernels"]) for x in runs)
        allows = " / ".join(f"{x['target_5pct_allows_between_kernels_us']:.2f}" for x in runs)
        parts.append(f"In the replay ({maths}) the GPU waits a median {gaps} us between two of "
                     f"its {counts} dependent kernels, where 5% would leave {allows} us.")
    if have(CPU):
        r = machine.load(CPU)
        files.append(f"{CPU}.json")
        m, rows = r["machine"], r["data"]["rows"]
        parts.append(f"CPU ({m['cores']} cores, load average {m['load_average']}"
                     + (", a busy machine" if m.get("loaded") else "") + "): "
                     + ", ".join(f"{x['model']} {_pct(x['diff_pct'])}" for x in rows)
                     + f" from `Timer.blocked_autorange` (target {_target(rows, 'cpu-timer')}). "
                     + _short_verdict(rows))
    text = ("- **bench vs reference timers** ([bench accuracy](results/bench.md)). "
            + " ".join(parts))
    return wrap(text), files


def para(text: str, indent: str = "") -> str:
    """A paragraph (or a list item, with ``indent``) wrapped at 95 columns."""
    return textwrap.fill(" ".join(text.split()), 95, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def wrap(text: str) -> str:
    """A docs/results.md bullet (included there as it is)."""
    return para(text, "  ") + "\n"
