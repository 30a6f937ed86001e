"""Renderers: one Report, four formats (table, json, csv, markdown).

A command builds a :class:`Report` — a JSON-ready ``data`` dict plus display ``sections`` —
and hands it to :func:`render` with the output stream. Nothing here imports torch.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@dataclass(frozen=True)
class Shown:
    """A table cell whose display text differs from its value (``1.81G`` for 1814073344).

    Table and markdown output show ``text``; CSV writes ``value`` so spreadsheets get numbers.
    """

    value: Any
    text: str

    def __str__(self) -> str:
        return self.text


def si(n: int | float | None, empty: str = "-") -> Shown:
    """A count shown as 1.81G (CSV: the exact number); ``empty`` is shown for 0/None."""
    return Shown(n if n is not None else "", fmt_si(n) if n else empty)


def nbytes(n: int | None) -> Shown:
    return Shown(n if n is not None else "", fmt_bytes(n))


def pct(x: float | None, signed: bool = False) -> Shown:
    if x is None:
        return Shown("", "-")
    return Shown(round(x, 6), f"{x:+.2f}%" if signed else f"{x:.2f}%")


@dataclass
class Table:
    """A titled table. ``align`` holds 'left'/'right' per column (default: numbers right)."""

    title: str | None
    columns: list[str]
    rows: list[list[Any]]
    align: list[str] | None = None
    footer: list[str] = field(default_factory=list)
    primary: bool = False  # the table written by --format csv


@dataclass
class KeyValues:
    """A titled list of label/value pairs (totals, versions)."""

    title: str | None
    items: list[tuple[str, Any]]


@dataclass
class Text:
    """A paragraph of notes, one line each."""

    lines: list[str]
    title: str | None = None
    style: str = ""  # rich style for table output, e.g. "yellow"


Section = Table | KeyValues | Text


@dataclass
class Report:
    command: str
    data: dict[str, Any]
    sections: list[Section] = field(default_factory=list)

    @property
    def schema(self) -> str:
        return f"torchinspect/{self.command}/v1"

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps({"schema": self.schema, **self.data}, indent=indent, default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def fmt_si(n: int | float | None, unit: str = "") -> str:
    """1.82G-style numbers (powers of 1000), e.g. for MACs."""
    if n is None:
        return "-"
    if n == 0:
        return f"0{unit}"
    exp = min(int(math.log10(abs(n)) // 3), 5)
    if exp <= 0:
        return f"{n:g}{unit}"
    return f"{n / 1000**exp:.2f}{'KMGTP'[exp - 1]}{unit}"


def _cell(v: Any) -> str:
    if isinstance(v, Shown):
        return v.text
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v)


def _is_num(v: Any) -> bool:
    if isinstance(v, Shown):
        v = v.value
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _aligns(t: Table) -> list[str]:
    if t.align:
        return t.align
    out = []
    for i in range(len(t.columns)):
        col = [r[i] for r in t.rows if i < len(r) and r[i] is not None]
        out.append("right" if col and all(_is_num(v) for v in col) else "left")
    return out


def render(report: Report, fmt: OutputFormat | str, stream: TextIO, width: int | None = None) -> None:
    """Write ``report`` to ``stream`` in ``fmt``."""
    fmt = OutputFormat(fmt)
    if fmt is OutputFormat.json:
        stream.write(report.to_json() + "\n")
    elif fmt is OutputFormat.csv:
        stream.write(render_csv(report))
    elif fmt is OutputFormat.markdown:
        stream.write(render_markdown(report))
    else:
        render_table(report, stream, width)


def render_csv(report: Report) -> str:
    """The primary table (or the first) as CSV with raw (unformatted) values."""
    tables = [s for s in report.sections if isinstance(s, Table)]
    primary = next((t for t in tables if t.primary), tables[0] if tables else None)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if primary is None:
        kv = [s for s in report.sections if isinstance(s, KeyValues)]
        w.writerow(["key", "value"])
        for s in kv:
            for k, v in s.items:
                w.writerow([k, v])
        return buf.getvalue()
    w.writerow(primary.columns)
    for row in primary.rows:
        w.writerow(["" if v is None else v.value if isinstance(v, Shown) else v for v in row])
    return buf.getvalue()


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def render_markdown(report: Report) -> str:
    out: list[str] = []
    for s in report.sections:
        if s.title:
            out.append(f"### {s.title}\n")
        if isinstance(s, Table):
            aligns = _aligns(s)
            out.append("| " + " | ".join(_md_escape(c) for c in s.columns) + " |")
            out.append("|" + "|".join("---:" if a == "right" else ":---" for a in aligns) + "|")
            for row in s.rows:
                out.append("| " + " | ".join(_md_escape(_cell(v)) for v in row) + " |")
            out.append("")
            out.extend(f"{line}  " for line in s.footer)
        elif isinstance(s, KeyValues):
            out.append("| | |")
            out.append("|:---|---:|")
            for k, v in s.items:
                out.append(f"| {_md_escape(str(k))} | {_md_escape(_cell(v))} |")
        else:
            out.extend(s.lines)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def render_table(report: Report, stream: TextIO, width: int | None = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable

    # Tables render at their natural width (like torchinfo): a layer table that wraps
    # inside its cells is unreadable. An explicit width (COLUMNS) is honoured.
    console = Console(file=stream, width=width or 1000, highlight=False, soft_wrap=False)
    first = True
    for s in report.sections:
        if not first:
            console.print()
        first = False
        if isinstance(s, Table):
            t = RichTable(title=s.title, box=box.SIMPLE_HEAD, title_justify="left",
                          title_style="bold", show_edge=False, pad_edge=False)
            for c, a in zip(s.columns, _aligns(s), strict=True):
                t.add_column(c, justify="right" if a == "right" else "left", overflow="fold",
                             no_wrap=width is None)
            for row in s.rows:
                t.add_row(*[_cell(v) for v in row])
            console.print(t)
            for line in s.footer:
                console.print(line, markup=False)
        elif isinstance(s, KeyValues):
            if s.title:
                console.print(f"[bold]{s.title}[/bold]")
            t = RichTable(box=None, show_header=False, pad_edge=False)
            t.add_column(justify="left")
            t.add_column(justify="right")
            for k, v in s.items:
                t.add_row(str(k), _cell(v))
            console.print(t)
        else:
            if s.title:
                console.print(f"[bold]{s.title}[/bold]")
            for line in s.lines:
                console.print(line, markup=False, style=s.style or None)
