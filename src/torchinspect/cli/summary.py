"""`inspect summary MODEL...`: the layer table and totals (several models: one comparison)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from torchinspect.cli.common import (
    DepthOpt,
    ModelsArg,
    OutputOptions,
    TrainOpt,
    each_model,
    emit_results,
    gpu_opt,
    model_command,
)
from torchinspect.errors import InspectError
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
    "GPU the `time` column is predicted for (h100, a100, l4, ...; `inspect bench --predict`'s "
    "model, no GPU needed).")]
TotalsOpt = Annotated[bool, typer.Option("--totals", help="totals only (one row per model).")]


def _add_times(s: Any, model: str, gpu: str | None, opts: ModelOptions) -> Any:
    """Fill the `time` column: predicted ms per call of each row on ``gpu`` (None: as is)."""
    if gpu is None:
        return s
    from torchinspect.bench.predict import module_times
    from torchinspect.bench.predict.gpus import validation_text
    from torchinspect.sources.case import make_case

    times, pred = module_times(make_case(model, options=opts, device="meta"), gpu)
    for row in s.rows:
        t = times.get(row.name)
        row.time_ms = None if t is None or not row.ran else t / max(row.calls, 1)
    r = pred.results[0]
    s.notes.append(
        f"Time (pred.): PREDICTED ms per call on {pred.gpu} ({r.dtype}, CUDA-graph replay; "
        f"whole model {r.gpu_ms:.3f} ms, eager {r.eager_ms:.3f} ms, {r.binds} binds), not "
        f"measured; {pred.source}; {validation_text(pred.validation)}")
    return s


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
    from torchinspect.analysis.summary import parse_columns, summarize
    from torchinspect.report.summary import summary_report

    cols = parse_columns(columns)
    timed = any(c.value == "time" for c in cols)
    if timed and gpu is None:
        raise InspectError("--columns time: predicted for which GPU?",
                           hint="add --gpu NAME (e.g. --gpu h100)")
    results = each_model(models, lambda m: _add_times(summarize(
        m, depth=depth, columns=cols, fold=fold, train=train, options=opts, memory=memory),
        m, gpu if timed else None, opts))
    emit_results("summary", results, summary_report, out, [*models, *opts.files()],
                 totals_only=totals)
