"""`inspect flops MODEL...`: MACs per module and per op, not-counted ops, other tools."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.common import (
    DepthOpt,
    ModelsArg,
    OutputOptions,
    TrainOpt,
    emit_results,
    model_command,
)
from torchinspect.sources.case import ModelOptions

CompareOpt = Annotated[bool, typer.Option(
    "--compare", help="also show what thop and torchinfo report for the same model and input.")]


@model_command()
def flops(models: ModelsArg, train: TrainOpt = False, depth: DepthOpt = 3,
          compare: CompareOpt = False, *, opts: ModelOptions, out: OutputOptions) -> None:
    """MACs (FLOPs = 2 x MACs) per module (with children, and self) and per aten op."""
    from torchinspect.analysis.flops import count_flops
    from torchinspect.report.flops import flops_report

    results = [count_flops(m, depth=depth, compare=compare, train=train, options=opts)
               for m in models]
    emit_results("flops", results, flops_report, out, [*models, *opts.files()])
