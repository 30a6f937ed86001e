"""`inspect doctor MODEL`: find the classic PyTorch pitfalls (the checks: analysis/doctor)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import model_command
from torchinspect.cli.options import MODEL_FORMS
from torchinspect.cli.output import OutputOptions, emit
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
ListOpt = Annotated[bool, typer.Option(
    "--list-checks", help="list the checks (code, severity, what each finds) and exit; "
    "MODEL is not needed. -f json gives each check's trigger, why and fix too.")]
OptionalModelArg = Annotated[str | None, typer.Argument(
    metavar="MODEL", help=f"{MODEL_FORMS}.", show_default=False)]

#: the severity a run fails on when --fail-on is not given (docs/commands/doctor.md says it:
#: tests/test_doctor_cli.py checks the page against this)
FAIL_ON_DEFAULT = "error"


@model_command(device_default="cpu", device_help="where the checks that need a real run "
               "(TI003-TI005, TI010-TI016, TI018, TI019, TI022, TI024-TI027) run: cpu (default), "
               "cuda[:N]; meta "
               "skips them. The rest use meta.")
def doctor(
    model: OptionalModelArg = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    fail_on: FailOnOpt = FAIL_ON_DEFAULT,
    list_checks: ListOpt = False,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Find classic PyTorch mistakes at their line: unregistered layers, eval randomness, NaN."""
    from torchinspect.analysis.doctor import FailOn, diagnose
    from torchinspect.errors import InspectError
    from torchinspect.report.doctor import checks_list_report, doctor_report

    if list_checks:
        emit(checks_list_report(), out, inputs=[])
        return
    if model is None:
        raise InspectError("missing MODEL", hint="inspect doctor MODEL (inspect doctor "
                           "--list-checks lists the checks without one)")
    try:
        level = FailOn(fail_on.strip().lower())
    except ValueError:
        raise InspectError(f"--fail-on {fail_on!r} is not a severity",
                           hint="use never, info, warning or error") from None
    result = diagnose(model, options=opts, select=select, ignore=ignore)
    emit(doctor_report(result), out, inputs=[model, *opts.files()])
    if result.failed(level):
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
