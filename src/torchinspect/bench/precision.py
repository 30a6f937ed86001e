"""TF32 math for fp32 on CUDA: read the current setting, and ``--tf32/--no-tf32`` for a run.

PyTorch's defaults differ per operator: cuDNN convolutions may use TF32 (tensor cores, a
10-bit mantissa), cuBLAS matmuls may not (``torch.set_float32_matmul_precision("highest")``).
So ``--dtype fp32`` is IEEE fp32 for a transformer's matmuls but TF32 for a CNN's
convolutions unless the user says otherwise; the benchmark records which math ran.

Two APIs set it: the legacy flags (``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``, ``torch.set_float32_matmul_precision``) and, since
PyTorch 2.9, ``fp32_precision`` ("ieee" / "tf32" / "none" = inherit) on
``torch.backends``, ``torch.backends.cuda.matmul``, ``torch.backends.cudnn(.conv)``. Once a
program has used the new API, *reading* a legacy flag raises ``RuntimeError`` ("mix of the
legacy and new APIs"). Here a legacy read is tried first and the new API read on that error;
a switch uses the API the process already uses, and restores what it changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any


def _resolve(*levels: Any) -> bool:
    """True if the first ``fp32_precision`` that is not "none" (operator, backend, global) is
    "tf32"; all "none" is PyTorch's IEEE default."""
    for obj in levels:
        value = getattr(obj, "fp32_precision", "none") if obj is not None else "none"
        if value != "none":
            return value == "tf32"
    return False


def _targets(torch: Any) -> dict[str, tuple[Any, str, tuple[Any, ...]]]:
    """name -> (legacy owner, legacy attribute, new-API levels from the operator upwards)."""
    b = torch.backends
    return {
        "matmul": (b.cuda.matmul, "allow_tf32", (b.cuda.matmul, b)),
        "cudnn": (b.cudnn, "allow_tf32", (getattr(b.cudnn, "conv", None), b.cudnn, b)),
    }


def _legacy(owner: Any, attr: str) -> bool | None:
    """The legacy flag, or None if the process has switched to the new API."""
    try:
        return bool(getattr(owner, attr))
    except RuntimeError:
        return None


def tf32_state() -> dict[str, bool]:
    """Whether fp32 matmuls (cuBLAS) and convolutions (cuDNN) may use TF32 right now."""
    import torch

    state = {}
    for name, (owner, attr, levels) in _targets(torch).items():
        legacy = _legacy(owner, attr)
        state[name] = legacy if legacy is not None else _resolve(*levels)
    return state


def matmul_precision() -> str:
    """``torch.get_float32_matmul_precision()``, derived from the TF32 state where reading it
    would raise (new-API programs)."""
    import torch

    try:
        return str(torch.get_float32_matmul_precision())
    except RuntimeError:
        return "high" if tf32_state()["matmul"] else "highest"


@contextlib.contextmanager
def tf32_switch(on: bool | None) -> Iterator[None]:
    """TF32 for both fp32 matmuls and convolutions on (True) or off (False) inside the block;
    None leaves PyTorch's settings alone. Restored afterwards."""
    if on is None:
        yield
        return
    import torch

    undo: list[Callable[[], None]] = []
    try:
        for name, (owner, attr, levels) in _targets(torch).items():
            if _legacy(owner, attr) is not None:
                if name == "matmul":  # "medium" (bf16 allowed) must come back as "medium"
                    undo.append(partial(torch.set_float32_matmul_precision,
                                        torch.get_float32_matmul_precision()))
                else:
                    undo.append(partial(setattr, owner, attr, getattr(owner, attr)))
                setattr(owner, attr, on)
            elif levels[0] is not None:
                op = levels[0]
                undo.append(partial(setattr, op, "fp32_precision", op.fp32_precision))
                op.fp32_precision = "tf32" if on else "ieee"
        yield
    finally:
        for restore in reversed(undo):
            restore()
