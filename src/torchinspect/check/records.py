"""The results of ``inspect check``: one ``Measured`` row per limit checked (an absolute
budget, an allowed increase over a baseline, or a change shown for information), one
``ModelCheck`` per model (its readings, or the error that stopped it), and the
``CheckResult``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.check.metrics import (
    Metric,
    Noise,
    Reading,
    Unit,
    fmt_full,
    fmt_percent,
    fmt_value,
)


class Kind(StrEnum):
    budget = "budget"  # value <= limit
    increase = "increase"  # growth over the baseline <= limit (a fraction)
    change = "change"  # no limit: the change over the baseline, for information


@dataclass
class Measured:
    metric: Metric
    limit: float | None
    value: float | None
    passed: bool
    message: str
    origin: str = "command line"  # where the limit came from: "pyproject.toml", "--max-params"
    kind: Kind = Kind.budget
    baseline: float | None = None
    noise: Noise | None = None  # of the measured value (timed metrics)
    band: float | None = None  # relative noise band of the comparison (bench's rule)
    within_noise: bool = False  # over the limit, but inside the noise: not a failure

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.value is None or self.baseline == 0:
            return None
        return (self.value - self.baseline) / self.baseline

    @property
    def headroom(self) -> float | None:
        """The share of the allowed value still unused (negative: how far over it is):
        ``(allowed - value) / allowed``, where allowed is the budget or the baseline plus
        the allowed increase."""
        if self.value is None or self.limit is None or self.kind is Kind.change:
            return None
        allowed = self.limit if self.kind is Kind.budget else (self.baseline or 0) * (1 + self.limit)
        return (allowed - self.value) / allowed if allowed > 0 else None

    @property
    def result(self) -> str:
        if self.kind is Kind.change:
            return "-"
        if self.within_noise:
            return "PASS (noise)"
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        def num(v: float | None) -> float | int | None:  # counts as integers, as elsewhere
            return int(v) if v is not None and self.metric.counted and float(v).is_integer() else v

        limit = self.limit if self.kind is not Kind.budget else num(self.limit)
        return {"metric": self.metric.value, "check": self.kind.value, "limit": limit,
                "value": num(self.value), "passed": self.passed, "message": self.message,
                "origin": self.origin, "baseline": num(self.baseline), "change": self.change,
                "headroom": self.headroom, "within_noise": self.within_noise,
                "noise": self.noise.to_dict() if self.noise else None, "noise_band": self.band}

    def shown(self) -> tuple[str, str]:
        """(measured, limit) as text whose comparison reads right: ``11.69M`` against a
        limit of ``11.6895M`` would look exceeded, so close values are shown in full."""
        value = self.value or 0
        if self.kind is not Kind.budget or self.limit is None:
            limit = f"+{self.limit * 100:g}%" if self.limit is not None else "-"
            return fmt_value(self.metric, value, exact=True), limit
        shown = fmt_value(self.metric, value, exact=True), fmt_value(self.metric, self.limit)
        if abs(value - self.limit) >= 0.01 * max(abs(self.limit), 1e-9) and shown[0] != shown[1]:
            return shown
        return fmt_full(self.metric, value), fmt_full(self.metric, self.limit)

    def shown_noise(self) -> str:
        """``IQR 0.012 ms, CoV 3.40%`` for a timed value, else empty."""
        if self.noise is None:
            return ""
        n = self.noise
        return f"IQR {fmt_value(self.metric, n.iqr)}, CoV {fmt_percent(n.cov, signed=False)}"


@dataclass
class ModelCheck:
    model: str  # as written on the command line or in the config
    name: str
    inputs: str
    results: list[Measured] = field(default_factory=list)
    seconds: float = 0.0
    source: str = "command line"
    readings: dict[Metric, Reading] = field(default_factory=dict)
    environment: dict[str, Any] | None = None  # where latency was timed
    error: str | None = None  # the model could not be built or run
    hint: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None and all(r.passed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "name": self.name, "inputs": self.inputs,
                "passed": self.passed, "source": self.source, "seconds": round(self.seconds, 3),
                "error": self.error, "hint": self.hint, "notes": list(self.notes),
                "readings": readings_dict(self.readings),
                "results": [r.to_dict() for r in self.results]}


def readings_dict(readings: dict[Metric, Reading]) -> dict[str, Any]:
    """``{"params": 11689512, "latency-ms": 0.35, ...}`` (counts as integers)."""
    return {m.value: int(r.value) if m.unit is Unit.number and float(r.value).is_integer()
            else r.value for m, r in readings.items()}


@dataclass
class CheckResult:
    models: list[ModelCheck]
    config: str | None = None
    baseline: str | None = None
    notes: list[str] = field(default_factory=list)  # models new to / gone from the baseline

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.models)

    @property
    def failures(self) -> int:
        return sum(not r.passed for m in self.models for r in m.results)

    @property
    def errors(self) -> int:
        return sum(m.error is not None for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "failures": self.failures, "errors": self.errors,
                "config": self.config, "baseline": self.baseline, "notes": list(self.notes),
                "models": [m.to_dict() for m in self.models]}
