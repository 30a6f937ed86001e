"""The doctor's rule registry, findings and result (no torch here).

Every check has a code (TI001..TI009), a default severity, the part of the model it looks
at (``static``: module attributes; ``trace``: the meta trace; ``run``: a real CPU run), and
a generic "why it matters"/"how to fix" that a finding may make more specific.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    needs: str  # static | trace | run
    title: str
    why: str
    fix: str


RULES: dict[str, Rule] = {r.code: r for r in [
    Rule("TI001", "unregistered-submodule", Severity.error, "static",
         "modules or parameters kept in a plain list/tuple/dict",
         "parameters(), state_dict(), .to() and the optimizer never see them: they are not "
         "trained, not saved and not moved to the GPU",
         "use nn.ModuleList / nn.ModuleDict (modules) or nn.ParameterList / nn.ParameterDict "
         "(parameters)"),
    Rule("TI002", "tensor-attribute", Severity.warning, "static",
         "a tensor kept as a plain attribute instead of a buffer",
         "it is not in state_dict() (not saved or loaded) and .to()/.cuda() leave it behind, "
         "so the forward fails or mixes devices after moving the model",
         "self.register_buffer(name, tensor) (persistent=False if it must not be saved)"),
    Rule("TI003", "no-gradient", Severity.warning, "run",
         "parameters that get no gradient",
         "they are never trained (weight decay still shrinks them), cost memory, and DDP "
         "needs find_unused_parameters=True",
         "call the module in forward, delete it, or freeze it with requires_grad_(False)"),
    Rule("TI004", "eval-stochastic", Severity.error, "run",
         "the model is random in eval mode",
         "two eval-mode forwards of the same input differ: predictions and metrics are noisy "
         "and not reproducible",
         "use nn.Dropout modules, or pass training=self.training to F.dropout and friends"),
    Rule("TI005", "non-finite", Severity.error, "run",
         "NaN or Inf values",
         "one NaN spreads to every output and gradient it touches; training diverges",
         "guard the operation (add an eps inside sqrt/log, clamp before exp/division)"),
    Rule("TI006", "tensor-core-alignment", Severity.info, "static",
         "layer sizes that are not multiples of 8",
         "fp16/bf16 matrix multiplies use Tensor Cores fully only when these dimensions are "
         "multiples of 8; other sizes are padded or run slower",
         "round the dimension up to a multiple of 8 (or 64 for vocabularies)"),
    Rule("TI007", "oversized-layer", Severity.info, "static",
         "a layer that holds a large share of all parameters",
         "one layer dominates memory and checkpoint size, and often overfits",
         "pool before the classifier (global average pooling), factorize the layer, or "
         "shrink its input"),
    Rule("TI008", "frozen-and-batchnorm", Severity.info, "trace",
         "frozen parameters; BatchNorm that sees one value per channel",
         "frozen parameters are not trained (fine if intended); a BatchNorm with one value "
         "per channel raises 'Expected more than 1 value per channel when training'",
         "check the frozen list is what you meant; train with a larger batch or use "
         "LayerNorm/GroupNorm"),
    Rule("TI009", "rounded-down-output", Severity.warning, "trace",
         "a conv/pool layer whose output size was rounded down",
         "the last input rows/columns never reach any window: information silently dropped",
         "pad the input or the layer so (H + 2p - d(k-1) - 1) is a multiple of the stride, "
         "or use ceil_mode=True for pooling"),
]}

RUN_CODES = tuple(c for c, r in RULES.items() if r.needs == "run")


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
                "skipped": dict(self.skipped), "notes": list(self.notes),
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
            if code not in RULES:
                raise InspectError(f"{option} {part!r} is not a doctor check",
                                   hint=f"use codes {', '.join(RULES)} (comma-separated)")
            if code not in out:
                out.append(code)
    return out


def _normalize(part: str) -> str:
    if part.startswith("TI") and part[2:].isdigit():
        return f"TI{int(part[2:]):03d}"
    for rule in RULES.values():  # names work too: --ignore tensor-core-alignment
        if rule.name.upper() == part:
            return rule.code
    return part


def selected_codes(select: Iterable[str] | None, ignore: Iterable[str] | None) -> list[str]:
    chosen = parse_codes(as_list(select), option="--select") if select else list(RULES)
    dropped = set(parse_codes(as_list(ignore), option="--ignore")) if ignore else set()
    return [c for c in chosen if c not in dropped]
