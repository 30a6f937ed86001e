"""``inspect bench`` result -> Report: one row per (dtype, batch), environment, warnings,
the profile's top operators, the --max-batch search and the --compare verdicts.

Time cells are ``Shown(seconds, "3.21 ms")``: CSV and JSON carry seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.bench.modes import Status
from torchinspect.bench.timing import fmt_time
from torchinspect.report.base import KeyValues, Report, Shown, Table, Text, fmt_bytes, nbytes
from torchinspect.sources.origin import describe_weights

if TYPE_CHECKING:
    from torchinspect.bench.compare import Change
    from torchinspect.bench.run import BenchResult


def _t(seconds: float | None) -> Shown:
    if seconds is None:
        return Shown("", "-")
    return Shown(seconds, fmt_time(seconds))


def _pct(x: float | None) -> Shown:
    return Shown("" if x is None else round(x * 100, 4), "-" if x is None else f"{x * 100:.1f}%")


def _rate(x: float | None) -> Shown:
    return Shown("" if x is None else x, "-" if x is None else f"{x:,.1f}")


def _short(name: str, limit: int = 90) -> Shown:
    """CUDA kernel names run to hundreds of characters: the table shows the start, CSV all."""
    return Shown(name, name if len(name) <= limit else name[: limit - 3] + "...")


def _rows(result: BenchResult, cuda: bool) -> tuple[list[str], list[list[Any]]]:
    cols = ["dtype", "batch", "status", "median", "mean", "min", "p90", "p99", "std", "CoV",
            "IQR", "samples/s", "iters", "first call"]
    if any(c.compile_s is not None for c in result.configs):
        cols.append("compile")
    if cuda:
        cols += ["peak alloc", "peak reserved"]
    rows = []
    for c in result.configs:
        t = c.timing
        s = t.stats if t else None
        row: list[Any] = [c.dtype, c.batch if c.batch is not None else "-",
                          c.status.upper() if c.status != Status.ok else "ok"]
        if t is None or s is None:
            row += [Shown("", "-")] * 10 + [Shown("", "-")]
        else:
            row += [_t(s.median), _t(s.mean), _t(s.min), _t(s.p90), _t(s.p99), _t(s.std),
                    _pct(s.cov), _t(s.iqr), _rate(c.throughput), t.iters, _t(t.first_call_s)]
        if "compile" in cols:
            row.append(_t(c.compile_s))
        if cuda:
            row += [nbytes(c.peak_allocated), nbytes(c.peak_reserved)]
        rows.append(row)
    return cols, rows


def _environment(result: BenchResult) -> KeyValues:
    e = result.environment
    o = result.options
    items: list[tuple[str, Any]] = [("model", result.model), ("inputs", result.inputs),
                                    ("weights", describe_weights(result.weights)),
                                    ("device", result.device)]
    if "gpu" in e:
        items += [("gpu", f"{e['gpu']} (sm {e['capability']}, {fmt_bytes(e['gpu_memory'])})"),
                  ("driver", e.get("driver") or "unknown"),
                  ("torch / CUDA / cuDNN", f"{e['torch']} / {e.get('cuda')} / {e.get('cudnn')}"),
                  ("TF32 matmul / cuDNN", f"{e['tf32_matmul']} / {e['tf32_cudnn']}")]
    else:
        items += [("cpu", f"{e.get('cpu')} ({e.get('cpu_count')} cores)"), ("torch", e["torch"])]
    flags = [f for f, on in (("amp", o.amp), ("channels-last", o.channels_last),
                             ("cuda-graphs", o.cuda_graphs)) if on]
    if o.compile:
        flags.append(f"compile={o.compile}")
    if o.tf32 is not None:
        flags.append("tf32" if o.tf32 else "no-tf32")
    if result.device.startswith("cuda"):
        flags.append(f"cudnn.benchmark={'on' if o.cudnn_benchmark else 'off'}")
    items += [("threads", o.threads or e.get("torch_threads")),
              ("flags", ", ".join(flags) or "-")]
    t = o.timing
    done = [c.timing.warmup_iters for c in result.configs if c.timing is not None]
    items.append(("method", f"{t.warmup_text(done)}; timed "
                  f"{t.min_time:g}-{t.max_time:g} s, >= {t.min_iters} iters, until the median's "
                  f"error <= {t.target_cov * 100:g}%; "
                  + ("CUDA events per call" if result.device.startswith("cuda")
                     else "perf_counter per call")))
    items.append(("percentiles", "linear interpolation (numpy default)"))
    return KeyValues("environment", items)


# left out, in this order, where the terminal is too narrow: the median, its spread (CoV),
# samples/s and the memory peaks stay longest
NARROW_ORDER = ("mean", "p99", "std", "min", "IQR", "iters", "first call", "p90", "peak reserved",
                "compile")


def bench_report(result: BenchResult, compare: list[Change] | None = None,
                 setup: list[str] | None = None) -> Report:
    cuda = result.device.startswith("cuda")
    cols, rows = _rows(result, cuda)
    sections: list[Any] = [_environment(result),
                           Table(f"{result.model} on {result.device}", cols, rows, primary=True,
                                 footer=["samples/s = batch x iterations / wall time of the "
                                         "synchronized timed blocks"],
                                 optional=list(NARROW_ORDER))]
    warn = [f"{c.label}: {w}" for c in result.configs for w in c.warnings]
    warn += [f"{c.label}: {c.status.upper()}: {c.error}" for c in result.configs
             if c.status != Status.ok and c.error]
    if warn:
        sections.append(Text(warn, title="warnings", style="yellow"))
    if result.max_batch is not None:
        mb = result.max_batch
        probes = ", ".join(f"{b}{'' if ok else ' OOM'}" for b, ok, _ in mb.probes)
        sections.append(KeyValues("max batch", [
            ("largest batch that fits", mb.batch if mb.batch else "none (batch 1 is OOM)"),
            ("search", f"doubling then bisection: {probes}"
             + (" (stopped at the cap)" if mb.capped else ""))]))
    if result.profile is not None:
        p = result.profile
        prow = [[_short(o.name), o.calls, _t(o.self_cpu_s), _t(o.self_device_s) if cuda else None]
                for o in p.ops]
        pcols = ["operator", "calls", "self CPU"] + (["self CUDA"] if cuda else [])
        prow = [r[: len(pcols)] for r in prow]
        footer = [f"per forward, mean of {p.forwards} profiled calls ({p.config}); "
                  f"total self CPU {fmt_time(p.total_self_cpu_s)}"
                  + (f", self CUDA {fmt_time(p.total_self_device_s)}" if cuda else "")]
        if p.kernel_s and p.kernels_per_forward:
            row = next((c for c in result.configs if c.label == p.config and c.timing), None)
            line = (f"GPU: {p.kernels_per_forward:g} kernels per forward, "
                    f"{fmt_time(p.kernel_s)} of kernel time")
            if row is not None and row.timing is not None:
                gap = row.timing.stats.median / p.kernel_s - 1
                line += (f"; the median is {gap * 100:+.1f}% over it (the GPU's time between "
                         "kernels and the launch)")
            footer.append(line)
        if p.trace_file:
            footer.append(f"Chrome trace: {p.trace_file} (open in chrome://tracing or Perfetto)")
        sections.append(Table(f"top operators by {p.sort_by.replace('_', ' ')} time", pcols, prow,
                              footer=footer))
    if compare is not None:
        sections += compare_sections(compare, setup, "compared with the earlier run")
    if result.notes:
        sections.append(Text(result.notes, title="notes"))
    data = result.to_dict()
    if compare is not None:
        data["compare"] = [c.to_dict() for c in compare]
        data["compare_setup"] = list(setup or [])
    return Report("bench", data, sections)


def compare_sections(compare: list[Change], setup: list[str] | None, title: str,
                     primary: bool = False) -> list[Any]:
    """The verdict table (old and new median per dtype and batch) and what else differs."""
    rows = [[c.dtype, c.batch if c.batch is not None else "-", _t(c.old_median),
             _t(c.new_median),
             Shown("" if c.change is None else round(c.change * 100, 4),
                   "-" if c.change is None else f"{c.change * 100:+.2f}%"),
             _pct(c.noise), c.verdict] for c in compare]
    out: list[Any] = [Table(title, ["dtype", "batch", "old median", "new median", "change",
                                    "noise", "verdict"], rows, primary=primary,
                            footer=["noise: 3 standard errors of the two medians combined, "
                                    "at least 1%"])]
    if setup:
        out.append(Text([*setup, "a change may come from these, not from the code"],
                        title="the runs differ in", style="yellow"))
    return out


def _run_line(path: str, data: dict[str, Any]) -> str:
    env = data.get("environment") or {}
    where = env.get("gpu") or env.get("cpu") or data.get("device")
    return (f"{path}: {data.get('model')} ({data.get('inputs')}) on {data.get('device')}, "
            f"{where}, torch {env.get('torch')}")


def saved_comparison_report(new_path: str, new: dict[str, Any], old_path: str,
                            old: dict[str, Any], compare: list[Change],
                            setup: list[str]) -> Report:
    """``inspect bench NEW.json --compare OLD.json``: two saved results, nothing run."""
    runs = KeyValues("runs", [("new", _run_line(new_path, new)), ("old", _run_line(old_path, old))])
    sections = [runs, *compare_sections(compare, setup, f"{new_path} compared with {old_path}",
                                         primary=True)]
    data = {"new": new_path, "old": old_path, "compare": [c.to_dict() for c in compare],
            "compare_setup": list(setup)}
    return Report("bench-compare", data, sections)
