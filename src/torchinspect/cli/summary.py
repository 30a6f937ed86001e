"""`inspect summary MODEL...`: the layer table and totals (several models: one comparison)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.common import (
    ArchOpt,
    ArgOpt,
    BatchOpt,
    DeviceOpt,
    FormatOpt,
    InputOpt,
    KeyOpt,
    ModelsArg,
    NoBatchOpt,
    OutputOpt,
    StrictOpt,
    TrainOpt,
    TrustOpt,
    WeightsOpt,
    check_depth,
    command_errors,
    emit_results,
    parse_device,
)
from torchinspect.report import OutputFormat

DepthOpt = Annotated[int, typer.Option("--depth", help="deepest module level shown as rows "
                                       "(deeper layers are folded into their parent).")]
ColumnsOpt = Annotated[str | None, typer.Option(
    "--columns", metavar="COL,...",
    help="columns to show: layer,type,input,output,kernel,params,params_pct,macs,trainable.")]
FoldOpt = Annotated[bool, typer.Option("--fold", help="fold runs of identical blocks into one row (×N).")]
TotalsOpt = Annotated[bool, typer.Option("--totals", help="totals only (one row per model).")]
PublishedOpt = Annotated[bool, typer.Option(
    "--published", help="torchvision: build with the first published weights' settings and input size.")]
WeightsConfigOpt = Annotated[str | None, typer.Option(
    "--weights-config", metavar="NAME",
    help="torchvision: build with the settings and input size of weights NAME (e.g. IMAGENET1K_V1).")]


def load_options(args, arch, weights, key, strict, trust_pickle, batch, no_batch, published,
                 weights_config):  # type: ignore[no-untyped-def]
    from torchinspect.analysis.prepare import LoadOptions

    config = weights_config if weights_config is not None else ("default" if published else None)
    return LoadOptions(args=args, arch=arch, weights=weights, key=key, strict=strict,
                       trust_pickle=trust_pickle, weights_config=config, batch=batch,
                       no_batch=no_batch)


@command_errors
def summary(
    models: ModelsArg,
    input: InputOpt = None,
    arg: ArgOpt = None,
    arch: ArchOpt = None,
    weights: WeightsOpt = None,
    key: KeyOpt = None,
    strict: StrictOpt = True,
    trust_pickle: TrustOpt = False,
    device: DeviceOpt = "auto",
    batch: BatchOpt = None,
    no_batch: NoBatchOpt = False,
    train: TrainOpt = False,
    depth: DepthOpt = 3,
    columns: ColumnsOpt = None,
    fold: FoldOpt = False,
    totals: TotalsOpt = False,
    published: PublishedOpt = False,
    weights_config: WeightsConfigOpt = None,
    format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Layer-by-layer table: shapes, kernel, params, MACs; totals and memory estimates."""
    from torchinspect.analysis.summary import parse_columns, summarize

    dev = parse_device(device)
    check_depth(depth)
    cols = parse_columns(columns)
    opts = load_options(arg, arch, weights, key, strict, trust_pickle, batch, no_batch, published,
                        weights_config)
    results = [summarize(m, input, depth=depth, columns=cols, fold=fold, device=dev, train=train,
                         options=opts) for m in models]
    emit_results("summary", results, format, output, [*models, arch, weights],
                 totals_only=totals)
