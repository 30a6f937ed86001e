"""The tracing mechanism: one instrumented forward (module hooks + dispatch counting).

Which device to run on and when to fall back is policy, in trace/policy.py.

The user's model is never changed: hooks are removed and every module's ``training``
flag restored in ``finally``; a model with real weights is traced on meta through
``torch.func.functional_call`` with meta stand-ins for its parameters and buffers (tied
tensors share one stand-in), so nothing is copied and nothing is assigned to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch
from torch import nn

from torchinspect.guard import model_code, training_mode
from torchinspect.privtorch import deferred_dynamo, fake_tensor_mode
from torchinspect.shapes import map_tensors, shape_tree, tensor_bytes
from torchinspect.trace.counting import MacCounter, counting
from torchinspect.trace.records import CallRecord, ModuleInfo
from torchinspect.trace.static import hookable_modules, is_quantized_module, module_names


class _ScriptCall(nn.Module):
    """A Python stand-in for a TorchScript submodule during one traced forward: TorchScript
    modules take no hooks, so its call is recorded through this one (under its name)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "_inner", inner)  # not registered: the module tree is unchanged
        # the scripted module's own tables: names ("enc.l.weight"), ties (a module registered
        # twice) and functional_call's swaps see the same tensors as without the stand-in
        for table in ("_parameters", "_buffers", "_modules"):
            object.__setattr__(self, table, getattr(inner, table))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # "inner.l.weight" still resolves (functional_call)
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "_inner"), name)


class _Recorder:
    """Forward pre/post hooks building the call tree; the counter writes into its top."""

    def __init__(self, model: nn.Module, infos: dict[str, ModuleInfo]) -> None:
        self.names = module_names(model)
        self.infos = infos
        self.calls: list[CallRecord] = []
        self.stack: list[CallRecord] = []
        self.outside: dict[str, int] = {}  # MACs run outside any module (root not running)
        self.handles: list[Any] = []
        self.swapped: list[tuple[nn.Module, str, nn.Module]] = []  # TorchScript children
        self.reads: dict[str, int] = {}  # parameter/buffer name -> the call that first read it
        self.model = model

    def sink(self) -> dict[str, int]:
        return self.stack[-1].macs if self.stack else self.outside

    def install(self) -> None:
        modules = hookable_modules(self.model)
        stand_ins: dict[int, _ScriptCall] = {}  # one per scripted module (it may be shared)
        for parent in list(modules):  # a TorchScript child is called through a stand-in
            for key, child in list(parent._modules.items()):
                if isinstance(child, torch.jit.ScriptModule):
                    stand_in = stand_ins.get(id(child))
                    if stand_in is None:
                        stand_in = stand_ins[id(child)] = _ScriptCall(child)
                        self.names[id(stand_in)] = self.names.get(id(child), key)
                        modules.append(stand_in)
                    parent._modules[key] = stand_in
                    self.swapped.append((parent, key, child))
        for module in modules:
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post, with_kwargs=True,
                                                             always_call=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        for parent, key, child in self.swapped:
            parent._modules[key] = child
        self.swapped.clear()

    def _pre(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        name = self.names.get(id(module), "?")
        info = self.infos.get(name)
        parent = self.stack[-1] if self.stack else None
        rec = CallRecord(
            index=len(self.calls), name=name, type=info.type if info else type(module).__name__,
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
        rec.output_bytes = tensor_bytes(output)


class _Reads:
    """Which call first read each parameter and buffer, from the ops the counter sees (its
    ``observe``): a module that is never called but whose weights its parent's functional
    call reads (``F.multi_head_attention_forward`` with ``out_proj.weight``,
    ``F.linear(x, self.proj.weight)``) or a tie uses is "used by" that call, not "never
    ran". Once every tensor was read, it stops looking."""

    def __init__(self, rec: _Recorder, tensors: dict[int, str]) -> None:
        self.rec = rec
        self.tensors = tensors  # id(tensor the forward runs on) -> its first name

    def see(self, args: tuple[Any, ...]) -> None:
        if not self.tensors or not self.rec.stack:
            return
        for a in args:
            if isinstance(a, torch.Tensor):
                name = self.tensors.pop(id(a), None)
                if name is not None:
                    self.rec.reads[name] = self.rec.stack[-1].index


def _read_names(model: nn.Module, state: dict[str, torch.Tensor] | None) -> dict[int, str]:
    """id -> first name of every tensor the forward runs on (the stand-ins of ``state``)."""
    out: dict[int, str] = {}
    pairs = state.items() if state else [*model.named_parameters(remove_duplicate=False),
                                         *model.named_buffers(remove_duplicate=False)]
    for name, t in pairs:
        out.setdefault(id(t), name)
    return out


@contextlib.contextmanager
def forward_mode(model: nn.Module, train: bool) -> Iterator[None]:
    """Set train/eval for the run and restore every module's flag (and MHA fast path)."""
    mha = getattr(torch.backends, "mha", None)
    fastpath = mha.get_fastpath_enabled() if mha is not None else None
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)  # count MHA through its matmuls, as torchvision does
        with training_mode(model, train):
            yield
    finally:
        if mha is not None and fastpath is not None:
            mha.set_fastpath_enabled(fastpath)


_SLOTS = ("_parameters", "_buffers", "_modules")


@contextlib.contextmanager
def _attributes_kept(model: nn.Module) -> Iterator[None]:
    """Undo whatever the forward assigns to the model's modules.

    Forwards assign to their own modules: torchvision's AnchorGenerator replaces its
    ``cell_anchors`` list with copies on the input's device (meta during a meta trace),
    caches store tensors as plain attributes, buffers are re-registered. Every module's
    ``__dict__`` and its parameter/buffer/submodule tables are restored to what they held
    (same objects) when the forward ends, so the caller's model is left as it was given.
    """
    saved = []
    scripted = []  # TorchScript modules keep their tensors in C++, not in __dict__
    contents = {}  # plain list/dict/set attributes: a cache filled in place (self._cache[n] = t)
    for m in model.modules():
        saved.append((m, dict(m.__dict__), [dict(m.__dict__.get(k, {})) for k in _SLOTS]))
        for key, value in m.__dict__.items():
            if key not in _MODULE_INTERNALS and type(value) in (list, dict, set) \
                    and id(value) not in contents:  # one copy per container, however shared
                contents[id(value)] = (value, type(value)(value))
        if isinstance(m, torch.jit.ScriptModule):
            scripted.append((m, dict([*m.named_parameters(recurse=False),
                                      *m.named_buffers(recurse=False)])))
    try:
        yield
    finally:
        for value, before in contents.values():
            if _changed(value, before):
                value.clear()
                if isinstance(value, list):
                    value.extend(before)
                else:
                    value.update(before)
        # functional_call cannot always put a scripted module's tensors back (one registered
        # under two names): the originals are set again where another tensor was left
        for m, tensors in scripted:
            for key, t in tensors.items():
                now = getattr(m, key, None)
                if not isinstance(now, torch.Tensor) or now.device != t.device or (
                        not t.is_meta and now.data_ptr() != t.data_ptr()):
                    setattr(m, key, t)
        for m, attrs, slots in saved:
            state = m.__dict__
            for key in [k for k in state if k not in attrs]:
                del state[key]
            for key, value in attrs.items():
                if state.get(key, _MISSING) is not value:
                    state[key] = value
            for key, table in zip(_SLOTS, slots, strict=True):
                live = state.get(key)
                if isinstance(live, dict) and (live.keys() != table.keys() or any(
                        live[k] is not v for k, v in table.items())):
                    live.clear()
                    live.update(table)


_MISSING = object()
_MODULE_INTERNALS = frozenset(nn.Module().__dict__)  # _parameters, _forward_hooks, training...


def _changed(value: Any, before: Any) -> bool:
    """A list/dict/set whose items (by identity) differ from its shallow copy ``before``."""
    if len(value) != len(before):
        return True
    if isinstance(value, list):
        return any(a is not b for a, b in zip(value, before, strict=True))
    if isinstance(value, dict):
        return value.keys() != before.keys() or any(value[k] is not before[k] for k in before)
    return value != before


@contextlib.contextmanager
def model_kept(model: nn.Module, *, buffers: bool = True) -> Iterator[None]:
    """The caller's model as it was given after real forwards run on it (graph, export,
    features, doctor): attributes and parameter/buffer/submodule tables put back
    (:func:`_attributes_kept`), and buffer values a forward changed in place (a step
    counter's ``+= 1``, a cache filled with ``copy_``) copied back. ``buffers=False`` when
    the forwards run on buffer copies (``functional_call``): attributes only. TorchScript
    modules are left alone (their attributes are not a ``__dict__``). The process around the
    model is kept too: the forwards run as the model's own code
    (:class:`torchinspect.guard.model_code`: torch's switches and the working folder put back,
    a ``sys.exit`` is the model's error), for the Python API as for the CLI."""
    with model_code(type(model).__name__), _state_kept(model, buffers=buffers):
        yield


@contextlib.contextmanager
def _state_kept(model: nn.Module, *, buffers: bool) -> Iterator[None]:
    if isinstance(model, torch.jit.ScriptModule):
        yield
        return
    from torch.nn.parameter import is_lazy

    seen: set[int] = set()
    # (buffer, its version counter, a copy in host memory): the device keeps its memory for
    # the run, and only a buffer whose version moved (an in-place write) is copied back
    saved: list[tuple[torch.Tensor, int | None, torch.Tensor]] = []
    for b in model.buffers() if buffers else ():
        if id(b) in seen or b.is_meta or is_lazy(b) or b.layout != torch.strided:
            continue  # sparse buffers: no in-place writes to undo (and no version to read)
        seen.add(id(b))
        version = None if b.is_inference() else b._version  # inference tensors have none
        saved.append((b, version, b.detach().to("cpu", copy=True)))
    with _attributes_kept(model):
        try:
            yield
        finally:
            for b, version, value in saved:
                if b.shape != value.shape or b.dtype != value.dtype:
                    continue
                moved = (not torch.equal(b.detach().cpu(), value)) if version is None \
                    else b._version != version
                if moved:
                    with torch.inference_mode() if b.is_inference() else torch.no_grad():
                        b.copy_(value)


def _buffer_copies(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of every buffer (ties kept): a training-mode forward updates these instead."""
    by_id: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for name, b in model.named_buffers(remove_duplicate=False):
        copy = by_id.get(id(b))
        if copy is None:
            copy = by_id[id(b)] = b.detach().clone()
        out[name] = copy
    return out


def is_quantized(model: nn.Module) -> bool:
    return any(is_quantized_module(m) for m in model.modules())


def meta_state(model: nn.Module) -> dict[str, torch.Tensor]:
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


def fake_forward_inputs(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[
        Any, dict[str, torch.Tensor], tuple[Any, ...], dict[str, Any]]:
    """A FakeTensorMode with fake stand-ins for every parameter and buffer (ties kept) and
    for the (meta) inputs: run_forward's ``fake`` path."""
    mode = fake_tensor_mode(allow_non_fake_inputs=True)
    by_id: dict[int, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    for name, t in [*model.named_parameters(remove_duplicate=False),
                    *model.named_buffers(remove_duplicate=False)]:
        stand_in = by_id.get(id(t))
        if stand_in is None:
            stand_in = by_id[id(t)] = mode.from_tensor(t.detach().to("meta"))
        state[name] = stand_in
    fake_args = map_tensors(args, mode.from_tensor)
    fake_kwargs = {k: map_tensors(v, mode.from_tensor) for k, v in kwargs.items()}
    return mode, state, fake_args, fake_kwargs


class ForwardWatch(Protocol):
    """Another reader of the one meta forward (summary's memory line, ``memory/watch.py``):
    it gives the stand-ins the forward runs on, and a context entered innermost around it
    (its dispatch mode sees every op after the counter's)."""

    def applies(self, model: nn.Module) -> bool:
        """Whether the forward can be shared for ``model`` (else the trace runs without it)."""

    def prepare(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[
            dict[str, torch.Tensor], tuple[Any, ...], dict[str, Any]]:
        """Stand-ins for the state (by name, ties by functional_call) and the inputs."""

    def watching(self) -> AbstractContextManager[Any]:
        """Entered around the forward, inside the counting modes."""

    def failed(self) -> None:
        """The shared forward failed: the trace runs again without the watch."""


def run_forward(model: nn.Module, infos: dict[str, ModuleInfo], args: tuple[Any, ...],
                kwargs: dict[str, Any], state: dict[str, torch.Tensor] | None,
                train: bool, fake_mode: Any = None,
                watch: ForwardWatch | None = None) -> tuple[_Recorder, MacCounter, Any]:
    """One instrumented forward; ``state`` (meta or fake stand-ins) runs it through
    functional_call; ``fake_mode`` (see :func:`fake_forward_inputs`) is entered around it,
    ``watch.watching()`` inside the counting modes."""
    for info in infos.values():
        info.calls = 0
    rec = _Recorder(model, infos)
    counter = MacCounter(rec.sink)
    scriptable = not isinstance(model, torch.jit.ScriptModule)
    if state is None and train and scriptable:
        state = _buffer_copies(model)  # batch-norm statistics move on copies, not the model's
    # a real forward on the model's own tensors: buffer values it changes are put back too
    kept = model_kept(model, buffers=not state) if scriptable else contextlib.nullcontext()
    # the snapshot and the train/eval flags come first: the hooks (and the TorchScript
    # stand-ins swapped into the tree) are installed inside them and removed before they end
    # deferred_dynamo: meta ops run PyTorch's Python references, whose wrappers would import
    # TorchDynamo (about a second) only to mark them "not compiled"
    if scriptable:
        counter.observe = _Reads(rec, _read_names(model, state)).see
    with deferred_dynamo(), kept, forward_mode(model, train), torch.no_grad(), \
            fake_mode if fake_mode is not None else contextlib.nullcontext(), counting(counter), \
            watch.watching() if watch is not None else contextlib.nullcontext():
        try:
            if scriptable:
                rec.install()
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
                                    tensor_bytes(out)))
        rec.outside.clear()
    return rec, counter, out


