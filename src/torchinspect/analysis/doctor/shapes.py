"""Checks that read the meta trace (shapes seen by each layer): TI008 (BatchNorm), TI009.

No real numbers are needed: the meta forward records every layer's input shape.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torchinspect.analysis.doctor.context import Context
from torchinspect.analysis.doctor.rules import Finding, Severity, doctor_check
from torchinspect.shapes import first_tensor

# TI009 is a warning when the dropped rows are at least this share of the input extent,
# info below it (e.g. one column of 224 in SqueezeNet's stem).
DROPPED_WARN_SHARE = 0.02


def batchnorm_single_value(model: nn.Module, trace: Any) -> list[Finding]:
    """TI008 (b): BatchNorm layers that see one value per channel at the traced input.

    One value per channel means the BatchNorm's batch dimension is 1 with no spatial extent
    (a head's BatchNorm1d on pooled features). At an example of batch 1 that is the
    example's doing: training at batch 1 would raise, any real batch works (info). At a
    larger batch the model itself folds the batch away before the BatchNorm (warning)."""
    modules = dict(model.named_modules())
    out: list[Finding] = []
    done: set[str] = set()
    given = first_tensor(trace.inputs)
    batch_of_one = given is None or not given.shape or given.shape[0] == 1
    for call in trace.calls:
        module = modules.get(call.name)
        if call.name in done or not isinstance(module, nn.modules.batchnorm._BatchNorm):
            continue
        x = first_tensor(call.inputs)
        if x is None or len(x.shape) < 2 or x.shape[1] == 0:
            continue
        per_channel = x.numel // x.shape[1]
        if per_channel != 1:
            continue
        done.add(call.name)
        out.append(Finding(
            "TI008", Severity.info if batch_of_one else Severity.warning, call.name,
            f"{type(module).__name__} sees 1 value per channel (input {x})"
            + (" at this batch of 1: training at batch 1 raises 'Expected more than 1 value "
               "per channel'" if batch_of_one else ": in training mode it raises 'Expected "
               "more than 1 value per channel' whatever the batch"),
            why="batch statistics over one value are undefined; with no spatial extent they "
            "come from the batch alone, so they are noisy at small batches",
            fix="train with batch size > 1 (drop_last=True in the DataLoader), or use "
            "LayerNorm/GroupNorm here" if batch_of_one else "normalize before the batch is "
            "folded away, or use LayerNorm/GroupNorm here",
            data={"type": type(module).__name__, "input_shape": list(x.shape),
                  "batch_of_one": batch_of_one}))
    return out


def _tuple(v: Any, n: int) -> tuple[Any, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _spatial_dims(module: nn.Module) -> int | None:
    for cls, n in ((nn.Conv1d, 1), (nn.Conv2d, 2), (nn.Conv3d, 3), (nn.MaxPool1d, 1),
                   (nn.MaxPool2d, 2), (nn.MaxPool3d, 3), (nn.AvgPool1d, 1), (nn.AvgPool2d, 2),
                   (nn.AvgPool3d, 3)):
        if isinstance(module, cls):
            return n
    return None


def dropped_edges(module: nn.Module, shape: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(axis, size, dropped)`` for each spatial axis where the last input rows are unused.

    A window covers padded indices ``s*i .. s*i + d*(k-1)``; with ``out = floor((H + 2p -
    d*(k-1) - 1)/s) + 1`` windows the last covered index is ``s*(out-1) + d*(k-1)`` and the
    last input row is ``p + H - 1``. Layers whose window is smaller than the stride skip
    rows everywhere by design (a strided 1x1 conv) and are left out, as are ceil_mode pools
    and padding="same".
    """
    n = _spatial_dims(module)
    if n is None or len(shape) < n + 1 or getattr(module, "ceil_mode", False):
        return []
    padding = getattr(module, "padding", 0)
    if isinstance(padding, str):
        if padding == "same":
            return []
        padding = 0
    k = _tuple(module.kernel_size, n)
    s = _tuple(module.stride if module.stride is not None else module.kernel_size, n)
    p = _tuple(padding, n)
    d = _tuple(getattr(module, "dilation", 1), n)
    out = []
    for axis in range(n):
        size = shape[len(shape) - n + axis]
        span = d[axis] * (k[axis] - 1)  # window extent - 1
        if span + 1 < s[axis] or size + 2 * p[axis] < span + 1:
            continue
        windows = (size + 2 * p[axis] - span - 1) // s[axis] + 1
        dropped = (p[axis] + size - 1) - (s[axis] * (windows - 1) + span)
        if dropped > 0:
            out.append((axis, size, dropped))
    return out


def _settings_explain(module: nn.Module, shape: tuple[int, ...], out: Any) -> bool:
    """The layer's own settings give the output size the trace saw: a layer that pads its
    input itself in forward (timm's Conv2dSame, MaxPool2dSame: "same" padding computed per
    input) reads every row although its ``padding`` attribute says 0."""
    n = _spatial_dims(module)
    if n is None or out is None or len(out.shape) < n or len(shape) < n:
        return False
    padding = getattr(module, "padding", 0)
    if isinstance(padding, str):
        return False
    k = _tuple(module.kernel_size, n)
    s = _tuple(module.stride if module.stride is not None else module.kernel_size, n)
    p = _tuple(padding, n)
    d = _tuple(getattr(module, "dilation", 1), n)
    for axis in range(n):
        size = shape[len(shape) - n + axis]
        windows = (size + 2 * p[axis] - d[axis] * (k[axis] - 1) - 1) // s[axis] + 1
        if out.shape[len(out.shape) - n + axis] != windows:
            return False
    return True


@doctor_check(
    "TI009", "rounded-down-output", "warning", "trace",
    title="a conv/pool layer whose output size was rounded down",
    trigger="at the example's shape, floor((H + 2p - d(k-1) - 1)/s) + 1 windows leave the "
    "last input rows/columns unread (info below 2% of the extent)",
    why="the last input rows/columns never reach any window: information silently dropped",
    fix="pad the input or the layer so (H + 2p - d(k-1) - 1) is a multiple of the stride, "
    "or use ceil_mode=True for pooling")
def rounded_down(ctx: Context) -> list[Finding]:
    return rounded_down_outputs(ctx.model, ctx.trace())


def rounded_down_outputs(model: nn.Module, trace: Any) -> list[Finding]:
    """TI009: conv/pool calls whose floor in the output size drops input rows/columns."""
    modules = dict(model.named_modules())
    out: list[Finding] = []
    done: set[str] = set()
    for call in trace.calls:
        module = modules.get(call.name)
        if module is None or call.name in done:
            continue
        x = first_tensor(call.inputs)
        if x is None:
            continue
        drops = dropped_edges(module, x.shape)
        if not drops or not _settings_explain(module, x.shape, first_tensor(call.outputs)):
            continue
        done.add(call.name)
        n = _spatial_dims(module) or 1
        axes = ["W"] if n == 1 else (["H", "W"] if n == 2 else ["D", "H", "W"])
        text = ", ".join(f"{dropped} of {size} along {axes[axis]}" for axis, size, dropped in drops)
        share = max(dropped / size for _, size, dropped in drops)
        settings = (f"kernel {module.kernel_size}, stride {module.stride}, "
                    f"padding {getattr(module, 'padding', 0)}")
        out.append(Finding(
            "TI009", Severity.warning if share >= DROPPED_WARN_SHARE else Severity.info, call.name,
            f"{type(module).__name__} ({settings}) on input {x} never reads its last input "
            f"rows/columns ({text})",
            data={"type": type(module).__name__, "input_shape": list(x.shape),
                  "dropped": [{"axis": axes[a], "size": sz, "dropped": dr} for a, sz, dr in drops]}))
    return out
