"""Group repeated-layer keys: 80 lines of ``layers.N.attn.q.weight`` become one pattern."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_NUM = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


@dataclass(frozen=True)
class KeyGroup:
    """Keys that differ only in their layer numbers, e.g. ``layers.{0..79}.attn.q.weight``."""

    pattern: str
    keys: tuple[str, ...]
    detail: Any = None  # what the grouped keys share (e.g. both shapes of a mismatch)

    @property
    def count(self) -> int:
        return len(self.keys)

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "count": self.count, "keys": list(self.keys)}


def key_template(key: str) -> str:
    """``layers.3.attn.q.weight`` -> ``layers.{}.attn.q.weight``."""
    return _NUM.sub("{}", key)


def _ranges(nums: Iterable[int]) -> str:
    values = sorted(set(nums))
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else
                     f"{start},{prev}" if prev == start + 1 else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    return "{" + ",".join(parts) + "}"


def group_keys(keys: Iterable[str], detail_of: Mapping[str, Hashable] | None = None) -> list[KeyGroup]:
    """Group keys whose non-numeric parts (and ``detail_of[key]``) are equal.

    Order follows the first key of each group. A group of one keeps the key as its pattern.
    """
    groups: dict[tuple[str, Hashable], list[tuple[str, tuple[int, ...]]]] = {}
    for k in keys:
        nums = tuple(int(m.group()) for m in _NUM.finditer(k))
        template = _NUM.sub("{}", k)
        detail = detail_of.get(k) if detail_of else None
        groups.setdefault((template, detail), []).append((k, nums))
    out: list[KeyGroup] = []
    for (template, detail), members in groups.items():
        names = tuple(m[0] for m in members)
        if len(members) == 1:
            out.append(KeyGroup(names[0], names, detail))
            continue
        slots = list(zip(*(m[1] for m in members), strict=True))
        filled = template
        for slot in slots:
            text = str(slot[0]) if len(set(slot)) == 1 else _ranges(slot)
            filled = filled.replace("{}", text.replace("{", "\x00").replace("}", "\x01"), 1)
        out.append(KeyGroup(filled.replace("\x00", "{").replace("\x01", "}"), names, detail))
    return out
