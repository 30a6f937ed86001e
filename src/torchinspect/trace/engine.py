"""trace_model: one instrumented forward (module hooks + dispatch counting), meta by default.

The user's model is never changed: hooks are removed and every module's ``training``
flag restored in ``finally``; a model with real weights is traced on meta through
``torch.func.functional_call`` with meta stand-ins for its parameters and buffers (tied
tensors share one stand-in), so nothing is copied and nothing is assigned to it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from torchinspect.errors import InspectError
from torchinspect.sources.inputs import ExampleInputs
from torchinspect.trace.counting import MacCounter, counting, sdpa_notes
from torchinspect.trace.records import CallRecord, ModuleInfo, TensorMeta, Trace
from torchinspect.trace.static import collect_static, dtype_name, is_quantized_module, module_names

# Messages of a forward that failed because of meta tensors (not because of the input).
_META_SIGNS = ("meta", "item()", "data-dependent", "data dependent", "_local_scalar_dense",
               "DataDependent", "NotImplemented", "Cannot copy out", "nonzero", "tolist")


def shape_tree(value: Any, depth: int = 0) -> Any:
    """Tensors -> TensorMeta, containers kept; other values shown by type."""
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(int(d) for d in value.shape), dtype_name(value.dtype))
    if depth > 6:
        return "…"
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return {f: shape_tree(getattr(value, f), depth + 1) for f in value._fields}
    if isinstance(value, (tuple, list)):
        items = [shape_tree(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {str(k): shape_tree(v, depth + 1) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tensors") and isinstance(value.tensors, torch.Tensor):  # ImageList
        return shape_tree(value.tensors, depth + 1)
    return type(value).__name__


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


class _Recorder:
    """Forward pre/post hooks building the call tree; the counter writes into its top."""

    def __init__(self, model: nn.Module, infos: dict[str, ModuleInfo]) -> None:
        self.names = module_names(model)
        self.infos = infos
        self.calls: list[CallRecord] = []
        self.stack: list[CallRecord] = []
        self.outside: dict[str, int] = {}  # MACs run outside any module (root not running)
        self.handles: list[Any] = []
        self.model = model

    def sink(self) -> dict[str, int]:
        return self.stack[-1].macs if self.stack else self.outside

    def install(self) -> None:
        for module in self.model.modules():
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post, with_kwargs=True,
                                                             always_call=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        name = self.names.get(id(module), "?")
        info = self.infos.get(name)
        parent = self.stack[-1] if self.stack else None
        rec = CallRecord(
            index=len(self.calls), name=name, type=type(module).__name__,
            depth=info.depth if info else (parent.depth + 1 if parent else 0),
            parent=parent.index if parent else None,
            call_number=info.calls if info else 0,
            inputs=shape_tree(args if not kwargs else (*args, kwargs)),
        )
        if info is not None:
            info.calls += 1
        if parent is not None:
            parent.children.append(rec.index)
        self.calls.append(rec)
        self.stack.append(rec)

    def _post(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not self.stack:
            return
        rec = self.stack.pop()
        rec.outputs = shape_tree(output)
        rec.output_bytes = _tensor_bytes(output)


@contextlib.contextmanager
def _preserved(model: nn.Module, train: bool) -> Iterator[None]:
    """Set train/eval for the run and restore every module's flag (and MHA fast path)."""
    flags = [(m, m.training) for m in model.modules()]
    mha = getattr(torch.backends, "mha", None)
    fastpath = mha.get_fastpath_enabled() if mha is not None else None
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)  # count MHA through its matmuls, as torchvision does
        try:
            model.train(train)  # honours models that override train()
        except NotImplementedError:  # exported GraphModules refuse .train(): set the flags
            for m, _ in flags:
                m.training = train
        yield
    finally:
        for m, flag in flags:
            m.training = flag
        if mha is not None and fastpath is not None:
            mha.set_fastpath_enabled(fastpath)


def _has_meta(model: nn.Module) -> bool:
    return any(t.is_meta for t in _tensors(model))


def _tensors(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()


def _model_device(model: nn.Module) -> torch.device:
    for t in _tensors(model):
        return t.device
    return torch.device("cpu")


def _is_quantized(model: nn.Module) -> bool:
    return any(is_quantized_module(m) for m in model.modules())


def _meta_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Meta stand-ins for every parameter and buffer, keyed by every name (ties kept)."""
    by_id: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in [*model.named_parameters(remove_duplicate=False),
                    *model.named_buffers(remove_duplicate=False)]:
        if t.is_meta:
            continue
        stand_in = by_id.get(id(t))
        if stand_in is None:
            stand_in = by_id[id(t)] = t.detach().to("meta")
        out[name] = stand_in
    return out


def _inputs_for(example: Any, device: torch.device) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example, ExampleInputs):
        return example.materialize(device)
    if isinstance(example, torch.Tensor):
        example = (example,)
    if isinstance(example, list):
        example = tuple(example)
    if not isinstance(example, tuple):
        raise InspectError(f"inputs of type {type(example).__name__} are not supported",
                           hint="pass ExampleInputs, a tensor, or a tuple of positional inputs")
    return _map_tensors(example, lambda t: t.to(device)), {}


def _run(model: nn.Module, infos: dict[str, ModuleInfo], args: tuple[Any, ...],
         kwargs: dict[str, Any], state: dict[str, torch.Tensor] | None,
         train: bool) -> tuple[_Recorder, MacCounter, Any]:
    for info in infos.values():
        info.calls = 0
    rec = _Recorder(model, infos)
    counter = MacCounter(rec.sink)
    scriptable = not isinstance(model, torch.jit.ScriptModule)
    try:
        if scriptable:
            rec.install()
        with _preserved(model, train), torch.no_grad(), counting(counter):
            if state:
                out = torch.func.functional_call(model, state, args, kwargs, tie_weights=True,
                                                 strict=False)
            else:
                out = model(*args, **kwargs)
    finally:
        rec.remove()
    if not scriptable:  # TorchScript: no hooks, one root record
        rec.calls.append(CallRecord(0, "", type(model).__name__, 0, None, 0,
                                    shape_tree(args), shape_tree(out), rec.outside.copy(),
                                    _tensor_bytes(out)))
        rec.outside.clear()
    return rec, counter, out


def _first_line(exc: BaseException) -> str:
    """``Type: first sentence`` of an exception, short enough for one output line."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    sentence = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
    out = f"{type(exc).__name__}: {sentence}"
    return out if len(out) <= 160 else out[:157] + "..."


def _looks_meta_related(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError):
        return True
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in _META_SIGNS)


def _estimated_real_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in _tensors(model)}.values())


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def trace_model(
    model: nn.Module,
    inputs: ExampleInputs | Any,
    *,
    device: str = "meta",
    train: bool = False,
    rebuild: Callable[[str], nn.Module] | None = None,
    fallback: bool = True,
) -> Trace:
    """Run one instrumented forward of ``model`` on ``inputs`` and return its Trace.

    ``device="meta"`` (the default; "auto" is the same) costs no memory for weights or
    activations. When the meta forward cannot run (data-dependent ops, ``.item()``,
    tensors kept as plain attributes, quantized kernels) and ``fallback`` is true, the
    forward runs for real on CPU — on ``rebuild("cpu")`` when the model's own weights
    are on meta — and ``Trace.fallback_reason`` says why. "cpu"/"cuda[:N]" force a real
    run on that device (the model must already be there or be rebuildable).
    """
    if not isinstance(model, nn.Module):
        raise InspectError(f"expected a torch.nn.Module, got {type(model).__name__}",
                           hint="pass the model object (or a model name to the analysis API)")
    want = "meta" if device in ("meta", "auto") else device
    try:
        target = torch.device(want)
    except RuntimeError:
        raise InspectError(f"device {device!r} is not a torch device",
                           hint="use auto, meta, cpu, cuda or cuda:N") from None
    if target.type == "cuda" and not torch.cuda.is_available():
        raise InspectError(f"--device {device}: CUDA is not available on this machine",
                           hint="use --device cpu, or the default (meta, no memory needed)")
    infos, stats = collect_static(model)
    reason: str | None = None
    notes: list[str] = []
    run_model = model

    if target.type == "meta" and (_is_quantized(model) or isinstance(model, torch.jit.ScriptModule)):
        reason = ("quantized kernels run on CPU only" if _is_quantized(model)
                  else "TorchScript modules cannot run on meta")
        target = _model_device(model) if not _has_meta(model) else torch.device("cpu")

    result = None
    if target.type == "meta":
        state = _meta_state(model)
        args, kwargs = _inputs_for(inputs, target)
        try:
            result = _run(model, infos, args, kwargs, state, train)
        except InspectError:
            raise
        except Exception as exc:  # the meta forward is impossible: go real
            reason = f"meta forward failed ({_first_line(exc)})"
            if not fallback:
                raise InspectError(f"the forward cannot run on the meta device: {_first_line(exc)}",
                                   hint="use --device auto (falls back to CPU) or --device cpu") from None
            if not _looks_meta_related(exc):
                need, avail = _estimated_real_bytes(model), _available_bytes()
                if avail is not None and need > avail // 2:
                    raise _forward_error(exc, inputs) from None
            target = torch.device("cpu")

    if result is None:
        real = torch.device("cpu") if target.type == "meta" else target
        if _has_meta(model):
            if rebuild is None:
                raise InspectError(
                    "the model's weights are on meta and its forward needs real tensors "
                    f"({reason or 'a real run was requested'})",
                    hint="load it through torchinspect.sources.load_model (it can rebuild it), "
                    "or pass rebuild=")
            run_model = rebuild(str(real))
            infos, stats = collect_static(run_model)
            target = real
        else:
            dev = _model_device(model)
            if reason is None and dev.type != real.type:  # a forced real run elsewhere
                raise InspectError(f"the model's weights are on {dev}, not {real}",
                                   hint=f"use --device {dev.type} or the default meta device")
            target = dev
        args, kwargs = _inputs_for(inputs, target)
        try:
            result = _run(run_model, infos, args, kwargs, None, train)
        except InspectError:
            raise
        except Exception as exc:
            raise _forward_error(exc, inputs) from None

    rec, counter, out = result
    if rec.outside and rec.calls:
        for op, n in rec.outside.items():
            rec.calls[0].macs[op] = rec.calls[0].macs.get(op, 0) + n
    for call in reversed(rec.calls):
        call.total_macs = call.own_macs + sum(rec.calls[i].total_macs for i in call.children)
    notes.extend(sdpa_notes(counter.notes))
    if isinstance(inputs, ExampleInputs):
        in_tree = shape_tree(inputs.materialize("meta")[0] if not inputs.kwargs
                             else (*inputs.materialize("meta")[0], inputs.materialize("meta")[1]))
        in_bytes = inputs.nbytes
    else:
        in_tree = shape_tree(inputs)
        in_bytes = _tensor_bytes(inputs)
    return Trace(
        model_type=type(model).__name__,
        device=str(target),
        train=train,
        inputs=in_tree,
        input_bytes=in_bytes,
        outputs=shape_tree(out),
        modules=infos,
        calls=rec.calls,
        params=stats,
        uncounted=dict(sorted(counter.uncounted.items(), key=lambda kv: (-kv[1], kv[0]))),
        op_calls=dict(counter.op_calls),
        notes=notes,
        fallback_reason=reason,
    )


def _forward_error(exc: BaseException, inputs: Any) -> InspectError:
    shown = inputs.describe() if isinstance(inputs, ExampleInputs) else "the given inputs"
    return InspectError(
        f"the model's forward failed for input {shown}: {_first_line(exc)}",
        hint="check --input (shape, dtype, how many inputs) against what the model's forward expects",
    )
