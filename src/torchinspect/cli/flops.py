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
    command_errors,
    emit,
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
    from torchinspect.analysis.compare import comparison_report
    from torchinspect.analysis.flops import count_flops
    from torchinspect.errors import InspectError

    dev = parse_device(device)
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    opts = load_options(arg, arch, weights, key, strict, trust_pickle, batch, no_batch, published,
                        weights_config)
    results = [count_flops(m, input, depth=depth, compare=compare, device=dev, train=train,
                           options=opts) for m in models]
    if len(results) > 1:
        emit(comparison_report("flops", results), format, output)
    else:
        emit(results[0].to_report(), format, output)
