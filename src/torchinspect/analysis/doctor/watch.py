"""What the model's forward does, statement by statement, during the doctor's real runs.

:class:`Watch` is a ``TorchFunctionMode`` (it sees every torch function, ``Tensor`` method
and ``F.*`` call, factories included) plus torch's *global* module hooks (removed on exit:
nothing is registered on the user's modules). It records :class:`Event` s, each with the
``file:line`` of the statement in the model's code that made the call:

* ``dropout-in-eval``: ``F.dropout`` (and friends) with ``training=True`` in eval mode;
* ``log-of-probs``: ``log`` of a ``softmax``/``sigmoid`` output; ``probs-into-loss``: such an
  output fed to a loss that applies its own (``cross_entropy``, ``nll_loss``,
  ``binary_cross_entropy_with_logits``);
* ``host-tensor``: a factory (``torch.zeros``, ``torch.tensor``, ``torch.arange`` ...) called
  by the model's code without ``device=`` (0-dim results left out: they mix with any device);
* ``sync``: ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``bool()/float()/int()`` of
  a tensor; ``data``: ``.data`` read;
* ``new-parameter``: a parameter created during the forward (a module built there, or an
  ``nn.Parameter`` that the model does not hold);
* ``bias-into-norm``: the output of a conv/linear with a bias going straight into BatchNorm;
* ``inplace`` (``inplace=True`` only): in-place ops, with the op that made their target;
* ``double-log-softmax``: a ``log_softmax`` output fed to ``cross_entropy``, which applies
  its own;
* ``softmax-over-one``: ``softmax``/``log_softmax`` over a dimension of size 1;
* ``reshape-as-transpose``: ``view``/``reshape`` to the same sizes in another order;
* ``cut`` (``graph=True``, a forward with gradients): where a graph tensor leaves autograd in
  the model's code (``torch.tensor(t)``, ``.numpy()``/``.tolist()`` of it or of its
  ``.detach()``, ``.detach()``, ``.data``), with the autograd nodes above it: which
  parameters the cut keeps from their gradient is known once the gradient is taken
  (:meth:`Watch.cut_parameters`).

Lint-like events count only where the model's own code calls torch directly (a library's
``.item()`` is not the user's to fix); semantic ones (dropout, new parameters) name the
innermost model-code line through any library.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode, resolve_name

from torchinspect.analysis.doctor.sites import direct_caller, user_caller

_FACTORIES = frozenset({torch.zeros, torch.ones, torch.empty, torch.full, torch.arange,
                        torch.linspace, torch.logspace, torch.eye, torch.rand, torch.randn,
                        torch.randint, torch.randperm, torch.tensor})
_PROBS = {torch.softmax: "softmax", torch.Tensor.softmax: "softmax", F.softmax: "softmax",
          torch.sigmoid: "sigmoid", torch.Tensor.sigmoid: "sigmoid", F.sigmoid: "sigmoid"}
_LOGS = frozenset({torch.log, torch.Tensor.log, torch.log2, torch.Tensor.log2, torch.log10,
                   torch.Tensor.log10})
# loss -> the probability function it applies itself (or, for nll_loss, expects the log of)
_LOSSES = {F.cross_entropy: "softmax", F.nll_loss: "softmax",
           F.binary_cross_entropy_with_logits: "sigmoid"}
_SYNCS = frozenset({torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
                    torch.Tensor.__bool__, torch.Tensor.__float__, torch.Tensor.__int__})
_DROPOUTS = frozenset({F.dropout, F.alpha_dropout, F.feature_alpha_dropout, F.dropout1d,
                       F.dropout2d, F.dropout3d})
_DATA = torch.Tensor.data
_LOG_SOFTMAX = frozenset({F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax})
_SOFTMAXES = frozenset({F.softmax, torch.softmax, torch.Tensor.softmax, F.softmin,
                        *_LOG_SOFTMAX})
_RESHAPES = frozenset({torch.Tensor.view, torch.Tensor.reshape, torch.reshape})
_SOFTMAX_MODULES = (nn.Softmax, nn.LogSoftmax, nn.Softmin)
# what leaves the graph: the values go on as a new tensor (or as numbers) without autograd
_COPIES = frozenset({torch.tensor})
_TO_HOST = frozenset({torch.Tensor.numpy, torch.Tensor.tolist})
_DETACH = frozenset({torch.Tensor.detach})
_NORMS = (nn.modules.batchnorm._BatchNorm,)
_BIASED = (nn.Linear, nn.modules.conv._ConvNd)


@dataclass
class Event:
    kind: str
    op: str
    location: str | None
    module: str  # the module whose forward was running ("" for the model)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class InplaceOp:
    op: str
    location: str | None
    made_by: str  # the autograd node that made the target ("SigmoidBackward0"), "" for leaves


def op_name(func: Any) -> str:
    try:
        name = resolve_name(func) or getattr(func, "__name__", repr(func))
    except Exception:  # noqa: BLE001 - a name is only for the text
        name = getattr(func, "__name__", repr(func))
    return (name.replace("torch.nn.functional.", "F.").replace("torch.Tensor.", "Tensor.")
            .replace(".__get__", ""))


def has_model_code(model: nn.Module) -> bool:
    """Some module class of the model is defined in the model's own files (not a library's):
    only then can a statement be pointed at, and the op-by-op watch is worth its cost."""
    import inspect

    from torchinspect.analysis.doctor.sites import is_user_file

    for cls in {type(m) for m in model.modules()}:
        try:
            path = inspect.getsourcefile(cls)
        except (OSError, TypeError):
            continue
        if path and is_user_file(path):
            return True
    return False


def _known_parameters(model: nn.Module) -> set[int]:
    """Parameters the model holds, registered or not (a plain list's are TI001's)."""
    known = {id(p) for p in model.parameters()}
    for module in model.modules():
        for value in vars(module).values():
            if type(value) not in (list, tuple, dict):  # plain containers only (not TorchScript's)
                continue
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, nn.Parameter):
                    known.add(id(item))
                elif isinstance(item, nn.Module):
                    known.update(id(p) for p in item.parameters())
    return known


class Watch(TorchFunctionMode):
    """Record the events above while the model runs (``with Watch(model, current):``).

    ``current()`` names the module whose forward is running (the doctor's probe knows);
    ``training``: the mode the model runs in; ``inplace``: record in-place ops too.
    """

    def __init__(self, model: nn.Module, current: Callable[[], str] = lambda: "",
                 *, training: bool = False, inplace: bool = False, ops: bool = True,
                 graph: bool = False) -> None:
        super().__init__()
        self.current = current
        self.training = training
        self.ops = ops  # False: module hooks only (no model code to point at: a library model)
        self.inplace = inplace
        self.graph = graph  # a forward with gradients: record where the graph is cut
        self.cuts: list[Cut] = []
        self._detached: dict[int, tuple[Any, Cut]] = {}  # id(x.detach()) -> (ref, its cut)
        self._log_softmax: dict[int, tuple[Any, str | None]] = {}  # id -> (ref, line)
        self._by_name = dict(model.named_modules())
        self.events: list[Event] = []
        self.inplace_ops: list[InplaceOp] = []
        self._seen: set[tuple[str, str | None]] = set()
        self._known = _known_parameters(model)
        self._probs: dict[int, tuple[Any, str, str | None]] = {}  # id -> (ref, fn, line)
        self._made: dict[int, str] = {}  # data_ptr of a factory's result -> its line
        self._biased: dict[int, tuple[Any, str]] = {}  # id(output) -> (ref, module name)
        self._names = {id(m): n for n, m in model.named_modules()}
        self._handles: list[Any] = []

    # ---------------------------------------------------------------- recording

    def _add(self, kind: str, op: str, location: str | None, **data: Any) -> None:
        if (kind, location) in self._seen:
            return
        self._seen.add((kind, location))
        self.events.append(Event(kind, op, location, self.current(), data))

    def __enter__(self) -> Watch:
        from torch.nn.modules import module as torch_module

        self._handles = [
            torch_module.register_module_parameter_registration_hook(self._new_parameter),
            torch_module.register_module_forward_hook(self._module_out),
            torch_module.register_module_forward_pre_hook(self._module_in)]
        return super().__enter__() if self.ops else self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.ops:
            super().__exit__(*exc)

    def _new_parameter(self, module: nn.Module, name: str, param: Any) -> None:
        if param is None:
            return
        self._known.add(id(param))
        self._add("new-parameter", f"{type(module).__name__}.{name}",
                  user_caller(not_self=module), module_type=type(module).__name__,
                  shape=list(param.shape))

    def _module_out(self, module: nn.Module, args: Any, output: Any) -> None:
        if (isinstance(module, _BIASED) and getattr(module, "bias", None) is not None
                and isinstance(output, torch.Tensor) and id(module) in self._names):
            self._biased[id(output)] = (weakref.ref(output), self._names[id(module)])

    def _module_in(self, module: nn.Module, args: Any) -> None:
        if not isinstance(module, _NORMS) or not args or not isinstance(args[0], torch.Tensor):
            return
        entry = self._biased.get(id(args[0]))
        if entry is not None and entry[0]() is args[0] and id(module) in self._names:
            self._add("bias-into-norm", type(module).__name__, None, source=entry[1],
                      norm=self._names[id(module)])

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        before = self._before(func, args, kwargs)
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            self._after(func, before, out)
            if self._detached:
                self._carry_detached(args, out)
        return out

    def _before(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.graph:
            cut = self._graph_cut(func, args)
            if cut is not None and cut.kind == "detach":
                return cut  # its output is marked: a .numpy() of it is a cut too
        if func in _SOFTMAXES:
            self._softmax_dim(func, args, kwargs)
            if func in _LOG_SOFTMAX:
                return "log-softmax"
        elif func in _RESHAPES:
            self._reshape(func, args, kwargs)
        # a parameter the model does not hold, used here: made in forward (not a property
        # read such as register_parameter's param.grad_fn: the registration hook names it)
        getter = getattr(func, "__name__", "") == "__get__"
        for a in () if getter else args:
            if type(a) is nn.Parameter and id(a) not in self._known:
                self._known.add(id(a))
                ptr = _ptr(a)
                at = self._made.get(ptr) if ptr is not None else None
                self._add("new-parameter", "nn.Parameter", at or user_caller(),
                          module_type="Parameter", shape=list(a.shape))
        if func in _FACTORIES:
            if func is torch.tensor and _holds_tensor(args[0] if args else kwargs.get("data")):
                return None  # a copy of a tensor stays on that tensor's device
            return "factory" if kwargs.get("device") is None else "factory-on-device"
        if func in _PROBS:
            return "probs"
        if func in _LOGS or func in _LOSSES:
            self._log_of_probs(func, args)
            return None
        if func in _SYNCS:
            at = direct_caller()
            if at is not None:
                self._add("sync", op_name(func), at)
            return None
        if func in _DROPOUTS:
            if kwargs.get("training", True) and not self.training:
                self._add("dropout-in-eval", op_name(func), user_caller())
            return None
        if getattr(func, "__self__", None) is _DATA:
            at = direct_caller()
            if at is not None:
                self._add("data", "Tensor.data", at)
            return None
        if self.inplace and _is_inplace(func, kwargs) and args and isinstance(args[0], torch.Tensor):
            node = args[0].grad_fn
            self.inplace_ops.append(InplaceOp(op_name(func), user_caller(),
                                              type(node).__name__ if node is not None else ""))
        return None

    def _after(self, func: Any, what: Any, out: torch.Tensor) -> None:
        at = direct_caller()  # None unless the model's own line called torch directly
        if what == "probs":
            self._probs[id(out)] = (weakref.ref(out), _PROBS[func], at)
        elif what == "log-softmax":
            self._log_softmax[id(out)] = (weakref.ref(out), at)
        elif isinstance(what, Cut):  # x.detach() of a graph tensor: its numpy() is a cut too
            self._detached[id(out)] = (weakref.ref(out), what)
        if at is None:
            return
        ptr = _ptr(out)
        if ptr is not None:  # what a new nn.Parameter(...) wraps: its line
            self._made[ptr] = at
        if what == "factory" and out.dim() > 0:
            self._add("host-tensor", op_name(func), at, shape=list(out.shape))

    def _log_of_probs(self, func: Any, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        if func is F.cross_entropy and isinstance(x, torch.Tensor):
            logged = self._log_softmax.get(id(x))
            at = direct_caller()
            if logged is not None and logged[0]() is x and at is not None:
                self._add("double-log-softmax", op_name(func), at, log_softmax_at=logged[1])
                return
        entry = self._probs.get(id(x)) if isinstance(x, torch.Tensor) else None
        if entry is None or entry[0]() is not x:
            return
        _, prob, prob_at = entry
        at = direct_caller()
        if at is None:
            return
        if func in _LOGS:
            self._add("log-of-probs", op_name(func), at, probs=prob, probs_at=prob_at)
        elif _LOSSES[func] == prob:
            self._add("probs-into-loss", op_name(func), at, probs=prob, probs_at=prob_at)


    # ---------------------------------------------------------------- shapes and dims

    def _softmax_dim(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs.get("input")
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if not isinstance(dim, int):  # implicit (deprecated): what torch picks
            dim = 0 if x.dim() in (0, 1, 3) else 1
        if not -x.dim() <= dim < x.dim() or x.shape[dim] != 1:
            return
        at = direct_caller()
        module = self._running_softmax_module()
        if at is None and module is None:
            return  # a library's own softmax: not the user's to fix
        self._add("softmax-over-one", op_name(func), None if module else at,
                  dim=dim if dim >= 0 else dim + x.dim(), shape=list(x.shape),
                  softmax_module=module)

    def _running_softmax_module(self) -> str | None:
        """The nn.Softmax/LogSoftmax module whose forward runs now (its site is the line)."""
        name = self.current()
        return name if isinstance(self._by_name.get(name), _SOFTMAX_MODULES) else None

    def _reshape(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.dim() < 2:
            return
        shape = _target_shape(x, args[1:], kwargs)
        if shape is None or shape == tuple(x.shape) or sorted(shape) != sorted(x.shape):
            return
        if [d for d in shape if d != 1] == [d for d in x.shape if d != 1]:
            return  # only size-1 dimensions moved: an unsqueeze/squeeze written as a view
        at = direct_caller()
        if at is not None:
            self._add("reshape-as-transpose", op_name(func), at, before=list(x.shape),
                      after=list(shape))

    # ---------------------------------------------------------------- graph cuts

    def _graph_cut(self, func: Any, args: tuple[Any, ...]) -> Cut | None:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor):
            return None
        if func in _TO_HOST:
            held = self._detached.get(id(x))
            if x.requires_grad or held is None or held[0]() is not x:
                return None  # numpy() of a graph tensor raises: that error is TI011's
            return self._cut("host", func, x, origin=held[1])
        if not x.requires_grad:
            return None
        if func in _COPIES:
            return self._cut("copy", func, x)
        if func in _DETACH:
            return self._cut("detach", func, x)
        if getattr(func, "__self__", None) is _DATA:
            return self._cut("data", func, x)
        return None

    def _cut(self, kind: str, func: Any, x: torch.Tensor, origin: Cut | None = None) -> Cut | None:
        at = direct_caller()
        if at is None:
            return None
        cut = Cut(kind, op_name(func), at, self.current(),
                  origin.nodes if origin is not None else _nodes_of(x),
                  origin.location if origin is not None else None)
        self.cuts.append(cut)
        return cut

    def _carry_detached(self, args: tuple[Any, ...], out: Any) -> None:
        """``x.detach().cpu()``: what is made from a detached graph tensor stays marked."""
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor) or out.requires_grad:
            return
        held = self._detached.get(id(x))
        if held is not None and held[0]() is x:
            self._detached[id(out)] = (weakref.ref(out), held[1])

    def cut_parameters(self, cut: Cut) -> set[int]:
        """ids of the tensors (parameters) whose gradient would flow through the cut."""
        return _leaves(cut.nodes)


def _holds_tensor(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return True
    return isinstance(data, (list, tuple)) and any(isinstance(d, torch.Tensor) for d in data)


def _target_shape(x: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...] | None:
    """The shape a view/reshape asks for (-1 resolved); None when it cannot be read."""
    shape: Any = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) \
        else (args or kwargs.get("shape") or kwargs.get("size"))
    if isinstance(shape, torch.dtype) or not shape:
        return None
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        return None
    if dims.count(-1) == 1:
        known = 1
        for d in dims:
            known *= d if d != -1 else 1
        if known == 0 or x.numel() % known:
            return None
        dims[dims.index(-1)] = x.numel() // known
    return tuple(dims)


@dataclass
class Cut:
    """Where a graph tensor left autograd in the model's code (a forward with gradients)."""

    kind: str  # "copy" (torch.tensor(t)), "host" (.numpy()/.tolist() of t.detach()), "detach", "data"
    op: str
    location: str
    module: str
    nodes: list[Any]  # the autograd node above the tensor (or the tensor itself, a leaf)
    detached_at: str | None = None  # "host": the .detach() that came first


def _nodes_of(t: torch.Tensor) -> list[Any]:
    return [t.grad_fn] if t.grad_fn is not None else [t]


def _leaves(nodes: list[Any]) -> set[int]:
    """ids of the leaf tensors (parameters) reached from autograd nodes (or leaf tensors)."""
    out: set[int] = set()
    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.Tensor):
            out.add(id(node))
            continue
        variable = getattr(node, "variable", None)  # AccumulateGrad
        if isinstance(variable, torch.Tensor):
            out.add(id(variable))
        stack.extend(n for n, _ in getattr(node, "next_functions", ()))
    return out


def _ptr(t: torch.Tensor) -> int | None:
    """The tensor's data address (None for meta, sparse and other storage-less tensors)."""
    if t.device.type == "meta" or t.layout != torch.strided:
        return None
    try:
        return int(t.data_ptr())
    except RuntimeError:  # functional or wrapper tensors without storage
        return None


_INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__",
                              "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                              "__imatmul__", "__ifloordiv__", "__imod__"})


def _is_inplace(func: Any, kwargs: dict[str, Any]) -> bool:
    name = getattr(func, "__name__", "")
    return (kwargs.get("inplace") is True or name in _INPLACE_DUNDERS
            or (name.endswith("_") and not name.startswith("_")))
