"""``inspect doctor``: find the classic PyTorch pitfalls in a model, at the line that made them.

* ``.rules``     the registry (``@doctor_check``: code, severity, trigger, why, fix, check),
                 findings, the result
* ``.context``   what a check reads: the model, where its modules were built, the meta trace
                 and the real runs (each made once, when a chosen check asks)
* ``.structure`` module-tree checks, no forward (TI001, TI002, TI006-TI008, TI017, TI020, TI021)
* ``.shapes``    checks over the meta trace's shapes (TI008 BatchNorm, TI009)
* ``.forward``   checks over the real runs (TI003-TI005, TI010-TI016, TI018, TI019)
* ``.dataflow``  checks over what the forward does to its values (TI022, TI024-TI027)
* ``.sharing``   one BatchNorm used at several places (TI023)
* ``.runtime``   the real runs (CPU by default), which leave the model untouched
* ``.watch``     what the forward does, statement by statement (a TorchFunctionMode)
* ``.sites``     ``file:line`` of statements and of the lines that built modules
* ``.source``    what the source says: the statement that sets an attribute, calls a module
* ``.locate``    ``file:line`` for findings that did not carry their own

``diagnose`` is the library entry point (``torchinspect.diagnose``); ``doctor_check`` adds
a check of your own. The model is never changed: see ``.runtime``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from torchinspect import device as devices
from torchinspect.analysis.doctor import (  # noqa: F401 - register checks
    dataflow,
    forward,
    shapes,
    sharing,
    structure,
)
from torchinspect.analysis.doctor.context import Context, Skip
from torchinspect.analysis.doctor.locate import locate
from torchinspect.analysis.doctor.rules import (
    RULES,
    DoctorResult,
    FailOn,
    Finding,
    Rule,
    Severity,
    doctor_check,
    fold_codes,
    parse_codes,
    rules,
    selected_codes,
)
from torchinspect.analysis.doctor.sites import init_sites, recording_sites, tensor_sites
from torchinspect.analysis.doctor.source import module_sites
from torchinspect.arguments import renamed_keywords
from torchinspect.errors import InspectError, first_line
from torchinspect.sources.case import ModelLike, ModelOptions, make_case
from torchinspect.sources.materialize import has_lazy
from torchinspect.trace.policy import materialized_lazy

__all__ = ["RULES", "Context", "DoctorResult", "FailOn", "Finding", "Rule", "Severity", "Skip",
           "diagnose", "diagnose_case", "doctor_check", "parse_codes", "rules"]


@renamed_keywords(model_or_spec="model")
def diagnose(model: ModelLike, inputs: Any = None, *, select: Sequence[str] | None = None,
             ignore: Sequence[str] | None = None, options: ModelOptions | None = None,
             device: str | None = None) -> DoctorResult:
    """Run the doctor's checks on a model (an ``nn.Module`` or any MODEL text).

    ``select``/``ignore`` take codes (``"TI003"``) or rule names. Checks that need real
    numbers run on ``device`` (default: ``options.device``, else CPU) with the example
    input; ``device="meta"`` skips them. The others read the module tree and the meta
    trace. The model is never changed.
    """
    opts = options or ModelOptions(device="cpu")
    wanted = devices.parse_device(device if device is not None else opts.device)
    # built on meta whatever the device: the structure and shape checks need no memory, and a
    # model too big for the device still gets them (the run checks then say why they did not
    # run). While it is built, the line that constructs each module is recorded.
    with recording_sites() as built:
        case = make_case(model, inputs, options=opts,
                         device="meta" if isinstance(model, str) else wanted)
    case.requested = wanted
    return diagnose_case(case, select=select, ignore=ignore,
                         sites={**module_sites(case.model, built.modules),
                                **tensor_sites(case.model, built)},
                         inits=init_sites(case.model, built))


def diagnose_case(case: Any, *, select: Sequence[str] | None = None,
                  ignore: Sequence[str] | None = None, trace: Any = None,
                  sites: dict[str, str] | None = None,
                  inits: dict[str, str] | None = None) -> DoctorResult:
    """The checks on a resolved ``ModelCase``.

    Real-number checks run on ``case.requested`` (auto -> cpu; meta -> skipped). ``trace``:
    an eval-mode Trace of this case already made (``inspect report`` passes its own), so the
    shape checks need no second forward. ``sites``: module name -> the line that built it
    (``diagnose`` records them; otherwise they are read from the classes' source);
    ``inits``: parameter name -> the ``nn.init.*`` call that set it.
    """
    start = time.perf_counter()
    codes = selected_codes(select, ignore)
    registry = rules()
    model = case.model
    notes: list[str] = []
    if has_lazy(model):  # the checks read sizes: a meta copy sized by the example (the
        # caller's stays lazy)
        model = materialized_lazy(model, case.require_example(), False, notes)
    ctx = Context(case, model, set(codes), sites if sites is not None else module_sites(model, {}),
                  inits=inits or {}, given_trace=trace, notes=notes)
    findings: list[Finding] = []
    skipped: dict[str, str] = {}
    broken: dict[str, str] = {}
    for code in codes:
        check = registry[code].check
        if check is None:
            continue
        try:
            found = check(ctx)
        except Skip as why:
            skipped[code] = why.reason
        except InspectError:
            raise  # the user's input (a bad --input, a model that cannot be built): exit 2
        except Exception as exc:  # noqa: BLE001 - one check's own failure never ends the run
            broken[code] = first_line(exc, typed=True)
        else:
            findings += found

    locate(findings, model, ctx.sites)
    ran = [c for c in codes if c not in skipped and c not in broken
           and registry[c].needs == "run"]
    if ctx.run_device is not None and ran:
        note = case.weights.note(f"the {len(ran)} checks that run it ({fold_codes(ran)}) ran on "
                                 "an untrained model")
        ctx.notes += [note] if note else []
    findings.sort(key=lambda f: (-f.severity.rank, f.code))
    return DoctorResult(
        model=case.name, inputs=case.describe_inputs(), findings=findings,
        checked=[c for c in codes if c not in skipped and c not in broken], skipped=skipped,
        broken=broken, notes=ctx.notes,
        run_device=ctx.run_device, seconds=time.perf_counter() - start,
        weights=case.weights.to_dict(digest=ctx.run_device is not None))
