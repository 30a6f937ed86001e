"""The one wrapping rule for every table cell, note, footer and error message.

A line breaks where a reader would break it: at a space; where a word is too long for the
line, after ``.``, ``/``, ``,``, an opening bracket, or between words of prose; after ``_``
only inside an identifier longer than the line; anywhere only when nothing else fits. It
never breaks inside a quoted string (``"scale"``), between the digits of a number (``2.00``,
``10,432``), inside ``...``, or at a space inside a call (``F.dropout(..., training=x)`` is
one word while it fits a line). ``wrap(text, width)`` gives the lines; the table layout
(``report/table_text.py``) and the error boundary use it, so every piece of text the tool
prints folds the same way. No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a word is broken after one of these when it can't fit a line (never between two digits)
_AFTER = frozenset("./,([{")
_OPEN, _CLOSE = "([{", ")]}"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a bracketed list of numbers: a shape or a tuple, one piece like a word
_NUMBERS = re.compile(r"\[[\d, ?×.-]*\]|\([\d, ?×.-]*\)")


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes (wide East Asian characters take two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _char_cells(text: str) -> list[int]:
    if text.isascii():
        return [1] * len(text)
    from rich.cells import cell_len

    return [cell_len(c) for c in text]


def _quote_end(text: str, i: int) -> int | None:
    """Where the quoted string opened at ``text[i]`` ends (the index after the closing quote),
    or None when ``text[i]`` is no opening quote (an apostrophe: ``model's``)."""
    q = text[i]
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_"):
        return None
    end = text.find(q, i + 1)
    while end != -1 and end + 1 < len(text) and (text[end + 1].isalnum() or text[end + 1] == "_"):
        end = text.find(q, end + 1)  # "it's" inside 'a string': not its end
    return None if end == -1 else end + 1


def _group_end(text: str, i: int) -> int | None:
    """Where the bracket opened at ``text[i]`` closes (the index after it), when it opens a
    call or an index (right after a name) or a list of numbers (a shape, ``[1, 64, 56,
    56]``); None when it opens prose (``(model.eval() switches it off)``) or never closes."""
    attached = i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_.)]")
    if not attached:
        close = _NUMBERS.match(text, i)
        return close.end() if close else None
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c in "\"'":
            end = _quote_end(text, j)
            if end is not None:
                j = end
                continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


@dataclass(frozen=True)
class _Word:
    """A run of text that wraps as one piece while it fits a line: words of prose, and calls
    and quoted strings with their spaces. ``breaks`` maps a position inside it to how good a
    place to break it is (1: a space inside a call, or after ``. / , (``; 2: after ``_``
    inside an identifier; 3: after the ``.`` of a path, where no ``/`` will do)."""

    text: str
    breaks: dict[int, int]
    gap: int = 1  # the spaces before it in the text (kept where it stays on the line)


def _words(text: str) -> list[_Word]:
    words: list[_Word] = []
    start, i, gap = 0, 0, 0
    quoted: list[tuple[int, int]] = []  # (start, end) of each quoted string in this word
    spaces_inside: list[int] = []
    while i <= len(text):
        if i == len(text) or text[i] == " ":
            if i > start:
                word = _word(text[start:i], [(a - start, b - start) for a, b in quoted],
                             [s - start for s in spaces_inside])
                words.append(_Word(word.text, word.breaks, max(gap, 1)))
                gap = 0
            gap += i < len(text)
            start, quoted, spaces_inside = i + 1, [], []
            i += 1
            continue
        c = text[i]
        end = _quote_end(text, i) if c in "\"'" else _group_end(text, i) if c in _OPEN else None
        if end is None:
            i += 1
            continue
        if c in "\"'":
            quoted.append((i, end))
        else:  # a call keeps its spaces; its quoted strings stay whole
            j = i + 1
            while j < end:
                qend = _quote_end(text, j) if text[j] in "\"'" else None
                if qend is not None and qend <= end:
                    quoted.append((j, qend))
                    j = qend
                    continue
                if text[j] == " ":
                    spaces_inside.append(j)
                j += 1
        i = end
    return words


def _word(text: str, quoted: list[tuple[int, int]], spaces: list[int]) -> _Word:
    inside: set[int] = set()
    for a, b in quoted:
        inside.update(range(a + 1, b))  # no break point strictly inside a string
    breaks: dict[int, int] = {}
    path = "/" in text
    for s in spaces:
        if s not in inside:
            breaks[s] = 1  # the space itself is dropped where it breaks
    for j, c in enumerate(text[:-1]):
        if j + 1 in inside or c not in _AFTER or j == 0:
            continue
        before, after = text[j - 1], text[j + 1]
        if c in ".," and (before.isdigit() and after.isdigit()):
            continue  # 2.00, 10,432
        if c == "." and (before == "." or after == "."):
            continue  # ...
        if c == "/" and before.isdigit() and after.isdigit():
            continue  # 1/2
        if after in " )]}" or (c in _OPEN and after in "._"):
            continue  # nothing to gain: "()" and "(...)" stay whole
        # in a path, a file's extension stays on its name: after "/" first
        breaks.setdefault(j + 1, 3 if c == "." and path else 1)
    for m in _IDENT.finditer(text):
        for k in range(m.start() + 1, m.end() - 1):
            if text[k] == "_" and k + 1 not in inside:
                breaks.setdefault(k + 1, 2)
    return _Word(text, breaks)


def _piece(word: _Word, room: int, widths: list[int], fresh: bool, full: int) -> int:
    """How many characters of ``word`` go on a line with ``room`` columns left: the longest
    cut at a good break point; after ``_`` only in an identifier longer than a whole line
    (``full``); on a
    fresh line, as many characters as fit when there is no break point (0: start a new line)."""
    fits, used = 0, 0
    for w in widths:
        if used + w > room:
            break
        used += w
        fits += 1
    good = [p for p, rank in word.breaks.items() if rank == 1 and p <= fits]
    if good:
        return max(good)
    for p in sorted((p for p, rank in word.breaks.items() if rank == 2 and p <= fits), reverse=True):
        ident = next(m for m in _IDENT.finditer(word.text) if m.start() < p < m.end())
        if ident.end() - ident.start() > full:
            return p
    late = [p for p, rank in word.breaks.items() if rank == 3 and p <= fits]
    if late:
        return max(late)
    return max(fits, 1) if fresh else 0


def longest_piece(text: str) -> int:
    """The widest piece of ``text`` that wraps as one (a word, a call, a shape)."""
    return max((cells(w.text) for line in text.split("\n") for w in _words(line)), default=0)


def wrap(text: str, width: int | None, indent: str | None = None) -> list[str]:
    """``text`` folded into lines of at most ``width`` columns by the rule above; each line
    after the first starts with ``indent`` (by default the first line's own indent: its
    leading spaces, and a tree's ``│``, so a folded layer name stays under itself).
    ``width`` None or ``text`` already short: the lines as they are."""
    out: list[str] = []
    for raw in text.split("\n"):
        if width is None or cells(raw) <= width:
            out.append(raw)
            continue
        hang = indent if indent is not None else _hanging(raw)
        if cells(hang) > width // 2:
            hang = ""
        out.extend(_wrap_line(raw, max(width, cells(hang) + 1), hang))
    return out


_TREE = str.maketrans({"├": "│", "└": " ", "─": " ", "┬": "│"})


def _hanging(line: str) -> str:
    lead = line[:len(line) - len(line.lstrip(" │├└─┬"))]
    return lead.translate(_TREE)


def _wrap_line(text: str, width: int, indent: str) -> list[str]:
    lead = text[:len(text) - len(text.lstrip(" │├└─┬"))]
    lines: list[str] = []
    line = lead
    empty = True  # nothing but the indent on ``line`` yet

    def newline() -> None:
        nonlocal line, empty
        lines.append(line.rstrip(" "))
        line, empty = indent, True

    for word in _words(text[len(lead):]):
        sep = "" if empty else " " * word.gap
        need = cells(word.text)
        if cells(line) + len(sep) + need <= width:
            line, empty = line + sep + word.text, False
            continue
        if need <= width - cells(indent) and not empty:
            newline()
            line, empty = line + word.text, False
            continue
        rest = word
        while rest.text:
            room = width - cells(line) - (0 if empty else rest.gap)
            widths = _char_cells(rest.text)
            if sum(widths) <= room:
                line, empty = line + ("" if empty else " " * rest.gap) + rest.text, False
                break
            cut = _piece(rest, room, widths, fresh=empty, full=width - cells(indent))
            if cut == 0:
                newline()
                continue
            head = rest.text[:cut].rstrip(" ")
            line, empty = line + ("" if empty else " " * rest.gap) + head, False
            newline()
            tail = rest.text[cut:]
            skip = len(tail) - len(tail.lstrip(" "))
            rest = _Word(tail[skip:], {p - cut - skip: r for p, r in rest.breaks.items()
                                        if p - cut - skip > 0})
    if not empty or not lines:
        lines.append(line.rstrip(" "))
    return lines
