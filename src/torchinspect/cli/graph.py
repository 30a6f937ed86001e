"""`inspect graph MODEL -o FILE`: the autograd graph or the module graph, as SVG/PNG/PDF/DOT/JSON."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import as_written, model_command
from torchinspect.cli.options import ForceOpt, ModelArg, all_opt
from torchinspect.cli.output import OutputOptions, emit
from torchinspect.errors import InspectError
from torchinspect.escape import printable
from torchinspect.export.graph import GraphKind
from torchinspect.report.render import OutputFormat
from torchinspect.sources.case import ModelOptions

KindOpt = Annotated[GraphKind, typer.Option(
    "--kind", help="module: the module graph of a meta trace (no memory); autograd: the "
    "backward graph of one real forward, every op (parameters by name).")]
GraphDepthOpt = Annotated[int | None, typer.Option(
    "--depth", min=0, help="module graph: collapse everything below this module depth into one "
    "node (default: the deepest level that stays readable; the output says how deep the "
    "model goes).", show_default=False)]
SavedOpt = Annotated[bool, typer.Option(
    "--saved", help="autograd graph: also draw the tensors each function saved for backward.")]
NoFoldOpt = Annotated[bool, typer.Option(
    "--no-fold", help="module graph: draw repeated identical blocks one by one.")]
FunctionsOpt = Annotated[bool | None, typer.Option(
    "--functions/--no-functions", help="module graph: draw functional ops between modules "
    "(add, relu, matmul, scaled_dot_product_attention ...) as nodes (default: on).",
    show_default=False)]
AllOpt = Annotated[bool, all_opt(
    "list every node type (default: the 15 most common; JSON always lists all).")]

DEVICE_HELP = ("autograd: where the forward runs (auto = cpu); module: where to trace "
               "(auto = meta, no memory, with a CPU fallback).")


@model_command(device_help=DEVICE_HELP,
               output_help="the picture: .svg, .png or .pdf (rendered by Graphviz dot), or its "
               ".dot source, or .json nodes and edges (atomic).")
def graph(model: ModelArg, kind: KindOpt = GraphKind.module, depth: GraphDepthOpt = None,
          saved: SavedOpt = False, no_fold: NoFoldOpt = False, functions: FunctionsOpt = None,
          show_all: AllOpt = False, force: ForceOpt = False, *,
          opts: ModelOptions, out: OutputOptions) -> None:
    """Draw the model: -o FILE picks the format by extension (.svg .png .pdf .dot .json)."""
    from torchinspect.cli.output import input_files
    from torchinspect.export.graph import build_graph, output_format, write_graph
    from torchinspect.report.graph import graph_report
    from torchinspect.sources.case import make_case

    if out.output is None and out.format is not OutputFormat.json:
        raise InspectError("inspect graph needs -o FILE (.svg, .png, .pdf, .dot or .json)",
                           hint=f"e.g. inspect graph {model} -o graph.svg, or --format json "
                           "for the nodes and edges on stdout")
    if saved and kind is not GraphKind.autograd:
        raise InspectError("--saved draws the autograd graph's saved tensors",
                           hint="add --kind autograd, or leave out --saved")
    if depth is not None and kind is not GraphKind.module:
        raise InspectError("--depth cuts the module graph (the autograd graph draws every op)",
                           hint="leave out --kind autograd, or --depth")
    if functions is not None and kind is not GraphKind.module:
        flag = "--functions" if functions else "--no-functions"
        raise InspectError(f"{flag} is for the module graph (the autograd graph draws every op)",
                           hint=f"add --kind module, or leave out {flag}")
    protect = input_files([model, *opts.files()])
    if out.output is not None:
        from torchinspect.io.atomic import check_target

        output_format(out.output)  # a bad extension fails before the forward
        check_target(out.output, force=force, protect=protect)
    case = make_case(model, options=opts)
    result = build_graph(case, kind=kind, depth=depth, fold=not no_fold, saved=saved,
                         functions=functions is not False)
    written = None
    if out.output is not None:
        written = as_written(write_graph(result, out.output, force=force, protect=protect),
                             out.output, "path", "requested")
        typer.echo(f"wrote {printable(str(written.path))}", err=True)
    emit(graph_report(result, written, show_all=show_all), OutputOptions(out.format, None))
