"""Invariants every golden table must hold before it is compared or rewritten (as torchinfo
checks that the column sums equal the totals on every golden).

``problems(text)`` reads the tables of a rendered report (the layer/module tables of summary,
params and flops, and flops' "MACs by op") and returns what does not add up:

* the root row's Params equal the "Total params" line;
* a row's Params are its shown children's Params plus its own (the Self column where the
  table has one; at most the row's own value where it has none): rows are inclusive;
* the "% MACs" of an op table add up to 100%.

A golden that breaks one is refused, by the comparison and by ``--update-golden`` alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE = re.compile(r"^─{10,}$")
_TREE = re.compile(r"^((?:│ |  )*)(?:├─|└─)")


@dataclass
class _Row:
    depth: int
    values: dict[str, str]


def _number(text: str) -> int | None:
    return int(text.replace(",", "")) if re.fullmatch(r"\d[\d,]*", text) else None


def _percent(text: str) -> float | None:
    return float(text[:-1]) if re.fullmatch(r"\d+(\.\d+)?%", text) else None


def _tables(lines: list[str]) -> list[tuple[str, list[str], list[str]]]:
    """(header, columns, body lines) of every ruled table."""
    out = []
    for i, line in enumerate(lines):
        if i and _RULE.match(line.strip()) and lines[i - 1].strip():
            body = []
            for row in lines[i + 1:]:
                if not row.strip() or _RULE.match(row.strip()):
                    break
                body.append(row)
            header = lines[i - 1]
            out.append((header, header.split(), body))
    return out


def _cell(header: str, row: str, column: str) -> str:
    """The value of a right-aligned column: the token that ends where its heading ends."""
    after = "(?! MACs)" if column == "Self" else ""  # Self (params), not "Self MACs"
    at = re.search(rf"(?<!\S){re.escape(column)}(?!\S){after}", header)
    if at is None:
        return ""
    m = re.search(r"(\S+)$", row[:at.end()])
    return m.group(1) if m else ""


def _depth(row: str, root_name: str, first: bool) -> int:
    if first:
        return 0
    tree = _TREE.match(row)
    if tree:
        return len(tree.group(1)) // 2 + 1
    indent = len(row) - len(row.lstrip(" "))
    if indent:
        return indent // 2
    name = row.split()[0]
    return 1 if root_name == "(model)" and "." not in name else name.count(".") + 1


def _layer_rows(header: str, body: list[str]) -> list[_Row]:
    root = body[0].split()[0] if body else ""
    rows = []
    for i, line in enumerate(body):
        values = {c: _cell(header, line, c) for c in ("Params", "Self", "% MACs")}
        if not re.fullmatch(r"[\d,]+|--?|\(recursive\)", values["Params"]):
            break  # the note under the table
        rows.append(_Row(_depth(line, root, i == 0), values))
    return rows


def _children(rows: list[_Row], i: int) -> list[_Row]:
    out = []
    for row in rows[i + 1:]:
        if row.depth <= rows[i].depth:
            break
        if row.depth == rows[i].depth + 1:
            out.append(row)
    return out


def problems(text: str) -> list[str]:
    lines = text.splitlines()
    found: list[str] = []
    total = next((_number(ln.split()[-1]) for ln in lines if ln.startswith("Total params")), None)
    for header, columns, body in _tables(lines):
        if "Params" in columns and body:
            rows = _layer_rows(header, body)
            root = _number(rows[0].values["Params"])
            if total is not None and root is not None and root != total:
                found.append(f"root row Params {root:,} != Total params {total:,}")
            has_self = bool(_cell(header, header, "Self"))
            for i, row in enumerate(rows):
                own, kids = _number(row.values["Params"]), _children(rows, i)
                counts = [_number(k.values["Params"]) for k in kids]
                if own is None or not kids or None in counts:
                    continue
                below = sum(c for c in counts if c is not None)
                self_params = _number(row.values["Self"]) if has_self else None
                if (below + self_params != own) if self_params is not None else below > own:
                    found.append(f"{body[i].split()[0]}: Params {own:,} but its rows below "
                                 f"add up to {below:,}" + (f" + Self {self_params:,}"
                                                           if self_params is not None else ""))
        if columns[:1] == ["Op"] and "% MACs" in header and body:
            shares = [_percent(row.split()[-1]) for row in body]
            known = [s for s in shares if s is not None]
            if len(known) == len(shares) and abs(sum(known) - 100) > 0.005 * len(known) + 1e-9:
                found.append(f"the % MACs of the op table add up to {sum(known):.2f}%")
    return found
