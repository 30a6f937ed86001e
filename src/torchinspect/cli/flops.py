"""`inspect flops MODEL...`: MACs per module and per op, not-counted ops, other tools."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import model_command
from torchinspect.cli.options import DepthOpt, ModelsArg, TrainOpt
from torchinspect.cli.output import OutputOptions, each_model, emit_results
from torchinspect.sources.case import ModelOptions

CrossCheckOpt = Annotated[str | None, typer.Option(
    "--cross-check", metavar="thop,torchinfo,fvcore|all",
    help="also run these counters on the same model and input and show their totals beside "
    "ours (fvcore runs on a real CPU copy).")]
CompareOpt = Annotated[bool, typer.Option(
    "--compare", hidden=True, help="deprecated: --cross-check thop,torchinfo.")]


@model_command()
def flops(models: ModelsArg, train: TrainOpt = False, depth: DepthOpt = 3,
          cross_check: CrossCheckOpt = None, compare: CompareOpt = False, *,
          opts: ModelOptions, out: OutputOptions) -> None:
    """MACs (FLOPs = 2 x MACs) per module (with children, and self) and per aten op."""
    from torchinspect.analysis.flops import count_flops, parse_cross_check
    from torchinspect.report.flops import flops_report

    if compare:
        typer.echo("note: --compare is deprecated, use --cross-check thop,torchinfo (or all)",
                   err=True)
        cross_check = cross_check or "thop,torchinfo"
    tools = parse_cross_check(cross_check)  # a bad name is refused before any model is built
    results = each_model(models, lambda m: count_flops(m, depth=depth, cross_check=tools,
                                                       train=train, options=opts))
    emit_results("flops", results, flops_report, out, [*models, *opts.files()])
