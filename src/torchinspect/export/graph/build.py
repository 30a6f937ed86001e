"""The case-level API: ``build_graph``, the library twin of ``inspect graph``."""

from __future__ import annotations

from typing import Any

from torchinspect import device as devices
from torchinspect.arguments import check_depth, renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.export.graph.autograd import autograd_graph
from torchinspect.export.graph.flow import _Flow, module_flow
from torchinspect.export.graph.model import Graph, GraphKind
from torchinspect.export.graph.modules import module_graph
from torchinspect.sources.case import ModelLike, ModelOptions, make_case


@renamed_keywords(case_or_model="model")
def build_graph(model: ModelLike, inputs: Any = None, *, kind: GraphKind | str = "autograd",
                depth: int | None = None, fold: bool = True, saved: bool = False,
                options: ModelOptions | None = None, functions: bool = True) -> Graph:
    """The graph of a model case (or a model/spec and inputs): the library twin of ``inspect graph``.

    ``kind="autograd"`` runs one real forward on the case's device (auto/meta: cpu; refused
    up front when the weights would not fit); ``kind="module"`` traces on meta (auto: with
    a CPU fallback), drawing functional ops as nodes unless ``functions=False``.
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
    graph = module_graph(trace, flow, depth=depth, fold=fold, name=case.name, functions=functions)
    if note:
        graph.notes.append(note)
    return graph


def _flow_for(case: Any, device: str) -> _Flow:
    """The tensor flow on the device the trace ran on (meta: stand-ins for real weights)."""
    from torchinspect.trace.engine import meta_state  # torch (package docstring)

    if device == "meta":
        args, kwargs = case.inputs_on("meta")
        return module_flow(case.model, args, kwargs, meta_state(case.model))
    model = case.real_model(device)
    args, kwargs = case.inputs_on(device)
    return module_flow(model, args, kwargs)
