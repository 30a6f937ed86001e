"""Report building blocks: a Report is JSON-ready ``data`` plus display ``sections``.

Command report modules (``report/summary.py``, ``report/diff.py``, ...) turn a core result
into a :class:`Report`; ``report/render.py`` writes it in the chosen format. No torch here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any


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
    """``data`` is the JSON document (under ``schema``); ``sections`` are for people."""

    command: str
    data: dict[str, Any]
    sections: list[Section] = field(default_factory=list)
    version: int = 1  # bumped when the JSON shape of a command changes

    @property
    def schema(self) -> str:
        return f"torchinspect/{self.command}/v{self.version}"

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
