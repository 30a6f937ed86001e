"""`inspect doctor` -> Report: one row per finding (code, severity, module, what, fix),
then why each code matters, the counts, and what was skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Table, Text
from torchinspect.sources.origin import describe_weights

if TYPE_CHECKING:
    from torchinspect.analysis.doctor import DoctorResult


def doctor_report(r: DoctorResult) -> Report:
    from torchinspect.analysis.doctor.rules import RULES

    counts = r.counts()
    where = f"real-number checks on {r.run_device}" if r.run_device else "no real-number checks"
    checks = f"{len(r.checked)} check{'' if len(r.checked) == 1 else 's'}"
    sections: list[Any] = [Text([f"{r.model} ({r.inputs}): {checks}, {where}"])]
    if r.findings:
        located = any(f.location for f in r.findings)  # file:line in the user's own code
        sections.append(Table(
            "Findings", ["Code", "Severity", "Module", *(["Source"] if located else []), "What",
                         "Fix"],
            [[f.code, str(f.severity), f.module or "(model)",
              *([f.location or "-"] if located else []), f.what, f.fix] for f in r.findings],
            align=["left"] * (6 if located else 5), primary=True,
            wrap=["What"], code=["Fix", "Source"]))
        codes = list(dict.fromkeys(f.code for f in r.findings))
        sections.append(Text([f"{c} {RULES[c].name}: {RULES[c].why}" for c in codes],
                             title="Why it matters"))
    else:
        sections.append(Table("Findings", ["Code", "Severity", "Module", "What", "Fix"], [],
                              primary=True, footer=["no findings"]))
    sections.append(KeyValues("Result", [
        ("Errors", counts["error"]), ("Warnings", counts["warning"]), ("Info", counts["info"]),
        ("Checks run", ", ".join(r.checked) or "-"),
        ("Weights", describe_weights(r.weights)),
        ("Time", f"{r.seconds:.2f} s"),
    ]))
    lines = [f"{code} skipped: {why}" for code, why in r.skipped.items()]
    lines += [f"{code} could not finish: {why} (a bug in torchinspect: the other checks' "
              "findings stand)" for code, why in r.broken.items()]
    lines += [f"note: {n}" for n in r.notes]
    if lines:
        sections.append(Text(lines, style="yellow"))
    return Report("doctor", r.to_dict(), sections)


def checks_list_report() -> Report:
    """``inspect doctor --list-checks``: one row per registered check (code, severity, what
    it finds); the JSON holds each check's name, what it reads, trigger, why and fix."""
    from torchinspect.analysis.doctor.rules import rules

    checks = list(rules().values())
    data = {"checks": [{"code": r.code, "name": r.name, "severity": str(r.severity),
                        "reads": r.needs, "title": r.title, "trigger": r.trigger, "why": r.why,
                        "fix": r.fix} for r in checks]}
    return Report("doctor-checks", data, [
        Table("Checks", ["Code", "Severity", "Finds"],
              [[r.code, str(r.severity), r.title] for r in checks], align=["left"] * 3,
              primary=True),
        Text([f"{len(checks)} checks; --select/--ignore take these codes (or the names "
              "that -f json lists)"])])


def checks_reference() -> str:
    """Markdown for the doctor's docs page: every registered check with its severity, what
    sets it off, why it matters and the fix (``docs/hooks.py`` puts it at
    ``<!-- doctor-checks -->``, so the page cannot drift from the registry)."""
    from torchinspect.analysis.doctor.rules import rules

    needs = {"static": "the module tree", "trace": "the meta trace", "run": "a real run"}
    lines = ["| code | name | severity | reads | finds |", "|---|---|---|---|---|"]
    lines += [f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {r.severity} | {needs[r.needs]} "
              f"| {r.title} |" for r in rules().values()]
    for r in rules().values():
        lines += ["", f"### {r.code}", "", f"**`{r.name}`** ({r.severity}, reads {needs[r.needs]}): "
                  f"{r.title}.", "", f"- **Trigger:** {r.trigger}.", f"- **Why it matters:** {r.why}.",
                  f"- **Fix:** {r.fix}."]
    return "\n".join(lines)
