"""`inspect params MODEL...`: parameter totals, per module, per dtype, frozen and tied."""

from __future__ import annotations

from torchinspect.cli.common import DepthOpt, ModelsArg, OutputOptions, emit_results, model_command
from torchinspect.sources.case import ModelOptions


@model_command(inputs=False)
def params(models: ModelsArg, depth: DepthOpt = 3, *, opts: ModelOptions,
           out: OutputOptions) -> None:
    """Parameter counts (tied weights once): totals, per module, per dtype, frozen, bytes."""
    from torchinspect.analysis.params import count_params
    from torchinspect.report.params import params_report

    results = [count_params(m, depth=depth, options=opts) for m in models]
    emit_results("params", results, params_report, out, [*models, *opts.files()])
