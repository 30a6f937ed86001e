"""What ``inspect check`` measures: one :class:`Metric` entry per number, with its unit and
the measurement it needs; budgets (``25M``) and allowed increases (``2%``) in human units.

Adding a metric is one entry in :class:`Metric` (key, unit, the :class:`Need` that yields
it, a label); a new kind of measurement is also one collector in ``measure.COLLECTORS``
(``collector(case, gpu)``: ``gpu`` is ``--gpu``, the GPU predictions are for, or None).
Budgets (``max-KEY`` in the config), baselines and the tables pick it up from there.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from torchinspect.errors import InspectError

if TYPE_CHECKING:
    from torchinspect.memory.budget import MemoryBudget


class Unit(StrEnum):
    number = "count"  # SI suffixes: 25M, 5G (a member named `count` would hide str.count)
    mb = "MB"  # 10^6 bytes
    ms = "ms"


class Need(StrEnum):
    """The measurement that yields a metric (cheapest first)."""

    static = "static"  # the module's tensors, no forward
    trace = "trace"  # one forward on meta (as `inspect summary`)
    memory = "memory"  # `inspect memory`'s prediction (fake tensors, CUDA caching allocator)
    prediction = "prediction"  # `inspect bench --predict GPU` (no GPU needed)
    step = "step"  # `inspect bench --predict GPU --train`: a training step (no GPU needed)
    timing = "timing"  # real forwards timed like `inspect bench`


class Metric(StrEnum):
    """Every number `check` can budget and keep in a baseline."""

    unit: Unit
    need: Need
    label: str

    if not TYPE_CHECKING:  # a type checker should see Metric("params") as the lookup it is
        def __new__(cls, key: str, unit: Unit, need: Need, label: str) -> Metric:
            obj = str.__new__(cls, key)
            obj._value_ = key
            obj.unit, obj.need, obj.label = unit, need, label
            return obj

    params = "params", Unit.number, Need.static, "parameters (tied weights once)"
    trainable = "trainable", Unit.number, Need.static, "trainable parameters"
    macs = "macs", Unit.number, Need.trace, "multiply-accumulates per forward"
    size_mb = "size-mb", Unit.mb, Need.static, "MB of weights (parameters + buffers)"
    activation_mb = "activation-mb", Unit.mb, Need.trace, "MB of leaf-module outputs of one forward"
    infer_mb = "infer-mb", Unit.mb, Need.memory, "MB peak GPU memory of inference (predicted)"
    train_mb = "train-mb", Unit.mb, Need.memory, ("MB peak GPU memory of an AdamW training "
                                                  "step (predicted)")
    latency_ms = "latency-ms", Unit.ms, Need.timing, "median ms per forward"
    predicted_ms = "predicted-ms", Unit.ms, Need.prediction, ("predicted ms per eager forward "
                                                              "on --gpu (no GPU here)")
    step_ms = "step-ms", Unit.ms, Need.step, ("predicted ms per eager training step (AdamW, "
                                              "autocast bf16) on --gpu (default h100)")

    @property
    def option(self) -> str:
        if self is Metric.predicted_ms:  # --max-latency-ms --gpu NAME, with no GPU here
            return "--max-latency-ms --gpu"
        return f"--max-{self.value}"

    @property
    def counted(self) -> bool:
        """Counts take SI suffixes (25M); MB and ms budgets are plain numbers."""
        return self.unit is Unit.number


def metric_named(name: str, where: str) -> Metric:
    try:
        return Metric(name.replace("_", "-"))
    except ValueError:
        raise InspectError(f"{where}: unknown metric {name!r}",
                           hint="use " + ", ".join(m.value for m in Metric)) from None


@dataclass(frozen=True)
class Noise:
    """The spread of a timed metric, in its unit: the interquartile range, the coefficient
    of variation (std / mean) and the relative standard error of the median (bench's)."""

    iqr: float
    cov: float
    median_cov: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reading:
    """One measured value; ``noise`` for timed metrics."""

    value: float
    noise: Noise | None = None
    # what a budget on it should know (a peak that is mostly cuBLAS workspace); not saved
    note: str = ""

    @property
    def se(self) -> float | None:
        """The standard error of the value (None when exact)."""
        if self.noise is None or not math.isfinite(self.noise.median_cov):
            return None
        return self.value * self.noise.median_cov


_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "B": 1e9}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTB]?)\s*$", re.IGNORECASE)
_PERCENT = re.compile(r"^\s*\+?([0-9]*\.?[0-9]+)\s*(%?)\s*$")


class MemoryLimit(float):
    """A GPU memory budget in MB that was given as a GPU (``"h100"``) or its memory
    (``"24GB"``): the usable MB, keeping how it was read (``.budget``, memory/budget.py), so a
    card it names is also the GPU its peaks are predicted for. It merges like any limit."""

    budget: MemoryBudget

    def __new__(cls, budget: MemoryBudget) -> MemoryLimit:
        limit = super().__new__(cls, budget.usable / 1e6)
        limit.budget = budget
        return limit


def gpu_budget(value: Any, metric: Metric | str, where: str | None = None) -> MemoryBudget | None:
    """A GPU memory budget written as a GPU of the catalogue (``"h100"``, ``"a10"``) or a GPU's
    memory (``"24GB"``, ``"80GiB"``), read as ``inspect memory --fit`` reads it
    (memory/budget.py: the card's memory as the driver reports it, GB on a GPU are GiB, less the
    CUDA context and the allocator's reserve); None for any other value (a number is MB, so
    ``"4090"`` is 4090 MB here: the card is ``rtx4090``)."""
    metric = Metric(metric)
    if metric.need is not Need.memory or not isinstance(value, str) or _NUMBER.match(value):
        return None
    from torchinspect.memory.budget import memory_budget

    return memory_budget(value, option=where or metric.option, number="MB", here=False)


def budget_note(value: Any, metric: Metric | str, where: str | None = None) -> str | None:
    """What a GPU memory budget (:func:`gpu_budget`) was read as, for the notes."""
    b = gpu_budget(value, metric, where)
    if b is None:
        return None
    given = f"{where or Metric(metric).option} {b.text}"
    if b.gpu is not None:
        memory = (f"the {b.gpu.name} ({b.gpu.label}), {b.total / 1e6:,.2f} MB {b.read_as}"
                  + (f" (sold as {b.size})" if b.read_as != "as sold" else ""))
    else:
        memory = f"{b.size}" + (f" ({b.read_as})" if b.read_as else "")
    predicted = f"; the peaks are predicted for the {b.gpu.name}" if b.gpu else ""
    return (f"{given}: {memory}, less the CUDA context ({b.context / 1e6:,.2f} MB, as PyTorch "
            f"measured it) and the caching allocator's reserve ({b.reserve:.0%}): "
            f"{b.usable / 1e6:,.2f} MB usable{predicted}")


def parse_budget(value: Any, metric: Metric | str, *, where: str | None = None) -> float:
    """``"25M"`` -> 25e6, ``"1.5e9"`` -> 1.5e9, ``100`` -> 100 (suffixes only for counts); a
    GPU memory budget may name a GPU or its memory, ``"h100"``, ``"24GB"``: its usable MB, a
    :class:`MemoryLimit` (:func:`gpu_budget`)."""
    metric = Metric(metric)
    label = where or metric.option
    gpu = gpu_budget(value, metric, where)
    if gpu is not None:
        return MemoryLimit(gpu)
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = _NUMBER.match(str(value))
        if not m or (m.group(2) and not metric.counted):
            example = ("25M, 5G, 1.5e9 or 30000000" if metric.counted else
                       "100 or 12.5 (MB), or a GPU: h100, 24GB" if metric.need is Need.memory
                       else "100 or 12.5")
            raise InspectError(f"{label} {value!r} is not a budget",
                               hint=f"use a number like {example}")
        number = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if not math.isfinite(number) or number < 0:
        raise InspectError(f"{label} {value!r} is not a budget", hint="use a positive number")
    return number


def parse_percent(value: Any, where: str) -> float:
    """``"2%"`` -> 0.02, ``0`` -> 0.0: an allowed relative increase."""
    m = _PERCENT.match(str(value)) if not isinstance(value, bool) else None
    if m is None or (not m.group(2) and float(m.group(1)) != 0):
        raise InspectError(f"{where} {value!r} is not an allowed increase",
                           hint='write a percentage, e.g. "2%" or "0.5%" ("0" allows no growth)')
    return float(m.group(1)) / 100


def parse_increases(text: str | None, where: str = "--max-increase") -> dict[Metric, float]:
    """``"params=2%,macs=5%"`` -> ``{params: 0.02, macs: 0.05}``."""
    out: dict[Metric, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, eq, amount = item.partition("=")
        if not eq:
            raise InspectError(f"{where} {item.strip()!r}: expected METRIC=PERCENT",
                               hint="e.g. --max-increase params=2%,macs=5%")
        metric = metric_named(name.strip(), where)
        out[metric] = parse_percent(amount.strip(), f"{where} {metric.value}=")
    return out


def fmt_value(metric: Metric, v: float, *, exact: bool = False) -> str:
    """``25.56M`` (measured, ``exact``) / ``30M`` (a limit); MB metrics always in MB:
    ``102.44 MB``, ``0.117 MB`` (measured), ``1 MB`` (a limit)."""
    if metric.counted:
        for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
            if abs(v) >= scale:
                return f"{v / scale:.2f}{unit}" if exact else f"{v / scale:g}{unit}"
        return f"{v:g}"
    if metric.unit is Unit.ms:  # 1,000 ms, 12.5 ms, 0.873 ms (never 1e+03)
        return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"
    # MB metrics stay in MB, as their budgets are written (never "81.72 KB" against "1 MB")
    if not exact:
        return f"{v:,g} MB"
    return f"{v:,.2f} MB" if abs(v) >= 1 or v == 0 else f"{v:.3g} MB"


def fmt_full(metric: Metric, v: float) -> str:
    """Every digit that matters: ``11,689,512``, ``46.8342 MB``, ``12.5030 ms``."""
    if metric.counted:
        return f"{v:,.0f}"
    return f"{v:,.4f} {metric.unit.value}"


def fmt_measure(metric: Metric, v: float | None) -> str:
    """A measured value or limit in the metric's own unit, every digit that matters
    (JUnit and messages): ``29,034``, ``0.1165 MB``."""
    return "-" if v is None else fmt_full(metric, v)


def fmt_percent(x: float, *, signed: bool = True) -> str:
    """``+0.80%``; tiny values keep two significant digits (``+0.0086%``)."""
    digits = 2 if abs(x) >= 0.0001 or x == 0 else 1 - math.floor(math.log10(abs(x) * 100))
    return f"{x * 100:{'+' if signed else ''}.{digits}f}%"
