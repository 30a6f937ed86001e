"""Renderers: one Report, several formats, chosen through a registry.

``render(report, fmt, stream)`` looks ``fmt`` up in ``RENDERERS``; a new format is one
``@renderer("name")`` function plus its ``OutputFormat`` member. No torch here.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
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
            out.extend(f"{markdown_text(line)}  " for line in s.footer)
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
# trailing spaces (and the colour codes after them) at the end of a rendered line
_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


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
    """Rich tables, key/value blocks and notes; no line ends in spaces."""
    buf = io.StringIO()
    _render_rich(report, buf, width, terminal=_is_terminal(stream), wrap=_wrap_width(stream, width))
    stream.write(_TRAILING.sub(r"\1", buf.getvalue()))


def _render_rich(report: Report, buf: TextIO, width: int | None, *, terminal: bool,
                 wrap: int) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

    def plain(v: str, style: str = "") -> RichText:
        # names and paths are shown as they are: "[bold]" or "[/x]" in a ModuleDict key or a
        # folder name is text, never rich markup
        return RichText(printable(v), style=style)

    # Tables render at their natural width (like torchinfo): a layer table that wraps
    # inside its cells is unreadable. An explicit width (COLUMNS) is honoured; tables of
    # sentences (Table.wrap) fold their text columns to the terminal, or WRAP_WIDTH.
    # Rendered into a buffer (colours kept on a terminal), then written without trailing spaces.
    console = Console(file=buf, width=1000, highlight=False, soft_wrap=False,
                      force_terminal=terminal or None)
    first = True
    for s in text_sections(report.sections):
        if not first:
            console.print()
        first = False
        if isinstance(s, Table):
            _print_table(console, s, width, wrap, plain, styled=terminal)
        elif isinstance(s, KeyValues):
            if s.title:
                console.print(plain(s.title, "bold"))
            # values next to their keys (left-aligned): a right-aligned column pushes every
            # value out to the longest one, which wraps alone in a narrower terminal
            t = RichTable(box=None, show_header=False, pad_edge=False)
            t.add_column(justify="left", no_wrap=True)
            t.add_column(justify="left", overflow="fold")
            for k, v in s.items:
                t.add_row(plain(str(k)), plain(cell_text(v)))
            console.print(t, width=width)
        else:
            if s.title:
                console.print(plain(s.title, "bold"))
            for line in s.lines:  # code is never cut: a copied line must stay one line
                console.print(plain(line, s.style or ""), soft_wrap=s.code, width=width)


# a text column folds to no fewer characters than this (or its longest cell, if shorter)
FOLD_MIN = 12
# the space between two columns: 3 when it fits, 2 or 1 before a column is left out or folded
GAPS = (3, 2, 1)


@dataclass(frozen=True)
class _Fit:
    keep: list[int]  # the columns shown
    left_out: list[str]  # the optional columns left out to fit
    width: int | None  # the width to print at (None: natural)
    gap: int  # spaces between columns


def _fitted(s: Table, width: int | None) -> _Fit:
    """The columns to show at ``width`` and how. In this order, until the table fits: the
    space between columns narrows from 3 to 2; ``optional`` columns are left out (in their
    order; a wider gap is kept when it leaves out no more); the gap narrows to 1 when that
    makes the table fit whole; text columns fold down to FOLD_MIN (numbers and ``nofold``
    columns never fold). A table that still doesn't fit is printed wider than ``width``
    rather than folded into pieces."""
    every = list(range(len(s.columns)))
    if width is None:
        return _Fit(every, [], None, GAPS[0])
    texts = [[cell_text(v) for v in row] for row in s.rows]
    aligns = column_aligns(s)

    def natural(i: int) -> int:
        return max([len(s.columns[i])] + [len(line) for r in texts if i < len(r)
                                          for line in (r[i].splitlines() or [""])])

    def least(i: int) -> int:
        folds = aligns[i] != "right" and s.columns[i] not in s.nofold
        return min(natural(i), FOLD_MIN) if folds else natural(i)

    def need(keep: list[int], gap: int, fold: bool = False) -> int:
        return sum(least(i) if fold else natural(i) for i in keep) + gap * (len(keep) - 1)

    def leave_out(gap: int) -> tuple[list[int], list[str]]:
        keep, left = list(every), []
        for name in s.optional:
            if need(keep, gap) <= width:
                break
            if name in s.columns and s.columns.index(name) in keep:
                keep.remove(s.columns.index(name))
                left.append(name)
        return keep, left

    wide, narrow = leave_out(GAPS[0]), leave_out(GAPS[1])
    wide_fits = need(wide[0], GAPS[0]) <= width and len(wide[1]) <= len(narrow[1])
    gap, (keep, left) = (GAPS[0], wide) if wide_fits else (GAPS[1], narrow)
    if need(keep, gap) > width >= need(keep, GAPS[2]):  # closing up saves folding a column
        gap = GAPS[2]
    fold = need(keep, gap) > width
    if need(keep, gap, fold=fold) > width >= need(keep, GAPS[2], fold=fold):
        gap = GAPS[2]  # folded, it fits only with the narrowest gap
    return _Fit(keep, left, max(width, need(keep, gap, fold=fold)), gap)


def _unstyled_lines(s: Table, fit: _Fit, aligns: list[str]) -> list[str] | None:
    """The lines rich prints for a table with no colours, where no cell folds and the title
    fits on one line, made directly (rich takes ~0.3 s for a 70B model's 400 rows; tests
    compare the two); None where rich is needed."""
    from rich.cells import cell_len

    if s.wrap:
        return None
    cells = [[printable(cell_text(row[i])) if i < len(row) else "" for i in fit.keep]
             for row in s.rows]
    heads = [printable(s.columns[i]) for i in fit.keep]
    widths = [max([cell_len(h)] + [cell_len(r[j]) for r in cells]) for j, h in enumerate(heads)]
    # _print_table's padding: left 1 at gap 3, right 1 at gaps 3 and 2; none at the edges
    last = len(widths) - 1
    pads = [(int(fit.gap == 3 and j > 0), int(fit.gap > 1 and j < last)) for j in range(last + 1)]
    total = sum(widths) + sum(a + b for a, b in pads) + len(widths) - 1
    title = printable(s.title) if s.title else ""
    if total > (fit.width or 1000) or cell_len(title) > total:
        return None

    def line(texts: list[str]) -> str:
        parts = []
        for j, text in enumerate(texts):
            gap = " " * (widths[j] - cell_len(text))
            body = gap + text if aligns[fit.keep[j]] == "right" else text + gap
            parts.append(" " * pads[j][0] + body + " " * pads[j][1])
        return " ".join(parts)

    return ([title] if title else []) + [line(heads), "─" * total] + [line(r) for r in cells]


def _print_table(console: Any, s: Table, width: int | None, wrap: int,
                 plain: Callable[..., Any], *, styled: bool = True) -> None:
    from rich import box
    from rich.table import Table as RichTable

    fit = _Fit(list(range(len(s.columns))), [], None, GAPS[0]) if s.wrap else _fitted(s, width)
    aligns = column_aligns(s)
    lines = None if styled else _unstyled_lines(s, fit, aligns)
    if lines is not None:
        console.file.write("\n".join(lines) + "\n")
        _print_footer(console, s, width, fit, plain)
        return
    # SIMPLE_HEAD puts one space between columns; the padding makes the rest of the gap
    padding: tuple[int, int] | tuple[int, int, int, int] = (
        (0, 1) if fit.gap == 3 else (0, 1, 0, 0) if fit.gap == 2 else (0, 0))
    t = RichTable(title=plain(s.title, "bold") if s.title else None, box=box.SIMPLE_HEAD,
                  title_justify="left", show_edge=False, pad_edge=False, padding=padding)
    for i in fit.keep:
        c, a = s.columns[i], aligns[i]
        # numbers and shapes never wrap ("147,96" over "8"); text columns fold to a set width
        folds = c in s.wrap or (width is not None and a != "right" and not s.wrap
                                and c not in s.nofold)
        t.add_column(plain(c), justify="right" if a == "right" else "left", overflow="fold",
                     no_wrap=not folds)
    for row in s.rows:
        t.add_row(*[plain(cell_text(row[i])) if i < len(row) else "" for i in fit.keep])
    console.print(t, width=wrap if s.wrap else fit.width)
    _print_footer(console, s, width, fit, plain)


def _print_footer(console: Any, s: Table, width: int | None, fit: _Fit,
                  plain: Callable[..., Any]) -> None:
    footer = list(s.footer)
    if fit.left_out:
        footer.append(f"Left out to fit {width} columns: {', '.join(fit.left_out)}.")
        footer.append(s.fit_hint(fit.left_out) if s.fit_hint else
                      "A wider terminal, a pipe or --format csv shows them.")
    for line in footer:
        console.print(plain(line), width=width)


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
