"""`inspect flops MODEL...`: MACs per module and per op, not-counted ops, other tools."""

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
from torchinspect.cli.summary import DepthOpt, PublishedOpt, WeightsConfigOpt, load_options
from torchinspect.report import OutputFormat

CompareOpt = Annotated[bool, typer.Option(
    "--compare", help="also show what thop and torchinfo report for the same model and input.")]


@command_errors
def flops(
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
    compare: CompareOpt = False,
    published: PublishedOpt = False,
    weights_config: WeightsConfigOpt = None,
    format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """MACs (FLOPs = 2 x MACs) per module and per aten op, with what is not counted."""
    from torchinspect.analysis.flops import count_flops

    dev = parse_device(device)
    check_depth(depth)
    opts = load_options(arg, arch, weights, key, strict, trust_pickle, batch, no_batch, published,
                        weights_config)
    results = [count_flops(m, input, depth=depth, compare=compare, device=dev, train=train,
                           options=opts) for m in models]
    emit_results("flops", results, format, output, [*models, arch, weights])
