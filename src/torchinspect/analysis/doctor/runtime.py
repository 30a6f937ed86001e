"""Checks that need real numbers: TI003 (no gradient), TI004 (random in eval), TI005 (NaN/Inf).

They run on a real model (CPU by default) and leave it as it was:

* every forward goes through ``torch.func.functional_call`` with *copies* of the buffers,
  so BatchNorm running statistics and counters are not updated;
* gradients come from ``torch.autograd.grad``, so no ``.grad`` field is written;
* every module's ``training`` flag is restored and every hook removed in ``finally``;
* the global RNG state is forked (``torch.random.fork_rng``) and restored.

Tensor hooks on the run's own intermediate tensors (never on the model) locate where a
NaN gradient first appears.
"""

from __future__ import annotations

import contextlib
import math
import re
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from torchinspect.analysis.doctor.sites import is_user_file, model_warnings, shown
from torchinspect.analysis.doctor.watch import Cut, Event, InplaceOp, Watch, has_model_code
from torchinspect.errors import first_line
from torchinspect.guard import training_mode
from torchinspect.shapes import tensor_leaves
from torchinspect.trace.engine import model_kept
from torchinspect.trace.static import hookable_modules


def _fingerprint(value: Any) -> tuple[float, ...]:
    """A cheap summary of every tensor: its sum and L2 norm (float32 reductions, vectorized).

    Equal tensors give equal fingerprints; a dropout mask or a NaN changes them. (float64
    reductions would be ~10x slower on CPU.)
    """
    parts = []
    for t in tensor_leaves(value):
        t = t.detach()
        if t.numel() == 0 or t.is_meta:
            continue
        if t.is_complex():
            t = torch.view_as_real(t)
        if not t.is_floating_point():
            t = t.to(torch.float32)
        acc = torch.float64 if t.dtype == torch.float64 else torch.float32  # never narrowing
        parts.append(t.sum(dtype=acc).to(torch.float64))
        parts.append(torch.linalg.vector_norm(t, dtype=acc).to(torch.float64))
    return tuple(torch.stack(parts).tolist()) if parts else ()


def all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in ``t`` (a NaN or Inf makes the sum non-finite; one reduction, fast)."""
    t = t.detach()
    if t.is_complex():  # both parts (a cast to real would drop the imaginary one)
        t = torch.view_as_real(t)
    if math.isfinite(float(t.sum(dtype=torch.float32))):
        return True
    return bool(torch.isfinite(t).all())  # confirm: a huge finite sum may overflow


def same_fingerprint(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if math.isnan(x) and math.isnan(y):
            continue
        if not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9):
            return False
    return True


def finite_fingerprint(fp: tuple[float, ...]) -> bool:
    return all(math.isfinite(v) for v in fp)


@dataclass
class _Call:
    name: str
    type: str
    depth: int
    inputs: tuple[float, ...] = ()
    outputs: tuple[float, ...] = ()
    done: int = -1  # completion order (innermost modules finish first)


@dataclass
class Probe:
    """Forward pre/post hooks that fingerprint every module call's inputs and outputs.

    With ``grads=True`` it also hangs tensor hooks on the run's own input/output tensors to
    see, per call, whether the gradient reaching its output / leaving through its inputs is
    finite (and in which order those hooks fire).
    """

    model: nn.Module
    grads: bool = False
    calls: list[_Call] = field(default_factory=list)
    stack: list[int] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    finished: int = 0
    fired: int = 0
    out_grad_bad: dict[int, bool] = field(default_factory=dict)
    in_grad_bad: dict[int, int] = field(default_factory=dict)  # call -> firing order

    def __enter__(self) -> Probe:
        names = {id(m): n for n, m in self.model.named_modules()}
        for module in hookable_modules(self.model):  # a TorchScript root: none
            name = names.get(id(module), "?")
            self.handles.append(module.register_forward_pre_hook(
                self._pre(name, type(module).__name__), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post, always_call=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, name: str, type_name: str) -> Any:
        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            index = len(self.calls)
            self.calls.append(_Call(name, type_name, len(self.stack),
                                    () if self.grads else _fingerprint((args, kwargs))))
            self.stack.append(index)
            if self.grads:
                for t in tensor_leaves((args, kwargs)):
                    if t.requires_grad:
                        t.register_hook(self._in_grad(index))
        return hook

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self.stack:
            return
        index = self.stack.pop()
        call = self.calls[index]
        call.outputs = () if self.grads else _fingerprint(output)
        call.done = self.finished
        self.finished += 1
        if self.grads:
            for t in tensor_leaves(output):
                if t.requires_grad:
                    t.register_hook(self._out_grad(index))

    def _in_grad(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.fired += 1
            if not all_finite(grad) and index not in self.in_grad_bad:
                self.in_grad_bad[index] = self.fired
        return hook

    def _out_grad(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.fired += 1
            if not all_finite(grad):
                self.out_grad_bad[index] = True
        return hook


@contextlib.contextmanager
def _restored(model: nn.Module) -> Iterator[None]:
    """Put back the model's attributes (what a forward assigns; the forwards run on buffer
    copies, see _forward) and the RNG state afterwards; the phases switch train/eval with
    ``guard.training_mode``, which puts every ``training`` flag back. Each forward also runs
    under :func:`_fresh`: every run starts from the model as it was given."""
    with model_kept(model, buffers=False), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def _fresh(model: nn.Module) -> Any:
    """One forward's own attribute snapshot: what it assigns (``self.hidden = h``, a
    parameter made in forward) is gone before the next run, so two eval runs compare the
    model's randomness, not the state one left for the other."""
    return model_kept(model, buffers=False)


def _forward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A forward that cannot change the model's buffers (they are copied for the call) nor
    the inputs: a forward that edits its input in place (``x.mul_(2)``) gets a copy, so two
    runs see the same values."""
    from torchinspect.privtorch import tree_map_only

    args, kwargs = tree_map_only(torch.Tensor, torch.clone, (tuple(args), dict(kwargs)))
    if isinstance(model, torch.jit.ScriptModule):
        return model(*args, **kwargs)
    copies: dict[int, torch.Tensor] = {}
    state = {}
    for name, b in model.named_buffers(remove_duplicate=False):
        if id(b) not in copies:
            copies[id(b)] = b.clone()
        state[name] = copies[id(b)]
    if not state:
        return model(*args, **kwargs)
    return torch.func.functional_call(model, state, args, kwargs, tie_weights=True, strict=False)


def _batch_of_two(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    """The inputs with batch 2 (a second random sample) when every batched input has batch 1.

    Training-mode BatchNorm needs more than one value per channel; a batch of one fails on
    1x1 feature maps (Inception's aux head) although the model is fine.
    """
    ts = [t for t in tensor_leaves((args, kwargs)) if t.dim() >= 2]
    if not ts or any(t.shape[0] != 1 for t in ts):
        return None

    def grow(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dim() >= 2:
            other = torch.randn_like(v) if v.is_floating_point() else v
            return torch.cat([v, other])
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*(grow(x) for x in v))
        if isinstance(v, (tuple, list)):
            return type(v)(grow(x) for x in v)
        if isinstance(v, dict):
            return {k: grow(x) for k, x in v.items()}
        return v

    return grow(args), grow(kwargs)




# ------------------------------------------------------------------ the run and its facts


@dataclass
class ModelError:
    """The model's own forward or backward raised (the user's bug: a finding, not a crash)."""

    stage: str  # "forward in eval mode", "forward in training mode", "backward"
    text: str  # "RuntimeError: mat1 and mat2 shapes cannot be multiplied ..."
    location: str | None  # the innermost line of the model's code in the traceback
    statement: str | None  # that line's source text


@dataclass
class InplaceFault:
    """The backward failed because a tensor it saved was modified in place."""

    made_by: str  # the op whose output was modified ("Sigmoid")
    saved_at: str | None  # the forward line of the op that saved it (anomaly detection)
    modified: InplaceOp | None  # the in-place op that modified it, when seen
    text: str


@dataclass
class GradRun:
    params: list[tuple[str, nn.Parameter]]
    grads: tuple[torch.Tensor | None, ...]
    probe: Probe
    nonfinite: list[str] = field(default_factory=list)  # parameters with NaN/Inf gradients
    nan_at: tuple[str, str] | None = None  # (backward node, its forward line) of the first NaN
    # where the model's code cut the graph, with the parameters above the cut that got no
    # gradient (empty: the cut kept nothing from its gradient, e.g. a copy for logging)
    cuts: list[tuple[Cut, list[str]]] = field(default_factory=list)
    ran: set[str] = field(default_factory=set)  # modules called in this forward

    def explained(self) -> set[str]:
        """Parameters without a gradient because the model's code cut the graph above them
        (``torch.tensor(t)``, a ``.numpy()`` round trip, ``.data``; not an explicit
        ``.detach()``, which TI003 reports with its line)."""
        return {n for cut, names in self.cuts if cut.kind != "detach" for n in names}


@dataclass
class KeptGraph:
    """A tensor of the autograd graph that the forward left on a module (``self.h = h``)."""

    module: str  # qualified name ("" for the model)
    attribute: str
    type: str  # the module's class
    what: str  # "a tensor", "a tuple of 2 tensors"


@dataclass
class RunData:
    """What the real runs saw; the run checks (``.forward``) turn it into findings."""

    model: nn.Module
    eval_runs: list[tuple[Probe, tuple[float, ...]]] = field(default_factory=list)
    inputs_finite: bool = True
    events: list[Event] = field(default_factory=list)
    errors: list[ModelError] = field(default_factory=list)
    grad: GradRun | None = None
    inplace: InplaceFault | None = None
    kept_graph: list[KeptGraph] = field(default_factory=list)
    grad_forward: bool = False  # a forward with gradients ran (kept_graph is its)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # code -> why

    def events_of(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]


# the checks that need the forward with gradients (TI011 too: a training-mode failure)
GRAD_CODES = frozenset({"TI003", "TI005", "TI010", "TI018", "TI024", "TI026"})


def model_error(stage: str, exc: BaseException) -> ModelError:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = next((f for f in reversed(frames) if is_user_file(f.filename)), None)
    return ModelError(stage, first_line(exc, typed=True),
                      f"{shown(mine.filename)}:{mine.lineno}" if mine else None,
                      (mine.line or "").strip() or None if mine else None)


def run_model(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              codes: set[str], watch: bool = True) -> RunData:
    """The doctor's real runs on ``model`` (left as it was): two eval-mode forwards (watched:
    see ``.watch``), then one training-mode forward and ``torch.autograd.grad``. An error
    of the model's code ends its phase and is kept in ``errors``; an in-place modification
    of a saved tensor is re-run with anomaly detection to name both lines."""
    data = RunData(model, inputs_finite=finite_fingerprint(_fingerprint((args, kwargs))))
    with _restored(model), model_warnings(data.notes):
        _eval_runs(data, args, kwargs, 2 if "TI004" in codes else 1, watch)
        if codes & {*GRAD_CODES, "TI011"}:
            _grad_run(data, args, kwargs, probe_grads="TI005" in codes, watch=watch)
    return data


def _eval_runs(data: RunData, args: tuple[Any, ...], kwargs: dict[str, Any], runs: int,
               watch: bool) -> None:
    model = data.model
    for i in range(runs):
        try:
            with _fresh(model), training_mode(model, False), torch.no_grad(), \
                    Probe(model) as probe, _watching(model, probe, watch, training=False) as seen:
                out = _forward(model, args, kwargs)
        except Exception as exc:  # the model's own bug: a finding, the other checks go on
            data.errors.append(model_error("forward in eval mode", exc))
            data.eval_runs.clear()
            return
        if i == 0 and seen is not None:
            data.events = seen.events
        data.eval_runs.append((probe, _fingerprint(out)))


@contextlib.contextmanager
def _watching(model: nn.Module, probe: Probe, on: bool, *, training: bool,
              inplace: bool = False, graph: bool = False) -> Iterator[Watch | None]:
    if not on or (graph and not has_model_code(model)):  # cuts are the model's own code's
        yield None
        return

    def current() -> str:
        return probe.calls[probe.stack[-1]].name if probe.stack else ""

    with Watch(model, current, training=training, inplace=inplace, graph=graph,
               ops=inplace or graph or has_model_code(model)) as seen:
        yield seen


_MODULE_INTERNALS = frozenset(vars(nn.Module()))


def _attributes(model: nn.Module) -> dict[tuple[int, str], int]:
    """``(module, attribute) -> id(value)`` of every module's own attributes."""
    return {(id(m), k): id(v) for m in model.modules() for k, v in vars(m).items()
            if k not in _MODULE_INTERNALS}


def _graph_tensors(value: Any, depth: int = 0) -> int:
    """How many tensors of the autograd graph (not leaves) ``value`` holds, two levels deep."""
    if isinstance(value, torch.Tensor):
        return int(value.grad_fn is not None)
    if depth < 2 and type(value) in (list, tuple, dict):
        items = value.values() if isinstance(value, dict) else value
        return sum(_graph_tensors(v, depth + 1) for v in items)
    return 0


def _kept_graph(model: nn.Module, before: dict[tuple[int, str], int]) -> list[KeptGraph]:
    """Attributes the forward set to graph tensors (``self.hidden = h``): the next call's
    backward runs into this call's graph, and every call's graph stays in memory."""
    out = []
    for name, m in model.named_modules():
        for key, value in vars(m).items():
            if key in _MODULE_INTERNALS or before.get((id(m), key)) == id(value):
                continue
            n = _graph_tensors(value)
            if n:
                what = "a tensor" if isinstance(value, torch.Tensor) else \
                    f"a {type(value).__name__} holding {n} tensor{'s' if n > 1 else ''}"
                out.append(KeptGraph(name, key, type(m).__name__, what))
    return out


def _grad_run(data: RunData, args: tuple[Any, ...], kwargs: dict[str, Any],
              probe_grads: bool, watch: bool = True) -> None:
    """TI003/TI005/TI010: one training-mode forward and torch.autograd.grad; the watch sees
    where the model's code cuts the graph, and what the forward left on its modules."""
    model = data.model
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        data.skipped.update({c: "no trainable parameters" for c in ("TI003", "TI005", "TI010")})
        return
    attempts: list[tuple[str, bool, tuple[Any, Any]]] = []
    grown = _batch_of_two(args, kwargs)
    if grown is not None:
        attempts.append(("training mode, batch 2", True, grown))
    attempts += [("training mode", True, (args, kwargs)), ("eval mode", False, (args, kwargs))]
    errors: list[tuple[str, BaseException]] = []
    for label, train, (a, kw) in attempts:
        probe = Probe(model, grads=probe_grads)
        try:
            with _fresh(model), torch.enable_grad(), probe, training_mode(model, train), \
                    _watching(model, probe, watch, training=train, graph=True) as seen:
                before = _attributes(model)
                out = _forward(model, a, kw)
                data.kept_graph = _kept_graph(model, before)
                data.grad_forward = True
                outs = [t for t in tensor_leaves(out) if t.requires_grad and t.is_floating_point()]
                if not outs:
                    data.skipped["TI003"] = "no output depends on a trainable parameter"
                    return
                loss = _loss(outs)
        except Exception as exc:  # the model's own failure in this mode: try the next
            errors.append((label, exc))
            continue
        if errors:
            data.notes.append(f"gradient checks ran in {label} "
                              f"({errors[0][0]}: {first_line(errors[0][1], typed=True)})")
        try:
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        except RuntimeError as exc:
            if "modified by an inplace operation" in str(exc):
                data.inplace = _find_inplace(model, a, kw, train, exc)
            else:
                data.errors.append(model_error("backward", exc))
            data.skipped.update({c: "the backward failed (see the error finding)"
                                 for c in ("TI003", "TI005")})
            return
        data.grad = GradRun(params, grads, probe, ran={c.name for c in probe.calls})
        if seen is not None:
            unused = {id(p): n for (n, p), g in zip(params, grads, strict=True) if g is None}
            data.grad.cuts = [(cut, sorted(unused[i] for i in seen.cut_parameters(cut)
                                           if i in unused)) for cut in seen.cuts]
        if probe_grads:
            data.grad.nonfinite = [n for (n, _), g in zip(params, grads, strict=True)
                                   if g is not None and not all_finite(g)]
            if data.grad.nonfinite:
                data.grad.nan_at = _find_nan_backward(model, a, kw, train)
        return
    if not data.errors:  # the eval forward worked: this failure is the training mode's
        stage, error = next(((lb, e) for lb, e in errors if lb == "training mode"), errors[0])
        data.errors.append(model_error(f"forward in {stage}", error))
    data.skipped["TI003"] = "the forward with gradients failed (see TI011)"


def _loss(outs: list[torch.Tensor]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return cast(torch.Tensor, sum((o.float() * torch.randn(o.shape, generator=gen).to(o.device)).sum()
                                  for o in outs))


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _anomaly_rerun(model: nn.Module, args: Any, kwargs: Any, train: bool, *,
                   check_nan: bool) -> tuple[RuntimeError | None, str | None, Watch | None]:
    """The forward and backward again under ``torch.autograd.detect_anomaly`` (which keeps
    every op's forward traceback and names the backward node that failed), watching
    in-place ops: (the backward's error, the forward line of the failing node, the watch)."""
    error = None
    seen: Watch | None = None
    probe = Probe(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _fresh(model), torch.autograd.detect_anomaly(check_nan=check_nan), \
                    torch.enable_grad(), probe, training_mode(model, train), \
                    _watching(model, probe, True, training=train, inplace=True) as seen:
                out = _forward(model, args, kwargs)
                outs = [t for t in tensor_leaves(out) if t.requires_grad and t.is_floating_point()]
                torch.autograd.grad(_loss(outs), [p for p in model.parameters() if p.requires_grad],
                                    allow_unused=True)
        except RuntimeError as exc:
            error = exc
    saved_at = None
    for w in caught:
        text = str(w.message)
        if "Traceback of forward call" in text:
            lines = [(path, int(n)) for path, n in _FRAME.findall(text) if is_user_file(path)]
            saved_at = f"{shown(lines[-1][0])}:{lines[-1][1]}" if lines else saved_at
    return error, saved_at, seen


def _find_inplace(model: nn.Module, args: Any, kwargs: Any, train: bool,
                  exc: RuntimeError) -> InplaceFault:
    """The op whose output was modified, the line that saved it, the in-place op that
    changed it (matched by the autograd node that made its target)."""
    made = re.search(r"which is output \d+ of (\w+)", str(exc))
    made_by = made.group(1) if made else ""
    _, saved_at, seen = _anomaly_rerun(model, args, kwargs, train, check_nan=False)
    modified = None
    if seen is not None and made_by:
        modified = next((op for op in seen.inplace_ops
                         if re.sub(r"Backward\d*$", "", op.made_by) == made_by), None)
    return InplaceFault(made_by, saved_at, modified, first_line(exc, typed=True))


def _find_nan_backward(model: nn.Module, args: Any, kwargs: Any, train: bool) -> tuple[str, str] | None:
    """(backward node, forward line) of the first backward that returned NaN."""
    error, saved_at, _ = _anomaly_rerun(model, args, kwargs, train, check_nan=True)
    node = re.search(r"Function '(\w+)' returned nan", str(error)) if error else None
    if node is None or saved_at is None:
        return None
    return node.group(1), saved_at
