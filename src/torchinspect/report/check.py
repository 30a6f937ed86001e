"""`inspect check` -> Report: what failed first (a pull-request comment reads it at a
glance), then one row per model and limit (measured, baseline and change, limit, headroom,
where the budget came from, the result), then notes and the verdict."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Shown, Table, Text

if TYPE_CHECKING:
    from torchinspect.check import CheckResult, Measured, ModelCheck


def _percent(x: float | None) -> Shown:
    from torchinspect.check.metrics import fmt_percent

    if x is None:
        return Shown("", "-")
    return Shown(x, fmt_percent(x))


def _shown_path(path: str) -> str:
    """A path as short as it reads right from here (``../pyproject.toml``)."""
    rel = os.path.relpath(path)
    return rel if len(rel) < len(path) else path


def _raw(x: Measured, v: float | None) -> Any:
    """The CSV value: counts as integers (29034, not 29034.0), nothing as empty."""
    if v is None:
        return ""
    return int(v) if x.metric.counted and float(v).is_integer() else v


def _row(m: ModelCheck, x: Measured, compare: bool) -> list[Any]:
    from torchinspect.check.metrics import fmt_full, fmt_value

    shown_value, shown_limit = x.shown()
    base = "-" if x.baseline is None else fmt_value(x.metric, x.baseline, exact=True)
    if base == shown_value and x.value != x.baseline:  # 29.03K -> 29.03K reads "unchanged"
        shown_value, base = fmt_full(x.metric, x.value or 0), fmt_full(x.metric, x.baseline or 0)
    if x.noise is not None:
        shown_value += f" ({x.shown_noise()})"
    row: list[Any] = [m.model, x.metric.value, Shown(_raw(x, x.value), shown_value)]
    if compare:
        row += [Shown(_raw(x, x.baseline), base), _percent(x.change)]
    limit = _raw(x, x.limit) if x.kind == "budget" else x.limit if x.limit is not None else ""
    return row + [Shown(limit, shown_limit),
                  _percent(x.headroom), x.origin, x.result]


def _table(r: CheckResult, compare: bool) -> Table:
    columns = ["Model", "Metric", "Measured", *(["Baseline", "Change"] if compare else []),
               "Limit", "Headroom", "Budget", "Result"]
    rows, quiet = [], []
    for m in r.models:
        if m.error is not None:
            rows.append([m.model, "-", "-", *(["-", "-"] if compare else []), "-", "-",
                         "-", "ERROR"])
            quiet.append(False)
        for x in m.results:
            rows.append(_row(m, x, compare))
            quiet.append(compare and x.passed and not x.within_noise and x.baseline is not None
                         and x.value == x.baseline)
    align = ["left", "left", "right", *(["right", "right"] if compare else []), "right",
             "right", "left", "left"]
    # in a narrow terminal: where each limit came from first, then the headroom (the
    # limit minus the change, both still shown)
    return Table("Budgets", columns, rows, align=align, primary=True,
                 quiet=quiet if any(quiet) else None, quiet_label="unchanged",
                 optional=["Budget", "Headroom"], fit_hint=_fit_hint)


def _fit_hint(left_out: list[str]) -> str:
    return "A wider terminal, a pipe, --format markdown or --junit shows them."


def _problems(r: CheckResult) -> list[str]:
    lines = []
    for m in r.models:
        if m.error is not None:
            lines.append(f"{m.model}: ERROR {m.error}")
            if m.hint:
                lines.append(f"{m.model}: hint: {m.hint}")
        lines.extend(f"{m.model}: {x.message}" for x in m.results if not x.passed)
    return lines


def check_report(r: CheckResult) -> Report:
    compare = r.baseline is not None
    header = []
    if r.config:
        header.append(f"budgets from {_shown_path(r.config)} (command-line options win)")
    if r.baseline:
        header.append(f"compared with the baseline {_shown_path(r.baseline)}")
    sections: list[Any] = [Text(header)] if header else []
    problems = _problems(r)
    if problems:
        sections.append(Text(problems, title="Failures"))
    sections.append(_table(r, compare))
    notes = [f"{m.model}: {x.message}" for m in r.models for x in m.results if x.within_noise]
    notes += [f"{m.model}: {n}" for m in r.models for n in m.notes] + list(r.notes)
    if notes:
        sections.append(Text(notes, title="Notes"))
    failed = [m.model + (" (error)" if m.error else "") for m in r.models if not m.passed]
    checked = sum(x.kind != "change" for m in r.models for x in m.results)
    sections.append(KeyValues("Result", [
        ("Models", len(r.models)), ("Budgets checked", checked), ("Failures", r.failures),
        ("Errors", r.errors), ("Verdict", "FAIL: " + ", ".join(failed) if failed else "PASS"),
    ]))
    verdict = "FAIL" if failed else "PASS"
    title = (f"torchinspect check: {verdict} ({len(r.models)} model(s), {checked} "
             f"budget(s) checked" + (f", {r.failures} failed" if r.failures else "") + ")")
    return Report("check", r.to_dict(), sections, title=title)
