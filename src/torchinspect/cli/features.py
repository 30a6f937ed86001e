"""`inspect features MODEL [INPUTS...] --layers L1,L2 -o OUT`: save layer outputs.

`--list` shows the layer names instead. Under `torchrun` every rank runs this command;
rank 0 prints the report and the progress bar.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from torchinspect.cli.boundary import error_exit
from torchinspect.cli.command import as_written, model_command
from torchinspect.cli.options import ModelArg, dtype_opt, shard_size_opt
from torchinspect.cli.output import OutputOptions, emit
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


def _dtype(text: str) -> str:
    try:
        return Dtype(text.lower()).value
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not one of fp32, fp16, bf16") from None


@dataclass
class FeatureArgs:
    """The options of ``inspect features``, each declared once, next to its field: Typer
    fills this dataclass (``@model_command`` expands it into the command's options, in this
    order) and :meth:`feature_options` turns it into the core's ``FeatureOptions``."""

    list_: Annotated[bool, typer.Option(
        "--list", help="list the layer names (modules and FX nodes) with their output shapes, "
        "then exit (meta: no weights).")] = False
    layers: Annotated[list[str] | None, typer.Option(
        "--layers", "-l", metavar="NAME,...", help="layers to save: module names (layer4, "
        "features.29) or FX node names (layer1.0.relu_1).")] = None
    output: Annotated[str | None, typer.Option(
        "--output", "-o", metavar="OUT", help="output folder: shards + manifest.json (created; "
        "rerun to resume; one run at a time).")] = None
    format_: Annotated[OutputFormat, typer.Option(
        "--format", "-f", parser=_format, metavar="[table|json|csv|markdown|html]",
        help="output format.")] = OutputFormat.table
    save_format: Annotated[FileFormat, typer.Option(
        "--save-format", case_sensitive=False, help="file type of the shards.")
        ] = FileFormat.safetensors
    batch: Annotated[int | None, typer.Option(
        "--batch", "-b", min=1, show_default=False,
        help="the batch a forward runs with: inputs per forward [default: 64, in smaller "
        "forwards when 64 would not fit in memory]; with no INPUTS, the number of random rows "
        "(prepended to --input shapes).")] = None
    workers: Annotated[int | None, typer.Option(
        "--workers", min=0, help="DataLoader worker processes (default: from the CPU count).")
        ] = None
    dtype: Annotated[str, dtype_opt("compute dtype (fp16/bf16: autocast).", parser=_dtype)
                     ] = "fp32"
    save_dtype: Annotated[Dtype | None, typer.Option(
        "--save-dtype", case_sensitive=False,
        help="storage dtype (default: --dtype); bf16 is kept exact.")] = None
    pool: Annotated[Pool, typer.Option(
        "--pool", case_sensitive=False,
        help="gap: global-average-pool spatial maps to (N, C).")] = Pool.none
    shard_size: Annotated[str, shard_size_opt("largest shard file, e.g. 1GB, 500MB.")] = "1GB"
    preprocess: Annotated[PreprocessMode, typer.Option(
        "--preprocess", case_sensitive=False,
        help="image: the published weights' transforms (or --resize/--crop/--mean/--std); "
        "none: pixels in [0, 1] as they are.")] = PreprocessMode.image
    resize: Annotated[int | None, typer.Option(
        "--resize", min=1, help="resize the shorter side to N.")] = None
    crop: Annotated[int | None, typer.Option("--crop", min=1, help="center crop N x N.")] = None
    mean: Annotated[str | None, typer.Option(
        "--mean", metavar="R,G,B", help="normalization mean.")] = None
    std: Annotated[str | None, typer.Option(
        "--std", metavar="R,G,B", help="normalization std.")] = None
    restart: Annotated[bool, typer.Option(
        "--restart", help="discard the rows an earlier run saved in OUT and start again "
        "(default: a rerun resumes, adding the inputs not there yet).")] = False
    skip_unreadable: Annotated[bool, typer.Option(
        "--skip-unreadable", help="inputs that cannot be read are listed (and kept in the "
        "manifest) but do not fail the run (exit 0).")] = False
    max_image_size: Annotated[str, typer.Option(
        "--max-image-size", metavar="SIZE", help="largest image file read, e.g. 256MB (a "
        "bigger one is an unreadable input).")] = "256MB"
    gpu_decode: Annotated[bool, typer.Option(
        "--gpu-decode/--cpu-decode", help="on CUDA: decode JPEGs on the GPU (nvjpeg).")] = True
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="progress bar on stderr (default: on a terminal).")
        ] = None
    report: Annotated[str | None, typer.Option("--report", hidden=True)] = None  # old --format
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, hidden=True)
                          ] = None  # old --batch
    force: Annotated[bool, typer.Option("--force", hidden=True)] = False  # refused: --restart

    def feature_options(self, layers: list[str], output: str, batch: int | None,
                        opts: ModelOptions, progress: Any) -> Any:
        """The core's ``FeatureOptions`` (features/plan.py) of this run."""
        from pathlib import Path

        from torchinspect.features.plan import FeatureOptions

        return FeatureOptions(
            layers=layers, output=Path(output), options=opts, device=opts.device,
            batch_size=batch, workers=self.workers, dtype=self.dtype,
            save_dtype=self.save_dtype.value if self.save_dtype else None,
            pool=self.pool.value, file_format=self.save_format.value,
            shard_size=self.shard_size, preprocess=self.preprocess.value, resize=self.resize,
            crop=self.crop, mean=_floats(self.mean, "--mean"), std=_floats(self.std, "--std"),
            restart=self.restart, gpu_decode=self.gpu_decode,
            skip_unreadable=self.skip_unreadable, max_image_size=self.max_image_size,
            progress=progress)


@model_command(device_default="cpu", outputs=False, batch=False, progress=False,
               device_help="where to run: cpu (default) or cuda[:N]; under torchrun, cuda = one GPU per rank.")
def features(model: ModelArg, inputs: InputsArg = None, *, args: FeatureArgs,
             opts: ModelOptions, out: OutputOptions) -> None:
    """Save any layer's output for images, folders or tensor files (--list: layer names)."""
    report_format, args.save_format = _formats(args.format_, args.report, args.save_format)
    batch = _batch(args.batch, args.batch_size)
    out = OutputOptions(report_format, None)
    if args.force:
        raise InspectError("--force: features never replaces earlier rows silently",
                           hint="a rerun resumes; --restart discards the earlier rows of OUT and "
                           "starts again")
    if args.list_:
        from torchinspect.features import list_layers
        from torchinspect.report.features import listing_report

        emit(listing_report(list_layers(model, options=opts)), out)
        return
    names = [n for spec in (args.layers or []) for n in spec.split(",") if n.strip()]
    if not names:
        raise InspectError("--layers is required", hint=f"see the names with `inspect features {model} --list`")
    if not args.output:
        raise InspectError("-o OUT (the output folder) is required", hint="e.g. -o feats/")
    if not inputs and batch is not None:  # random rows: the batch prepended to --input shapes
        opts = dataclasses.replace(opts, batch=batch)
    rank0 = os.environ.get("RANK", "0") == "0"
    show = args.progress if args.progress is not None else _stderr_tty()
    from torchinspect.features.extract import run_features
    from torchinspect.report.features import features_report

    with _progress_bar(show and rank0) as on_progress:
        result = run_features(model, inputs or [], args.feature_options(
            names, args.output, batch, opts, on_progress))
    if not rank0:
        return
    result = as_written(result, args.output, "output", "manifest")
    emit(features_report(result), out)
    if result.new_failed and not args.skip_unreadable:
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
