"""The module graph: the module calls of a :class:`Trace` cut at ``depth``, repeated
identical blocks folded (the folding of ``summary --fold``, :mod:`torchinspect.trace.tree`),
modules drawn open nested as clusters, and (``functions=True``) the functional ops between
them (``add``, ``relu``, ``matmul``, ``scaled_dot_product_attention`` ...) as their own nodes.

Edges follow the tensors from node to node, found by a second forward that tracks which
module call or function produced each tensor (:mod:`torchinspect.export.graph.flow`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect.export.graph.flow import FUNC, INPUT, OUTPUT, Flow
from torchinspect.export.graph.model import (
    Graph,
    GraphCluster,
    GraphEdge,
    GraphKind,
    GraphNode,
    big_note,
)
from torchinspect.shapes import first_tensor, format_shape_tree


@dataclass
class _View:
    """State of one module graph being built: which node or cluster stands for each call."""

    trace: Any
    flow: Flow | None
    graph: Graph
    before: dict[int, list[Any]] = field(default_factory=dict)  # children before folding
    owner: dict[int, str] = field(default_factory=dict)  # producer id -> node id
    cluster_of: dict[int, str] = field(default_factory=dict)  # open call index -> cluster id
    edge_keys: set[tuple[str, str]] = field(default_factory=set)


def module_graph(trace: Any, flow: Flow | None, *, depth: int | None = None, fold: bool = True,
                 name: str | None = None, functions: bool = True) -> Graph:
    """The module graph of ``trace`` cut at ``depth`` (None: every level), edges from ``flow``.

    A node is a module call shown as a leaf at that depth (everything below is inside it);
    runs of identical consecutive blocks fold into one node (``BasicBlock ×2``); a module
    shown open is a cluster around its children. ``functions``: functional ops outside the
    leaves are nodes too (``False``: edges pass through them, the older picture).
    """
    from torchinspect.trace.tree import fold_repeats, shown_tree  # torch (package docstring)

    graph = Graph(GraphKind.module, name or trace.model_type, depth=depth, device=trace.device)
    root = shown_tree(trace, 10**6 if depth is None else max(depth, 0))
    if root is None:
        return graph
    matched = flow is not None and _flow_matches(flow, trace)
    view = _View(trace, flow if matched else None, graph)
    _snapshot(view, root)
    if fold:
        fold_repeats(trace, root)
    _walk(view, root, None)
    _add_inputs(view, trace)
    if matched and functions:
        _add_functions(view)
    graph.nodes.append(GraphNode("output", f"output\n{_short(trace.outputs)}", "output", "output"))
    view.owner[OUTPUT] = "output"
    if matched:
        _flow_edges(view)
    else:
        if flow is not None:
            graph.notes.append("edges follow the call order (the tensor flow could not be "
                               "matched to the trace)")
        ids = [n.id for n in graph.nodes]
        for a, b in zip(ids, ids[1:], strict=False):
            _link(view, a, b)
    big_note(graph)
    return graph


def _add_inputs(view: _View, trace: Any) -> None:
    """An input node per input tensor (named by the forward's parameters) when the flow is
    known; one node for all inputs otherwise."""
    inputs = view.flow.inputs if view.flow is not None else []
    nodes = [GraphNode("input" if len(inputs) == 1 else f"input{i}", f"{name}\n{_dims(shape)}",
                       "input", name, None, shape) for i, (name, shape) in enumerate(inputs)]
    for i, node in enumerate(nodes):
        view.owner[INPUT + i] = node.id
    if not nodes:
        nodes = [GraphNode("input", f"input\n{_short(trace.inputs)}", "input", "input")]
    view.graph.nodes[:0] = nodes


def _snapshot(view: _View, node: Any) -> None:
    view.before[id(node)] = list(node.children)
    for ch in node.children:
        _snapshot(view, ch)


def _walk(view: _View, node: Any, cluster: str | None) -> None:
    """Leaves become nodes; a module shown open becomes a cluster around its children."""
    if not node.children:
        _add_leaf(view, node, [node], cluster)
        return
    orig = view.before[id(node)]
    pos = 0
    for ch in node.children:
        while orig[pos] is not ch:
            pos += 1
        members = orig[pos:pos + ch.fold]
        pos += ch.fold
        if ch.fold > 1 or not ch.children:
            _add_leaf(view, ch, members, cluster)
        else:
            _walk(view, ch, _add_cluster(view, ch.call, cluster))


def _add_cluster(view: _View, call: Any, parent: str | None) -> str:
    from torchinspect.trace.tree import is_called  # torch (package docstring)

    cid = f"c{len(view.graph.clusters)}"
    view.graph.clusters.append(GraphCluster(cid, f"{call.name or '(model)'} ({call.type})",
                                            call.name, call.type, parent))
    if is_called(call):
        view.cluster_of[call.index] = cid
    return cid


def _add_leaf(view: _View, node: Any, members: list[Any], cluster: str | None) -> None:
    from torchinspect.trace.tree import call_of  # torch (package docstring)

    call, last = node.call, members[-1].call
    nid = f"m{len(view.graph.nodes)}"
    outs = _last_outputs(view.trace, last)
    fold_text = f" ×{len(members)}" if len(members) > 1 else ""
    names = (call.name or "(model)") + call_of(view.trace, call)  # act (call 1/2), as summary
    site = view.flow.sites.get(call.index) if view.flow is not None else None
    if len(members) > 1:
        names = f"{_site(view, call)} … {_site(view, last)}"
    elif site is not None:  # a module shared by several parents: the name this caller uses
        names = f"{site} (shared: {call.name})"
    label = f"{call.type}{fold_text}\n{names}" + (f"\n{outs}" if outs else "")
    view.graph.nodes.append(GraphNode(nid, label, "module", call.name, call.type,
                                      _first_shape(last.outputs), len(members), cluster))
    for m in members:
        for i in _enclosed(view.trace, m.call):
            view.owner[i] = nid


def _site(view: _View, call: Any) -> str:
    sites = view.flow.sites if view.flow is not None else {}
    return str(sites.get(call.index, call.name))


def _enclosed(trace: Any, call: Any) -> list[int]:
    from torchinspect.trace.tree import is_called  # torch (package docstring)

    out: list[int] = []
    stack = [call.index] if is_called(call) else list(call.children)
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(trace.calls[i].children)
    return out


def _add_functions(view: _View) -> None:
    """Functional ops outside every leaf: a node each, in the cluster of the module whose
    forward called them; ops inside a leaf belong to the leaf."""
    assert view.flow is not None
    view.graph.functions = True
    calls = view.trace.calls
    for j, fc in enumerate(view.flow.functions):
        inside = view.owner.get(fc.parent) if fc.parent is not None else None
        if inside is not None:
            view.owner[FUNC + j] = inside
            continue
        where = calls[fc.parent].name if fc.parent is not None else ""
        nid = f"f{j}"
        view.graph.nodes.append(GraphNode(
            nid, f"{fc.name}\n{_dims(fc.shape)}", "function", where or "(model)", fc.name,
            fc.shape, 1, view.cluster_of.get(fc.parent) if fc.parent is not None else None))
        view.owner[FUNC + j] = nid


def _dims(shape: list[int] | None) -> str:
    """``[1, 64, 128]``, as the module nodes write their output shapes."""
    return "" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _flow_edges(view: _View) -> None:
    flow = view.flow
    assert flow is not None
    for i, sources in enumerate(flow.sources):
        _link_from(view, sources, view.owner.get(i))
    for j, fc in enumerate(flow.functions):
        if FUNC + j in view.owner:
            _link_from(view, fc.sources, view.owner[FUNC + j])
    _link_from(view, flow.outputs, "output")


def _link_from(view: _View, sources: frozenset[int], dst: str | None) -> None:
    for p in sorted(sources):
        for src in _resolve(view, p, set()):
            _link(view, src, dst)


def _resolve(view: _View, p: int, seen: set[int]) -> list[str]:
    """Node(s) standing for producer ``p``: its own node; for a container drawn open,
    whatever produced the tensors it returned; for an op not drawn, its own producers."""
    nid = view.owner.get(p)
    if nid is not None or p in seen:
        return [nid] if nid is not None else []
    seen.add(p)
    assert view.flow is not None
    if FUNC <= p < INPUT:
        nxt = view.flow.functions[p - FUNC].sources
    else:
        nxt = view.flow.via.get(p, frozenset())
    return [n for q in sorted(nxt) for n in _resolve(view, q, seen)]


def _link(view: _View, src: str | None, dst: str | None) -> None:
    if src is None or dst is None or src == dst or (src, dst) in view.edge_keys:
        return
    view.edge_keys.add((src, dst))
    view.graph.edges.append(GraphEdge(src, dst))


def _flow_matches(flow: Flow, trace: Any) -> bool:
    return len(flow.calls) == len(trace.calls) and all(
        n == c.name for (n, _), c in zip(flow.calls, trace.calls, strict=True))


def _first_shape(tree: Any) -> list[int] | None:
    t = first_tensor(tree)
    return list(t.shape) if t is not None else None


def _short(tree: Any) -> str:
    if tree is None:
        return ""
    return format_shape_tree(tree, limit=60)


def _last_outputs(trace: Any, call: Any) -> str:
    from torchinspect.trace.tree import is_called  # torch (package docstring)

    if is_called(call):
        return _short(call.outputs)
    if call.children:
        return _short(trace.calls[max(call.children)].outputs)
    return ""
