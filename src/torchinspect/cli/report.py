"""`inspect report MODEL... [-o report.html]`: one self-contained HTML page (several models:
one comparison page). Without -o the page is MODEL.html in the current folder."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.arguments import parse_batches
from torchinspect.cli.command import model_command
from torchinspect.cli.options import DepthOpt, ForceOpt, ModelsArg, gpu_opt
from torchinspect.cli.output import OutputOptions, emit, input_files, model_file_stem
from torchinspect.cli.progress import current
from torchinspect.errors import InspectError
from torchinspect.escape import printable
from torchinspect.report import OutputFormat
from torchinspect.sources.case import ModelOptions

BenchOpt = Annotated[bool, typer.Option("--bench", help="also time the forward per batch size "
                                        "on --device (a quick look; `inspect bench` for more).")]
BenchBatchOpt = Annotated[str, typer.Option(
    "--bench-batch", metavar="N[,N...]", help="batch sizes for --bench.")]
BenchSecondsOpt = Annotated[float, typer.Option(
    "--bench-seconds", min=0.05, help="seconds of timing per --bench configuration (at least).")]
GraphDepthOpt = Annotated[int, typer.Option("--graph-depth", min=0,
                                            help="deepest module level drawn in the graph.")]
GpuOpt = Annotated[str | None, gpu_opt(
    "predict for this GPU (h100, a100, l4, ...): add its predicted latency and roofline chart "
    "(one point per module, both roofs drawn), and predict the memory for it (default: the GPU "
    "here, else h100).")]
NoGraphOpt = Annotated[bool, typer.Option("--no-graph", help="leave the module graph out.")]
NoDoctorOpt = Annotated[bool, typer.Option("--no-doctor", help="leave the doctor's checks out.")]
DoctorRunOpt = Annotated[bool, typer.Option(
    "--doctor-run", help="also run the doctor's checks that need a real forward and backward "
    "(no-gradient, eval randomness, NaN/Inf; slow on large models).")]

DEVICE_HELP = ("auto = trace on meta (no memory), real runs (--bench, --doctor-run) on the CPU; "
               "cpu; cuda[:N] (trace and real runs there); meta.")


@model_command(device_help=DEVICE_HELP)
def report(
    models: ModelsArg,
    depth: DepthOpt = 3,
    bench: BenchOpt = False,
    bench_batch: BenchBatchOpt = "1,8,32",
    bench_seconds: BenchSecondsOpt = 1.0,
    graph_depth: GraphDepthOpt = 2,
    no_graph: NoGraphOpt = False,
    no_doctor: NoDoctorOpt = False,
    doctor_run: DoctorRunOpt = False,
    force: ForceOpt = False,
    gpu: GpuOpt = None,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """One self-contained HTML page: totals, charts, module graph, layers, doctor, bench.

    Without -o the page is written to MODEL.html in the current folder (an existing one is
    replaced only with --force); --format json/markdown/csv print to stdout.
    """
    from torchinspect.overview import collect_overview
    from torchinspect.report.overview import overview_report

    # checked even without --bench: bad input is an error
    batches = parse_batches(bench_batch, option="--bench-batch")
    if batches is None:
        raise InspectError("--bench-batch is empty", hint="e.g. --bench-batch 1,8,32")
    inputs = [*models, *opts.files()]
    if out.format is OutputFormat.table:  # the page is the point; --format json/markdown/csv too
        out = OutputOptions(OutputFormat.html, out.output)
    if out.format is OutputFormat.html and not out.output:  # never 60 KB of HTML on a terminal
        out = OutputOptions(OutputFormat.html, default_page(models, force=force, inputs=inputs))
    result = collect_overview(models, depth=depth, options=opts, graph=not no_graph,
                              graph_depth=graph_depth, doctor=not no_doctor,
                              doctor_run=doctor_run, bench=bench, bench_batches=batches if bench else None,
                              bench_seconds=bench_seconds, progress=current(), gpu=gpu)
    emit(overview_report(result), out, inputs)


def default_page(models: list[str], *, force: bool, inputs: list[str | None]) -> str:
    """MODEL.html (A-vs-B.html for several) in the current folder, refused up front when it
    exists without --force."""
    import os

    from torchinspect.io.atomic import check_target

    stem = "-vs-".join(dict.fromkeys(model_file_stem(m) for m in models))
    path = f"{stem[:120]}.html"
    if os.path.lexists(path) and not force:
        raise InspectError(f"{path} already exists (the page for {' '.join(models)} when no -o "
                           "is given)", hint="pass --force to replace it, or -o FILE to write "
                           "elsewhere")
    check_target(path, protect=input_files(inputs))  # never an input, a folder, a device
    typer.echo(f"no -o: the page goes to {printable(str(path))}", err=True)
    return path
