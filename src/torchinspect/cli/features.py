"""`inspect features MODEL [INPUTS...] --layers L1,L2 -o OUT`: save layer outputs.

`--list` shows the layer names instead. Under `torchrun` every rank runs this command;
rank 0 prints the report and the progress bar.
"""

from __future__ import annotations

import math
import os
from enum import StrEnum
from typing import Annotated, Any

import typer

from torchinspect.cli.common import ModelArg, OutputOptions, emit, model_command
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
OutOpt = Annotated[str | None, typer.Option("--output", "-o", metavar="OUT",
                                            help="output folder (created; rerun to resume).")]
FileFormatOpt = Annotated[FileFormat, typer.Option("--format", "-f", case_sensitive=False,
                                                   help="file format of the shards.")]
ReportOpt = Annotated[OutputFormat, typer.Option("--report", case_sensitive=False,
                                                 help="format of the report printed on stdout.")]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", min=1, help="inputs per forward.")]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=0, help="DataLoader worker processes (default: from the CPU count).")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", case_sensitive=False,
                                         help="compute dtype (fp16/bf16: autocast).")]
SaveDtypeOpt = Annotated[Dtype | None, typer.Option(
    "--save-dtype", case_sensitive=False, help="storage dtype (default: --dtype); bf16 is kept exact.")]
PoolOpt = Annotated[Pool, typer.Option("--pool", case_sensitive=False,
                                       help="gap: global-average-pool spatial maps to (N, C).")]
ShardOpt = Annotated[str, typer.Option("--shard-size", metavar="SIZE",
                                       help="largest shard file, e.g. 1GB, 500MB.")]
PrepOpt = Annotated[PreprocessMode, typer.Option(
    "--preprocess", case_sensitive=False,
    help="image: the published weights' transforms (or --resize/--crop/--mean/--std); "
    "none: pixels in [0, 1] as they are.")]
ResizeOpt = Annotated[int | None, typer.Option("--resize", min=1, help="resize the shorter side to N.")]
CropOpt = Annotated[int | None, typer.Option("--crop", min=1, help="center crop N x N.")]
MeanOpt = Annotated[str | None, typer.Option("--mean", metavar="R,G,B", help="normalization mean.")]
StdOpt = Annotated[str | None, typer.Option("--std", metavar="R,G,B", help="normalization std.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="start OUT over (deletes its earlier shards).")]
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


@model_command(device_default="cpu", outputs=False,
               device_help="where to run: cpu (default) or cuda[:N]; under torchrun, cuda = one GPU per rank.")
def features(
    model: ModelArg,
    inputs: InputsArg = None,
    list_: ListOpt = False,
    layers: LayersOpt = None,
    output: OutOpt = None,
    file_format: FileFormatOpt = FileFormat.safetensors,
    report: ReportOpt = OutputFormat.table,
    batch_size: BatchSizeOpt = 64,
    workers: WorkersOpt = None,
    dtype: DtypeOpt = Dtype.fp32,
    save_dtype: SaveDtypeOpt = None,
    pool: PoolOpt = Pool.none,
    shard_size: ShardOpt = "1GB",
    preprocess: PrepOpt = PreprocessMode.image,
    resize: ResizeOpt = None,
    crop: CropOpt = None,
    mean: MeanOpt = None,
    std: StdOpt = None,
    force: ForceOpt = False,
    gpu_decode: GpuDecodeOpt = True,
    progress: ProgressOpt = None,  # type: ignore[assignment]
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Save any layer's output for images, folders or tensor files (--list: layer names)."""
    out = OutputOptions(report, None)
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
    rank0 = os.environ.get("RANK", "0") == "0"
    show = progress if progress is not None else _stderr_tty()
    from torchinspect.features import extract_features
    from torchinspect.report.features import features_report

    with _progress_bar(show and rank0) as on_progress:
        result = extract_features(
            model, inputs or [], layers=names, output=output, options=opts, device=opts.device,
            batch_size=batch_size, workers=workers, dtype=dtype.value,
            save_dtype=save_dtype.value if save_dtype else None, pool=pool.value,
            file_format=file_format.value, shard_size=shard_size, preprocess=preprocess.value,
            resize=resize, crop=crop, mean=_floats(mean, "--mean"), std=_floats(std, "--std"),
            force=force, gpu_decode=gpu_decode, progress=on_progress)
    if not rank0:
        return
    emit(features_report(result), out)
    if result.failed:
        typer.echo(f"error: {len(result.failed)} input(s) could not be read (listed above); "
                   "the other rows were saved", err=True)
        raise typer.Exit(int(result.status))


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
