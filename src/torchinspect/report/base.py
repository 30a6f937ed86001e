"""Report building blocks: a Report is JSON-ready ``data`` plus display ``sections``.

Command report modules (``report/summary.py``, ``report/diff.py``, ...) turn a core result
into a :class:`Report`; ``report/render.py`` writes it in the chosen format. No torch here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchinspect.escape import utf8_safe


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
    depths: list[int] | None = None  # a tree table: each row's depth (html collapses by it)
    # a table of sentences: these columns fold so the table fits the terminal (or 100 columns)
    wrap: list[str] = field(default_factory=list)
    # columns the table renderer leaves out (in this order) when the terminal's width (or
    # COLUMNS) can't hold the whole table; a footer names them, and ``fit_hint`` (given the
    # names left out) says how to get them back
    optional: list[str] = field(default_factory=list)
    fit_hint: Callable[[list[str]], str] | None = None
    # text columns that never fold (shapes): the table leaves out columns or is printed wider
    nofold: list[str] = field(default_factory=list)
    # footer lines about one column, shown only where that column is (a terminal may leave
    # it out): {"Self MACs": "Self: the module's own."}
    column_notes: dict[str, str] = field(default_factory=dict)
    # columns of code to copy (a fix, a file:line): never folded; where keeping them would
    # squeeze the text beside them, each goes on a line of its own under its row (in a
    # terminal, or at WRAP_WIDTH for a table of sentences), as linters print a fix
    code: list[str] = field(default_factory=list)
    # rows a reader can skip (unchanged against a baseline): Markdown (a pull-request comment)
    # folds them into a collapsed <details> block under the table; other formats show them
    quiet: list[bool] | None = None
    quiet_label: str = "unchanged"


    def footer_for(self, shown: list[str]) -> list[str]:
        """The footer under the table when ``shown`` are its columns: its first line, the
        column notes of the columns shown (each note once), then its other lines."""
        notes = [self.column_notes[c] for c in shown if c in self.column_notes]
        return [*self.footer[:1], *dict.fromkeys(notes), *self.footer[1:]]


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
    code: bool = False  # lines of Python to copy: never wrapped, a code block in Markdown/HTML


@dataclass
class Chart:
    """A chart: inline SVG in html, a small table in the other formats.

    ``kind="bar"``: horizontal bars, one group per label, one bar per series (several series
    overlay models on the same categories). ``kind="line"``: ``labels`` are x values (numbers),
    one line per series. ``unit`` picks the value format: "" counts (1.81G), "B" bytes,
    "s" seconds, "/s" rates.
    """

    title: str | None
    labels: list[str]
    series: list[tuple[str, list[float | None]]]
    kind: str = "bar"
    unit: str = ""
    x_title: str = ""
    y_title: str = ""


@dataclass
class Figure:
    """A picture given as trusted SVG (e.g. from Graphviz); ``note`` says why when ``svg`` is None."""

    title: str | None
    svg: str | None
    note: str | None = None


Section = Table | KeyValues | Text | Chart | Figure


@dataclass
class Report:
    """``data`` is the JSON document (under ``schema``); ``sections`` are for people."""

    command: str
    data: dict[str, Any]
    sections: list[Section] = field(default_factory=list)
    version: int = 1  # bumped when the JSON shape of a command changes
    title: str | None = None  # a heading for documents that stand alone (Markdown)

    @property
    def schema(self) -> str:
        return f"torchinspect/{self.command}/v{self.version}"

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON: a NaN or infinity (a diff of NaN weights, a NaN output) is null, as
        JSON has no such numbers and parsers other than Python's reject them."""
        doc = json.loads(json.dumps({"schema": self.schema, **self.data}, default=_json_default))
        return json.dumps(_finite(doc), indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    """NaN and infinities as null; strings (keys too) valid UTF-8 (escape.utf8_safe: a lone
    surrogate from a pickle or a file name becomes ``\\udcXX`` text, which strict JSON
    parsers accept)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, str):
        return utf8_safe(obj)
    if isinstance(obj, dict):
        return {utf8_safe(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


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


def fmt_value(v: float | None, unit: str = "") -> str:
    """A chart value in ``unit``: counts as 1.81G, bytes as 46.76 MB, seconds as 12.3 ms."""
    if v is None:
        return "-"
    if unit == "B":
        return fmt_bytes(v)
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(v) >= scale or name == "µs":
                return f"{v / scale:.3g} {name}"
    if unit == "/s":
        return f"{fmt_si(v)}/s" if abs(v) >= 1000 else f"{v:.3g}/s"
    return fmt_si(v)


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
