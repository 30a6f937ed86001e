"""``inspect doctor``: find the classic PyTorch pitfalls in a model (checks TI001..TI009).

* ``.rules``     the registry (code, severity, why, fix), findings, the result
* ``.structure`` module-tree checks, no forward (TI001, TI002, TI006, TI007, TI008 frozen)
* ``.shapes``    checks over the meta trace's shapes (TI008 BatchNorm, TI009)
* ``.runtime``   checks that need real numbers on CPU (TI003, TI004, TI005)
* ``.locate``    ``file:line`` of a finding in the user's own code

``diagnose`` is the library entry point (``torchinspect.diagnose``). The model is never
changed: see ``.runtime`` for how the real runs leave it untouched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from torchinspect import device as devices
from torchinspect.analysis.doctor import runtime, shapes, structure
from torchinspect.analysis.doctor.locate import locate
from torchinspect.analysis.doctor.rules import (
    RULES,
    RUN_CODES,
    DoctorResult,
    FailOn,
    Finding,
    Rule,
    Severity,
    parse_codes,
    selected_codes,
)
from torchinspect.arguments import renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.sources.case import ModelLike, ModelOptions, make_case
from torchinspect.sources.materialize import has_lazy
from torchinspect.trace import trace_model
from torchinspect.trace.policy import materialized_lazy

__all__ = ["RULES", "DoctorResult", "FailOn", "Finding", "Rule", "Severity", "diagnose",
           "diagnose_case", "parse_codes"]

_TRACE_CODES = {"TI008", "TI009"}


@renamed_keywords(model_or_spec="model")
def diagnose(model: ModelLike, inputs: Any = None, *, select: Sequence[str] | None = None,
             ignore: Sequence[str] | None = None, options: ModelOptions | None = None,
             device: str | None = None) -> DoctorResult:
    """Run the doctor's checks on a model (an ``nn.Module`` or any MODEL text).

    ``select``/``ignore`` take codes (``"TI003"``) or rule names. Checks that need real
    numbers (TI003-TI005) run on ``device`` (default: ``options.device``, else CPU) with the
    example input; ``device="meta"`` skips them. The others read the module tree and the meta
    trace. The model is never changed.
    """
    opts = options or ModelOptions(device="cpu")
    wanted = devices.parse_device(device if device is not None else opts.device)
    # built on meta whatever the device: the structure and shape checks need no memory, and a
    # model too big for the device still gets them (TI003-TI005 then say why they did not run)
    case = make_case(model, inputs, options=opts,
                     device="meta" if isinstance(model, str) else wanted)
    case.requested = wanted
    return diagnose_case(case, select=select, ignore=ignore)


def diagnose_case(case: Any, *, select: Sequence[str] | None = None,
                  ignore: Sequence[str] | None = None, trace: Any = None) -> DoctorResult:
    """The checks on a resolved ``ModelCase``.

    Real-number checks run on ``case.requested`` (auto -> cpu; meta -> skipped). ``trace``:
    an eval-mode Trace of this case already made (``inspect report`` passes its own), so the
    shape checks need no second forward.
    """
    start = time.perf_counter()
    codes = selected_codes(select, ignore)
    chosen = set(codes)
    model = case.model
    findings: list[Finding] = []
    notes: list[str] = []
    skipped: dict[str, str] = {}

    if has_lazy(model):  # the checks read sizes: a meta copy sized by the example (the
        # caller's stays lazy)
        model = materialized_lazy(model, case.require_example(), False, notes)

    if "TI001" in chosen:
        findings += structure.unregistered(model)
    if "TI002" in chosen:
        findings += structure.tensor_attributes(model)
    if "TI006" in chosen:
        findings += structure.tensor_core_alignment(model)
    if "TI007" in chosen:
        findings += structure.oversized_layers(model)
    if "TI008" in chosen:
        findings += structure.frozen_parameters(model)
    if chosen & _TRACE_CODES:
        if trace is None or trace.train:
            trace = trace_model(model, case.require_example(), device="meta", rebuild=case.rebuild)
        if trace.fallback_reason:
            notes.append(f"shapes traced on {trace.device}: {trace.fallback_reason}")
        if "TI008" in chosen:
            findings += shapes.batchnorm_single_value(model, trace)
        if "TI009" in chosen:
            findings += shapes.rounded_down_outputs(model, trace)

    run_device = None
    wanted = [c for c in RUN_CODES if c in chosen]
    if wanted and case.requested == "meta":
        skipped.update({c: "--device meta: no real numbers" for c in wanted})
    elif wanted:
        import torch

        device = devices.real_device(case.requested)
        with torch.random.fork_rng(devices=[]):  # random inputs must not move the user's RNG
            run_device = _run_checks(case, device, chosen, wanted, findings, notes, skipped)

    locate(findings, model)
    if run_device is not None:
        note = case.weights.note(f"{', '.join(c for c in wanted if c not in skipped)} ran on "
                                 "an untrained model")
        notes += [note] if note else []
    order = {code: i for i, code in enumerate(RULES)}
    findings.sort(key=lambda f: (-f.severity.rank, order[f.code]))
    return DoctorResult(
        model=case.name, inputs=case.describe_inputs(), findings=findings,
        checked=[c for c in codes if c not in skipped], skipped=skipped, notes=notes,
        run_device=run_device, seconds=time.perf_counter() - start,
        weights=case.weights.to_dict(digest=run_device is not None))


def _run_checks(case: Any, device: str, chosen: set[str], wanted: list[str], findings: list[Finding],
                notes: list[str], skipped: dict[str, str]) -> str | None:
    """TI003-TI005 on a real model; returns the device they ran on (None: skipped)."""
    try:
        real = case.real_model(device)
        args, kwargs = case.inputs_on(device)
    except InspectError as exc:  # too big for this machine, or no way to get weights
        skipped.update({c: f"no real model on {device}: {exc.message}" for c in wanted})
        return None
    if "TI005" in chosen:
        findings += runtime.nonfinite_weights(real)
    for part in (runtime.check_eval(real, args, kwargs, chosen),
                 runtime.check_gradients(real, args, kwargs, chosen)):
        findings += part.findings
        notes += part.notes
        skipped.update({c: why for c, why in part.skipped.items() if c in chosen})
    return device
