"""`inspect flops` -> Report: MACs by module (including children, and self), by op,
not-counted ops, and other tools' counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.analysis.flops import COMPARE_NOTE
from torchinspect.report.base import Report, Table, Text, fmt_si, pct, si
from torchinspect.report.summary import convention_notes, header_lines

if TYPE_CHECKING:
    from torchinspect.analysis.flops import FlopsResult, FlopsRow

# v2: totals under "totals" (as in summary), module rows carry "self_macs".
# v3: "self_macs" is the module's own ops only (no longer plus layers folded below --depth);
# rows carry "calls" and "call_number".
SCHEMA_VERSION = 3


def _call_suffix(m: FlopsRow) -> str:
    """`` (call 2/3)`` on each row of a module run several times (a block reused in a loop)."""
    return f" (call {m.call_number + 1}/{m.calls})" if m.calls > 1 else ""


def flops_report(r: FlopsResult) -> Report:
    head = header_lines(r.model, r.input, r.device, r.fallback_reason, False)
    head.append(f"Total: {fmt_si(r.macs)} MACs ({r.macs:,}) = {fmt_si(r.flops)} FLOPs")
    sections: list[Any] = [Text(head)]
    total = r.macs or 1
    sections.append(Table(
        "MACs by module",
        ["Module", "Type", "MACs", "Self", "% MACs", "Top op"],
        [["  " * m.depth + (m.name or r.model) + _call_suffix(m), m.type, si(m.macs, empty="0"),
          si(m.self_macs, empty="0"), pct(100.0 * m.macs / total),
          max(m.by_op, key=m.by_op.__getitem__) if m.by_op else "-"] for m in r.rows],
        align=["left", "left", "right", "right", "right", "left"], primary=True,
        depths=[m.depth for m in r.rows],
        footer=["MACs include the modules inside; Self: the module's own ops."]))
    sections.append(Table(
        "MACs by op", ["Op", "Calls", "MACs", "% MACs"],
        [[op, r.op_calls.get(op, 0), si(m), pct(100.0 * m / total)] for op, m in r.by_op.items()],
        align=["left", "right", "right", "right"]))
    if r.not_counted:
        sections.append(Table("Not counted", ["Op", "Calls"],
                              [[k, v] for k, v in r.not_counted.items()],
                              footer=["Ops with no MAC formula: their work is not in the MACs."]))
    sections.append(convention_notes())
    if r.compare:
        rows = [["torchinspect", si(r.macs), r.macs, pct(0.0, signed=True), r.params, COMPARE_NOTE]]
        for c in r.compare:
            diff = None if c.macs is None or not r.macs else 100.0 * (c.macs - r.macs) / r.macs
            rows.append([c.tool, si(c.macs), c.macs, pct(diff, signed=True), c.params, c.note])
        sections.append(Table("Other tools, same model and input",
                              ["Tool", "MACs", "MACs (exact)", "vs ours", "Params", "What it counts"],
                              rows, align=["left", "right", "right", "right", "right", "left"]))
    if r.notes:
        sections.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return Report("flops", r.to_dict(), sections, version=SCHEMA_VERSION)
