"""Graphviz output: :func:`to_dot` writes DOT source with every label escaped (module
clusters nested as ``subgraph cluster_*``, tooltips that name what a node is);
:func:`write_graph` renders it with ``dot`` (through the ``graphviz`` package) or falls back
to the ``.dot`` source beside the requested file."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.escape import dot_text, utf8_safe
from torchinspect.export.graph.model import Graph, GraphCluster, GraphNode
from torchinspect.io.atomic import atomic_write_bytes, atomic_write_text, check_target

RENDER_FORMATS = ("svg", "png", "pdf")
WRITE_FORMATS = (*RENDER_FORMATS, "dot", "json")


def dot_quote(text: str) -> str:
    """A DOT double-quoted string (escape.dot_text): backslashes and quotes escaped, newlines
    as centred breaks, NUL and the other controls as visible escapes (Graphviz refuses NUL)."""
    return f'"{dot_text(str(text))}"'


_STYLE = {
    "op": 'shape=box style="rounded,filled" fillcolor="#e8e8e8"',
    "param": 'shape=box style=filled fillcolor="#cfe8cf"',
    "input": 'shape=box style=filled fillcolor="#cfdff5"',
    "output": 'shape=box style=filled fillcolor="#f5e3b3"',
    "saved": 'shape=box style=filled fillcolor="#f0d0f0"',
    "module": 'shape=box style="rounded,filled" fillcolor="#eef2f8"',
    "function": 'shape=ellipse style=filled fillcolor="#fdf1dc" fontsize=9',
}
_CLUSTER_STYLE = 'style="rounded,dashed" color="#8a9bb5" fontcolor="#4a5a75" fontsize=9'


def tooltip(node: GraphNode) -> str:
    """What a node is, by name (Graphviz would show its internal id)."""
    if node.kind == "function":
        return f"{node.type}() in {node.name}"
    if node.kind == "module":
        name = node.name or "(model)"
        return f"{name} ({node.type})" + (f", {node.fold} identical blocks" if node.fold > 1 else "")
    return node.label.replace("\n", " ")


def dot_ids(graph: Graph) -> dict[str, str]:
    """Node id -> the id written in the DOT source: what the node is, by name (``layer1.0``,
    ``add in layer1.0``, ``conv1.weight``), numbered when repeated. Graphviz shows it as the
    SVG element's title, so hovering a node names it instead of an internal ``m3``."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for n in graph.nodes:
        if n.kind == "module":
            base = (n.name or "(model)") + (f" ×{n.fold}" if n.fold > 1 else "")
        elif n.kind == "function":
            base = f"{n.type} in {n.name}"
        elif n.kind == "op":
            base = str(n.type)
        elif n.kind == "saved":
            base = f"saved {n.name}"
        else:
            base = n.name or n.label.split("\n")[0]
        out[n.id] = _unique(base, used)
    for c in graph.clusters:  # Graphviz draws a box only for names that start with "cluster"
        out[c.id] = _unique(f"cluster {c.label}", used)
    return out


def _unique(base: str, used: set[str]) -> str:
    key, k = base, 1
    while key in used:
        k += 1
        key = f"{base} #{k}"
    used.add(key)
    return key


def to_dot(graph: Graph) -> str:
    """Graphviz source for ``graph`` (UTF-8; every label escaped; nodes named by what they
    are, see :func:`dot_ids`)."""
    lines = [f"digraph {dot_quote(graph.model)} {{",
             '  graph [rankdir=TB fontname="Helvetica" charset="UTF-8"];',
             '  node [fontname="Helvetica" fontsize=10];',
             '  edge [arrowsize=0.6];']
    members: dict[str | None, list[GraphNode]] = {}
    for n in graph.nodes:
        members.setdefault(n.cluster, []).append(n)
    inner: dict[str | None, list[GraphCluster]] = {}
    for c in graph.clusters:
        inner.setdefault(c.parent, []).append(c)
    ids = dot_ids(graph)
    _emit(lines, None, members, inner, ids, "  ")
    for e in graph.edges:
        lines.append(f"  {dot_quote(ids.get(e.src, e.src))} -> {dot_quote(ids.get(e.dst, e.dst))};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _emit(lines: list[str], cluster: str | None, members: dict[str | None, list[GraphNode]],
          inner: dict[str | None, list[GraphCluster]], ids: dict[str, str], pad: str) -> None:
    """The nodes of ``cluster`` (None: the top level), then its clusters, nested."""
    for n in members.get(cluster, []):
        style = _STYLE.get(n.kind, "shape=box")
        if n.fold > 1:
            style = style.replace("rounded,filled", "rounded,filled,bold")
        lines.append(f"{pad}{dot_quote(ids[n.id])} [label={dot_quote(n.label)} {style} "
                     f"tooltip={dot_quote(tooltip(n))}];")
    for c in inner.get(cluster, []):
        lines.append(f"{pad}subgraph {dot_quote(ids[c.id])} {{")
        lines.append(f"{pad}  label={dot_quote(c.label)} tooltip={dot_quote(c.label)} "
                     f"{_CLUSTER_STYLE};")
        _emit(lines, c.id, members, inner, ids, pad + "  ")
        lines.append(f"{pad}}}")


def output_format(path: str | os.PathLike[str]) -> str:
    """svg/png/pdf/dot/json from the file name; anything else is refused."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in WRITE_FORMATS:
        raise InspectError(f"{path}: cannot tell the graph format from the extension "
                           f"{('.' + ext) if ext else '(none)'}",
                           hint="name the output .svg, .png, .pdf, .dot or .json")
    return ext


@dataclass
class GraphFile:
    """What :func:`write_graph` wrote: the requested file, or the ``.dot`` beside it."""

    path: str
    format: str
    bytes: int
    rendered: bool
    requested: str
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def dot_binary() -> str | None:
    return shutil.which("dot")


def write_graph(graph: Graph, path: str | os.PathLike[str], *, force: bool = False,
                protect: tuple[str, ...] = ()) -> GraphFile:
    """Write ``graph`` to ``path`` (format by extension), atomically.

    Without the Graphviz ``dot`` binary an image request writes ``<name>.dot`` instead and
    says so in ``fallback_reason``.
    """
    fmt = output_format(path)
    target = Path(path)
    if fmt == "json":
        text = graph_json(graph)
        atomic_write_text(target, text, force=force, protect=protect)
        return GraphFile(str(target), fmt, len(text.encode()), False, str(target))
    source = to_dot(graph)
    if fmt == "dot":
        atomic_write_text(target, source, force=force, protect=protect)
        return GraphFile(str(target), fmt, len(source.encode()), False, str(target))
    data, reason = _render(source, fmt, target, force=force, protect=protect)
    if data is not None:
        atomic_write_bytes(target, data, force=force, protect=protect)
        return GraphFile(str(target), fmt, len(data), True, str(target))
    dot_path = target.with_suffix(".dot")
    atomic_write_text(dot_path, source, force=force, protect=protect)
    return GraphFile(str(dot_path), "dot", len(source.encode()), False, str(target), reason)


def _render(source: str, fmt: str, target: Path, *, force: bool,
            protect: tuple[str, ...]) -> tuple[bytes | None, str | None]:
    """The rendered image, or None and why it could not be rendered here."""
    try:
        import graphviz
    except ImportError:
        return None, "the graphviz Python package is not installed (pip install graphviz)"
    if dot_binary() is None:
        return None, "the Graphviz `dot` program is not on PATH"
    check_target(target, force=force, protect=protect)  # before the layout
    try:
        return graphviz.Source(source).pipe(format=fmt), None
    except graphviz.ExecutableNotFound:
        return None, "the Graphviz `dot` program is not on PATH"
    except graphviz.CalledProcessError as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise InspectError(f"Graphviz dot failed to render {target.name}: "
                           f"{err[-1] if err else exc}",
                           hint=f"write the source with -o {target.with_suffix('.dot')} "
                           "and inspect it") from None


def graph_json(graph: Graph) -> str:
    import json

    text = json.dumps({"schema": "torchinspect/graph/v1", **graph.to_dict()}, indent=2,
                      ensure_ascii=False) + "\n"
    return utf8_safe(text)  # a lone surrogate in a name: \udcXX text, the file valid UTF-8
