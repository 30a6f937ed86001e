"""Read a JSON file this tool wrote earlier (a baseline, a bench result), as untrusted input.

Such a file may have been edited or crafted: a 5,000-digit integer, nesting 100,000 deep, a
string or null where a number belongs, NaN or a negative median. :func:`read_json` reads a
regular file once (size-capped), parses it with a bounded depth and turns every failure into
one :class:`InspectError` line; :func:`number` checks one value's type and range.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.regular import read_regular

MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64


def depth(obj: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: no recursion limit to hit)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(value, dict):
            stack.extend((v, d + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, d + 1) for v in value)
    return deepest


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: str | os.PathLike[str], *, where: str, hint: str) -> Any:
    """The parsed file; InspectError (exit 2) naming ``where`` for a missing file, a folder,
    a device, over :data:`MAX_JSON_BYTES`, not UTF-8, not JSON (NaN/Infinity included),
    an integer over Python's digit limit, or nesting over :data:`MAX_DEPTH`."""
    if os.path.isdir(path):
        raise InspectError(f"{where}: is a folder", hint=hint)
    if not os.path.exists(path):
        raise InspectError(f"{where}: no such file", hint=hint)
    raw = read_regular(path, limit=MAX_JSON_BYTES, what=where)
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except RecursionError:
        raise InspectError(f"{where}: not JSON (nested too deeply)", hint=hint) from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, the int digit limit
        raise InspectError(f"{where}: not JSON ({str(exc)[:120]})", hint=hint) from None
    if depth(data) > MAX_DEPTH:
        raise InspectError(f"{where}: not JSON this tool writes (nested over {MAX_DEPTH} levels)",
                           hint=hint)
    return data


def number(value: Any, where: str, hint: str, *, minimum: float = 0.0, positive: bool = False,
           integer: bool = False, maximum: float = 1e30) -> float:
    """``value`` as a float, refused unless it is a JSON number (not a bool or string),
    finite, at least ``minimum`` (above it with ``positive``), at most ``maximum``, and a
    whole number with ``integer``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        abs(value) <= maximum if isinstance(value, int) else math.isfinite(value))
    if ok:
        v = float(value)
        ok = (v > minimum if positive else v >= minimum) and v <= maximum \
            and (not integer or v.is_integer())
    if not ok:
        want = ("a whole number" if integer else "a number") + \
            (f" above {minimum:g}" if positive else f" of at least {minimum:g}")
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InspectError(f"{where} = {shown} is not {want}", hint=hint)
    return float(value)
