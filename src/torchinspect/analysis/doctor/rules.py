"""The doctor's check registry, findings and result (no torch here).

Every check is registered by ``@doctor_check``: a code (TI001, ...), a name, a default
severity, the part of the model it reads (``static``: module attributes; ``trace``: the
meta trace; ``run``: the real runs), what sets it off, why it matters and the fix (which a
finding may make more specific), and the function. Dispatch, ``--select``/``--ignore`` and
the docs page are generated from this one table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from torchinspect.arguments import as_list
from torchinspect.errors import InspectError


class Severity(StrEnum):
    info = "info"
    warning = "warning"
    error = "error"

    @property
    def rank(self) -> int:
        return _RANK[self.value]


_RANK = {"info": 0, "warning": 1, "error": 2}


class FailOn(StrEnum):
    """``--fail-on``: the lowest severity that makes the run fail (exit 1)."""

    never = "never"
    info = "info"
    warning = "warning"
    error = "error"


class Needs(StrEnum):
    """What a check reads: the module tree, the meta trace, or the real runs."""

    static = "static"  # module attributes
    trace = "trace"  # the meta trace
    run = "run"  # a real run


NEEDS = tuple(Needs)


@dataclass(frozen=True)
class Rule:
    """One doctor check: what it is called, how bad, what sets it off, why, the fix, and the
    function that finds it (``check(ctx) -> list[Finding]``, see ``.context.Context``)."""

    code: str
    name: str
    severity: Severity
    needs: Needs
    title: str
    trigger: str
    why: str
    fix: str
    check: Callable[[Any], list[Finding]] | None = field(default=None, compare=False, repr=False)


# code -> Rule, filled by the ``@doctor_check`` decorator as the check modules are imported
# (``torchinspect.analysis.doctor`` imports them all); read it through ``rules()``.
RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add ``rule`` to the registry; a code or a name already taken is refused."""
    if not re.fullmatch(r"TI\d{3}", rule.code):
        raise ValueError(f"doctor check code {rule.code!r} is not TI followed by three digits")
    if rule.needs not in NEEDS:
        raise ValueError(f"doctor check {rule.code}: needs={str(rule.needs)!r}, expected one of "
                         f"{tuple(str(n) for n in NEEDS)}")
    for other in RULES.values():
        if rule.code == other.code or rule.name == other.name:
            raise ValueError(f"doctor check {rule.code} {rule.name} is registered twice "
                             f"(taken by {other.code} {other.name})")
    RULES[rule.code] = rule
    return rule


def _needs(code: str, needs: Needs | str) -> Needs:
    if needs not in NEEDS:
        raise ValueError(f"doctor check {code}: needs={str(needs)!r}, expected one of "
                         f"{tuple(str(n) for n in NEEDS)}")
    return Needs(needs)


def doctor_check(code: str, name: str, severity: str, needs: Needs | str, *, title: str, trigger: str,
                 why: str, fix: str) -> Callable[[Callable[[Any], list[Finding]]],
                                                 Callable[[Any], list[Finding]]]:
    """Decorator: register ``fn(ctx) -> list[Finding]`` as the doctor check ``code``.

    Dispatch, ``--select``/``--ignore`` names and the doctor docs page all come from here, so
    a new check is one decorated function (plus its test)::

        @doctor_check("TI042", "huge-embedding", "info", "static", title="...", trigger="...",
                      why="...", fix="...")
        def huge_embedding(ctx):
            return [Finding("TI042", Severity.info, name, "...") for name, m in ...]
    """

    def decorate(fn: Callable[[Any], list[Finding]]) -> Callable[[Any], list[Finding]]:
        register(Rule(code, name, Severity(severity), _needs(code, needs), title, trigger, why,
                      fix, fn))
        return fn

    return decorate


def rules() -> dict[str, Rule]:
    """Every registered check, by code. (Importing this module imports its package first,
    whose ``__init__`` imports the built-in checks: the registry is full by then.)"""
    return dict(sorted(RULES.items()))


def run_codes() -> tuple[str, ...]:
    return tuple(c for c, r in rules().items() if r.needs == "run")


@dataclass
class Finding:
    """One problem in one place (``module`` is a qualified name, "" for the whole model)."""

    code: str
    severity: Severity
    module: str
    what: str
    why: str = ""
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    location: str | None = None  # file:line in the user's own code (see .locate)

    def __post_init__(self) -> None:
        rule = RULES[self.code]
        self.why = self.why or rule.why
        self.fix = self.fix or rule.fix

    @property
    def name(self) -> str:
        return RULES[self.code].name

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "severity": str(self.severity),
                "module": self.module, "location": self.location, "what": self.what,
                "why": self.why, "fix": self.fix, "data": self.data}


@dataclass
class DoctorResult:
    """What ``inspect doctor`` found on one model."""

    model: str
    inputs: str
    findings: list[Finding]
    checked: list[str]  # codes that ran
    skipped: dict[str, str] = field(default_factory=dict)  # code -> why it did not run
    broken: dict[str, str] = field(default_factory=dict)  # code -> the check's own error
    notes: list[str] = field(default_factory=list)
    run_device: str | None = None  # where the real-number checks ran (cpu), None if none
    seconds: float = 0.0
    weights: dict[str, Any] | None = None  # WeightsOrigin.to_dict(): what the real checks ran on

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings:
            out[f.severity.value] += 1
        return out

    def failed(self, fail_on: FailOn | str) -> bool:
        fail_on = FailOn(fail_on)
        if fail_on is FailOn.never:
            return False
        limit = _RANK[fail_on.value]
        return any(f.severity.rank >= limit for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "inputs": self.inputs, "counts": self.counts(),
                "findings": [f.to_dict() for f in self.findings], "checked": list(self.checked),
                "skipped": dict(self.skipped), "not_finished": dict(self.broken),
                "notes": list(self.notes),
                "run_device": self.run_device, "weights": self.weights,
                "seconds": round(self.seconds, 3)}


def parse_codes(values: Sequence[str] | str | None, *, option: str) -> list[str]:
    """``["TI001,TI003", "ti5"]`` -> ``["TI001", "TI003", "TI005"]`` (validated)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for value in values:
        for part in str(value).replace(" ", ",").split(","):
            part = part.strip().upper()
            if not part:
                continue
            code = _normalize(part)
            if code not in rules():
                raise InspectError(f"{option} {part!r} is not a doctor check",
                                   hint=f"use codes {rules_span()} or their names "
                                   "(comma-separated; docs: inspect doctor)")
            if code not in out:
                out.append(code)
    return out


def fold_codes(codes: Iterable[str]) -> str:
    """``TI001, TI003-TI005``: runs of three or more consecutive codes folded."""
    runs: list[list[str]] = []
    for code in sorted(codes):
        if runs and code[:2] == runs[-1][-1][:2] and code[2:].isdigit() \
                and runs[-1][-1][2:].isdigit() and int(code[2:]) == int(runs[-1][-1][2:]) + 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    return ", ".join(", ".join(r) if len(r) < 3 else f"{r[0]}-{r[-1]}" for r in runs)


def rules_span() -> str:
    codes = list(rules())
    return f"{codes[0]}..{codes[-1]}" if codes else "-"


def _normalize(part: str) -> str:
    if part.startswith("TI") and part[2:].isdigit():
        return f"TI{int(part[2:]):03d}"
    for rule in rules().values():  # names work too: --ignore tensor-core-alignment
        if rule.name.upper() == part:
            return rule.code
    return part


def selected_codes(select: Iterable[str] | None, ignore: Iterable[str] | None) -> list[str]:
    chosen = parse_codes(as_list(select), option="--select") if select else list(rules())
    dropped = set(parse_codes(as_list(ignore), option="--ignore")) if ignore else set()
    return [c for c in chosen if c not in dropped]
