"""The measured error of everything but cuDNN workspaces, carried by the range of a
prediction made without a GPU.

With every cuDNN workspace measured on the GPU (calibrated), what remains between the
prediction and ``max_memory_allocated`` is the model of the rest: the allocator's rounding,
staging buffers, kernels that allocate what the fake run does not see. Its size is measured
on the development sets only (``benchmarks/memory_heldout.py``'s and the LSTM-projection
models of ``benchmarks/memory_validation.py``: each peak's calibrated error, per kind of
run) and shipped as ``data/peak_margins.json`` (``memory_validation.py margins``).
A prediction without a GPU widens its workspace range by the extremes found there: with
errors ``e = predicted / measured - 1`` between ``e_min`` and ``e_max``, the measurement of a
prediction ``p`` lies between ``p / (1 + e_max)`` and ``p / (1 + e_min)``
(docs/concepts/memory.md, "The range").
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

MARGINS_FILE = "peak_margins.json"
KINDS = ("inference", "training", "training-amp")


@dataclass(frozen=True)
class Margin:
    """The calibrated errors of one kind of run on the development set."""

    low: float  # the most negative predicted / measured - 1 (<= 0)
    high: float  # the most positive (>= 0)
    n: int

    def widen(self, low: int, high: int) -> tuple[int, int]:
        """The range of measurements consistent with predictions ``low`` and ``high``."""
        return math.floor(low / (1 + self.high)), math.ceil(high / (1 + self.low))


def run_kind(mode: str, amp: str | None) -> str:
    """inference | training | training-amp: the groups the errors are measured in."""
    return "inference" if mode == "inference" else "training-amp" if amp else "training"


def margins_from(errors: dict[str, list[float]]) -> dict[str, Margin]:
    """Per kind of run, from its calibrated errors (predicted / measured - 1)."""
    return {kind: Margin(min(0.0, *errs), max(0.0, *errs), len(errs))
            for kind, errs in errors.items() if errs}


def margins_from_dict(data: Any) -> dict[str, Margin]:
    """Validate and build (a malformed file raises ValueError)."""
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError("not a version-1 margins file")
    out = {}
    for kind, m in dict(data.get("kinds", {})).items():
        if kind not in KINDS or not -1 < float(m["low"]) <= 0 <= float(m["high"]):
            raise ValueError(f"bad margin {kind!r}")
        out[kind] = Margin(float(m["low"]), float(m["high"]), int(m["n"]))
    return out


@functools.lru_cache(maxsize=1)
def shipped_margins() -> dict[str, Margin]:
    """The margins shipped with torchinspect (none if the file is missing)."""
    try:
        raw = resources.files("torchinspect.memory").joinpath("data", MARGINS_FILE).read_bytes()
    except (FileNotFoundError, OSError):
        return {}
    return margins_from_dict(json.loads(raw))


def widen(run: Any, kind: str, margins: dict[str, Margin] | None = None) -> None:
    """Set ``run.peak_low``/``peak_high`` (a `RunMemory`) to the range that also holds the
    measured error of the rest of the prediction (unchanged where none was measured)."""
    margin = (shipped_margins() if margins is None else margins).get(kind)
    if margin is None:
        return
    low = run.peak if run.peak_low is None else run.peak_low
    high = run.peak if run.peak_high is None else run.peak_high
    run.peak_low, run.peak_high = margin.widen(low, high)
    if not run.high_at:
        run.high_at = run.where


def note(kinds: list[str], margins: dict[str, Margin] | None = None) -> str | None:
    """The line that says the range holds the measured error (None: none was applied)."""
    found = shipped_margins() if margins is None else margins
    parts = [f"{k} {100 * found[k].low:+.1f}% to {100 * found[k].high:+.1f}%"
             for k in kinds if k in found]
    if not parts:
        return None
    return ("the range holds the error measured on the development set with every cuDNN "
            f"workspace known: {'; '.join(parts)}")
