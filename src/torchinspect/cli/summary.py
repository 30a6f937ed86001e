"""`inspect summary MODEL...`: the layer table and totals (several models: one comparison)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import model_command
from torchinspect.cli.options import DepthOpt, ModelsArg, TrainOpt, gpu_opt
from torchinspect.cli.output import OutputOptions, each_model, emit_results
from torchinspect.sources.case import ModelOptions

ColumnsOpt = Annotated[str | None, typer.Option(
    "--columns", metavar="COL,...",
    help="columns to show, comma-separated: layer, type, input, output, kernel, params, "
    "params_pct, self_params, macs, self_macs, trainable, output_bytes (bytes of the layer's "
    "output tensors), flops (2 x macs). Params, macs and flops include the modules inside; "
    "self_* are the module's own. Default: all but self_params, output_bytes and flops, the "
    "least useful left out to fit the terminal.")]
FoldOpt = Annotated[bool, typer.Option("--fold", help="fold runs of identical blocks into one row (×N).")]
MemoryOpt = Annotated[str, typer.Option(
    "--memory", metavar="inference|train|none",
    help="memory lines: the predicted peak of inference on CUDA (default; `inspect memory`'s "
    "engine), also of a training step (train: AdamW, forward + backward + step), or none (the "
    "sum of leaf outputs, as torchinfo).")]
GpuOpt = Annotated[str | None, gpu_opt(
    "predict for this GPU (h100, a100, l4, ...; no GPU needed): the `time` column (added to "
    "the default columns) and the memory lines (default: the GPU here, else h100).")]
TotalsOpt = Annotated[bool, typer.Option("--totals", help="totals only (one row per model).")]


@model_command()
def summary(
    models: ModelsArg,
    train: TrainOpt = False,
    depth: DepthOpt = 3,
    columns: ColumnsOpt = None,
    fold: FoldOpt = False,
    totals: TotalsOpt = False,
    memory: MemoryOpt = "inference",
    gpu: GpuOpt = None,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Layer-by-layer table: shapes, kernel, params, MACs; totals and memory estimates."""
    from torchinspect.analysis.summary import summarize, summary_columns
    from torchinspect.report.summary import summary_report

    cols = summary_columns(columns, gpu)  # usage errors before any model is built
    results = each_model(models, lambda m: summarize(
        m, depth=depth, columns=cols, fold=fold, train=train, options=opts, memory=memory,
        gpu=gpu))
    emit_results("summary", results, summary_report, out, [*models, *opts.files()],
                 totals_only=totals)
