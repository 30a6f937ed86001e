"""What a GPU's memory leaves for tensors: ``--fit 24GB`` (and ``check``'s memory budgets
given as a size) read as a card is sold, less what a PyTorch process can't give its tensors.

* **The unit.** A card sold as "24 GB" holds 24 GiB (a 24 GB RTX 4090 reports 24,564 MiB), so
  a size for a GPU reads GB, MB, KB, TB as GiB, MiB, KiB, TiB; ``24GiB`` says the same
  outright, and a plain number is bytes. The output says how the size was read.
* **The CUDA context.** The driver's context, PyTorch's kernels and the cuBLAS/cuDNN handles
  take memory before the first tensor: 287,047,680 bytes for a PyTorch process with lazy
  module loading, PyTorch's default since 1.13 (666,632,192 loaded eagerly; measured in
  pytorch/pytorch#86509; it varies by GPU and driver). ``--fit cuda`` measures the free
  memory of the GPU that is here, after this process's context: nothing more is taken.
* **The caching allocator's reserve.** The limit a real run hits is the memory the allocator
  has reserved (allocated plus the cached, partly free blocks), above the allocated peak
  the prediction gives: resnet50 training on an H100 with an 80 GB budget fit at an
  allocated peak of 79.29 GB and ran out at 79.38 GB (the committed
  ``benchmarks/results/fit-resnet50-h100.json`` and ``fit-resnet50-predicted.json``), so
  the reserve was 0.78-0.89% there: 1% of the memory is kept for it.

A :class:`MemoryBudget` holds the memory given, how it was read, and what is usable; the fit
search and the verdicts compare peaks with ``usable``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torchinspect.errors import InspectError

# a PyTorch process's CUDA context with lazy module loading (see the module docstring)
CUDA_CONTEXT = 287_047_680
# the caching allocator's reserve above the allocated peak, as a fraction of the memory
ALLOCATOR_RESERVE = 0.01
# a memory no GPU has (a pebibyte): a larger size, or an infinite one, is an input error
MOST = 2.0**50

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([KMGT]?)(i?)(B?)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryBudget:
    """A GPU's memory (``total`` bytes, as given) and what of it tensors may use."""

    text: str  # as written: "24GB", "cuda"
    total: int  # the memory, in bytes
    size: str  # the memory as read: "24 GiB" ("" for a measured free memory)
    read_as: str  # why it was read so: "GB on a GPU are GiB" ("" when written outright)
    context: int  # taken by the CUDA context (0: already out of a measured free memory)
    reserve: float = ALLOCATOR_RESERVE  # kept for the caching allocator, fraction of total

    @property
    def usable(self) -> int:
        """The bytes the predicted (allocated) peak may reach."""
        return max(0, int(self.total * (1 - self.reserve)) - self.context)

    def to_dict(self) -> dict[str, Any]:
        return {"given": self.text, "total": self.total, "read_as": self.size,
                "cuda_context": self.context, "allocator_reserve": self.reserve,
                "usable": self.usable}


def gpu_memory(text: str, option: str = "--fit", number: str = "bytes") -> MemoryBudget:
    """``24GB`` / ``24GiB`` / ``25769803776`` -> the budget of a card of that size (GB read
    as GiB, as GPU memory is sold; the output says so); ``number``: what a plain number is,
    for the hint."""
    m = _SIZE.fullmatch(str(text))
    if not m or (m[3] and not m[2]) or (m[2] and not m[4] and not m[3]):
        raise InspectError(f"{option} {text!r}: expected a GPU's memory, like 24GB or 80GiB",
                           hint="GB on a GPU are GiB (a 24 GB card holds 24 GiB); a number "
                           f"without a unit is {number}")
    amount, prefix = float(m[1]), m[2].upper()
    size = amount * 1024 ** " KMGT".index(prefix or " ")
    if not size < MOST:  # 1e400 is infinite; no GPU holds a pebibyte
        raise InspectError(f"{option} {text!r}: more memory than any GPU has",
                           hint="give the GPU's memory, e.g. 24GB or 80GiB")
    total = int(size)
    if total < 1:
        raise InspectError(f"{option} {text!r}: must be at least 1 byte", hint="e.g. 24GB")
    size = f"{amount:g} {prefix}iB" if prefix else f"{total:,} bytes"
    why = f"{prefix}B on a GPU are {prefix}iB, as its memory is sold" if prefix and not m[3] else ""
    return MemoryBudget(str(text).strip(), total, size, why, CUDA_CONTEXT)


def measured_free(text: str, free: int) -> MemoryBudget:
    """``--fit cuda``: the free memory of the GPU that is here (its context already out)."""
    return MemoryBudget(text.strip(), free, "", "the free memory of the GPU here, measured", 0)
