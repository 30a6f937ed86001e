"""Renderers: one Report, several formats, chosen through a registry.

``render(report, fmt, stream)`` looks ``fmt`` up in ``RENDERERS``; a new format is one
``@renderer("name")`` function plus its ``OutputFormat`` member. No torch here.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TextIO

from torchinspect.escape import markdown_cell, markdown_text, printable, utf8_safe
from torchinspect.report.base import (
    Chart,
    Figure,
    KeyValues,
    Report,
    Section,
    Shown,
    Table,
    Text,
    fmt_value,
)
from torchinspect.report.cells import cell_text, column_aligns
from torchinspect.report.page import render_html
from torchinspect.report.table_text import Line, key_value_lines, table_lines
from torchinspect.report.wrap import wrap as wrap_text


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"
    html = "html"


Renderer = Callable[[Report, TextIO, "int | None"], None]
RENDERERS: dict[str, Renderer] = {}


def renderer(name: str) -> Callable[[Renderer], Renderer]:
    """Register a renderer for ``--format name``."""

    def register(fn: Renderer) -> Renderer:
        RENDERERS[name] = fn
        return fn

    return register


def render(report: Report, fmt: OutputFormat | str, stream: TextIO, width: int | None = None) -> None:
    """Write ``report`` to ``stream`` in ``fmt`` (``width``: terminal columns for tables)."""
    fn = RENDERERS.get(str(OutputFormat(fmt).value))
    if fn is None:  # pragma: no cover - every OutputFormat member has a renderer
        raise KeyError(f"no renderer for {fmt}")
    fn(report, stream, width)


def render_csv(report: Report) -> str:
    """The primary table (or the first) as CSV with raw (unformatted) values."""
    tables = [s for s in report.sections if isinstance(s, Table)]
    primary = next((t for t in tables if t.primary), tables[0] if tables else None)
    buf = io.StringIO()
    w = _CsvRows(buf)
    if primary is None:
        kv = [s for s in report.sections if isinstance(s, KeyValues)]
        w.writerow(["key", "value"])
        for s in kv:
            for k, v in s.items:
                w.writerow([k, v.value if isinstance(v, Shown) else v])
        return utf8_safe(buf.getvalue())
    w.writerow(primary.columns)
    for row in primary.rows:
        w.writerow(["" if v is None else v.value if isinstance(v, Shown) else v for v in row])
    return utf8_safe(buf.getvalue())  # names kept exact, a file valid UTF-8 (escape.py)


class _CsvRows:
    """csv.writer with "\n" line ends, which quotes a cell holding "\r" too (the module
    quotes only the characters of its line terminator: a bare CR would split the row for
    every reader)."""

    def __init__(self, buf: io.StringIO) -> None:
        self._minimal = csv.writer(buf, lineterminator="\n")
        self._all = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def writerow(self, row: list[Any]) -> None:
        cr = any(isinstance(c, str) and "\r" in c for c in row)
        (self._all if cr else self._minimal).writerow(row)


def chart_table(c: Chart) -> Table:
    """A chart's numbers as a table (for the text formats)."""
    head = c.x_title or ("Batch" if c.kind == "line" else "")
    cols = [head or "", *(name for name, _ in c.series)]
    rows = [[label, *(Shown(vals[i] if vals[i] is not None else "", fmt_value(vals[i], c.unit))
                      for _, vals in c.series)] for i, label in enumerate(c.labels)]
    return Table(c.title, cols, rows, align=["left", *(["right"] * len(c.series))])


def text_sections(sections: list[Section]) -> list[Table | KeyValues | Text]:
    """Charts as tables and figures as a line, for the formats that draw no pictures."""
    out: list[Table | KeyValues | Text] = []
    for s in sections:
        if isinstance(s, Chart):
            out.append(chart_table(s))
        elif isinstance(s, Figure):
            out.append(Text([s.note or "(a picture: see --format html)"], title=s.title))
        else:
            out.append(s)
    return out


def _md_rows(s: Table, rows: list[list[Any]]) -> list[str]:
    aligns = column_aligns(s)
    return ["| " + " | ".join(markdown_cell(c) for c in s.columns) + " |",
            "|" + "|".join("---:" if a == "right" else ":---" for a in aligns) + "|",
            *("| " + " | ".join(markdown_cell(cell_text(v)) for v in row) + " |" for row in rows)]


def render_markdown(report: Report) -> str:
    out: list[str] = [f"## {markdown_text(report.title)}", ""] if report.title else []
    for s in text_sections(report.sections):
        if s.title:
            out.append(f"### {markdown_text(s.title)}\n")
        if isinstance(s, Table):
            quiet = s.quiet or [False] * len(s.rows)
            loud = [r for r, q in zip(s.rows, quiet, strict=True) if not q]
            folded = [r for r, q in zip(s.rows, quiet, strict=True) if q]
            if loud or not folded:
                out.extend(_md_rows(s, loud))
            else:
                out.append(f"All {len(folded)} rows {markdown_text(s.quiet_label)}.")
            if folded:  # a collapsed block: a pull-request comment shows what changed first
                out += ["", f"<details><summary>{len(folded)} {markdown_text(s.quiet_label)} "
                        f"row(s)</summary>", "", *_md_rows(s, folded), "", "</details>"]
            out.append("")
            out.extend(f"{markdown_text(line)}  " for line in s.footer_for(s.columns))
        elif isinstance(s, KeyValues):
            out.append("| | |")
            out.append("|:---|:---|")
            for k, v in s.items:
                out.append(f"| {markdown_cell(str(k))} | {markdown_cell(cell_text(v))} |")
        elif s.code:  # a fence longer than any run of backticks inside (a path may hold some)
            fence = "`" * max(3, 1 + max((len(r) for ln in s.lines for r in re.findall("`+", ln)),
                                         default=0))
            out.extend([f"{fence}python", *(printable(ln) for ln in s.lines), fence])
        else:  # one line each (a Markdown viewer joins plain consecutive lines)
            out.extend(f"{markdown_text(line)}  " for line in s.lines)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# the width a table of sentences (``Table.wrap`` names its columns) folds to when neither a
# terminal nor COLUMNS gives one: a CI log stays readable instead of 330 characters wide
WRAP_WIDTH = 100


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _wrap_width(stream: TextIO, width: int | None) -> int:
    """Where ``Table.wrap`` tables fold: COLUMNS, else the terminal's width, else WRAP_WIDTH."""
    if width:
        return width
    if _is_terminal(stream):
        import shutil

        return shutil.get_terminal_size((WRAP_WIDTH, 24)).columns
    return WRAP_WIDTH


def render_table(report: Report, stream: TextIO, width: int | None = None) -> None:
    """Tables, key/value blocks and notes as text, laid out by ``report/table_text.py`` (one
    folding rule, ``report/wrap.py``); colours only on a terminal; no line ends in spaces."""
    lines = _text_lines(report, width, wrap=_wrap_width(stream, width))
    if not _is_terminal(stream):
        stream.write("".join(line.text + "\n" for line in lines))
        return
    from rich.console import Console
    from rich.text import Text as RichText

    console = Console(file=stream, width=1000, highlight=False, soft_wrap=True,
                      force_terminal=True)
    for line in lines:
        console.print(RichText(line.text, style=line.style))


def _text_lines(report: Report, width: int | None, *, wrap: int) -> list[Line]:
    """Every line of the report, in order. Tables render at their natural width (like
    torchinfo: a layer table that wraps inside its cells is unreadable) unless ``width`` (the
    terminal's, or COLUMNS) asks to fit it; tables of sentences (Table.wrap) fit the
    terminal, or WRAP_WIDTH without one. Names and paths are shown as they are, escaped by
    :func:`printable`."""
    out: list[Line] = []
    for s in text_sections(report.sections):
        if out:
            out.append(Line(""))
        if isinstance(s, Table):
            out += table_lines(s, wrap if s.wrap else width, width, printable)
            continue
        if s.title:
            out += [Line(t, "bold") for t in wrap_text(printable(s.title), width)]
        if isinstance(s, KeyValues):
            out += key_value_lines(s, width, lambda v: printable(str(v)))
        else:  # code is never cut: a copied line must stay one line
            out += [Line(t, s.style or "") for line in s.lines
                    for t in ([printable(line)] if s.code else wrap_text(printable(line), width))]
    return out


@renderer("json")
def _json(report: Report, stream: TextIO, width: int | None) -> None:
    stream.write(report.to_json() + "\n")


@renderer("csv")
def _csv(report: Report, stream: TextIO, width: int | None) -> None:
    stream.write(render_csv(report))


@renderer("markdown")
def _markdown(report: Report, stream: TextIO, width: int | None) -> None:
    stream.write(render_markdown(report))


@renderer("html")
def _html(report: Report, stream: TextIO, width: int | None) -> None:

    stream.write(render_html(report))


renderer("table")(render_table)
