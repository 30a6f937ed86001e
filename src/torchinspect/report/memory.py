"""`inspect memory` -> Report: the predicted peaks, their makeup, and the verification."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from torchinspect.report.base import KeyValues, Report, Shown, Table, Text, fmt_bytes, nbytes, pct

if TYPE_CHECKING:
    from torchinspect.memory.budget import MemoryBudget
    from torchinspect.memory.result import FitResult, MemoryResult, MemorySweep, RunMemory
    from torchinspect.memory.verify import Verification

_COLUMNS = ("weights", "buffers", "input", "gradients", "optimizer state", "activations",
            "temporaries", "workspace")


def memory_report(result: MemoryResult | MemorySweep) -> Report:
    """One batch: the full breakdown; several (or --fit): one row per batch."""
    if hasattr(result, "results"):
        return _sweep_report(cast("MemorySweep", result))
    r = result  # hasattr above tells mypy it is the one-batch result
    sections: list[Any] = [Text(_header(r))]
    if r.inference is not None:
        sections.append(_inference(r.inference))
    if r.training is not None:
        sections.append(_phases(r.training))
        sections.append(_training(r, r.training))
        if r.training.saved:
            sections.append(_saved(r.training))
    sections.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return Report("memory", r.to_dict(), sections)


def _header(r: MemoryResult) -> list[str]:
    c = r.config
    step = "inference only" if not c["train"] else (
        f"optimizer {c['optimizer']}" + (" (foreach)" if c["foreach"] else "")
        + f", loss {c['loss']} of the first floating output")
    precision = f"autocast {c['amp']}" if c["amp"] else f"dtype {c['dtype'] or 'as built'}"
    lines = [f"{r.model}  input {r.input}",
             f"predicted for {r.device}" + (f" ({r.gpu})" if r.gpu else "")
             + f" on fake tensors; {precision}; {step}"]
    if c["checkpointing"]:
        lines.append(f"activation checkpointing on every {c['checkpointing']}")
    lines.append(f"params {r.params:,} ({fmt_bytes(r.weight_bytes)}), buffers "
                 f"{fmt_bytes(r.buffer_bytes)}, input {fmt_bytes(r.input_bytes)}")
    return lines


def peak_cell(run: RunMemory) -> Shown:
    """``1.33 GB``, or ``1.33-2.12 GB`` where unmeasured cuDNN workspaces give a range (the
    value, for CSV, stays the point prediction)."""
    if not _ranged(run):
        return nbytes(run.peak)
    return Shown(run.peak, bytes_range(run.peak_low or 0, run.peak_high or 0))


def _ranged(run: RunMemory) -> bool:
    return run.peak_low is not None and run.peak_high is not None and run.peak_low != run.peak_high


def bytes_range(low: int, high: int) -> str:
    """``1.33-2.12 GB`` (one unit where both share it, else ``980.00 MB-1.20 GB``)."""
    a, b = fmt_bytes(low).split(" "), fmt_bytes(high).split(" ")
    return f"{a[0]}-{b[0]} {b[1]}" if a[1] == b[1] else f"{fmt_bytes(low)}-{fmt_bytes(high)}"


def _range_items(run: RunMemory) -> list[tuple[str, Any]]:
    if not _ranged(run):
        return []
    return [("Range", Shown([run.peak_low, run.peak_high],
                            bytes_range(run.peak_low or 0, run.peak_high or 0)
                            + " (unmeasured cuDNN workspaces, measured error)")),
            ("Upper end set by", run.high_at or "-")]


def _inference(run: RunMemory) -> KeyValues:
    items: list[tuple[str, Any]] = [("Peak allocated", nbytes(run.peak)), *_range_items(run),
                                    ("Where", run.where)]
    items += [(k.capitalize(), nbytes(v)) for k, v in run.breakdown.items() if v]
    return KeyValues("Inference (eval, inference_mode)", items)


def _phases(run: RunMemory) -> Table:
    """Categories down, phases across (first step, then the steady state)."""
    phases = sorted(run.phases, key=lambda p: (p.step, _ORDER.get(p.phase, 9)))
    heads = [f"{_SHORT.get(p.phase, p.phase)} {p.step}" for p in phases]
    rows: list[list[Any]] = [["Peak", *(nbytes(p.peak) for p in phases)]]
    for c in _COLUMNS:
        if any(p.breakdown.get(c, 0) for p in phases):
            rows.append([c.capitalize(), *(nbytes(p.breakdown.get(c, 0)) for p in phases)])
    footer = ["fwd/bwd/opt: forward, backward, optimizer.step; 1: the first step (creates the "
              "optimizer state), 2: the steady state"]
    footer += [f"{h}: peak at {p.module}" for h, p in zip(heads, phases, strict=True) if p.module]
    return Table("Training step: the peak of each phase and what is allocated then",
                 ["", *heads], rows, align=["left", *["right"] * len(heads)], footer=footer,
                 primary=True)


_ORDER = {"forward": 0, "backward": 1, "optimizer": 2, "inference": 0}
_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def _training(r: MemoryResult, run: RunMemory) -> KeyValues:
    first = max((p.peak for p in run.phases if p.step == 1), default=0)
    steady = max((p.peak for p in run.phases if p.step == 2), default=0)
    items: list[tuple[str, Any]] = [
        ("Peak allocated", nbytes(run.peak)), *_range_items(run), ("Where", run.where),
        ("First step peak", nbytes(first)), ("Steady-state peak", nbytes(steady)),
        ("Gradients", nbytes(run.gradients)), ("Optimizer state", nbytes(run.optimizer_state)),
        ("Activations saved for backward", nbytes(run.saved_total)),
    ]
    return KeyValues("Training step", items)


def _saved(run: RunMemory) -> Table:
    total = run.saved_total or 1
    rows = [[m, nbytes(b), pct(100 * b / total)] for m, b in run.saved]
    return Table(f"Activations alive when backward starts, by module (top {len(rows)})",
                 ["Module", "Bytes", "% of saved"], rows, align=["left", "right", "right"])


def _sweep_report(s: MemorySweep) -> Report:
    first = s.results[0]
    budget = first.budget  # the usable bytes
    train = bool(first.config["train"])
    rows = []
    for r in s.results:
        row: list[Any] = [r.batch if r.batch is not None else "-", r.input]
        for run in (r.inference, r.training) if train else (r.inference,):
            row.append(peak_cell(run) if run is not None else Shown("", "-"))
        if budget is not None:
            misses = [m for m in ("inference", "training") if r.fits(m) is False]
            row.append("no: " + ", ".join(misses) if misses else "yes")
        row.append(r.training.where if r.training is not None else
                   r.inference.where if r.inference is not None else "-")
        rows.append(row)
    columns = ["Batch", "Input", "Inference peak", *(["Training peak"] if train else []),
               *([f"Fits {_memory(s.budget)}"] if s.budget is not None else
                 ["Fits " + fmt_bytes(budget)] if budget is not None else []),
               "Training peak at" if train else "Inference peak at"]
    sections: list[Any] = [Text(_header(first)[1:2]),
                           Table(f"{first.model}: predicted peaks by batch", columns, rows,
                                 primary=True)]
    if s.fit is not None:
        sections += _fit_sections(s.fit, train, s.budget)
    sections.append(Text([f"note: {n}" for n in first.notes], style="yellow"))
    return Report("memory", s.to_dict(), sections)


def _memory(b: MemoryBudget) -> str:
    """The memory given, as read: ``h100``, ``24 GiB``; the measured free memory in bytes."""
    return b.gpu.name if b.gpu is not None else b.size or fmt_bytes(b.total)


def _gib(n: int) -> str:
    return f"{fmt_bytes(n)} ({n / 2**30:,.2f} GiB)"


def budget_items(b: MemoryBudget) -> list[tuple[str, Any]]:
    """How the memory given was read, and what of it a peak may use (and why less)."""
    if b.gpu is not None:
        given = (f"{b.gpu.name} ({b.gpu.label}): {_gib(b.total)} {b.read_as}"
                 + (f"; sold as {b.size}" if b.read_as != "as sold" else ""))
    else:
        given = _memory(b) + (f" ({fmt_bytes(b.total)})" if b.size else "")
        given = f"{given}: {b.read_as}" if b.read_as else given
    context = f"the CUDA context ({fmt_bytes(b.context)}, as PyTorch measured it) and " \
        if b.context else ""
    return [("GPU memory", Shown(b.total, given)),
            ("Usable", Shown(b.usable, f"{_gib(b.usable)}: less {context}the caching "
                             f"allocator's reserve ({b.reserve:.0%}: "
                             f"{fmt_bytes(b.reserve_bytes)})"))]


def _fit_sections(f: FitResult, train: bool, memory: MemoryBudget | None = None) -> list[Any]:
    """The largest batch per mode, the rows at it and one above, and which mode binds."""
    rows = []
    for mode in ("inference", "training") if train else ("inference",):
        for p in f.edge(mode):
            left = f.budget - p.peak
            rows.append([mode, p.batch, nbytes(p.peak) if not p.ranged else
                         Shown(p.peak, fmt_bytes(p.peak) + " (upper end)"),
                         Shown(left, ("" if left >= 0 else "-") + fmt_bytes(abs(left))),
                         "yes" if p.peak <= f.budget else "no", p.where])
    items: list[tuple[str, Any]] = (budget_items(memory) if memory is not None
                                    else [("Budget", nbytes(f.budget))])
    for mode in ("inference", "training") if train else ("inference",):
        value = getattr(f, mode)
        items.append((f"Largest {mode} batch", value if value is not None else "none (batch 1 "
                      "does not fit)"))
    binding = f.binding
    if binding is not None:
        edge = f.edge(binding)
        at = next((p.where for p in edge if p.peak > f.budget), edge[-1].where if edge else "-")
        items.append(("Binding", f"{binding}: the next batch up peaks in {at}"))
    items.append(("Predictions made", len(f.probes)))
    if any(p.ranged for p in f.probes):
        items.append(("Note", "peaks with a range are compared at their upper end"))
    if f.capped:
        items.append(("Note", "the search stopped at its batch limit"))
    return [KeyValues("Largest batch that fits (doubling, then bisection)", items),
            Table("The batch found and the next one up", ["Mode", "Batch", "Peak",
                                                          "Headroom", "Fits", "Peak at"], rows,
                  align=["left", "right", "right", "right", "left", "left"])]


def verification_report(v: Verification) -> Report:
    rows = [[c.mode, c.phase, nbytes(c.predicted), nbytes(c.measured),
             Shown(round(c.error, 6), f"{100 * c.error:+.2f}%"), "ok" if c.ok else "FAIL"]
            for c in v.checks]
    tol = v.checks[0].tolerance if v.checks else 0.0
    return Report("memory-verify", v.to_dict(), [
        Table(f"Predicted vs torch.cuda.max_memory_allocated on {v.device} (tolerance "
              f"{100 * tol:g}%)", ["Mode", "Phase", "Predicted", "Measured", "Error", "Result"],
              rows, align=["left", "left", "right", "right", "right", "left"], primary=True),
        Text(["verification " + ("passed" if v.ok else "FAILED: a peak is beyond the tolerance")]),
    ])
