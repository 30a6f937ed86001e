"""One cell of a table as every renderer shows it: the text (``Shown`` keeps its own, ints get
thousands separators, floats four significant digits), the number a column sorts by, and
which columns are numbers (right-aligned). ``render.py`` and ``page.py`` both use these, so
neither imports the other."""

from __future__ import annotations

from typing import Any

from torchinspect.report.base import Shown, Table


def cell_text(v: Any) -> str:
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


def cell_value(v: Any) -> float | None:
    """The number a column sorts by (None: sorts by text)."""
    raw = v.value if isinstance(v, Shown) else v
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw)


def is_number(v: Any) -> bool:
    if isinstance(v, Shown):
        v = v.value
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def column_aligns(t: Table) -> list[str]:
    """The table's own ``align``, else "right" for a column of numbers and "left" otherwise."""
    if t.align:
        return t.align
    out = []
    for i in range(len(t.columns)):
        col = [r[i] for r in t.rows if i < len(r) and r[i] is not None]
        out.append("right" if col and all(is_number(v) for v in col) else "left")
    return out
