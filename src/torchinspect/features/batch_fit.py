"""How many rows one forward of ``inspect features`` can take in the memory there is.

A forward's peak is roughly the batch times what one row needs: the largest module's input
and output together (the activations alive at once in an inference forward) plus the
outputs kept for saving. One row of the first batch is sent through the model with hooks
on every leaf module to measure it; when ``batch x per-row bytes`` exceeds a share of the
available memory (host MemAvailable, or free CUDA memory), a batch chosen by default is
run in smaller forwards (the same rows, the same results), and one given with ``--batch``
is kept with a warning. Both are said in the run's notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from torchinspect import device as devices
from torchinspect.features.layers import LayerCapture
from torchinspect.privtorch import tree_leaves

MEMORY_SHARE = 0.5  # of the available memory, for one forward


@dataclass
class BatchFit:
    per_row: int  # estimated bytes of one row's forward
    batch: int  # rows per batch (--batch)
    forward_rows: int  # rows per forward actually run
    available: int | None  # bytes free on the device when measured
    note: str | None = None


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


def per_row_bytes(cap: LayerCapture, x1: torch.Tensor) -> int:
    """Bytes one row needs in a forward: the largest leaf module's input + output, plus the
    captured outputs and the input row (measured with hooks on a forward of ``x1``)."""
    sizes: list[int] = [0]

    def hook(_m: Any, args: Any, out: Any) -> None:
        sizes.append(_nbytes(args) + _nbytes(out))

    leaves = [m for m in cap.model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        outs = cap(x1)
    finally:
        for h in handles:
            h.remove()
    return max(sizes) + _nbytes(outs) + _nbytes(x1)


def fit_batch(per_row: int, batch: int, device: str, *, explicit: bool) -> BatchFit:
    """Rows per forward for ``batch`` rows of ``per_row`` bytes on ``device``."""
    available = devices.available_bytes(device)
    need = per_row * batch
    if available is None or need <= MEMORY_SHARE * available:
        return BatchFit(per_row, batch, batch, available)
    fits = max(1, int(MEMORY_SHARE * available // max(per_row, 1)))
    said = (f"a forward of --batch {batch} needs about {devices.fmt_size(need)} "
            f"({devices.fmt_size(per_row)} per row), more than {MEMORY_SHARE:.0%} of the "
            f"{devices.fmt_size(available)} available on {device}")
    if explicit:
        return BatchFit(per_row, batch, batch, available,
                        f"{said}: kept as given (--batch {fits} would fit)")
    return BatchFit(per_row, batch, fits, available,
                    f"{said}: forwards of {fits} rows were run instead (pass --batch to choose)")
