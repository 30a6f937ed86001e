"""`inspect check` -> Report: one row per model and budget (measured, budget, PASS/FAIL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Shown, Table, Text

if TYPE_CHECKING:
    from torchinspect.analysis.check import CheckResult


def check_report(r: CheckResult) -> Report:
    rows = []
    for m in r.models:
        for x in m.results:
            shown_value, shown_limit = x.shown()
            rows.append([m.model, x.metric.option, Shown(x.value, shown_value),
                         Shown(x.limit, shown_limit), "PASS" if x.passed else "FAIL"])
    sections: list[Any] = []
    if r.config:
        sections.append(Text([f"budgets from {r.config} (command-line options win)"]))
    sections.append(Table("Budgets", ["Model", "Budget", "Measured", "Limit", "Result"], rows,
                          align=["left", "left", "right", "right", "left"], primary=True))
    failed = [m.model for m in r.models if not m.passed]
    sections.append(KeyValues("Result", [
        ("Models", len(r.models)), ("Budgets checked", len(rows)), ("Failures", r.failures),
        ("Verdict", "FAIL: " + ", ".join(failed) if failed else "PASS"),
    ]))
    return Report("check", r.to_dict(), sections)
