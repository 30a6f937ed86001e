"""Judging readings: each absolute budget, each allowed increase over the baseline, and
(with a baseline) the change of every other metric. Timed metrics follow `inspect bench`'s
significance rule: over a limit but inside the measurement noise is noted, never failed."""

from __future__ import annotations

import math

from torchinspect.bench.compare import setup_differences, significance
from torchinspect.check.baseline import BaselineModel
from torchinspect.check.config import ModelBudget
from torchinspect.check.metrics import Metric, Reading, fmt_full, fmt_percent, fmt_value
from torchinspect.check.plan import CheckPlan
from torchinspect.check.records import CheckResult, Kind, Measured, ModelCheck


def judge(check: ModelCheck, mb: ModelBudget, plan: CheckPlan) -> None:
    """Fill ``check.results`` (and notes) from its readings."""
    if check.error is not None:
        return
    base = plan.baseline.models.get(check.model) if plan.baseline else None
    wanted = plan.metrics_for(mb)
    for metric in Metric:
        reading = check.readings.get(metric)
        if reading is None:
            continue
        old = base.readings.get(metric) if base else None
        before = len(check.results)
        if metric in mb.limits:
            check.results.append(budget_row(metric, mb.limits[metric], mb.origins.get(metric, "-"),
                                            reading, old))
        if old is not None and metric in plan.increase:
            allowed, origin = plan.increase[metric]
            check.results.append(increase_row(metric, allowed, origin, reading, old))
        if reading.note and any(r.kind is not Kind.change for r in check.results[before:]):
            check.notes.append(reading.note)  # where a limit is judged on it
        if len(check.results) == before and metric in wanted:  # shown, not judged
            message = (_growth(metric, old, reading) if old is not None else
                       f"{metric.value} {fmt_value(metric, reading.value, exact=True)}")
            check.results.append(Measured(metric, None, reading.value, True, message, "-",
                                          Kind.change, old.value if old else None, reading.noise))
    if base is not None:
        check.notes.extend(_baseline_notes(check, base, plan))


def _within_noise(row: Measured, old: float, old_se: float | None, new: Reading) -> None:
    """A row over its limit whose excess is inside the noise (bench's rule) passes, noted."""
    if row.passed or new.se is None:
        return
    _, band, verdict = significance(old, old_se, new.value, new.se)
    row.band = band
    if verdict == "same":
        row.passed = row.within_noise = True


def budget_row(metric: Metric, limit: float, origin: str, reading: Reading,
               old: Reading | None) -> Measured:
    row = Measured(metric, limit, reading.value, reading.value <= limit, "", origin, Kind.budget,
                   old.value if old else None, reading.noise)
    if reading.value > limit and limit > 0:
        _within_noise(row, limit, None, reading)
    shown_value, shown_limit = row.shown()
    noise = f" ({row.shown_noise()})" if reading.noise else ""
    row.message = (f"{metric.value} {shown_value}{noise} "
                   f"{'<=' if reading.value <= limit else '>'} budget {shown_limit}")
    if row.within_noise:
        row.message += (f", inside the measurement noise (±{fmt_percent(row.band or 0, signed=False)}"
                        "): not a failure")
    return row


def increase_row(metric: Metric, allowed: float, origin: str, reading: Reading,
                 old: Reading) -> Measured:
    row = Measured(metric, allowed, reading.value, True, "", origin, Kind.increase, old.value,
                   reading.noise)
    change = row.change
    if change is None:  # a zero baseline: any growth is over any allowed percentage
        change = math.inf if reading.value > old.value else 0.0
    row.passed = change <= allowed
    if old.value > 0:
        _within_noise(row, old.value, old.se, reading)
    row.message = f"{_growth(metric, old, reading)}, limit {allowed * 100:g}%"
    if row.within_noise:
        row.message += (f", inside the measurement noise (±{fmt_percent(row.band or 0, signed=False)}"
                        "): not a failure")
    return row


def _growth(metric: Metric, old: Reading, new: Reading) -> str:
    """``params grew 0.80% (11,689,512 -> 11,782,952)``."""
    if metric.counted:
        span = f"({fmt_full(metric, old.value)} -> {fmt_full(metric, new.value)})"
    else:
        span = f"({fmt_value(metric, old.value, exact=True)} -> {fmt_value(metric, new.value, exact=True)})"
    if new.value == old.value:
        return f"{metric.value} unchanged {span}"
    if old.value == 0:
        return f"{metric.value} grew from 0 {span}"
    change = (new.value - old.value) / old.value
    verb = "grew" if change > 0 else "shrank"
    return f"{metric.value} {verb} {fmt_percent(abs(change), signed=False)} {span}"


def _baseline_notes(check: ModelCheck, base: BaselineModel, plan: CheckPlan) -> list[str]:
    notes = []
    if base.error:
        notes.append(f"the baseline has no numbers for it: it failed there ({base.error})")
    if base.inputs and check.inputs not in ("-", base.inputs):
        notes.append(f"inputs differ from the baseline ({base.inputs} -> {check.inputs}): "
                     "MACs and activations compare different inputs")
    missing = [m.value for m in plan.increase if m in check.readings and m not in base.readings]
    if missing:
        notes.append(f"not in the baseline, not compared: {', '.join(missing)}")
    if Metric.latency_ms in check.readings and Metric.latency_ms in base.readings:
        diff = setup_differences({"environment": base.environment or {}},
                                 {"environment": check.environment or {}})
        if diff:
            notes.append("latency timed in another setup than the baseline's: " + "; ".join(diff))
    return notes


def result_notes(result: CheckResult, plan: CheckPlan) -> list[str]:
    """How budgets were read (a GPU's memory), models new to the baseline and models of the
    baseline not checked now."""
    if plan.baseline is None:
        return list(plan.notes)
    checked = {m.model for m in result.models}
    notes = [*plan.notes]
    notes += [f"{m.model}: not in the baseline {plan.baseline.path} (a new model): nothing to "
              "compare" for m in result.models if m.model not in plan.baseline.models]
    notes += [f"{name}: in the baseline but not checked now (removed or renamed?)"
              for name in plan.baseline.models if name not in checked]
    return notes
