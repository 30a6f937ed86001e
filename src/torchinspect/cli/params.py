"""`inspect params MODEL...`: parameter totals, per module, per dtype, frozen and tied."""

from __future__ import annotations

from torchinspect.cli.common import (
    ArchOpt,
    ArgOpt,
    DeviceOpt,
    FormatOpt,
    KeyOpt,
    ModelsArg,
    OutputOpt,
    StrictOpt,
    TrustOpt,
    WeightsOpt,
    check_depth,
    command_errors,
    emit_results,
    parse_device,
)
from torchinspect.cli.summary import DepthOpt, PublishedOpt, WeightsConfigOpt, load_options
from torchinspect.report import OutputFormat


@command_errors
def params(
    models: ModelsArg,
    arg: ArgOpt = None,
    arch: ArchOpt = None,
    weights: WeightsOpt = None,
    key: KeyOpt = None,
    strict: StrictOpt = True,
    trust_pickle: TrustOpt = False,
    device: DeviceOpt = "auto",
    depth: DepthOpt = 3,
    published: PublishedOpt = False,
    weights_config: WeightsConfigOpt = None,
    format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Parameter counts (tied weights once): totals, per module, per dtype, frozen, bytes."""
    from torchinspect.analysis.params import count_params

    dev = parse_device(device)
    check_depth(depth)
    opts = load_options(arg, arch, weights, key, strict, trust_pickle, None, False, published,
                        weights_config)
    results = [count_params(m, depth=depth, device=dev, options=opts) for m in models]
    emit_results("params", results, format, output, [*models, arch, weights])
