"""`inspect graph` -> Report: what was drawn and where it went (JSON: every node and edge)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Table, Text, nbytes

if TYPE_CHECKING:
    from torchinspect.export.graph import Graph, GraphFile

DOT_PACKAGES = "apt install graphviz (Debian/Ubuntu), dnf install graphviz, brew install graphviz, " \
    "or conda install graphviz"


def _depth(graph: Graph) -> str:
    if graph.depth is None or graph.max_depth is None:
        return "all"
    return f"{graph.depth} of {graph.max_depth}"


def graph_report(graph: Graph, written: GraphFile | None = None, *,
                 show_all: bool = False) -> Report:
    """What was drawn; ``show_all`` lists every node type (15 otherwise; JSON has all)."""
    data: dict[str, Any] = {**graph.to_dict(), "file": written.to_dict() if written else None}
    items: list[tuple[str, Any]] = [
        ("Model", graph.model), ("Kind", graph.kind),
        ("Depth", _depth(graph)) if graph.kind == "module" else
        ("Forward on", graph.device),
        ("Inputs", graph.inputs or "-"), ("Nodes", len(graph.nodes)), ("Edges", len(graph.edges)),
    ]
    if graph.kind == "autograd":
        items.insert(4, ("Parameters drawn", graph.count("param")))
    else:
        if graph.functions:
            items.append(("Function nodes", graph.count("function")))
        if graph.clusters:
            items.append(("Module clusters", len(graph.clusters)))
        if any(n.fold > 1 for n in graph.nodes):
            items.append(("Folded blocks", sum(1 for n in graph.nodes if n.fold > 1)))
    if written is not None:
        items.append(("File", written.path))
        items.append(("Format", written.format + ("" if written.rendered or written.format != "dot"
                                                  else " (Graphviz source)")))
        items.append(("Size", nbytes(written.bytes)))
    sections: list[Any] = [KeyValues(f"{graph.kind} graph", items)]
    by_kind: dict[str, int] = {}
    for n in graph.nodes:
        key = n.type or n.kind
        by_kind[key] = by_kind.get(key, 0) + 1
    top = sorted(by_kind.items(), key=lambda kv: (-kv[1], kv[0]))
    label = "Autograd function" if graph.kind == "autograd" else "Module or function"
    shown = len(top) if show_all else 15
    rows: list[list[Any]] = [[k, v] for k, v in top[:shown]]
    footer = [f"… and {len(top) - shown} more kinds (--all lists them; JSON lists every node)"] \
        if len(top) > shown else []
    sections.append(Table("Node types", [label, "Nodes"], rows,
                          align=["left", "right"], footer=footer, primary=True))
    notes = [f"note: {n}" for n in graph.notes]
    if written is not None and written.fallback_reason:
        image = written.requested
        fmt = image.rpartition(".")[2]
        notes += [f"warning: {written.fallback_reason}: wrote the Graphviz source {written.path} "
                  f"instead of {image}",
                  f"render it with: dot -T{fmt} {written.path} -o {image}",
                  f"the `dot` program comes with the Graphviz system package: {DOT_PACKAGES}"]
    if notes:
        sections.append(Text(notes, style="yellow"))
    return Report("graph", data, sections)
