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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from torchinspect.analysis.doctor.rules import Finding, Severity
from torchinspect.analysis.doctor.structure import show_names
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


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in ``t`` (a NaN or Inf makes the sum non-finite; one reduction, fast)."""
    t = t.detach()
    if t.is_complex():  # both parts (a cast to real would drop the imaginary one)
        t = torch.view_as_real(t)
    if math.isfinite(float(t.sum(dtype=torch.float32))):
        return True
    return bool(torch.isfinite(t).all())  # confirm: a huge finite sum may overflow


def _same(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if math.isnan(x) and math.isnan(y):
            continue
        if not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9):
            return False
    return True


def _finite(fp: tuple[float, ...]) -> bool:
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
class _Probe:
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

    def __enter__(self) -> _Probe:
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
            if not _all_finite(grad) and index not in self.in_grad_bad:
                self.in_grad_bad[index] = self.fired
        return hook

    def _out_grad(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.fired += 1
            if not _all_finite(grad):
                self.out_grad_bad[index] = True
        return hook


@contextlib.contextmanager
def _restored(model: nn.Module) -> Iterator[None]:
    """Restore the model's attributes and buffers (what a forward assigns) and the RNG state
    afterwards (its training flags: guard.training_mode around each forward)."""
    # the forwards run on buffer copies (_forward): attributes are what can change
    with model_kept(model, buffers=False), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def _forward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A forward that cannot change the model's buffers (they are copied for the call) nor
    the inputs: a forward that edits its input in place (``x.mul_(2)``) gets a copy, so two
    runs see the same values."""
    from torch.utils import _pytree as pytree

    args, kwargs = pytree.tree_map_only(torch.Tensor, torch.clone, (tuple(args), dict(kwargs)))
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


def _label(name: str) -> str:
    return name or "(model)"


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


@dataclass
class RunFindings:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def nonfinite_weights(model: nn.Module) -> list[Finding]:
    """TI005 (a): parameters and buffers holding NaN/Inf (each tensor once)."""
    bad: list[str] = []
    seen: set[int] = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) in seen or t.is_meta or not (t.is_floating_point() or t.is_complex()):
            continue
        seen.add(id(t))
        if not _all_finite(t):
            bad.append(name)
    if not bad:
        return []
    return [Finding("TI005", Severity.error, bad[0].rpartition(".")[0],
                    f"{len(bad)} parameter/buffer tensor(s) hold NaN/Inf: {show_names(bad)}",
                    why="every forward through them gives NaN/Inf",
                    fix="reload the weights, or find the training step that diverged "
                    "(lower the learning rate, clip gradients)",
                    data={"tensors": bad})]


def check_eval(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
               codes: set[str]) -> RunFindings:
    """TI004 and TI005 (outputs): two eval-mode forwards of the same inputs."""
    res = RunFindings()
    runs: list[tuple[_Probe, tuple[float, ...]]] = []
    with _restored(model), torch.no_grad(), training_mode(model, False):
        for _ in range(2 if "TI004" in codes else 1):
            with _Probe(model) as probe:
                out = _forward(model, args, kwargs)
            runs.append((probe, _fingerprint(out)))
    probe, out_fp = runs[0]
    if "TI005" in codes and not _finite(out_fp):
        first = sorted((c for c in probe.calls if _finite(c.inputs) and not _finite(c.outputs)),
                       key=lambda c: c.done)
        where = first[0] if first else None
        if not _finite(_fingerprint((args, kwargs))):
            res.notes.append("TI005: the example inputs themselves hold NaN/Inf")
        res.findings.append(Finding(
            "TI005", Severity.error, where.name if where else "",
            "the eval-mode output holds NaN/Inf" + (
                f"; it first appears in the output of {_label(where.name)} ({where.type}) "
                "whose inputs are finite" if where else ""),
            data={"stage": "forward", "module_type": where.type if where else None}))
    if "TI004" in codes and len(runs) == 2:
        (p1, o1), (p2, o2) = runs
        if not _same(o1, o2) or not _same_calls(p1, p2):
            res.findings.append(_stochastic_finding(p1, p2))
    return res


def _same_calls(p1: _Probe, p2: _Probe) -> bool:
    return len(p1.calls) == len(p2.calls) and all(
        a.name == b.name and _same(a.outputs, b.outputs) for a, b in zip(p1.calls, p2.calls, strict=True))


def _stochastic_finding(p1: _Probe, p2: _Probe) -> Finding:
    if len(p1.calls) != len(p2.calls) or any(
            a.name != b.name for a, b in zip(p1.calls, p2.calls, strict=True)):
        return Finding("TI004", Severity.error, "",
                       "two eval-mode forwards of the same input call different modules "
                       "(random control flow)", data={"module_type": None})
    culprits = sorted((a for a, b in zip(p1.calls, p2.calls, strict=True)
                       if _same(a.inputs, b.inputs) and not _same(a.outputs, b.outputs)),
                      key=lambda c: c.done)
    where = culprits[0] if culprits else None
    name = where.name if where else ""
    text = (f"two eval-mode forwards of the same input differ; {_label(name)} ({where.type}) "
            "is the first module whose output differs for identical inputs" if where else
            "two eval-mode forwards of the same input differ")
    if where is not None:
        text += " (its forward draws random numbers in eval mode, e.g. F.dropout without " \
                "training=self.training)"
    return Finding("TI004", Severity.error, name, text,
                   data={"module_type": where.type if where else None})


def check_gradients(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                    codes: set[str]) -> RunFindings:
    """TI003 and TI005 (gradients): one training-mode forward and torch.autograd.grad."""
    res = RunFindings()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        for code in ("TI003", "TI005") if "TI003" in codes else ():
            res.skipped.setdefault(code, "no trainable parameters")
        return res
    attempts: list[tuple[str, bool, tuple[Any, Any]]] = []
    grown = _batch_of_two(args, kwargs)
    if grown is not None:
        attempts.append(("training mode, batch 2", True, grown))
    attempts += [("training mode", True, (args, kwargs)), ("eval mode", False, (args, kwargs))]
    with _restored(model):
        out = None
        errors = []
        for label, train, (a, kw) in attempts:
            probe = _Probe(model, grads="TI005" in codes)
            try:
                with torch.enable_grad(), probe, training_mode(model, train):
                    out = _forward(model, a, kw)
                break
            except Exception as exc:  # the model's own failure in this mode: try the next
                errors.append(f"{label}: {first_line(exc, typed=True)}")
                out = None
        if out is None:
            res.skipped["TI003"] = "the forward with gradients failed (" + "; ".join(errors) + ")"
            return res
        if errors:
            res.notes.append(f"gradient checks ran in {label} ({errors[0]})")
        outs = [t for t in tensor_leaves(out) if t.requires_grad and t.is_floating_point()]
        if not outs:
            res.skipped["TI003"] = "no output depends on a trainable parameter"
            return res
        gen = torch.Generator().manual_seed(0)
        loss = sum((o.float() * torch.randn(o.shape, generator=gen).to(o.device)).sum() for o in outs)
        grads = torch.autograd.grad(cast(torch.Tensor, loss), [p for _, p in params],
                                    allow_unused=True)
    if "TI003" in codes:
        res.findings += _no_gradient([n for (n, _), g in zip(params, grads, strict=True) if g is None],
                                     [n for n, _ in params], model)
    if "TI005" in codes:
        bad = [n for (n, _), g in zip(params, grads, strict=True)
               if g is not None and not _all_finite(g)]
        if bad:
            res.findings.append(_nan_gradient(bad, probe))
    return res


def _no_gradient(unused: list[str], trainable: list[str], model: nn.Module) -> list[Finding]:
    if not unused:
        return []
    unused_set = set(unused)
    sizes = dict(model.named_parameters())
    tops: list[str] = []
    for name, _module in model.named_modules():
        if name == "" or any(name.startswith(t + ".") for t in tops):
            continue
        own = [p for p in trainable if p.startswith(name + ".")]
        if own and all(p in unused_set for p in own):
            tops.append(name)
    covered = {p for p in unused for t in tops if p.startswith(t + ".")}
    out = []
    modules = dict(model.named_modules())
    for top in tops:
        names = [p for p in unused if p.startswith(top + ".")]
        count = sum(sizes[p].numel() for p in names)
        out.append(Finding("TI003", Severity.warning, top,
                           f"{type(modules[top]).__name__} gets no gradient: {count:,} parameters "
                           f"in {len(names)} tensor(s) never reach the output",
                           data={"parameters": names, "count": count}))
    rest = [p for p in unused if p not in covered]
    by_owner: dict[str, list[str]] = {}
    for p in rest:
        by_owner.setdefault(p.rpartition(".")[0], []).append(p)
    for owner, names in by_owner.items():
        count = sum(sizes[p].numel() for p in names)
        out.append(Finding("TI003", Severity.warning, owner,
                           f"{show_names([n.rpartition('.')[2] for n in names])} of "
                           f"{_label(owner)} get no gradient ({count:,} parameters)",
                           data={"parameters": names, "count": count}))
    return out


def _nan_gradient(bad: list[str], probe: _Probe) -> Finding:
    # the innermost call whose output gradient is finite and whose input gradient is not
    culprits = [(probe.calls[i].depth, -order, i) for i, order in probe.in_grad_bad.items()
                if not probe.out_grad_bad.get(i, False)]
    where = probe.calls[max(culprits)[2]] if culprits else None
    text = f"{len(bad)} parameter tensor(s) get NaN/Inf gradients ({show_names(bad)})"
    if where is not None:
        text += (f"; they first appear in the backward of {_label(where.name)} ({where.type}): "
                 "finite gradient in, NaN/Inf out")
    return Finding("TI005", Severity.error, where.name if where else bad[0].rpartition(".")[0], text,
                   data={"stage": "backward", "parameters": bad,
                         "module_type": where.type if where else None})
