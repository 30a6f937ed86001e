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
    command_errors,
    emit,
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
    from torchinspect.analysis.compare import comparison_report
    from torchinspect.analysis.params import count_params
    from torchinspect.errors import InspectError

    dev = parse_device(device)
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    opts = load_options(arg, arch, weights, key, strict, trust_pickle, None, False, published,
                        weights_config)
    results = [count_params(m, depth=depth, device=dev, options=opts) for m in models]
    if len(results) > 1:
        emit(comparison_report("params", results), format, output)
    else:
        emit(results[0].to_report(), format, output)
