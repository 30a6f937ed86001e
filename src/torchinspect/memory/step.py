"""The steps whose memory is predicted (on fake tensors) and measured (on the GPU).

One definition serves both, so the prediction and ``--verify`` run the same code:
`inference` is an eval-mode forward under ``inference_mode``; `train_step` is
``zero_grad(set_to_none=True)``, forward, loss (``sum``/``mean`` of the first floating
output), ``backward``, ``optimizer.step()``; forward outputs and the loss are locals, dropped
when the step returns. ``on_phase(name)`` is called as each phase starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from torchinspect.dtypes import RUN, SHORT
from torchinspect.errors import InspectError
from torchinspect.shapes import tensor_leaves

OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "none")
DTYPES = {short: getattr(torch, SHORT[short]) for short in RUN}  # dtypes.py's names
LOSSES = ("sum", "mean")


#: the largest --fsdp world size predicted (the fake process group holds every rank's shard
#: metadata: time grows with it, about 0.1 s a rank; larger jobs shard within groups: HSDP)
MAX_FSDP_RANKS = 1024


@dataclass(frozen=True)
class StepConfig:
    """What one prediction runs (the CLI's --optimizer --dtype --amp --checkpointing --loss)."""

    train: bool = True
    optimizer: str = "adamw"
    dtype: str | None = None  # weights (and floating inputs) cast to this; None: as built
    amp: str | None = None  # autocast to bf16/fp16, fp32 master weights
    checkpointing: str | None = None  # class name of the modules to checkpoint
    loss: str = "sum"
    foreach: bool | None = None  # None: as PyTorch picks on the device
    fsdp: int | None = None  # FSDP2 over this many GPUs: the per-GPU peak (memory/fsdp.py)
    fsdp_unit: str | None = None  # class name of the modules each fully_shard wraps

    def __post_init__(self) -> None:
        for value, allowed, option in ((self.optimizer, OPTIMIZERS, "--optimizer"),
                                       (self.dtype, tuple(DTYPES), "--dtype"),
                                       (self.loss, LOSSES, "--loss")):
            if value is not None and value not in allowed:
                raise InspectError(f"{option} {value!r}: expected one of {', '.join(allowed)}",
                                   hint=f"e.g. {option} {allowed[0]}")
        if self.fsdp is not None and (isinstance(self.fsdp, bool) or not isinstance(self.fsdp, int)
                                      or not 1 <= self.fsdp <= MAX_FSDP_RANKS):
            raise InspectError(f"--fsdp {self.fsdp!r}: expected a number of GPUs from 1 to "
                               f"{MAX_FSDP_RANKS:,} (the prediction simulates every rank's "
                               "shard of each parameter)", hint="e.g. --fsdp 8")
        if self.fsdp_unit is not None and self.fsdp is None:
            raise InspectError("--fsdp-unit names the modules FSDP shards: it needs --fsdp N",
                               hint=f"e.g. --fsdp 8 --fsdp-unit {self.fsdp_unit}")
        if self.amp is not None and self.amp not in ("bf16", "fp16"):
            raise InspectError(f"--amp {self.amp!r}: expected bf16 or fp16", hint="e.g. --amp --dtype bf16")
        if self.amp is not None and self.dtype not in (None, "fp32"):
            raise InspectError("--amp keeps fp32 master weights: it does not combine with --dtype "
                               f"{self.dtype}", hint="use either --amp bf16 or --dtype bf16")


def make_optimizer(name: str, params: list[Any], foreach: bool | None) -> Any:
    """The optimizer with PyTorch's defaults (lr irrelevant to memory)."""
    if name == "none" or not params:
        return None
    kw: dict[str, Any] = {} if foreach is None else {"foreach": foreach}
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kw)
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)


def first_floating(output: Any, name: str) -> Any:
    """The first floating-point tensor of a forward's output (the loss is formed from it)."""
    for t in tensor_leaves(output):
        if t.is_floating_point() or t.is_complex():
            return t
    raise InspectError(
        f"{name}: the forward returns no floating-point tensor, so no loss can be formed for "
        "the training step (the loss is --loss sum|mean of the first floating output)",
        hint="predict inference only with --no-train")


def call(model: Any, state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return torch.func.functional_call(model, state, args, kwargs)


def inference(model: Any, state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
              autocast: Any) -> None:
    """An eval forward under ``inference_mode``; the output is dropped when it returns."""
    with torch.inference_mode(), autocast():
        call(model, state, args, kwargs)


def train_step(model: Any, state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               *, optimizer: Any, loss: str, autocast: Any, name: str,
               on_phase: Callable[[str], None]) -> None:
    """zero_grad, forward, loss, backward, optimizer.step (the loss and outputs are locals)."""
    on_phase("forward")
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    else:
        for t in state.values():
            t.grad = None
    with autocast():
        out = call(model, state, args, kwargs)
        target = first_floating(out, name)
        value = target.sum() if loss == "sum" else target.mean()
    del out, target
    on_phase("backward")
    value.backward()
    del value
    on_phase("optimizer")
    if optimizer is not None:
        optimizer.step()


@contextlib.contextmanager
def checkpointed(model: Any, type_name: str | None) -> Iterator[int]:
    """Wrap each module whose class is ``type_name`` in non-reentrant activation checkpointing
    (an instance ``forward`` removed afterwards); yields how many were wrapped."""
    if not type_name:
        yield 0
        return
    from torch.utils.checkpoint import checkpoint

    wrapped = [m for m in model.modules() if type(m).__name__ == type_name
               or f"{type(m).__module__}.{type(m).__qualname__}" == type_name]
    added = []
    try:
        for m in wrapped:
            if "forward" in m.__dict__:
                continue
            original = m.forward

            def forward(*a: Any, _f: Any = original, _m: Any = m, **kw: Any) -> Any:
                return checkpoint(_recomputable(_m, _f), *a, use_reentrant=False, **kw)

            m.forward = forward
            added.append(m)
        yield len(wrapped)
    finally:
        for m in added:
            m.__dict__.pop("forward", None)


def _recomputable(module: Any, forward: Any) -> Any:
    """``forward`` bound to the parameters and buffers ``module`` holds now: under
    ``functional_call`` those are the step's tensors, but the recomputation runs during the
    backward, after ``functional_call`` has put the module's own (meta, for a model the CLI
    built) tensors back."""
    from torchinspect.privtorch import reparametrized

    state = {**dict(module.named_parameters(remove_duplicate=False)),
             **dict(module.named_buffers(remove_duplicate=False))}

    def run(*a: Any, **kw: Any) -> Any:
        with reparametrized(module, state):
            return forward(*a, **kw)
    return run


def module_types(model: Any) -> list[str]:
    return sorted({type(m).__name__ for m in model.modules()})
