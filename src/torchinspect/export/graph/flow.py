"""Which module call or functional op produced each tensor of one forward.

Module hooks record the module calls; a ``TorchFunctionMode`` sees every torch function
(``add``, ``relu``, ``@``, ``scaled_dot_product_attention`` ...) with the module call it ran
in, as torchview records its function nodes. Ops that only rearrange a tensor (views,
transposes, indexing, dtype casts) pass their producers through instead of becoming nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchinspect.guard import training_mode
from torchinspect.shapes import tensor_leaves

OUTPUT = -2  # pseudo call index of the module graph's output node
FUNC = 1 << 40  # producer ids from here are functional ops: FUNC + index
INPUT = 1 << 41  # producer ids from here are the forward's input tensors: INPUT + index

# rearranging and bookkeeping ops: their outputs keep the producers of their inputs
LAYOUT_OPS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "transpose_", "permute", "contiguous",
    "flatten", "unflatten", "squeeze", "squeeze_", "unsqueeze", "unsqueeze_", "getitem", "split",
    "split_with_sizes", "chunk", "tensor_split", "unbind", "expand", "expand_as", "T", "mT", "H",
    "mH", "t", "movedim", "moveaxis", "swapaxes", "swapdims", "narrow", "select", "to", "type",
    "float", "double", "half", "bfloat16", "int", "long", "bool", "detach", "detach_", "clone",
    "requires_grad_", "cpu", "cuda", "as_strided", "view_as_real", "view_as_complex", "real",
    "imag", "data", "setitem", "len", "size", "dim", "shape", "dtype", "device", "numel",
    "item", "tolist", "unfold", "repeat_interleave_self", "type_as",
})


@dataclass
class FunctionCall:
    """One functional op of the forward: its name, the module call it ran in (None: outside
    every hooked module) and the producers of its tensor inputs."""

    name: str
    parent: int | None
    sources: frozenset[int]
    shape: list[int] | None


def function_name(func: Any) -> str | None:
    """The name an op is drawn with (``x + y`` -> ``add``, ``x += y`` -> ``add_``), or None
    for a layout op."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if name == "__get__":  # a tensor property (x.T): the descriptor's name
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core.startswith("i") and core[1:] in _BINARY:
            core = core[1:] + "_"
        elif core.startswith("r") and core[1:] in _BINARY:
            core = core[1:]
        name = core
    return None if name in LAYOUT_OPS else _SPELLED.get(name, name)


_SPELLED = {"truediv": "div", "truediv_": "div_", "floordiv": "floor_divide",
            "invert": "bitwise_not"}
_BINARY = frozenset({"add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "and",
                     "or", "xor", "lshift", "rshift", "div"})


class Flow:
    """Which module call produced each tensor of one forward (module hooks + a function mode)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        from torchinspect.trace.static import module_names  # torch (package docstring)

        # a module held by several parents goes by its first name, as in the trace
        self.names = module_names(model)
        self.producers: dict[int, tuple[Any, frozenset[int]]] = {}  # id(t) -> (t, calls)
        self.calls: list[tuple[str, list[int]]] = []  # (name, children) in call order
        self.stack: list[int] = []
        self.sources: list[frozenset[int]] = []  # producers of each call's inputs
        self.outputs: frozenset[int] = frozenset()
        # container call -> what produced the tensors it returned (for an expanded view)
        self.via: dict[int, frozenset[int]] = {}
        self.functions: list[FunctionCall] = []  # producer id FUNC + i
        self.inputs: list[tuple[str, list[int]]] = []  # (name, shape): producer id INPUT + i
        # call index -> the name its caller holds it by, where that is not its own name (a
        # module shared by several parents: ``enc2.act`` for the ReLU first registered as ``act``)
        self.sites: dict[int, str] = {}
        self.modules: list[Any] = []  # the modules running, outermost first

    def of(self, value: Any) -> frozenset[int]:
        out: frozenset[int] = frozenset()
        for t in tensor_leaves(value):
            entry = self.producers.get(id(t))
            if entry is not None and entry[0] is t:
                out |= entry[1]
        return out

    def mark(self, value: Any, calls: frozenset[int]) -> None:
        for t in tensor_leaves(value):
            self.producers[id(t)] = (t, calls)

    def mark_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """One producer per input tensor, named by the forward's parameters (``a``, ``b``,
        ``features['numeric']``)."""
        for i, (label, t) in enumerate(input_leaves(self.model, args, kwargs)):
            self.inputs.append((label, [int(d) for d in t.shape]))
            self.producers[id(t)] = (t, frozenset({INPUT + i}))

    def pre(self, module: Any, args: Any, kwargs: Any) -> None:
        index = len(self.calls)
        name = self.names.get(id(module), "?")
        if self.stack:
            self.calls[self.stack[-1]][1].append(index)
            site = _site_name(self.modules[-1], self.calls[self.stack[-1]][0], module)
            if site is not None and site != name:
                self.sites[index] = site
        self.calls.append((name, []))
        self.sources.append(self.of((args, kwargs)))
        self.stack.append(index)
        self.modules.append(module)

    def post(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not self.stack:
            return
        index = self.stack.pop()
        self.modules.pop()
        if self.calls[index][1]:  # a container: remember what inside (or before) made its outputs
            self.via[index] = self.via.get(index, frozenset()) | self.of(output)
        self.mark(output, frozenset({index}))

    def function(self, func: Any, out: Any, sources: frozenset[int]) -> None:
        """A torch function ran on tensors of known producers: a layout op passes them on,
        any other op becomes the producer of its outputs."""
        name = function_name(func)
        tensors = tensor_leaves(out)
        if name is None or not tensors:
            self.mark(out, sources)
            return
        shape = [int(d) for d in tensors[0].shape]
        self.functions.append(FunctionCall(name, self.stack[-1] if self.stack else None,
                                           sources, shape))
        self.mark(out, frozenset({FUNC + len(self.functions) - 1}))


def _site_name(parent: Any, parent_name: str, module: Any) -> str | None:
    """The name ``parent`` holds ``module`` by (None: the parent does not hold it)."""
    for key, child in parent._modules.items():
        if child is module:
            return f"{parent_name}.{key}" if parent_name else key
    return None


def input_leaves(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each input tensor with the name of the forward parameter it came in by; nested
    values add their keys (``features['numeric']``, ``x[1]``). Unnamed: ``input i``."""
    import inspect

    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    out: list[tuple[str, Any]] = []

    def walk(value: Any, label: str) -> None:
        leaves = tensor_leaves(value)
        if len(leaves) == 1 and leaves[0] is value:
            out.append((label, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{label}[{k!r}]")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{label}[{i}]")
        else:
            out.extend((f"{label}[{j}]", t) for j, t in enumerate(leaves))

    for i, a in enumerate(args):
        walk(a, params[i] if i < len(params) else f"input {i}")
    for k, v in kwargs.items():
        walk(v, k)
    return out


def _flow_mode(flow: Flow) -> Any:
    from torch.overrides import TorchFunctionMode

    class FlowMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            srcs = flow.of((args, kwargs))
            if srcs:
                flow.function(func, out, srcs)
            return out

    return FlowMode()


def module_flow(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                state: dict[str, Any] | None = None) -> Flow:
    """One forward recording, per module call, which earlier calls produced its inputs.

    ``state``: stand-in tensors by name (``functional_call``), e.g. meta copies of real
    weights, so the user's model is neither copied nor touched.
    """
    flow = Flow(model)
    flow.mark_inputs(tuple(args), dict(kwargs))
    handles = []
    try:
        from torchinspect.trace.static import hookable_modules  # torch (package docstring)

        for m in hookable_modules(model):
            handles.append(m.register_forward_pre_hook(flow.pre, with_kwargs=True))
            handles.append(m.register_forward_hook(flow.post, with_kwargs=True, always_call=True))
        import torch

        from torchinspect.trace.engine import model_kept  # torch (package docstring)

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
