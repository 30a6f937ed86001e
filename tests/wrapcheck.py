"""What a reader must find whole in a report shown as text: every word (the text between two
spaces) that fits the narrowest column a table may have (FOLD_MIN) stays on one line, and so
does every code line that fits the width (``Table.code`` cells, ``Text.code`` lines). Used by
the pty goldens and the docs walk (issue 42)."""

from __future__ import annotations

from torchinspect.escape import printable
from torchinspect.report.base import Chart, Figure, KeyValues, Report, Table, Text
from torchinspect.report.cells import cell_text
from torchinspect.report.render import WRAP_WIDTH, text_sections
from torchinspect.report.table_text import FOLD_MIN, fit_columns


def texts_of(report: Report, width: int | None) -> tuple[list[str], list[str]]:
    """(every text the report shows at ``width``, its code texts): a column a narrow
    terminal leaves out is not shown."""
    texts: list[str] = []
    code: list[str] = []
    for s in text_sections([x for x in report.sections if not isinstance(x, (Chart, Figure))]):
        if isinstance(s, Table):
            cells = [[printable(cell_text(v)) for v in row] for row in s.rows]
            fit = fit_columns(s, cells, width or (WRAP_WIDTH if s.wrap else None))
            shown = {s.columns[i] for i in [*fit.keep, *fit.below]}
            texts += [*(c for c in s.columns if c in shown), *s.footer_for(list(shown)),
                      *(s.title and [s.title] or [])]
            for row in s.rows:
                for col, v in zip(s.columns, row, strict=False):
                    if col in shown:
                        (code if col in s.code else texts).append(cell_text(v))
        elif isinstance(s, KeyValues):
            texts += [str(k) for k, _ in s.items] + [cell_text(v) for _, v in s.items]
        elif isinstance(s, Text):
            (code if s.code else texts).extend(s.lines)
    return [printable(t) for t in texts], [printable(t) for t in code]


def broken_words(report: Report, shown: str, width: int | None) -> list[str]:
    """The words and code of ``report`` that ``shown`` (its text at ``width``) splits."""
    lines = shown.splitlines()
    text, code = texts_of(report, width)
    words = {w for t in text for w in t.split(" ") if 0 < len(w) <= FOLD_MIN}
    missing = sorted(w for w in words if not any(w in line for line in lines))
    fits = [c for c in code if len(c) <= (width or WRAP_WIDTH) - 16]
    missing += [c for c in fits if not any(c in line for line in lines)]
    return missing
