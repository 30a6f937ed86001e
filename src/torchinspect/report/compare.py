"""Several models in one call: one comparison table, one row per model.

Its JSON is a document of its own, ``torchinspect/<command>-comparison/v1``: ``{"models":
[...]}`` with one entry per model (for summary and flops: ``"totals": {"params", "macs",
"flops"}`` as in their single-model documents).
"""

from __future__ import annotations

from typing import Any

from torchinspect.analysis.conventions import convention_notes
from torchinspect.analysis.flops import FlopsResult
from torchinspect.analysis.params import ParamsResult
from torchinspect.report.base import Report, Table, Text, nbytes, si


def comparison_report(command: str, results: list[Any]) -> Report:
    """``results``: Summary, FlopsResult or ParamsResult objects (one kind)."""
    rows: list[list[Any]] = []
    data: list[dict[str, Any]] = []
    notes: list[str] = []
    head: list[str] = []
    foot: list[str] = []
    if all(isinstance(r, ParamsResult) for r in results):
        cols = ["Model", "Params", "Trainable", "Frozen", "Param memory", "Buffers"]
        for r in results:
            s = r.stats
            rows.append([r.model, s.total, s.trainable, s.frozen, nbytes(s.param_bytes), s.buffers])
            data.append({"model": r.model, "params": s.total, "trainable": s.trainable,
                         "frozen": s.frozen, "param_bytes": s.param_bytes, "buffers": s.buffers})
        head = ["Parameters counted once per tensor (tied weights once)."]
    else:
        cols = ["Model", "Input", "Params", "MACs", "FLOPs", "Device"]
        for r in results:
            if isinstance(r, FlopsResult):
                params, macs, dev = r.params, r.macs, r.device
            else:
                params, macs, dev = r.totals.params, r.totals.macs, r.device
            rows.append([r.model, r.input, params, si(macs), si(2 * macs), dev])
            data.append({"model": r.model, "input": r.input,
                         "totals": {"params": params, "macs": macs, "flops": 2 * macs},
                         "device": dev, "fallback_reason": r.fallback_reason})
            if r.fallback_reason:
                notes.append(f"{r.model}: traced on {dev}: {r.fallback_reason}")
        foot = convention_notes()  # notes below the table, short lines
    sections: list[Any] = [*([Text(head)] if head else []), Table(None, cols, rows, primary=True)]
    if foot:
        sections.append(Text(foot))
    if notes:
        sections.append(Text([f"note: {n}" for n in notes], style="yellow"))
    return Report(f"{command}-comparison", {"models": data}, sections)
