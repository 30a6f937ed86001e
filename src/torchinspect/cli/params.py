"""`inspect params MODEL...`: parameter totals, per module, per dtype, frozen and tied."""

from __future__ import annotations

from torchinspect.cli.command import model_command
from torchinspect.cli.options import DepthOpt, ModelsArg
from torchinspect.cli.output import OutputOptions, each_model, emit_results
from torchinspect.sources.case import ModelOptions


@model_command(inputs=False)
def params(models: ModelsArg, depth: DepthOpt = 3, *, opts: ModelOptions,
           out: OutputOptions) -> None:
    """Parameter counts (tied weights once): totals, per module, per dtype, frozen, bytes."""
    from torchinspect.analysis.params import count_params
    from torchinspect.report.params import params_report

    results = each_model(models, lambda m: count_params(m, depth=depth, options=opts))
    if len(models) > 1 and not all(hasattr(r, "stats") for r in results.results):
        from torchinspect.errors import InspectError

        raise InspectError("params compares models, and a weights file without --arch is not one",
                           hint="`inspect params CKPT` one at a time, or `inspect diff A B` "
                           "to compare two checkpoints")
    emit_results("params", results, params_report, out, [*models, *opts.files()])
