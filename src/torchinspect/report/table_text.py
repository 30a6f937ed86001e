"""A Table as lines of text at a terminal's width: which columns to show, how wide each is,
and where each cell folds (by the one rule of ``report/wrap.py``). The table renderer draws
what this returns, with colours on a terminal and without them elsewhere, so a table looks
the same either way. No torch here.

How a table meets a width, in this order, until it fits: the space between columns narrows
from 3 to 2; ``optional`` columns are left out (in their order, and a footer names them); a
``code`` column that would squeeze the text beside it goes under its row, on a line of its
own as wide as the terminal (``Fix: ...``, as linters print a fix under the message); the
gap narrows to 1 when that makes the table fit whole; text columns fold (``wrap`` columns,
sentences, first), each down to FOLD_MIN at least. Numbers, ``nofold`` columns (shapes)
and code never fold inside the grid; a table that still doesn't fit is printed wider.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from torchinspect.report.base import KeyValues, Table
from torchinspect.report.cells import cell_text, column_aligns
from torchinspect.report.wrap import cells, longest_piece, wrap

# a text column folds to no fewer characters than this (or its longest cell, if shorter)
FOLD_MIN = 12
# ... or than its longest word, up to this many characters
WORD_MAX = 20
# a code column stays in the grid only while the sentences beside it keep this many columns
COMFORT = 30
# the space between two columns: 3 when it fits, 2 or 1 before a column is left out or folded
GAPS = (3, 2, 1)
# the indent of a code line under its row (at most: the start of the second column)
BELOW_INDENT = 8


@dataclass(frozen=True)
class Line:
    """One line of text and how a terminal shows it ("bold" for titles and headers)."""

    text: str
    style: str = ""


@dataclass(frozen=True)
class Fit:
    keep: list[int]  # the columns shown in the grid
    left_out: list[str]  # the optional columns left out to fit
    below: list[int]  # code columns shown on a line of their own under each row
    widths: dict[int, int]  # the width each kept column may take (folding where less)
    gap: int  # spaces between columns


def fit_columns(s: Table, texts: list[list[str]], width: int | None) -> Fit:
    """The columns to show at ``width`` and how (see the module's docstring)."""
    n = len(s.columns)
    aligns = column_aligns(s)
    natural = [max([cells(s.columns[i])] + [cells(r[i]) for r in texts if i < len(r)])
               for i in range(n)]
    every = list(range(n))
    if width is None:
        return Fit(every, [], [], dict(enumerate(natural)), GAPS[0])
    foldable = {i for i in every if aligns[i] != "right" and s.columns[i] not in s.nofold
                and s.columns[i] not in s.code}

    # a column folds no narrower than its longest name (a word, or the part of a dotted
    # path or file path between two breaks, after the cell's indent; up to WORD_MAX)
    words = [max([_longest_name(r[i]) for r in texts if i < len(r)] + [0]) for i in range(n)]

    def least(i: int, floor: int = FOLD_MIN) -> int:
        return min(natural[i], max(floor, words[i])) if i in foldable else natural[i]

    def need(keep: list[int], gap: int, fold: bool = False, floor: int = FOLD_MIN) -> int:
        return (sum(least(i, floor) if fold else natural[i] for i in keep)
                + gap * (len(keep) - 1))

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
    below = []
    for name in s.code:
        i = s.columns.index(name) if name in s.columns else -1
        if i in keep and need(keep, gap) > width and need(keep, gap, True, COMFORT) > width:
            keep.remove(i)
            below.append(i)
    if need(keep, gap) > width >= need(keep, GAPS[2]):  # closing up saves folding a column
        gap = GAPS[2]
    fold = need(keep, gap) > width
    if need(keep, gap, fold=fold) > width >= need(keep, GAPS[2], fold=fold):
        gap = GAPS[2]  # folded, it fits only with the narrowest gap
    widths = {i: natural[i] for i in keep}
    room = width - gap * (len(keep) - 1)
    # sentences fold first, then every other text column; a shape only as a last resort,
    # between its pieces ({logits: [1, 128, 1000], / cache: ...}), never inside one
    shapes = [i for i in keep if s.columns[i] in s.nofold and aligns[i] != "right"]
    for group, floor in (([i for i in keep if i in foldable and s.columns[i] in s.wrap], least),
                         ([i for i in keep if i in foldable], least),
                         (shapes, lambda i: max([longest_piece(r[i]) for r in texts
                                                 if i < len(r)] + [cells(s.columns[i])]))):
        over = sum(widths.values()) - room
        if over > 0 and group:
            _level(widths, group, {i: min(widths[i], floor(i)) for i in group}, over)
    return Fit(keep, left, sorted(below), widths, gap)


_PIECES = re.compile(r"[^ ./,]+[./,]?")


def _longest_name(text: str) -> int:
    """The widest piece ``text`` can't be broken inside (up to WORD_MAX), after its indent
    (a tree's too), where a folded line of it starts."""
    body = text.lstrip(" │├└─┬")
    indent = cells(text) - cells(body)
    return indent + min(WORD_MAX, max((cells(p) for p in _PIECES.findall(body)), default=0))


def _level(widths: dict[int, int], group: list[int], floor: dict[int, int], over: int) -> None:
    """Take ``over`` columns from the widest of ``group``, levelling them down (never below
    ``floor``), as far as they can give."""
    budget = sum(widths[i] for i in group) - over

    def total(level: int) -> int:
        return sum(max(floor[i], min(widths[i], level)) for i in group)

    level = max(widths[i] for i in group)
    while level > 0 and total(level) > budget:
        level -= 1
    spare = budget - total(level)
    for i in group:
        new = max(floor[i], min(widths[i], level))
        if spare > 0 and widths[i] > level >= floor[i]:
            new += 1
            spare -= 1
        widths[i] = new


def table_lines(s: Table, width: int | None, terminal: int | None,
                shown: Callable[[str], str]) -> list[Line]:
    """The lines that show table ``s`` fitted to ``width`` (None: natural width, every
    column), then its footer; ``shown`` turns a text into what may be printed (escapes);
    the title, code lines and footer fold at ``terminal`` (the terminal's width, None when
    there is none)."""
    texts = [[shown(cell_text(v)) for v in row] for row in s.rows]
    heads = [shown(c) for c in s.columns]
    fit = fit_columns(s, texts, width)
    aligns = column_aligns(s)
    grid = [[wrap(r[i] if i < len(r) else "", fit.widths[i]) for i in fit.keep] for r in texts]
    head = [wrap(heads[i], fit.widths[i]) for i in fit.keep]
    size = [max([cells(ln) for ln in head[j]] + [cells(ln) for row in grid for ln in row[j]])
            for j in range(len(fit.keep))]
    total = sum(size) + fit.gap * (len(size) - 1)

    def line(parts: list[str]) -> str:
        out = []
        for j, text in enumerate(parts):
            pad = " " * (size[j] - cells(text))
            out.append(pad + text if aligns[fit.keep[j]] == "right" else text + pad)
        return (" " * fit.gap).join(out).rstrip(" ")

    def block(cols: list[list[str]], bottom: bool = False) -> list[str]:
        height = max((len(c) for c in cols), default=1)
        padded = [([""] * (height - len(c)) + c) if bottom else (c + [""] * (height - len(c)))
                  for c in cols]
        return [line([c[k] for c in padded]) for k in range(height)]

    out = [Line(t, "bold") for t in wrap(shown(s.title), terminal)] if s.title else []
    out += [Line(t, "bold") for t in block(head, bottom=True)]
    out.append(Line("─" * total))
    indent = " " * min(BELOW_INDENT, size[0] + fit.gap if len(size) > 1 else 2)
    for r, row in zip(texts, grid, strict=True):
        out += [Line(t) for t in block(row)]
        for i in fit.below:
            text = r[i] if i < len(r) else ""
            if text.strip() and text != "-":
                label = f"{indent}{heads[i]}: "
                out += [Line(t) for t in wrap(label + text, width, " " * cells(label))]
    footer = [shown(f) for f in s.footer_for([s.columns[i] for i in fit.keep])]
    if fit.left_out:
        footer = [*footer, f"Left out to fit {width} columns: {', '.join(fit.left_out)}.",
                  s.fit_hint(fit.left_out) if s.fit_hint else
                  "A wider terminal, a pipe or --format csv shows them."]
    return out + [Line(ln) for text in footer for ln in wrap(text, terminal)]


def key_value_lines(kv: KeyValues, width: int | None,
                    shown: Callable[[object], str]) -> list[Line]:
    """A key/value block: each value next to its key, all values starting in one column, a
    long value folding in that column."""
    keys = [shown(k) for k, _ in kv.items]
    start = max((cells(k) for k in keys), default=0) + 2
    room = None if width is None else max(width - start, FOLD_MIN)
    out = []
    for key, (_, value) in zip(keys, kv.items, strict=True):
        parts = wrap(shown(cell_text(value)), room) or [""]
        out.append(Line((key + " " * (start - cells(key)) + parts[0]).rstrip(" ")))
        out += [Line(" " * start + p) for p in parts[1:]]
    return out
