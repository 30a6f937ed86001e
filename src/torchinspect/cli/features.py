"""`inspect features MODEL [INPUTS...] --layers L1,L2 -o OUT`: save layer outputs.

`--list` shows the layer names instead. Under `torchrun` every rank runs this command;
rank 0 prints the report and the progress bar.
"""

from __future__ import annotations

import dataclasses
import math
import os
from enum import StrEnum
from typing import Annotated, Any

import typer

from torchinspect.cli.common import (
    ModelArg,
    OutputOptions,
    as_written,
    dtype_opt,
    emit,
    error_exit,
    model_command,
    shard_size_opt,
)
from torchinspect.errors import InspectError
from torchinspect.report import OutputFormat
from torchinspect.sources.case import ModelOptions


class FileFormat(StrEnum):
    safetensors = "safetensors"
    npy = "npy"
    pt = "pt"


class Dtype(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


class Pool(StrEnum):
    none = "none"
    gap = "gap"


class PreprocessMode(StrEnum):
    image = "image"
    none = "none"


InputsArg = Annotated[list[str] | None, typer.Argument(
    metavar="[INPUTS]...", show_default=False,
    help="image files, folders (searched recursively, sorted), .pt/.npy/.safetensors tensor "
    "files; none: one random batch from --input.")]
ListOpt = Annotated[bool, typer.Option("--list", help="list the layer names (modules and FX nodes) "
                                       "with their output shapes, then exit (meta: no weights).")]
LayersOpt = Annotated[list[str] | None, typer.Option(
    "--layers", "-l", metavar="NAME,...",
    help="layers to save: module names (layer4, features.29) or FX node names (layer1.0.relu_1).")]
OutOpt = Annotated[str | None, typer.Option(
    "--output", "-o", metavar="OUT", help="output folder: shards + manifest.json (created; "
    "rerun to resume; one run at a time).")]
def _format(text: str) -> OutputFormat | FileFormat:
    """The report format; the old shard values (safetensors|npy|pt) are still taken, for one
    release, as the shard file type (with a note: see _formats)."""
    value = text.lower()
    if value in SHARD_TYPES:
        return FileFormat(value)
    try:
        return OutputFormat(value)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not one of table, json, csv, markdown, html "
                                 "(the shard file type is --save-format)") from None


FormatOpt = Annotated[OutputFormat, typer.Option(
    "--format", "-f", parser=_format, metavar="[table|json|csv|markdown|html]",
    help="output format.")]
SaveFormatOpt = Annotated[FileFormat, typer.Option("--save-format", case_sensitive=False,
                                                   help="file type of the shards.")]
ReportOpt = Annotated[str | None, typer.Option("--report", hidden=True)]  # old name of --format
BatchOpt = Annotated[int | None, typer.Option(
    "--batch", "-b", min=1, show_default=False,
    help="the batch a forward runs with: inputs per forward [default: 64, in smaller forwards "
    "when 64 would not fit in memory]; with no INPUTS, "
    "the number of random rows (prepended to --input shapes).")]
BatchSizeOpt = Annotated[int | None, typer.Option("--batch-size", min=1, hidden=True)]  # old --batch
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=0, help="DataLoader worker processes (default: from the CPU count).")]
def _dtype(text: str) -> str:
    try:
        return Dtype(text.lower()).value
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not one of fp32, fp16, bf16") from None


DtypeOpt = Annotated[str, dtype_opt("compute dtype (fp16/bf16: autocast).", parser=_dtype)]
SaveDtypeOpt = Annotated[Dtype | None, typer.Option(
    "--save-dtype", case_sensitive=False, help="storage dtype (default: --dtype); bf16 is kept exact.")]
PoolOpt = Annotated[Pool, typer.Option("--pool", case_sensitive=False,
                                       help="gap: global-average-pool spatial maps to (N, C).")]
ShardOpt = Annotated[str, shard_size_opt("largest shard file, e.g. 1GB, 500MB.")]
PrepOpt = Annotated[PreprocessMode, typer.Option(
    "--preprocess", case_sensitive=False,
    help="image: the published weights' transforms (or --resize/--crop/--mean/--std); "
    "none: pixels in [0, 1] as they are.")]
ResizeOpt = Annotated[int | None, typer.Option("--resize", min=1, help="resize the shorter side to N.")]
CropOpt = Annotated[int | None, typer.Option("--crop", min=1, help="center crop N x N.")]
MeanOpt = Annotated[str | None, typer.Option("--mean", metavar="R,G,B", help="normalization mean.")]
StdOpt = Annotated[str | None, typer.Option("--std", metavar="R,G,B", help="normalization std.")]
RestartOpt = Annotated[bool, typer.Option(
    "--restart", help="discard the rows an earlier run saved in OUT and start again "
    "(default: a rerun resumes, adding the inputs not there yet).")]
ForceOpt = Annotated[bool, typer.Option("--force", hidden=True)]  # refused: --restart
SkipOpt = Annotated[bool, typer.Option(
    "--skip-unreadable", help="inputs that cannot be read are listed (and kept in the "
    "manifest) but do not fail the run (exit 0).")]
MaxImageOpt = Annotated[str, typer.Option(
    "--max-image-size", metavar="SIZE", help="largest image file read, e.g. 256MB (a bigger "
    "one is an unreadable input).")]
GpuDecodeOpt = Annotated[bool, typer.Option("--gpu-decode/--cpu-decode",
                                            help="on CUDA: decode JPEGs on the GPU (nvjpeg).")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress",
                                           help="progress bar on stderr (default: on a terminal).")]


def _floats(text: str | None, option: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise InspectError(f"{option} {text!r}: not a list of numbers", hint=f"e.g. {option} 0.5,0.5,0.5") from None
    if not all(math.isfinite(v) for v in values) or (option == "--std" and 0 in values):
        raise InspectError(f"{option} {text!r}: every value must be a finite number"
                           + (", and a std not 0" if option == "--std" else ""),
                           hint=f"e.g. {option} 0.5,0.5,0.5")
    return values


SHARD_TYPES = {f.value for f in FileFormat}


@model_command(device_default="cpu", outputs=False, batch=False, progress=False,
               device_help="where to run: cpu (default) or cuda[:N]; under torchrun, cuda = one GPU per rank.")
def features(
    model: ModelArg,
    inputs: InputsArg = None,
    list_: ListOpt = False,
    layers: LayersOpt = None,
    output: OutOpt = None,
    format_: FormatOpt = OutputFormat.table,
    save_format: SaveFormatOpt = FileFormat.safetensors,
    batch: BatchOpt = None,
    workers: WorkersOpt = None,
    dtype: DtypeOpt = "fp32",
    save_dtype: SaveDtypeOpt = None,
    pool: PoolOpt = Pool.none,
    shard_size: ShardOpt = "1GB",
    preprocess: PrepOpt = PreprocessMode.image,
    resize: ResizeOpt = None,
    crop: CropOpt = None,
    mean: MeanOpt = None,
    std: StdOpt = None,
    restart: RestartOpt = False,
    skip_unreadable: SkipOpt = False,
    max_image_size: MaxImageOpt = "256MB",
    gpu_decode: GpuDecodeOpt = True,
    progress: ProgressOpt = None,  # type: ignore[assignment]
    report: ReportOpt = None,
    batch_size: BatchSizeOpt = None,
    force: ForceOpt = False,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Save any layer's output for images, folders or tensor files (--list: layer names)."""
    report_format, save_format = _formats(format_, report, save_format)
    batch = _batch(batch, batch_size)
    out = OutputOptions(report_format, None)
    if force:
        raise InspectError("--force: features never replaces earlier rows silently",
                           hint="a rerun resumes; --restart discards the earlier rows of OUT and "
                           "starts again")
    if list_:
        from torchinspect.features import list_layers
        from torchinspect.report.features import listing_report

        emit(listing_report(list_layers(model, options=opts)), out)
        return
    names = [n for spec in (layers or []) for n in spec.split(",") if n.strip()]
    if not names:
        raise InspectError("--layers is required", hint=f"see the names with `inspect features {model} --list`")
    if not output:
        raise InspectError("-o OUT (the output folder) is required", hint="e.g. -o feats/")
    if not inputs and batch is not None:  # random rows: the batch prepended to --input shapes
        opts = dataclasses.replace(opts, batch=batch)
    rank0 = os.environ.get("RANK", "0") == "0"
    show = progress if progress is not None else _stderr_tty()
    from torchinspect.features import extract_features
    from torchinspect.report.features import features_report

    with _progress_bar(show and rank0) as on_progress:
        result = extract_features(
            model, inputs or [], layers=names, output=output, options=opts, device=opts.device,
            batch_size=batch, workers=workers, dtype=dtype,
            save_dtype=save_dtype.value if save_dtype else None, pool=pool.value,
            file_format=save_format.value, shard_size=shard_size, preprocess=preprocess.value,
            resize=resize, crop=crop, mean=_floats(mean, "--mean"), std=_floats(std, "--std"),
            restart=restart, gpu_decode=gpu_decode, skip_unreadable=skip_unreadable,
            max_image_size=max_image_size, progress=on_progress)
    if not rank0:
        return
    result = as_written(result, output, "output", "manifest")
    emit(features_report(result), out)
    if result.new_failed and not skip_unreadable:
        raise error_exit(f"{result.new_failed} input(s) could not be read (listed above); the "
                         "others were saved", "--skip-unreadable accepts them",
                         int(result.status))
    raise typer.Exit(int(result.status))


def _deprecated(old: str, new: str) -> None:
    typer.echo(f"note: {old} is deprecated; use {new}", err=True)


def _formats(format_: OutputFormat | FileFormat, report: str | None,
             save_format: FileFormat) -> tuple[OutputFormat, FileFormat]:
    """(report format, shard type). ``--format safetensors|npy|pt`` (the old shard option)
    and ``--report FORMAT`` (the old report option) still work, with a note."""
    value = str(format_.value).lower()
    if isinstance(format_, FileFormat):
        _deprecated(f"--format {value} (the shard file type)", f"--save-format {value}")
        save_format, value = FileFormat(value), "table"
    if report is not None:
        _deprecated("--report", "--format")
        value = report.lower()
    try:
        return OutputFormat(value), save_format
    except ValueError:
        raise InspectError(f"--format {format_!r}: unknown report format",
                           hint="use table, json, csv, markdown or html; the shard file type is "
                           "--save-format safetensors|npy|pt") from None


def _batch(batch: int | None, batch_size: int | None) -> int | None:
    if batch_size is not None:
        _deprecated("--batch-size", "--batch")
        if batch is not None and batch != batch_size:
            raise InspectError(f"--batch {batch} and --batch-size {batch_size} disagree",
                               hint="pass --batch only (--batch-size is its old name)")
        return batch_size
    return batch


def _stderr_tty() -> bool:
    import sys

    return sys.stderr.isatty()


class _progress_bar:  # noqa: N801  (a context manager used like a function)
    """A rich progress bar on stderr with rows/s and ETA; yields the callback (or None)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("features"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]:>8} rows/s"), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        return self.update

    def update(self, p: Any) -> None:
        if self.task is None:
            self.task = self.bar.add_task("features", total=p.total, rate="-")
        rate = p.rows / p.elapsed if p.elapsed > 0 else 0.0
        self.bar.update(self.task, completed=p.rows, total=p.total, rate=f"{rate:,.1f}")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
