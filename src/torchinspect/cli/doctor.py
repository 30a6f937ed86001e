"""`inspect doctor MODEL`: find the classic PyTorch pitfalls (the checks: analysis/doctor)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.common import ModelArg, OutputOptions, emit, model_command
from torchinspect.errors import ExitStatus
from torchinspect.sources.case import ModelOptions

SelectOpt = Annotated[list[str] | None, typer.Option(
    "--select", metavar="CODES", help="run only these checks (comma-separated codes such as "
    "TI001, or names such as unregistered-submodule; docs/commands/doctor.md lists them).")]
IgnoreOpt = Annotated[list[str] | None, typer.Option(
    "--ignore", metavar="CODES", help="skip these checks (comma-separated codes).")]
FailOnOpt = Annotated[str, typer.Option(
    "--fail-on", metavar="never|info|warning|error",
    help="exit 1 when a finding is at least this severe (default: error, as linters do; "
    "never: always exit 0).")]


@model_command(device_default="cpu", device_help="where the checks that need a real run "
               "(TI003-TI005, TI010-TI016, TI018, TI019) run: cpu (default), cuda[:N]; meta "
               "skips them. The rest use meta.")
def doctor(
    model: ModelArg,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    fail_on: FailOnOpt = "error",
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Find classic PyTorch mistakes at their line: unregistered layers, eval randomness, NaN."""
    from torchinspect.analysis.doctor import FailOn, diagnose
    from torchinspect.errors import InspectError
    from torchinspect.report.doctor import doctor_report

    try:
        level = FailOn(fail_on.strip().lower())
    except ValueError:
        raise InspectError(f"--fail-on {fail_on!r} is not a severity",
                           hint="use never, info, warning or error") from None
    result = diagnose(model, options=opts, select=select, ignore=ignore)
    emit(doctor_report(result), out, inputs=[model, *opts.files()])
    if result.failed(level):
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
