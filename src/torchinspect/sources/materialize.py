"""Real or meta copies of a model the caller passed in; the caller's module is never touched.

* :func:`real_copy` — a module given on meta whose forward needs real values (``.item()``,
  data-dependent checks): a copy with its meta tensors allocated on a real device and
  initialized (each module's ``reset_parameters`` where it has one; other parameters
  from N(0, 0.02) with a fixed seed, buffers zero). Tensors that were already real are
  copied with their values. Refused up front when the weights would not fit.
* :func:`lazy_copy` — a model with lazy modules (``nn.LazyLinear``...): a copy on meta
  whose lazy parameters are materialized by a forward on the example input, as the first
  real forward would do.
"""

from __future__ import annotations

import copy
from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line
from torchinspect.guard import training_mode

INIT_STD = 0.02  # the usual transformer init; only values feeding data-dependent checks matter


def _deepcopy(model: Any, memo: dict[int, Any], what: str) -> Any:
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:
        raise InspectError(f"{type(model).__name__} cannot be copied to {what} "
                           f"({type(exc).__name__}: {str(exc)[:120]})",
                           hint="pass the model with real weights (e.g. built on CPU), or "
                           "load it by name/spec so torchinspect can rebuild it") from None


def real_copy(model: Any, device: str = "cpu", *, name: str | None = None) -> Any:
    """A copy of ``model`` with every meta tensor allocated on ``device`` and initialized."""
    import torch
    from torch import nn

    name = name or type(model).__name__
    devices.ensure_fits(name, devices.weight_bytes(model), device,
                        hint="use --device meta (static counts only), or a smaller config")
    clone = _deepcopy(model, {}, device)
    gen = torch.Generator().manual_seed(0)
    made: dict[int, torch.Tensor] = {}  # id(meta tensor) -> its real replacement (ties kept)
    fresh_modules = []
    for module in clone.modules():
        direct = [*module._parameters.items(), *module._buffers.items()]
        metas = [(k, t) for k, t in direct if t is not None and t.is_meta]
        if not metas:
            continue
        if len(metas) == len([t for _, t in direct if t is not None]):
            fresh_modules.append(module)
        for key, t in metas:
            real = made.get(id(t))
            if real is None:
                if key in module._parameters:
                    data = torch.empty(t.shape, dtype=t.dtype, device="cpu")
                    if data.is_floating_point():
                        data.normal_(0.0, INIT_STD, generator=gen)
                    else:
                        data.zero_()
                    real = nn.Parameter(data.to(device), requires_grad=t.requires_grad)
                else:
                    real = torch.zeros(t.shape, dtype=t.dtype, device=device)
                made[id(t)] = real
            if key in module._parameters:
                module._parameters[key] = real
            else:
                module._buffers[key] = real
    with torch.no_grad():
        for module in fresh_modules:
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                try:
                    reset()
                except Exception:  # noqa: S110 - a custom reset that needs more: keep N(0, 0.02)
                    pass
    return clone


def has_lazy(model: Any) -> bool:
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in (*model.parameters(), *model.buffers()))


def lazy_names(model: Any) -> list[str]:
    from torch.nn.parameter import is_lazy

    return [n for n, t in (*model.named_parameters(), *model.named_buffers()) if is_lazy(t)]


def lazy_copy(model: Any) -> Any:
    """A copy of ``model`` on meta whose lazy parameters and buffers are still lazy (on meta).

    Real tensors are replaced by meta stand-ins in the copy (nothing is copied); run a
    forward on meta inputs to materialize the lazy ones, as the first real forward would.
    """
    import torch
    from torch import nn
    from torch.nn.parameter import is_lazy

    memo: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        if id(t) in memo:
            continue
        if is_lazy(t):
            memo[id(t)] = _fresh_lazy(t, "meta")
        elif isinstance(t, nn.Parameter):
            memo[id(t)] = nn.Parameter(t.detach().to("meta"), requires_grad=t.requires_grad)
        else:
            memo[id(t)] = t.detach().to("meta")
    with torch.device("meta"):
        return _deepcopy(model, memo, "meta")


def lazy_real_copy(model: Any) -> Any:
    """A copy of a model with lazy modules on its own device, still lazy: the caller's stays
    lazy when the copy is sized. (A plain deepcopy fails on ``UninitializedBuffer``: each
    lazy tensor gets a fresh uninitialized one instead.)"""
    from torch.nn.parameter import is_lazy

    memo: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        if id(t) in memo or not is_lazy(t):
            continue
        memo[id(t)] = _fresh_lazy(t, t.device)
    return _deepcopy(model, memo, "a lazy copy")


def _fresh_lazy(t: Any, device: Any) -> Any:
    """A new uninitialized parameter/buffer standing for the lazy tensor ``t`` on ``device``."""
    from torch import nn
    from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

    # typed Any: torch's stubs leave out the device/dtype keywords these classes take
    kind: Any = UninitializedParameter if isinstance(t, nn.Parameter) else UninitializedBuffer
    grad = t.requires_grad if isinstance(t, nn.Parameter) else False
    return kind(requires_grad=grad, device=device, dtype=t.dtype)


def size_lazy(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, name: str | None,
              inputs: str, train: bool = False) -> Any:
    """``model`` (a copy or a rebuild, never the caller's) with its lazy modules sized by one
    forward (eval mode unless ``train``), as its first real forward would; ``inputs``
    describes them for errors."""
    import torch

    names = lazy_names(model)
    if not names:
        return model
    try:
        with training_mode(model, train), torch.no_grad():
            model(*args, **kwargs)
    except Exception as exc:
        raise InspectError(
            f"{name + ': ' if name else ''}the lazy modules ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}) could not be materialized with input "
            f"{inputs}: {first_line(exc)}",
            hint="pass the input the model expects, or run one forward before inspecting it") from None
    return model
