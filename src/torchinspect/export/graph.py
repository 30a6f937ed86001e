"""Model graphs: the autograd graph of one real forward, or the module graph of a meta trace.

* :func:`autograd_graph` runs the model once with gradients and walks
  ``grad_fn.next_functions`` from the outputs (as pytorchviz does): one node per autograd
  function, parameter leaves named by their qualified name and shape.
* :func:`module_graph` draws the module calls of a :class:`Trace` cut at ``depth`` with
  repeated identical blocks folded (the folding of ``summary --fold``,
  :mod:`torchinspect.analysis.tree`); edges follow the tensors from module to module, found
  by a second meta forward that tracks which module call produced each tensor.
* :func:`to_dot` writes Graphviz source with every label escaped; :func:`write_graph`
  renders it with ``dot`` (through the ``graphviz`` package) or falls back to the ``.dot``.

The core returns a :class:`Graph` dataclass and never prints.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.arguments import check_depth
from torchinspect.errors import InspectError, is_out_of_memory
from torchinspect.guard import training_mode
from torchinspect.shapes import first_tensor, tensor_leaves

BIG_GRAPH = 2000  # nodes; above this the result suggests --depth
RENDER_FORMATS = ("svg", "png", "pdf")
WRITE_FORMATS = (*RENDER_FORMATS, "dot", "json")
INPUT, OUTPUT = -1, -2  # pseudo call indices of the module graph's input and output nodes


class GraphKind(StrEnum):
    autograd = "autograd"
    module = "module"


@dataclass
class GraphNode:
    """One node. ``kind``: op, param, input, output, saved (autograd); module, input, output."""

    id: str
    label: str
    kind: str
    name: str | None = None  # parameter or module qualified name
    type: str | None = None  # autograd function or module class
    shape: list[int] | None = None
    fold: int = 1  # identical consecutive blocks drawn as this one node

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GraphEdge:
    src: str
    dst: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Graph:
    """Nodes and edges of one view of a model, ready for DOT or JSON."""

    kind: str
    model: str
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    depth: int | None = None
    device: str = "meta"
    inputs: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def big(self) -> bool:
        return len(self.nodes) > BIG_GRAPH

    def count(self, kind: str) -> int:
        return sum(1 for n in self.nodes if n.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "depth": self.depth,
                "device": self.device, "inputs": self.inputs, "notes": list(self.notes),
                "nodes": [n.to_dict() for n in self.nodes],
                "edges": [e.to_dict() for e in self.edges]}


def _shape(t: Any) -> list[int]:
    return [int(d) for d in t.shape]


def _fmt_shape(shape: list[int] | tuple[int, ...] | None) -> str:
    if shape is None:
        return ""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _tensors(value: Any) -> list[Any]:
    """Every tensor in a value: pytree containers, and dataclass fields (a model may return
    a dataclass, which pytree sees as one leaf)."""
    from torch.utils import _pytree as pytree

    return [t for leaf in pytree.tree_leaves(value) for t in tensor_leaves(leaf)]


# ------------------------------------------------------------------ autograd graph


def autograd_graph(model: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                   *, saved: bool = False, name: str | None = None,
                   state: dict[str, Any] | None = None) -> Graph:
    """The backward graph of ``model(*args, **kwargs)``'s outputs (one forward, eval mode).

    Floating-point inputs get gradients (copies: the caller's tensors are untouched), so
    the input leaves appear too. ``saved=True`` adds the tensors each function saved.
    ``state``: stand-ins by name (e.g. meta copies) run through ``functional_call``.
    """
    import torch

    kwargs = dict(kwargs or {})
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

    from torch.utils import _pytree as pytree

    args, kwargs = pytree.tree_map(leafify, (tuple(args), kwargs))
    input_names = {id(t): f"input {i}" for i, t in enumerate(_tensors((args, kwargs)))}
    from torchinspect.trace.engine import model_kept

    # what the forward assigns is put back after the walk: restoring a buffer earlier would
    # invalidate the tensors the graph saved (their version changes)
    with model_kept(model):
        def forward(a: tuple[Any, ...], k: dict[str, Any]) -> Any:
            if state:
                return torch.func.functional_call(model, state, a, k, strict=False)
            return model(*a, **k)

        with training_mode(model), torch.enable_grad():
            try:
                try:
                    out = forward(args, kwargs)
                except RuntimeError as exc:
                    if "leaf Variable that requires grad" not in str(exc):
                        raise
                    # the forward edits an input in place: it gets a copy of the input leaf
                    # (a CloneBackward node after it in the graph)
                    out = forward(*pytree.tree_map_only(
                        torch.Tensor, lambda t: t.clone() if t.requires_grad else t,
                        (tuple(args), dict(kwargs))))
            except (InspectError, MemoryError, KeyboardInterrupt):
                raise
            except Exception as exc:  # the model's forward on these inputs: a user error
                from torchinspect.trace.policy import forward_error

                if is_out_of_memory(exc):
                    raise  # the CLI says "ran out of memory", with its own hint

                raise forward_error(exc, (args, kwargs) if kwargs else args) from None
        graph = Graph(GraphKind.autograd, name or type(model).__name__, device=_device_of(out))
        nodes: dict[int, GraphNode] = {}
        # the Python objects of autograd nodes are made on access and freed when unreferenced
        # (torch 2.11: AccumulateGrad): kept alive here, an id() is never reused by another node
        alive: list[Any] = []
        by_leaf: dict[int, GraphNode] = {}
        made: list[GraphNode] = []  # each node once, in creation order
        edges: set[tuple[str, str]] = set()
        edge_list: list[GraphEdge] = []

        def add_edge(src: str, dst: str) -> None:
            if (src, dst) not in edges:
                edges.add((src, dst))
                edge_list.append(GraphEdge(src, dst))

        def node_for(fn: Any) -> GraphNode:
            node = nodes.get(id(fn))
            if node is not None:
                return node
            alive.append(fn)
            var = getattr(fn, "variable", None)
            if var is not None and id(var) in by_leaf:  # one node per leaf tensor
                nodes[id(fn)] = by_leaf[id(var)]
                return by_leaf[id(var)]
            nid = f"n{len(made)}"
            if var is not None:  # AccumulateGrad: a leaf tensor
                pname = names.get(id(var))
                if pname is not None:
                    node = GraphNode(nid, f"{pname} {_fmt_shape(_shape(var))}", "param", pname,
                                     "Parameter", _shape(var))
                else:
                    label = input_names.get(id(var), "leaf tensor")
                    node = GraphNode(nid, f"{label}\n{_fmt_shape(_shape(var))}", "input", label,
                                     None, _shape(var))
            else:
                kind = type(fn).__name__
                node = GraphNode(nid, kind, "op", None, kind)
            nodes[id(fn)] = node
            made.append(node)
            if var is not None:
                by_leaf[id(var)] = node
            return node

        outputs = [t for t in _tensors(out) if t.grad_fn is not None or t.requires_grad]
        if not outputs:
            raise InspectError(f"{graph.model}: the output does not depend on anything that "
                               "requires a gradient, so it has no autograd graph",
                               hint="use --kind module for the module graph")
        stack: list[Any] = []
        seen: set[int] = set()
        saved_count = 0

        def follow(fn: Any, dst: str) -> None:  # an edge fn -> dst; fn's inputs walked once
            add_edge(node_for(fn).id, dst)
            if id(fn) not in seen:
                seen.add(id(fn))
                stack.append(fn)

        for i, t in enumerate(outputs):
            onode = GraphNode(f"out{i}", f"output {i}\n{_fmt_shape(_shape(t))}", "output",
                              f"output {i}", None, _shape(t))
            graph.nodes.append(onode)
            if t.grad_fn is not None:
                follow(t.grad_fn, onode.id)
        while stack:
            fn = stack.pop()
            here = node_for(fn)
            if saved:
                for attr in dir(fn):
                    if not attr.startswith("_saved_"):
                        continue
                    val = getattr(fn, attr, None)
                    if isinstance(val, torch.Tensor):
                        saved_count += 1
                        sid = f"s{saved_count}"
                        graph.nodes.append(GraphNode(sid, f"{attr[7:]}\n{_fmt_shape(_shape(val))}",
                                                     "saved", attr[7:], "Tensor", _shape(val)))
                        add_edge(sid, here.id)
            for nxt, _ in getattr(fn, "next_functions", ()):
                if nxt is not None:
                    follow(nxt, here.id)
        graph.nodes[:0] = made
        graph.edges = edge_list
        del out, outputs
    _big_note(graph)
    return graph


def _device_of(out: Any) -> str:
    ts = _tensors(out)
    return str(ts[0].device) if ts else "cpu"


def _big_note(graph: Graph) -> None:
    if graph.big:
        hint = ("pass --kind module --depth 2 for a readable picture" if graph.kind == "autograd"
                else "pass --depth 2 (or 1) to collapse the inner modules")
        graph.notes.append(f"{len(graph.nodes):,} nodes: a graph this big is hard to read; {hint}")


# ------------------------------------------------------------------ module graph


class _Flow:
    """Which module call produced each tensor of one forward (module hooks + a function mode)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        self.producers: dict[int, tuple[Any, frozenset[int]]] = {}  # id(t) -> (t, calls)
        self.calls: list[tuple[str, list[int]]] = []  # (name, children) in call order
        self.stack: list[int] = []
        self.sources: list[frozenset[int]] = []  # producers of each call's inputs
        self.outputs: frozenset[int] = frozenset()
        # container call -> what produced the tensors it returned (for an expanded view)
        self.via: dict[int, frozenset[int]] = {}

    def of(self, value: Any) -> frozenset[int]:
        out: frozenset[int] = frozenset()
        for t in _tensors(value):
            entry = self.producers.get(id(t))
            if entry is not None and entry[0] is t:
                out |= entry[1]
        return out

    def mark(self, value: Any, calls: frozenset[int]) -> None:
        for t in _tensors(value):
            self.producers[id(t)] = (t, calls)

    def pre(self, module: Any, args: Any, kwargs: Any) -> None:
        index = len(self.calls)
        if self.stack:
            self.calls[self.stack[-1]][1].append(index)
        self.calls.append((self.names.get(id(module), "?"), []))
        self.sources.append(self.of((args, kwargs)))
        self.stack.append(index)

    def post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not self.stack:
            return
        index = self.stack.pop()
        if self.calls[index][1]:  # a container: remember what inside (or before) made its outputs
            self.via[index] = self.via.get(index, frozenset()) | self.of(output)
        self.mark(output, frozenset({index}))


def _flow_mode(flow: _Flow) -> Any:
    from torch.overrides import TorchFunctionMode

    class FlowMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            srcs = flow.of((args, kwargs))
            if srcs:
                flow.mark(out, srcs)
            return out

    return FlowMode()


def module_flow(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                state: dict[str, Any] | None = None) -> _Flow:
    """One forward recording, per module call, which earlier calls produced its inputs.

    ``state``: stand-in tensors by name (``functional_call``), e.g. meta copies of real
    weights, so the user's model is neither copied nor touched.
    """
    flow = _Flow(model)
    flow.mark((args, kwargs), frozenset({INPUT}))
    handles = []
    try:
        from torchinspect.trace.static import hookable_modules

        for m in hookable_modules(model):
            handles.append(m.register_forward_pre_hook(flow.pre, with_kwargs=True))
            handles.append(m.register_forward_hook(flow.post, with_kwargs=True, always_call=True))
        import torch

        from torchinspect.trace.engine import model_kept

        with model_kept(model), training_mode(model), torch.no_grad(), _flow_mode(flow):
            if state:
                out = torch.func.functional_call(model, state, args, kwargs, strict=False)
            else:
                out = model(*args, **kwargs)
        flow.outputs = flow.of(out)
    finally:
        for h in handles:
            h.remove()
    flow.producers.clear()
    return flow


def module_graph(trace: Any, flow: _Flow | None, *, depth: int | None = None, fold: bool = True,
                 name: str | None = None) -> Graph:
    """The module graph of ``trace`` cut at ``depth`` (None: every level), edges from ``flow``.

    A node is a module call shown as a leaf at that depth (everything below is inside it);
    runs of identical consecutive blocks fold into one node (``BasicBlock ×2``).
    """
    from torchinspect.analysis.tree import ShownCall, fold_repeats, is_called, shown_tree

    graph = Graph(GraphKind.module, name or trace.model_type, depth=depth, device=trace.device)
    root = shown_tree(trace, 10**6 if depth is None else max(depth, 0))
    if root is None:
        return graph
    before: dict[int, list[ShownCall]] = {}

    def snapshot(n: ShownCall) -> None:
        before[id(n)] = list(n.children)
        for ch in n.children:
            snapshot(ch)

    snapshot(root)
    if fold:
        fold_repeats(trace, root)
    calls = trace.calls
    owner: dict[int, str] = {}  # trace call index -> node id

    def enclosed(call: Any) -> list[int]:
        out: list[int] = []
        stack = [call.index] if is_called(call) else list(call.children)
        while stack:
            i = stack.pop()
            out.append(i)
            stack.extend(calls[i].children)
        return out

    def add_leaf(node: ShownCall, members: list[ShownCall]) -> None:
        call = node.call
        nid = f"m{len(graph.nodes)}"
        last = members[-1].call
        outs = _last_outputs(trace, last)
        fold_text = f" ×{len(members)}" if len(members) > 1 else ""
        names = call.name or "(model)"
        if len(members) > 1:
            names = f"{call.name} … {last.name}"
        label = f"{call.type}{fold_text}\n{names}" + (f"\n{outs}" if outs else "")
        graph.nodes.append(GraphNode(nid, label, "module", call.name, call.type,
                                     _first_shape(last.outputs), len(members)))
        for m in members:
            for i in enclosed(m.call):
                owner[i] = nid

    def walk(node: ShownCall) -> None:
        if not node.children:
            add_leaf(node, [node])
            return
        orig = before[id(node)]
        pos = 0
        for ch in node.children:
            while orig[pos] is not ch:
                pos += 1
            members = orig[pos:pos + ch.fold]
            pos += ch.fold
            if ch.fold > 1 or not ch.children:
                add_leaf(ch, members)
            else:
                walk(ch)

    walk(root)
    graph.nodes.insert(0, GraphNode("input", f"input\n{_short(trace.inputs)}", "input", "input"))
    graph.nodes.append(GraphNode("output", f"output\n{_short(trace.outputs)}", "output", "output"))
    owner[INPUT], owner[OUTPUT] = "input", "output"
    seen: set[tuple[str, str]] = set()

    def link(src: str | None, dst: str | None) -> None:
        if src is None or dst is None or src == dst or (src, dst) in seen:
            return
        seen.add((src, dst))
        graph.edges.append(GraphEdge(src, dst))

    def resolve(p: int, seen: set[int]) -> list[str]:
        """Node(s) standing for producer call ``p``: its own node, or (a container drawn
        open) whatever produced the tensors it returned."""
        nid = owner.get(p)
        if nid is not None or p in seen:
            return [nid] if nid is not None else []
        seen.add(p)
        return [n for q in sorted(flow.via.get(p, ())) for n in resolve(q, seen)]

    if flow is not None and _flow_matches(flow, trace):
        for i, sources in enumerate(flow.sources):
            dst = owner.get(i)
            for p in sorted(sources):
                for src in resolve(p, set()):
                    link(src, dst)
        for p in sorted(flow.outputs):
            for src in resolve(p, set()):
                link(src, "output")
    else:
        if flow is not None:
            graph.notes.append("edges follow the call order (the tensor flow could not be "
                               "matched to the trace)")
        ids = [n.id for n in graph.nodes]
        for a, b in zip(ids, ids[1:], strict=False):
            link(a, b)
    _big_note(graph)
    return graph


def _flow_matches(flow: _Flow, trace: Any) -> bool:
    return len(flow.calls) == len(trace.calls) and all(
        n == c.name for (n, _), c in zip(flow.calls, trace.calls, strict=True))


def _first_shape(tree: Any) -> list[int] | None:
    t = first_tensor(tree)
    return list(t.shape) if t is not None else None


def _short(tree: Any) -> str:
    from torchinspect.shapes import format_shape_tree

    if tree is None:
        return ""
    return format_shape_tree(tree, limit=60)


def _last_outputs(trace: Any, call: Any) -> str:
    from torchinspect.analysis.tree import is_called

    if is_called(call):
        return _short(call.outputs)
    if call.children:
        return _short(trace.calls[max(call.children)].outputs)
    return ""


# ------------------------------------------------------------------ the case-level API


def build_graph(case_or_model: Any, inputs: Any = None, *, kind: GraphKind | str = "autograd",
                depth: int | None = None, fold: bool = True, saved: bool = False,
                options: Any = None) -> Graph:
    """The graph of a model case (or a model/spec and inputs): the library twin of ``inspect graph``.

    ``kind="autograd"`` runs one real forward on the case's device (auto/meta: cpu; refused
    up front when the weights would not fit); ``kind="module"`` traces on meta (auto: with
    a CPU fallback). ``options``: a ModelOptions when a spec is given.
    """
    from torchinspect.sources.case import ModelCase, make_case

    if str(kind) not in {k.value for k in GraphKind}:
        raise InspectError(f"kind={kind!r}: unknown graph kind", hint="use 'autograd' or 'module'")
    kind = GraphKind(kind)
    if depth is not None:
        check_depth(depth)
    case = case_or_model if isinstance(case_or_model, ModelCase) else make_case(case_or_model, inputs, options=options)
    if kind is GraphKind.autograd:
        from torchinspect import device as devices

        if case.requested == "meta":  # asked for explicitly: the same graph, no memory
            from torchinspect.trace.engine import meta_state

            args, kwargs = case.inputs_on("meta")
            graph = autograd_graph(case.model, args, kwargs, saved=saved, name=case.name,
                                   state=meta_state(case.model))
        else:
            target = devices.real_device(case.requested)
            if case.on_meta:  # refuse up front, with the size, before building anything
                devices.ensure_fits(case.name, devices.weight_bytes(case.model), target,
                                    hint="--kind module draws the module graph on meta, "
                                    "--device meta the autograd graph, both without memory")
            model = case.real_model(target)
            args, kwargs = case.inputs_on(target)
            graph = autograd_graph(model, args, kwargs, saved=saved, name=case.name)
    else:
        from torchinspect.trace import trace_case

        trace = trace_case(case)
        note = None
        try:
            flow = _flow_for(case, trace.device)
        except Exception as exc:  # noqa: BLE001 - the picture still works with call-order edges
            flow = None
            note = f"tensor flow unavailable ({type(exc).__name__}); edges follow the call order"
        graph = module_graph(trace, flow, depth=depth, fold=fold, name=case.name)
        if note:
            graph.notes.append(note)
    graph.inputs = case.describe_inputs()
    graph.notes[:0] = list(case.notes)
    return graph


def _flow_for(case: Any, device: str) -> _Flow:
    """The tensor flow on the device the trace ran on (meta: stand-ins for real weights)."""
    from torchinspect.trace.engine import meta_state

    if device == "meta":
        args, kwargs = case.inputs_on("meta")
        return module_flow(case.model, args, kwargs, meta_state(case.model))
    model = case.real_model(device)
    args, kwargs = case.inputs_on(device)
    return module_flow(model, args, kwargs)


# ------------------------------------------------------------------ DOT and files


def dot_quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as centred breaks."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r", "").replace("\n", "\\n")
    return f'"{text}"'


_STYLE = {
    "op": 'shape=box style="rounded,filled" fillcolor="#e8e8e8"',
    "param": 'shape=box style=filled fillcolor="#cfe8cf"',
    "input": 'shape=box style=filled fillcolor="#cfdff5"',
    "output": 'shape=box style=filled fillcolor="#f5e3b3"',
    "saved": 'shape=box style=filled fillcolor="#f0d0f0"',
    "module": 'shape=box style="rounded,filled" fillcolor="#eef2f8"',
}


def to_dot(graph: Graph) -> str:
    """Graphviz source for ``graph`` (UTF-8; every label escaped)."""
    lines = [f"digraph {dot_quote(graph.model)} {{",
             '  graph [rankdir=TB fontname="Helvetica" charset="UTF-8"];',
             '  node [fontname="Helvetica" fontsize=10];',
             '  edge [arrowsize=0.6];']
    for n in graph.nodes:
        style = _STYLE.get(n.kind, "shape=box")
        if n.fold > 1:
            style = style.replace("rounded,filled", "rounded,filled,bold")
        lines.append(f"  {dot_quote(n.id)} [label={dot_quote(n.label)} {style}];")
    for e in graph.edges:
        lines.append(f"  {dot_quote(e.src)} -> {dot_quote(e.dst)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


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
    from torchinspect.io.atomic import atomic_write_bytes, atomic_write_text, check_target

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
    try:
        import graphviz
    except ImportError:
        reason = "the graphviz Python package is not installed (pip install graphviz)"
    else:
        if dot_binary() is None:
            reason = "the Graphviz `dot` program is not on PATH"
        else:
            check_target(target, force=force, protect=protect)  # before the layout
            try:
                data = graphviz.Source(source).pipe(format=fmt)
            except graphviz.ExecutableNotFound:
                reason = "the Graphviz `dot` program is not on PATH"
            except graphviz.CalledProcessError as exc:
                err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
                raise InspectError(f"Graphviz dot failed to render {target.name}: "
                                   f"{err[-1] if err else exc}",
                                   hint=f"write the source with -o {target.with_suffix('.dot')} "
                                   "and inspect it") from None
            else:
                atomic_write_bytes(target, data, force=force, protect=protect)
                return GraphFile(str(target), fmt, len(data), True, str(target))
    dot_path = target.with_suffix(".dot")
    atomic_write_text(dot_path, source, force=force, protect=protect)
    return GraphFile(str(dot_path), "dot", len(source.encode()), False, str(target), reason)


def graph_json(graph: Graph) -> str:
    import json

    return json.dumps({"schema": "torchinspect/graph/v1", **graph.to_dict()}, indent=2,
                      ensure_ascii=False) + "\n"
