"""The autograd graph of one real forward: ``grad_fn.next_functions`` walked from the
outputs (as pytorchviz does), one node per autograd function, parameter leaves named by
their qualified name and shape.

Three phases: :func:`_prepare` (gradient-requiring copies of the inputs and stand-ins),
:func:`_forward` (one forward in eval mode), :class:`_Walk` (the walk into a :class:`Graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect.errors import InspectError, is_out_of_memory
from torchinspect.export.graph.flow import input_leaves
from torchinspect.export.graph.model import (
    Graph,
    GraphEdge,
    GraphKind,
    GraphNode,
    big_note,
    device_of,
    fmt_shape,
    shape_list,
)
from torchinspect.guard import training_mode
from torchinspect.shapes import tensor_leaves


@dataclass
class _Prepared:
    """What the forward runs on: inputs (leaves that require grad), stand-ins, names."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: dict[str, Any] | None
    names: dict[int, str]  # id(parameter or stand-in) -> qualified name
    input_names: dict[int, str]  # id(input leaf) -> "input i"


def autograd_graph(model: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                   *, saved: bool = False, name: str | None = None,
                   state: dict[str, Any] | None = None) -> Graph:
    """The backward graph of ``model(*args, **kwargs)``'s outputs (one forward, eval mode).

    Floating-point inputs get gradients (copies: the caller's tensors are untouched), so
    the input leaves appear too. ``saved=True`` adds the tensors each function saved.
    ``state``: stand-ins by name (e.g. meta copies) run through ``functional_call``.
    """
    from torchinspect.trace.engine import model_kept  # torch (package docstring)

    prep = _prepare(model, args, kwargs, state)
    # what the forward assigns is put back after the walk: restoring a buffer earlier would
    # invalidate the tensors the graph saved (their version changes)
    with model_kept(model):
        out = _forward(model, prep)
        graph = Graph(GraphKind.autograd, name or type(model).__name__, device=device_of(out))
        walk = _Walk(graph, prep, saved)
        walk.run(out)
        del out, walk
    big_note(graph)
    return graph


def _prepare(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
             state: dict[str, Any] | None) -> _Prepared:
    import torch

    from torchinspect.privtorch import tree_map

    names = {id(p): n for n, p in model.named_parameters()}
    if state:
        state = dict(state)
        leaves: dict[int, Any] = {}  # one grad-requiring leaf per stand-in (ties kept)
        for n, p in model.named_parameters(remove_duplicate=False):
            t = state.get(n, p)
            if t.is_floating_point() and p.requires_grad:
                t = leaves.setdefault(id(t), t.detach().requires_grad_(True))
            state[n] = t
        names = {}
        for n, _ in model.named_parameters():
            names.setdefault(id(state[n]), n)

    def leafify(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.detach().clone().requires_grad_(True)
        return v

    args, kwargs = tree_map(leafify, (tuple(args), dict(kwargs or {})))
    input_names = {id(t): name for name, t in input_leaves(model, args, kwargs)}
    return _Prepared(args, kwargs, state, names, input_names)


def _forward(model: Any, prep: _Prepared) -> Any:
    """One forward with gradients in eval mode; a forward that edits an input in place gets
    a copy of the input leaf (a CloneBackward node after it in the graph)."""
    import torch

    from torchinspect.privtorch import tree_map_only

    def forward(a: tuple[Any, ...], k: dict[str, Any]) -> Any:
        if prep.state:
            return torch.func.functional_call(model, prep.state, a, k, strict=False)
        return model(*a, **k)

    args, kwargs = prep.args, prep.kwargs
    with training_mode(model), torch.enable_grad():
        try:
            try:
                return forward(args, kwargs)
            except RuntimeError as exc:
                if "leaf Variable that requires grad" not in str(exc):
                    raise
                return forward(*tree_map_only(
                    torch.Tensor, lambda t: t.clone() if t.requires_grad else t,
                    (tuple(args), dict(kwargs))))
        except (InspectError, MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:  # the model's forward on these inputs: a user error
            from torchinspect.trace.policy import forward_error  # torch (package docstring)

            if is_out_of_memory(exc):
                raise  # the CLI says "ran out of memory", with its own hint

            raise forward_error(exc, (args, kwargs) if kwargs else args) from None


@dataclass
class _Walk:
    """The walk from the outputs through ``next_functions``: nodes made once, edges once."""

    graph: Graph
    prep: _Prepared
    saved: bool
    nodes: dict[int, GraphNode] = field(default_factory=dict)  # id(autograd fn) -> node
    # the Python objects of autograd nodes are made on access and freed when unreferenced
    # (torch 2.11: AccumulateGrad): kept alive here, an id() is never reused by another node
    alive: list[Any] = field(default_factory=list)
    by_leaf: dict[int, GraphNode] = field(default_factory=dict)  # id(leaf tensor) -> node
    made: list[GraphNode] = field(default_factory=list)  # each node once, in creation order
    edge_keys: set[tuple[str, str]] = field(default_factory=set)
    edges: list[GraphEdge] = field(default_factory=list)
    stack: list[Any] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    saved_count: int = 0

    def run(self, out: Any) -> None:
        outputs = [t for t in tensor_leaves(out) if t.grad_fn is not None or t.requires_grad]
        if not outputs:
            raise InspectError(f"{self.graph.model}: the output does not depend on anything "
                               "that requires a gradient, so it has no autograd graph",
                               hint="use --kind module for the module graph")
        for i, t in enumerate(outputs):
            onode = GraphNode(f"out{i}", f"output {i}\n{fmt_shape(shape_list(t))}", "output",
                              f"output {i}", None, shape_list(t))
            self.graph.nodes.append(onode)
            if t.grad_fn is not None:
                self.follow(t.grad_fn, onode.id)
        while self.stack:
            fn = self.stack.pop()
            here = self.node_for(fn)
            if self.saved:
                self.add_saved(fn, here)
            for nxt, _ in getattr(fn, "next_functions", ()):
                if nxt is not None:
                    self.follow(nxt, here.id)
        self.graph.nodes[:0] = self.made
        self.graph.edges = self.edges

    def add_edge(self, src: str, dst: str) -> None:
        if (src, dst) not in self.edge_keys:
            self.edge_keys.add((src, dst))
            self.edges.append(GraphEdge(src, dst))

    def follow(self, fn: Any, dst: str) -> None:
        """An edge fn -> dst; fn's inputs walked once."""
        self.add_edge(self.node_for(fn).id, dst)
        if id(fn) not in self.seen:
            self.seen.add(id(fn))
            self.stack.append(fn)

    def node_for(self, fn: Any) -> GraphNode:
        node = self.nodes.get(id(fn))
        if node is not None:
            return node
        self.alive.append(fn)
        var = getattr(fn, "variable", None)
        if var is not None and id(var) in self.by_leaf:  # one node per leaf tensor
            self.nodes[id(fn)] = self.by_leaf[id(var)]
            return self.by_leaf[id(var)]
        nid = f"n{len(self.made)}"
        if var is not None:  # AccumulateGrad: a leaf tensor
            pname = self.prep.names.get(id(var))
            if pname is not None:
                node = GraphNode(nid, f"{pname} {fmt_shape(shape_list(var))}", "param", pname,
                                 "Parameter", shape_list(var))
            else:
                label = self.prep.input_names.get(id(var), "leaf tensor")
                node = GraphNode(nid, f"{label}\n{fmt_shape(shape_list(var))}", "input", label,
                                 None, shape_list(var))
            self.by_leaf[id(var)] = node
        else:
            kind = type(fn).__name__
            node = GraphNode(nid, kind, "op", None, kind)
        self.nodes[id(fn)] = node
        self.made.append(node)
        return node

    def add_saved(self, fn: Any, here: GraphNode) -> None:
        """The tensors ``fn`` saved for backward, each a node with an edge into ``fn``."""
        import torch

        for attr in dir(fn):
            if not attr.startswith("_saved_"):
                continue
            val = getattr(fn, attr, None)
            if isinstance(val, torch.Tensor):
                self.saved_count += 1
                sid = f"s{self.saved_count}"
                self.graph.nodes.append(GraphNode(sid, f"{attr[7:]}\n{fmt_shape(shape_list(val))}",
                                                  "saved", attr[7:], "Tensor", shape_list(val)))
                self.add_edge(sid, here.id)
