"""`inspect export MODEL -o model.onnx`: ONNX export, checked and verified in onnxruntime."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import as_written, model_command
from torchinspect.cli.options import ForceOpt, ModelArg, all_opt, atol_opt, rtol_opt
from torchinspect.cli.output import OutputOptions, emit
from torchinspect.cli.progress import current
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.escape import printable
from torchinspect.sources.case import ModelOptions

OpsetOpt = Annotated[int | None, typer.Option(
    "--opset", min=7, help="ONNX opset (default: the exporter's own choice).", show_default=False)]
LegacyOpt = Annotated[bool, typer.Option(
    "--legacy", help="use the TorchScript exporter (dynamo=False) instead of torch.export.")]
StaticOpt = Annotated[bool, typer.Option(
    "--static", help="fix every shape (default: the batch dimension is dynamic).")]
DynamicOpt = Annotated[list[str] | None, typer.Option(
    "--dynamic", metavar="NAME:DIM", help="also make dim DIM of input NAME dynamic "
    "(repeatable), e.g. --dynamic idx:1.", show_default=False)]
VerifyOpt = Annotated[bool | None, typer.Option(
    "--verify/--no-verify", help="run the file in onnxruntime at batch 1 and 3 and compare with "
    "PyTorch (default: on when onnxruntime is installed).", show_default=False)]
AtolOpt = Annotated[float, atol_opt("absolute tolerance of the verification.")]
RtolOpt = Annotated[float, rtol_opt("relative tolerance of the verification.")]
ExternalOpt = Annotated[bool, typer.Option(
    "--external-data", help="store the weights in FILE.onnx.data beside the .onnx (automatic over 2 GB).")]
InputNamesOpt = Annotated[str | None, typer.Option(
    "--input-names", metavar="A,B", help="names of the ONNX inputs, in order (default: the "
    "forward's parameter names).", show_default=False)]
OutputNamesOpt = Annotated[str | None, typer.Option(
    "--output-names", metavar="A,B", help="names of the ONNX outputs, in order (default: "
    "output, or output_0, output_1 ...).", show_default=False)]
ExporterReportOpt = Annotated[bool, typer.Option(
    "--exporter-report", help="also keep torch.onnx's own markdown report as "
    "FILE.export-report.md beside the .onnx (on a failure too).")]
AllOpt = Annotated[bool, all_opt(
    "list every op type (default: the 20 most used; JSON always lists all).")]


@model_command(device_help="where the model runs for export: auto = cpu; cpu; cuda[:N].",
               output_help="the ONNX file to write, FILE.onnx (atomic; its weights go to "
               "FILE.onnx.data beside it over 2 GB).")
def export(model: ModelArg, opset: OpsetOpt = None, legacy: LegacyOpt = False,
           static: StaticOpt = False, dynamic: DynamicOpt = None, verify: VerifyOpt = None,
           atol: AtolOpt = 1e-4, rtol: RtolOpt = 1e-3, external_data: ExternalOpt = False,
           input_names: InputNamesOpt = None, output_names: OutputNamesOpt = None,
           exporter_report: ExporterReportOpt = False, show_all: AllOpt = False,
           force: ForceOpt = False, *, opts: ModelOptions, out: OutputOptions) -> None:
    """Export to ONNX (-o FILE.onnx), run onnx.checker, verify in onnxruntime; exit 1 if it differs."""
    from torchinspect.cli.options import tolerance
    from torchinspect.cli.output import input_files
    from torchinspect.export.onnx import export_onnx
    from torchinspect.report.export import export_report
    from torchinspect.sources.case import make_case

    if out.output is None:
        raise InspectError("inspect export needs -o FILE.onnx", hint=f"e.g. inspect export {model} -o model.onnx")
    if static and dynamic:
        raise InspectError("--static and --dynamic exclude each other",
                           hint="--static fixes every shape; --dynamic NAME:DIM frees the ones named")
    atol, rtol = tolerance(atol, "--atol"), tolerance(rtol, "--rtol")
    protect = input_files([model, *opts.files()])
    case = make_case(model, options=opts)
    result = export_onnx(case, out.output, opset=opset, legacy=legacy, static=static,
                         dynamic=dynamic or (), verify=verify, atol=atol, rtol=rtol, force=force,
                         external_data=True if external_data else None, device=case.requested,
                         protect=protect, report=exporter_report, input_names=input_names,
                         output_names=output_names, progress=current())
    result = as_written(result, out.output, "path", "data_path", "report_path")
    typer.echo(f"wrote {printable(str(result.path))}", err=True)
    emit(export_report(result, show_all=show_all), OutputOptions(out.format, None))
    if result.verified is False:
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
