"""Checks and normal forms of the Python API's arguments, shared by every command core.

Nothing here imports torch.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from torchinspect.errors import InspectError

P = ParamSpec("P")
R = TypeVar("R")


class ProgressFn(Protocol):
    """The progress callback of the API's long runs (``benchmark``, ``collect_overview``):
    ``fn(text)`` for a passing one-line status, ``fn(text, final=True)`` when a step is done
    (a finished configuration). ``extract_features`` reports row counts instead (its
    ``Progress`` events feed a progress bar)."""

    def __call__(self, text: str, /, *, final: bool = False) -> None: ...


def as_list(value: Any) -> list[Any]:
    """A parameter that takes several texts (``layers``, ``select``, ``inputs`` ...): one
    string is one item, not its characters; None is none."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, os.PathLike)):  # one path is one item too
        return [value]
    return list(value)


def check_depth(depth: int) -> None:
    """The one depth check of the Python API (the CLI's --depth has min=0)."""
    if depth < 0:
        raise InspectError(f"depth={depth}: the depth must be 0 or more",
                           hint="e.g. depth=3 (0 shows the model as one row)")


def renamed_keywords(**old_to_new: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Keep an old keyword name working after a parameter was renamed (``model_or_spec=`` ->
    ``model=``): the value goes to the new name, with a DeprecationWarning. Positional calls,
    the usual form, never see it."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old}= and {new}=")
                    warnings.warn(f"{fn.__name__}({old}=...) is deprecated; use {new}=...",
                                  DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call

    return wrap


def parse_batches(text: str | None, *, option: str = "--batch") -> tuple[int, ...] | None:
    """A batch-size list as typed (``"1,8,32"`` -> ``(1, 8, 32)``, repeats once); None or
    blank -> None (the example's own batch). ``option`` names the flag in the error."""
    if text is None or not str(text).strip():
        return None
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise InspectError(f"{option} {text!r}: {part!r} is not a positive integer",
                               hint=f"e.g. {option} 1,8,32")
        if len(part) > 12 or int(part) > MAX_BATCH:
            raise InspectError(f"{option} {text!r}: {part} samples in one batch, over "
                               f"{MAX_BATCH:,} (more than any machine holds)",
                               hint=f"e.g. {option} 1,8,32")
        out.append(int(part))
    return tuple(dict.fromkeys(out))


# ------------------------------------------------------------------ bounds of every number

#: The largest value each kind of number takes on any machine: a larger one is a typo (or an
#: attack) and is refused where it is parsed, in one line, before anything is allocated or a
#: loop starts that would never end (``bench --warmup inf``).
MAX_BATCH = 2**31 - 1  # samples in one batch: more than any machine holds
MAX_TENSOR_BYTES = 2**50  # 1 PiB: one tensor larger than the memory of any machine
MAX_BYTES = 2**50  # a size option (--shard-size, --max-image-size, --fit)
MAX_SECONDS = 86_400.0  # a day of warm-up or timing
MAX_COUNT = 10**9  # iterations, rows, depths


def max_threads() -> int:
    """Threads or worker processes: 4 x the CPUs of this machine (torch and libgomp fail to
    create 100,000 threads, and the process dies)."""
    return 4 * (os.cpu_count() or 1)


def bounded(value: float, option: str, *, least: float, most: float, unit: str,
            why: str = "") -> float:
    """``value`` when it is a finite number from ``least`` to ``most``; else one
    InspectError naming ``option`` (exit 2). ``unit`` words the number ("seconds"), ``why``
    the bound ("a day")."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InspectError(f"{option} {value}: not a finite number of {unit}",
                           hint=f"give {unit} from {_num(least)} to {_num(most)}")
    if not least <= value <= most:
        reason = f" ({why})" if why else ""
        raise InspectError(f"{option} {_num(value)}: {unit} must be from {_num(least)} to "
                           f"{_num(most)}{reason}", hint=f"e.g. {option} {_num(max(least, 1))}")
    return value


def _num(x: float) -> str:
    """``2,147,483,647``, ``86,400``, ``0.5``, ``1e+23``: a bound or value as people read it."""
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:g}"
