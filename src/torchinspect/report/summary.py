"""`inspect summary` -> Report: the layer table, totals, not-counted ops and notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.analysis.conventions import COUNTED_CONVENTION, MACS_CONVENTION
from torchinspect.report.base import (
    KeyValues,
    Report,
    Shown,
    Table,
    Text,
    fmt_bytes,
    fmt_si,
    pct,
    si,
)

if TYPE_CHECKING:
    from torchinspect.analysis.summary import Column, Summary, SummaryRow, Totals


def summary_cell(row: SummaryRow, col: Column) -> Any:
    """The display value of one cell (numbers stay numbers for CSV)."""
    name = col.value
    if name == "layer":  # the tree for people, the full dotted name for CSV
        return Shown(row.name or row.label, row.label)
    if name == "macs":
        return si(row.macs, empty="--")
    if name == "params_pct":
        if row.params_pct is None or (row.container and not row.params):
            return None
        return pct(row.params_pct)
    if name == "params":
        if row.params is None or (row.container and not row.params):
            return Shown("", "--")
        return row.params
    return getattr(row, name)


HEADERS = {
    "layer": "Layer", "type": "Type", "input": "Input shape", "output": "Output shape",
    "kernel": "Kernel", "params": "Params", "params_pct": "% params", "macs": "MACs",
    "trainable": "Trainable",
}
_NUMERIC = ("params", "params_pct", "macs")


def summary_report(s: Summary, *, totals_only: bool = False) -> Report:
    sections: list[Any] = [Text(header_lines(s.model, s.input, s.device, s.fallback_reason, s.train))]
    if not totals_only:
        cols = list(s.columns)
        rows = [[summary_cell(r, c) for c in cols] for r in s.rows]
        align = ["right" if c.value in _NUMERIC else "left" for c in cols]
        footer = []
        if s.folded and any(r.repeat > 1 for r in s.rows):
            footer.append("(×N): N identical consecutive blocks folded into one row; "
                          "rows under it show one block.")
        sections.append(Table(None, [HEADERS[c.value] for c in cols], rows, align=align,
                              footer=footer, primary=True, depths=[r.depth for r in s.rows]))
    sections.append(totals_section(s.totals))
    sections.extend(trailer_sections(s.not_counted, s.notes))
    return Report("summary", s.to_dict(), sections)


def header_lines(model: str, inputs: str, device: str, fallback: str | None, train: bool) -> list[str]:
    lines = [f"{model}  input {inputs}  ({'train' if train else 'eval'} mode, traced on {device})",
             MACS_CONVENTION, COUNTED_CONVENTION]
    if fallback:
        lines.append(f"note: traced on {device} instead of meta: {fallback}")
    return lines


def totals_section(t: Totals) -> KeyValues:
    # Shown: the text for people, the raw number for CSV
    items: list[tuple[str, Any]] = [
        ("Total params", Shown(t.params, f"{t.params:,}")),
        ("Trainable params", Shown(t.trainable, f"{t.trainable:,}")),
        ("Non-trainable params", Shown(t.frozen, f"{t.frozen:,}")),
        ("Buffers (elements)", Shown(t.buffers, f"{t.buffers:,}")),
        ("MACs", Shown(t.macs, f"{fmt_si(t.macs)} ({t.macs:,})")),
        ("FLOPs (2 x MACs)", Shown(t.flops, f"{fmt_si(t.flops)} ({t.flops:,})")),
    ]
    for dt, b in t.param_bytes_by_dtype.items():
        items.append((f"Param memory ({dt})", Shown(b, fmt_bytes(b))))
    items += [
        ("Buffer memory", Shown(t.buffer_bytes, fmt_bytes(t.buffer_bytes))),
        ("Input size", Shown(t.input_bytes, fmt_bytes(t.input_bytes))),
        ("Activation memory (forward, est.)", Shown(t.activation_bytes, fmt_bytes(t.activation_bytes))),
        ("Estimated total size", Shown(t.total_bytes, fmt_bytes(t.total_bytes))),
    ]
    return KeyValues("Totals", items)


def trailer_sections(not_counted: dict[str, int], notes: list[str]) -> list[Any]:
    out: list[Any] = []
    if not_counted:
        shown = ", ".join(f"{op} ×{n}" for op, n in list(not_counted.items())[:12])
        more = f", … ({len(not_counted) - 12} more)" if len(not_counted) > 12 else ""
        out.append(Text([f"not counted (no MAC formula): {shown}{more}"]))
    if notes:
        out.append(Text([f"note: {n}" for n in notes], style="yellow"))
    return out
