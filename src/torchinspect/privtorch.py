"""Every place torchinspect leans on PyTorch's private API, in one module.

Private means a name of torch's that starts with an underscore: its private modules
(``torch._C``, ``torch._dynamo``, ``torch._subclasses``, ``torch.utils._pytree``,
``torch._export``, ...) and its private functions and methods (``Library._destroy``,
``TorchDispatchMode._should_skip_dynamo``, ``OpOverload._op_dk``). Nothing else in the package
names them (``tests/test_privtorch.py`` reads every module to keep it so); a torch release
that moves one breaks this module and its test, and a public API that replaces one is
adopted here. Reads of torch's own objects (``op._schema``, a module's ``_modules``) and the
aten ops whose names start with an underscore (``torch.ops.aten._scaled_dot_product_attention_math``,
the op table's vocabulary) are not touchpoints in this sense and stay where they are read.

What lives here:

- :func:`aten_overrides`: aten kernels replaced for the duration of a block (the memory
  predictor runs CUDA's attention, dropout, rms_norm, cuDNN RNN and autocast routes on fake
  CPU tensors), through torch's own scoped library (``torch.library._scoped_library``).
- :class:`QuietDispatchMode`: the dispatch-mode base of the counters and trackers, which
  does not wrap its ``__torch_dispatch__`` in ``torch._disable_dynamo`` (that wrapper's first
  call imports TorchDynamo, about a second of every command's start-up).
- :func:`deferred_dynamo`, :func:`standing_in`, :func:`call_later`: a ``torch._dynamo``
  stand-in while a model is built or traced, so commands that never compile never import
  TorchDynamo.
- Accessors for what torch keeps private: fake tensors, the module tracker, pytrees, the
  composite kernels, dispatch keys, the export deserializer, ...

**The off switch.** ``TORCHINSPECT_NO_TORCH_WORKAROUNDS=1`` (any of 1/true/yes/on) turns off
the workarounds that only save time: the TorchDynamo stand-in and the quiet dispatch modes.
Commands then import TorchDynamo as torch does by default (about a second more at start-up);
their results are the same. Use it when a torch release changes those internals before
torchinspect follows. The aten overrides are not a workaround (they are how the memory
predictor models the GPU's kernels on a CPU) and stay on.

**Threads.** An aten override is registered in torch's dispatcher, which every thread of
the process shares: while ``summarize()`` (its memory line), ``predict_memory()``,
``check_budgets()`` with a memory budget or ``inspect report``'s memory part runs, the
kernels of ``aten::scaled_dot_product_attention``, ``aten::dropout``, ``aten::rms_norm`` and
the RNNs' (``aten::lstm``/``gru``/``rnn_tanh``/``rnn_relu``) are replaced for *every* thread
(and, with ``amp``, the CPU autocast kernels of the ops CUDA's autocast lists), and
``nn.TransformerEncoderLayer.forward`` and ``nn.MultiheadAttention.forward`` are patched to
take CUDA's fast path. Another thread that calls those ops meanwhile runs the replacement
(the same values on real tensors, by the math route, but slower). Two such calls in two
threads of one process do not corrupt each other: the overrides are taken one block at a
time (a process-wide lock), so the second waits for the first. Everything is put back when
the block ends, also after an error. Like PyTorch's own ``MemTracker``, this is meant for one
predictor at a time in a process; run predictions of several models in parallel in separate
processes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

OFF_SWITCH = "TORCHINSPECT_NO_TORCH_WORKAROUNDS"
"""The environment variable that turns the time-saving workarounds off (see the module)."""

DYNAMO = "torch._dynamo"

OpOverload: type = torch._ops.OpOverload
"""The type of one aten op overload (``torch.ops.aten.mm.default``)."""


def workarounds_on() -> bool:
    """False when :data:`OFF_SWITCH` is set to 1, true, yes or on."""
    return os.environ.get(OFF_SWITCH, "").strip().lower() not in ("1", "true", "yes", "on")


# ------------------------------------------------------------------ aten kernel overrides

_OVERRIDES = threading.RLock()  # one overriding thread at a time in the process (see Threads)
_owner: list[int] = []  # the thread that holds the overrides, once per block it opened
_carriers: list[Callable[[], bool]] = []  # per open block: does this thread carry its work?


def overriding_here() -> bool:
    """This thread runs the overrides' work: it opened an :func:`aten_overrides` block, or it
    carries one (autograd's worker threads carry the dispatch modes of the thread that
    started the backward). Any other thread gets what torch would run."""
    return (bool(_owner) and _owner[-1] == threading.get_ident()) or \
        any(carried() for carried in list(_carriers))


class AtenOverrides:
    """The kernels one :func:`aten_overrides` block registers."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def impl(self, op: Any, kernel: Callable[..., Any], key: str = "CompositeImplicitAutograd",
             *, elsewhere: Callable[..., Any] | None = None) -> None:
        """``kernel`` for aten ``op`` (a name, ``"lstm.input"``, or an overload) at dispatch
        ``key`` while the block lasts, in the threads :func:`overriding_here`; any other
        thread runs ``elsewhere`` (default: torch's own Python decomposition of the op for a
        composite key; for ``AutocastCPU`` the op without autocast's casts)."""
        overload = _overload(op)
        other = elsewhere or _torch_route(overload, key)

        def route(*args: Any, **kwargs: Any) -> Any:
            return (kernel if overriding_here() else other)(*args, **kwargs)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            self._lib.impl(op, route, key, **_ALLOW_OVERRIDE)


def _allow_override() -> dict[str, bool]:
    """Nested blocks may override one op twice (the latency recorder's attention inside the
    memory predictor's kernels): torch 2.11's ``Library.impl`` refuses a second Python kernel
    for one op and key unless ``allow_override=True`` (later releases do not ask); the
    dispatcher keeps both and puts the outer one back when the inner block ends."""
    import inspect

    params = inspect.signature(torch.library.Library.impl).parameters
    return {"allow_override": True} if "allow_override" in params else {}


_ALLOW_OVERRIDE = _allow_override()


def _overload(op: Any) -> Any:
    if not isinstance(op, str):
        return op
    base, _, name = op.partition(".")
    return getattr(getattr(torch.ops.aten, base), name or "default")


def _torch_route(op: Any, key: str) -> Callable[..., Any]:
    """What another thread runs in place of an overridden ``op``: below autocast, the op
    itself; for a composite, torch's Python decomposition (looked up when first needed)."""
    if key == "AutocastCPU":
        def uncast(*args: Any, **kwargs: Any) -> Any:
            with autocast_cpu_excluded():
                return op(*args, **kwargs)
        return uncast

    def decomposed(*args: Any, **kwargs: Any) -> Any:
        return decomposition(op)(*args, **kwargs)
    return decomposed


@contextmanager
def aten_overrides(*, carried: Callable[[], bool] | None = None) -> Iterator[AtenOverrides]:
    """aten kernels replaced for the duration of the block (``overrides.impl(op, kernel,
    key)``) and removed after it, whatever happens. They apply in this thread and in the
    threads for which ``carried()`` is true; other threads run torch's own route. The
    dispatcher is shared by the whole process, so blocks are taken one thread at a time
    (another thread's block waits; this thread's nested blocks are fine)."""
    with _OVERRIDES, torch.library._scoped_library("aten", "IMPL") as lib:
        _owner.append(threading.get_ident())
        if carried is not None:
            _carriers.append(carried)
        try:
            yield AtenOverrides(lib)
        finally:
            _owner.pop()
            if carried is not None:
                _carriers.remove(carried)


def registrations(op: str) -> str:
    """The dispatcher's table of one op (``aten::scaled_dot_product_attention``): every kernel
    registered for it, by dispatch key (tests compare it before and after an override)."""
    return str(torch._C._dispatch_dump(op))


# ------------------------------------------------------------------ dispatch modes


class QuietDispatchMode(TorchDispatchMode):
    """A ``TorchDispatchMode`` whose ``__torch_dispatch__`` is not wrapped in
    ``torch._disable_dynamo``: nothing compiles inside our modes, and that wrapper's first
    call imports TorchDynamo (about a second of start-up for every command). Torch's default
    comes back with the off switch."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return not workarounds_on()


def dispatch_mode_stack() -> list[Any]:
    """The dispatch modes active in this thread, outermost first."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return list(_get_current_dispatch_mode_stack())


def without_dispatch_modes() -> Any:
    """A context in which no dispatch mode of this thread sees the ops run."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def has_composite_kernel(op: Any) -> bool:
    """``op`` (an aten overload) has a CompositeImplicitAutograd kernel: a C++ decomposition
    into other ops."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(
        op.name(), torch._C.DispatchKey.CompositeImplicitAutograd))


def run_composite(op: Any, args: Any, kwargs: dict[str, Any], *, explicit: bool = False) -> Any:
    """``op``'s composite kernel (CompositeImplicitAutograd, or with ``explicit``
    CompositeExplicitAutograd) run directly, so its parts dispatch one by one."""
    key = (torch._C.DispatchKey.CompositeExplicitAutograd if explicit
           else torch._C.DispatchKey.CompositeImplicitAutograd)
    return op._op_dk(key, *args, **kwargs)


@contextmanager
def autocast_cpu_excluded() -> Iterator[None]:
    """Within it, ops skip the AutocastCPU dispatch key (a kernel registered there calls the
    op again without recursing into itself)."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        yield


def decomposition(op: Any) -> Callable[..., Any]:
    """torch's own Python decomposition of ``op`` (``torch._decomp``; imported only then)."""
    from torch._decomp import decomposition_table

    return decomposition_table[op]


def clear_cublas_workspaces() -> None:
    """Free the cuBLAS workspaces torch keeps per handle (a measurement starts from none)."""
    torch._C._cuda_clearCublasWorkspaces()


def current_autograd_node() -> Callable[[], Any] | None:
    """``torch._C._current_autograd_node`` (the autograd node a backward is running now), or
    None where this torch has none."""
    return getattr(torch._C, "_current_autograd_node", None)


def vf_function(name: str) -> Any:
    """``torch._VF.<name>``: the C++ function ``nn.LSTM``/``GRU``/``RNN`` call (``lstm``,
    ``gru``, ``rnn_tanh``, ``rnn_relu``), or None."""
    return getattr(torch._VF, name, None)


# ------------------------------------------------------------------ torch's private classes


def fake_tensor_mode(**kwargs: Any) -> Any:
    """A ``FakeTensorMode`` (torch._subclasses): tensors with shapes, dtypes and devices and
    no storage."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(**kwargs)


def mod_tracker() -> Any:
    """torch's ``ModTracker`` (torch.distributed._tools: forward and backward module context;
    it imports torch.distributed, seconds cold, so only when asked)."""
    from torch.distributed._tools.mod_tracker import ModTracker

    return ModTracker()


def fake_store() -> Any:
    """A ``FakeStore`` for the "fake" process group (importing it registers the backend);
    ImportError where this torch build lacks it."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()


def reparametrized(module: Any, state: dict[str, Any]) -> Any:
    """A context in which ``module``'s parameters and buffers are the tensors of ``state``
    (name -> tensor), as ``torch.func.functional_call`` swaps them."""
    from torch.nn.utils.stateless import _reparametrize_module

    return _reparametrize_module(module, state)


def weights_only_allowed() -> set[str]:
    """The globals ``torch.load(weights_only=True)`` accepts here: torch's own and those the
    user allowed (``torch.serialization.add_safe_globals``)."""
    from torch import _weights_only_unpickler as unpickler

    return set(unpickler._get_allowed_globals()) | set(unpickler._get_user_allowed_globals())


def c_switches(t: Any) -> tuple[Callable[..., Any], Callable[[], bool],
                                               Callable[[bool], None]]:
    """torch's C functions behind ``set_default_dtype``, ``is_grad_enabled`` and
    ``set_grad_enabled`` of the torch module ``t`` (its Python ones where it has none): a
    model that replaces the Python functions does not change what they do."""
    c = t._C
    return (getattr(c, "_set_default_dtype", t.set_default_dtype),
            getattr(c, "is_grad_enabled", t.is_grad_enabled),
            getattr(c, "_set_grad_enabled", t.set_grad_enabled))


def onnx_default_opset() -> str:
    """The ONNX opset torch.onnx exports by default ("default" where torch hides it)."""
    try:
        from torch.onnx._constants import ONNX_DEFAULT_OPSET
    except ImportError:  # pragma: no cover - private constant moved
        return "default"
    return str(ONNX_DEFAULT_OPSET)


def export_deserializer() -> tuple[Any, Any, Callable[..., Any], dict[Any, Any]]:
    """torch.export's deserializer parts: (schema module, ``ExportedProgramDeserializer``,
    ``_dict_to_dataclass``, the serialized dtype -> torch dtype table)."""
    from torch._export.serde import schema
    from torch._export.serde.serialize import (
        _SERIALIZE_TO_TORCH_DTYPE,
        ExportedProgramDeserializer,
        _dict_to_dataclass,
    )

    return schema, ExportedProgramDeserializer, _dict_to_dataclass, _SERIALIZE_TO_TORCH_DTYPE


def shape_functions() -> types.ModuleType:
    """torch's sympy shape functions (``torch.utils._sympy.functions``: FloorDiv, Mod, ...)."""
    return importlib.import_module("torch.utils._sympy.functions")


# ------------------------------------------------------------------ pytrees


def tree_leaves(value: Any) -> list[Any]:
    """The leaves of a pytree (torch.utils._pytree), in torch's order."""
    from torch.utils import _pytree

    return list(_pytree.tree_leaves(value))


def tree_flatten(value: Any) -> tuple[list[Any], Any]:
    from torch.utils import _pytree

    return _pytree.tree_flatten(value)


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    from torch.utils import _pytree

    return _pytree.tree_map(fn, value)


def tree_map_only(kind: type | tuple[type, ...], fn: Callable[[Any], Any], value: Any) -> Any:
    """``fn`` over the leaves of ``value`` that are a ``kind``; the others as they are."""
    from torch.utils import _pytree

    return _pytree.tree_map_only(kind, fn, value)


def pytree_children(value: Any) -> list[Any] | None:
    """The children of a container type registered as a pytree node (None for any other)."""
    from torch.utils import _pytree

    node = _pytree.SUPPORTED_NODES.get(type(value))
    if node is None:
        return None
    children, _ = node.flatten_fn(value)
    return list(children)


# ------------------------------------------------------------------ the TorchDynamo stand-in
#
# Meta tensors run many ops through PyTorch's Python references, each wrapped in
# ``torch._disable_dynamo``; the first call of such a wrapper imports ``torch._dynamo`` (about a
# second on a laptop CPU, a third of ``inspect bench --predict``) only to mark the function "do
# not compile". While nothing is compiling that mark changes nothing, and nothing can compile
# while TorchDynamo is not imported. ``deferred_dynamo()`` puts a stand-in ``torch._dynamo`` in
# place for the duration of a block, unless the real one is already loaded. Its
# ``disable(fn)`` returns a callable that runs ``fn`` directly, or through the real
# ``torch._dynamo.disable`` once TorchDynamo has been imported (by anything, later); any other
# attribute of the stand-in imports the real module and answers from it, so model code that
# reaches for TorchDynamo still gets it.


class _StandIn(types.ModuleType):
    """A module in ``sys.modules`` until something needs more than what it was given: any
    other name imports the real module (the stand-in steps aside first)."""

    def __getattr__(self, attr: str) -> Any:
        if attr == "__path__" and sys._getframe(1).f_code.co_name == "_find_and_load_unlocked":
            # the import system asks for a submodule (``import torch._dynamo.utils``): the
            # real package steps in; ``from M import x`` also asks for ``__path__`` (through
            # _handle_fromlist), and is answered "not a package", as for any other dunder
            return _real(self.__name__).__path__
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(_real(self.__name__), attr)


class Deferred:
    """``torch._dynamo.disable(fn, ...)`` decided at call time, not at first call.

    It stands for a function (``torch.compiler.disable`` on a method of the model's code): it
    binds as one (``__get__``: ``self`` is passed), carries ``fn``'s name, docstring and
    ``__wrapped__``, and works after the block as before it: it runs ``fn`` directly while
    TorchDynamo is not imported, and through the real ``torch._dynamo.disable`` once it is
    (``torch.compile`` then skips it as it would have)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.disabled: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)  # __name__, __qualname__, __doc__, __wrapped__ ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.disabled is None:
            loaded = sys.modules.get(DYNAMO)
            if loaded is None or isinstance(loaded, _StandIn):
                return self.fn(*args, **kwargs)
            self.disabled = loaded.disable(self.fn, *self.args, **self.kwargs)
        return self.disabled(*args, **kwargs)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        """A method: bound to ``obj`` as a plain function would be."""
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return f"<deferred torch._dynamo.disable of {self.fn!r}>"


class _Handed:
    """The :class:`Deferred` objects a block handed out to torch's own ``_disable_dynamo``
    wrappers, which cache them on the wrapped function (``fn.__dynamo_disable``): taken off
    again when the block ends, so nothing of the stand-in outlives it in torch."""

    def __init__(self) -> None:
        self.cached: list[tuple[Callable[..., Any], Deferred]] = []

    def disable(self, fn: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if fn is None:  # used as a decorator factory: disable(recursive=False)(fn)
            return lambda f: self.disable(f, *args, **kwargs)
        deferred = Deferred(fn, args, kwargs)
        if kwargs.get("wrapping") is False:  # torch._disable_dynamo's call: it caches it
            self.cached.append((fn, deferred))
        return deferred

    def clean(self) -> None:
        for fn, deferred in self.cached:
            if getattr(fn, "__dynamo_disable", None) is deferred:
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(fn, "__dynamo_disable")
        self.cached.clear()


def _step_aside(name: str, stand_in: types.ModuleType | None = None) -> None:
    """Take ``stand_in`` (or any stand-in) for ``name`` out of ``sys.modules`` and its parent."""
    def ours(value: Any) -> bool:
        return value is stand_in if stand_in is not None else isinstance(value, _StandIn)

    if ours(sys.modules.get(name)):
        del sys.modules[name]
    parent, _, child = name.rpartition(".")
    owner = sys.modules.get(parent)
    if owner is not None and ours(vars(owner).get(child)):
        delattr(owner, child)


def _real(name: str) -> types.ModuleType:
    """The real module ``name``, its stand-in taken out of the way first."""
    _step_aside(name)
    return importlib.import_module(name)


def call_later(name: str, function: str) -> Callable[..., Any]:
    """``function`` of module ``name``, which is imported when it is first called."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real(name), function)(*args, **kwargs)

    return call


@contextmanager
def standing_in(name: str, **attrs: Any) -> Iterator[None]:
    """Within it, module ``name`` (unless already loaded, or the off switch is set) is a
    stand-in holding ``attrs``."""
    if name in sys.modules or not workarounds_on():
        yield
        return
    stand_in = _StandIn(name)
    for attr, value in attrs.items():
        setattr(stand_in, attr, value)
    sys.modules[name] = stand_in
    try:
        yield
    finally:
        _step_aside(name, stand_in)


@contextmanager
def deferred_dynamo() -> Iterator[None]:
    """Within it, ``torch._disable_dynamo`` wrappers do not import TorchDynamo; after it, the
    wrappers of torch it served hold nothing of it (what the model's own code decorated in
    the block keeps a :class:`Deferred`, which behaves as the real decorator's result). With
    the off switch set it changes nothing."""
    handed = _Handed()
    try:
        with standing_in(DYNAMO, disable=handed.disable):
            yield
    finally:
        handed.clean()
