"""`inspect check [MODEL...] --max-params 25M --max-macs 5G`: size budgets for CI (exit 1 on failure)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.common import OutputOptions, emit, model_command
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.sources.case import ModelOptions

MaybeModelsArg = Annotated[list[str] | None, typer.Argument(
    metavar="[MODEL]...", show_default=False,
    help="models to check; default: the models listed in [tool.torchinspect.check] "
    "(pyproject.toml in this folder, or --config).")]


def _opt(name: str, units: str) -> object:
    return Annotated[str | None, typer.Option(f"--max-{name}", metavar=units.split()[0],
                                              help=f"budget: {units}.")]


ParamsOpt = _opt("params", "N parameters, e.g. 25M, 1.5e9, 30000000")
MacsOpt = _opt("macs", "N multiply-accumulates per forward, e.g. 5G")
SizeOpt = _opt("size-mb", "MB of weights (parameters + buffers, 1 MB = 10^6 bytes), e.g. 100")
ActOpt = _opt("activation-mb", "MB of activations (leaf-module outputs of one forward)")
LatencyOpt = _opt("latency-ms", "median ms per forward at the example input, measured like "
                  "`inspect bench` on --device (auto/meta: cpu; cuda for GPU budgets)")
ConfigOpt = Annotated[str | None, typer.Option(
    "--config", metavar="FILE", help="TOML file with [tool.torchinspect.check] (default: "
    "./pyproject.toml when it has one).")]
JunitOpt = Annotated[str | None, typer.Option(
    "--junit", metavar="FILE", help="also write a JUnit XML report (atomic) for CI systems.")]


@model_command()
def check(
    models: MaybeModelsArg = None,
    max_params: ParamsOpt = None,  # type: ignore[valid-type]
    max_macs: MacsOpt = None,  # type: ignore[valid-type]
    max_size_mb: SizeOpt = None,  # type: ignore[valid-type]
    max_activation_mb: ActOpt = None,  # type: ignore[valid-type]
    max_latency_ms: LatencyOpt = None,  # type: ignore[valid-type]
    config: ConfigOpt = None,
    junit: JunitOpt = None,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Enforce size budgets (params, MACs, MB) on one or more models; exit 1 if any fails."""
    from torchinspect.analysis.check import check_budgets, write_junit
    from torchinspect.cli.common import input_files
    from torchinspect.report.check import check_report

    if junit:  # refused before any work, like --output
        import os

        from torchinspect.io.atomic import check_target

        if out.output and os.path.abspath(junit) == os.path.abspath(out.output):
            raise InspectError(f"--junit {junit} and --output name the same file",
                               hint="give the JUnit XML and the report different names")
        check_target(junit, protect=input_files([*(models or []), *opts.files(), config]))
    result = check_budgets(models, max_params=max_params, max_macs=max_macs,
                           max_size_mb=max_size_mb, max_activation_mb=max_activation_mb,
                           max_latency_ms=max_latency_ms, config=config, options=opts)
    inputs = [*(models or []), *opts.files(), config, result.config]
    if junit:
        write_junit(result, junit, protect=input_files(inputs))
        typer.echo(f"wrote {junit}", err=True)
    emit(check_report(result), out, inputs=inputs)
    if not result.passed:
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
