"""The case-level API: ``build_graph``, the library twin of ``inspect graph``."""

from __future__ import annotations

from typing import Any

from torchinspect import device as devices
from torchinspect.arguments import check_depth, renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.export.graph.autograd import autograd_graph
from torchinspect.export.graph.flow import Flow, module_flow
from torchinspect.export.graph.model import READABLE_NODES, Graph, GraphKind
from torchinspect.export.graph.modules import module_graph
from torchinspect.sources.case import ModelLike, ModelOptions, make_case


@renamed_keywords(case_or_model="model")
def build_graph(model: ModelLike, inputs: Any = None, *, kind: GraphKind | str = "module",
                depth: int | None = None, fold: bool = True, saved: bool = False,
                options: ModelOptions | None = None, functions: bool = True) -> Graph:
    """The graph of a model case (or a model/spec and inputs): the library twin of ``inspect graph``.

    ``kind="module"`` (the default) traces on meta (auto: with a CPU fallback), drawing
    functional ops as nodes unless ``functions=False``; ``depth=None`` picks the deepest
    level whose picture stays readable (at most `READABLE_NODES` nodes) and says so in
    ``notes``. ``kind="autograd"`` runs one real forward on the case's device (auto/meta:
    cpu; refused up front when the weights would not fit) and draws every autograd op.
    ``options``: a ModelOptions when a spec is given.
    """
    if str(kind) not in {k.value for k in GraphKind}:
        raise InspectError(f"kind={kind!r}: unknown graph kind", hint="use 'autograd' or 'module'")
    kind = GraphKind(kind)
    if depth is not None:
        check_depth(depth)
    case = make_case(model, inputs, options=options)
    if kind is GraphKind.autograd:
        graph = _autograd_of(case, saved)
    else:
        graph = _module_of(case, depth, fold, functions)
    graph.inputs = case.describe_inputs()
    graph.notes[:0] = list(case.notes)
    return graph


def _autograd_of(case: Any, saved: bool) -> Graph:
    if case.requested == "meta":  # asked for explicitly: the same graph, no memory
        from torchinspect.trace.engine import meta_state  # torch (package docstring)

        args, kwargs = case.inputs_on("meta")
        return autograd_graph(case.model, args, kwargs, saved=saved, name=case.name,
                              state=meta_state(case.model))
    target = devices.real_device(case.requested)
    if case.on_meta:  # refuse up front, with the size, before building anything
        devices.ensure_fits(case.name, devices.weight_bytes(case.model), target,
                            hint="--kind module draws the module graph on meta, "
                            "--device meta the autograd graph, both without memory")
    model = case.real_model(target)
    args, kwargs = case.inputs_on(target)
    return autograd_graph(model, args, kwargs, saved=saved, name=case.name)


def _module_of(case: Any, depth: int | None, fold: bool, functions: bool) -> Graph:
    from torchinspect.trace import trace_case  # torch (package docstring)

    trace = trace_case(case)
    note = None
    try:
        flow = _flow_for(case, trace.device)
    except Exception as exc:  # noqa: BLE001 - the picture still works with call-order edges
        flow = None
        note = f"tensor flow unavailable ({type(exc).__name__}); edges follow the call order"
    if depth is not None:
        graph = module_graph(trace, flow, depth=depth, fold=fold, name=case.name,
                             functions=functions)
        graph.max_depth = _deepest(trace)
    else:
        graph = _readable(trace, flow, fold, case.name, functions)
    if note:
        graph.notes.append(note)
    return graph


def _deepest(trace: Any) -> int:
    """The deepest module call (a shared module is as deep as the call it runs in)."""
    level: dict[int, int] = {}
    for c in trace.calls:  # parents before children
        level[c.index] = max(c.depth, level[c.parent] + 1) if c.parent in level else c.depth
    return max(level.values(), default=0)


def _readable(trace: Any, flow: Flow | None, fold: bool, name: str, functions: bool) -> Graph:
    """The deepest module graph with at most READABLE_NODES nodes (depth 1 at least), with a
    note saying how to draw more when that is not every level."""
    deepest = _deepest(trace)
    for depth in range(deepest, 0, -1):
        graph = module_graph(trace, flow, depth=depth, fold=fold, name=name, functions=functions)
        if len(graph.nodes) <= READABLE_NODES:
            break
    else:
        graph = module_graph(trace, flow, depth=deepest, fold=fold, name=name,
                             functions=functions)
    graph.max_depth = deepest
    if graph.depth is not None and graph.depth < deepest:
        graph.notes.append(
            f"drawn to module depth {graph.depth} of {deepest} ({len(graph.nodes)} nodes) so "
            f"the picture stays readable; --depth {deepest} draws every module, "
            "--kind autograd every op")
    return graph


def _flow_for(case: Any, device: str) -> Flow:
    """The tensor flow on the device the trace ran on (meta: stand-ins for real weights)."""
    from torchinspect.trace.engine import meta_state  # torch (package docstring)

    if device == "meta":
        args, kwargs = case.inputs_on("meta")
        return module_flow(case.model, args, kwargs, meta_state(case.model))
    model = case.real_model(device)
    args, kwargs = case.inputs_on(device)
    return module_flow(model, args, kwargs)
