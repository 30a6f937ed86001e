"""What a GPU's memory leaves for tensors: the target of ``--fit`` and of check's memory
budgets, given as a GPU of the catalogue (``h100``), a size (``24GB``) or the GPU that is here
(``cuda``), less what a PyTorch process can't give its tensors.

* **A GPU by name.** ``--fit h100`` (any name or alias of the catalogue, gpus.py) starts from
  the card's memory as the driver reports it: the total CUDA reports where the catalogue has
  it measured (the H100: 85,017,493,504 bytes on this project's), else nvidia-smi's total from
  a public record, else the size as sold (`Gpu.total_bytes`, `Gpu.total_basis`); the card is
  also the GPU the prediction is for (its cuBLAS workspace), unless ``--gpu`` names the same.
* **A size.** A card sold as "24 GB" holds 24 GiB (a 24 GB RTX 4090 reports 24,564 MiB), so a
  size for a GPU reads GB, MB, KB, TB as GiB, MiB, KiB, TiB; ``24GiB`` says the same outright,
  and a plain number is bytes. The output says how the size was read.
* **What a peak may use of it** (`gpus.usable_bytes`, the one rule): less the CUDA context
  (`gpus.CUDA_CONTEXT_BYTES`, one cited figure) and 1% for the caching allocator's reserve
  (`gpus.ALLOCATOR_RESERVE`, from the committed H100 fit data). ``--fit cuda`` measures the
  free memory of the GPU that is here, after this process's context: only the reserve is kept.

:func:`memory_budget` is the one parser (``--fit``, ``--max-infer-mb``, ``max-train-mb = ...``);
a :class:`MemoryBudget` holds the memory, how it was read and what is usable (``.usable``): the
fit search and the verdicts compare peaks with it. :func:`prediction_gpu` reconciles the cards
budgets name with ``--gpu``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.gpus import (
    ALLOCATOR_RESERVE,
    CATALOGUE,
    CUDA_CONTEXT_BYTES,
    Gpu,
    did_you_mean,
    find_gpu,
    lookup_gpu,
    usable_bytes,
)

# a memory no GPU has (a pebibyte): a larger size, or an infinite one, is an input error
MOST = 2.0**50

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([KMGT]?)(i?)(B?)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryBudget:
    """A GPU's memory (``total`` bytes, as given) and what of it tensors may use."""

    text: str  # as written: "24GB", "h100", "cuda"
    total: int  # the memory, in bytes
    size: str  # the memory as read: "24 GiB"; a card's as sold: "80 GiB"; "" when measured
    read_as: str  # why it was read so: "GB on a GPU are GiB, ..."; a card's: "as CUDA reports it"
    context: int  # taken by the CUDA context (0: already out of a measured free memory)
    reserve: float = ALLOCATOR_RESERVE  # kept for the caching allocator, fraction of total
    gpu: Gpu | None = None  # the catalogue's card, when one was named
    option: str = "--fit"  # where it was given, for messages: --fit, --max-train-mb, a config key

    @property
    def usable(self) -> int:
        """The bytes the predicted (allocated) peak may reach."""
        return usable_bytes(self.total, context=self.context, reserve=self.reserve)

    @property
    def reserve_bytes(self) -> int:
        """The caching allocator's reserve, in bytes."""
        return self.total - int(self.total * (1 - self.reserve))

    def to_dict(self) -> dict[str, Any]:
        return {"given": self.text, "gpu": self.gpu.name if self.gpu else None,
                "total": self.total, "read_as": self.size, "basis": self.read_as,
                "cuda_context": self.context, "allocator_reserve": self.reserve,
                "usable": self.usable}


def memory_budget(target: str | Gpu, *, option: str = "--fit", number: str = "bytes",
                  here: bool = True) -> MemoryBudget:
    """The usable memory of a target: a GPU of the catalogue (``"h100"``, ``"4090"``,
    ``"NVIDIA H100 80GB HBM3"`` or a `Gpu`), a GPU's size (``"24GB"``, ``"80GiB"``, bytes) or,
    with ``here``, ``"cuda"``/``"cuda:1"`` (the free memory of that GPU, measured). The one
    parser of ``--fit`` and of check's memory budgets; ``.usable`` is what a peak may reach.
    An unknown name: the catalogue's did-you-mean, exit 2 (``option`` names the argument;
    ``number`` says what a plain number is, for the hint)."""
    if isinstance(target, Gpu):
        return card_memory(target, target.name, option)
    text = str(target).strip()
    if here and text.lower().split(":")[0] == "cuda":
        return free_here(text, option)
    gpu = lookup_gpu(text)
    if gpu is not None:
        return card_memory(gpu, text, option)
    if text[:1].isdigit() or text[:1] == ".":
        return gpu_memory(text, option, number)
    raise InspectError(f"{option} {text!r}: not a GPU this tool knows, nor a memory size",
                       hint=f"{did_you_mean(text)}known GPUs: {', '.join(CATALOGUE)}; or a "
                       "GPU's memory, like 24GB or 80GiB", status=ExitStatus.USAGE)


def card_memory(gpu: Gpu, text: str, option: str = "--fit") -> MemoryBudget:
    """A catalogue card's memory as the driver reports it (`Gpu.total_bytes`)."""
    return MemoryBudget(text, gpu.total_bytes, f"{gpu.memory_gib} GiB", gpu.total_basis,
                        CUDA_CONTEXT_BYTES, gpu=gpu, option=option)


def gpu_memory(text: str, option: str = "--fit", number: str = "bytes") -> MemoryBudget:
    """``24GB`` / ``24GiB`` / ``25769803776`` -> the budget of a card of that size (GB read
    as GiB, as GPU memory is sold; the output says so); ``number``: what a plain number is,
    for the hint."""
    m = _SIZE.fullmatch(str(text))
    if not m or (m[3] and not m[2]) or (m[2] and not m[4] and not m[3]):
        raise InspectError(f"{option} {text!r}: expected a GPU's memory, like 24GB or 80GiB",
                           hint="GB on a GPU are GiB (a 24 GB card holds 24 GiB); a number "
                           f"without a unit is {number}; or a GPU's name, like h100")
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
    return MemoryBudget(str(text).strip(), total, size, why, CUDA_CONTEXT_BYTES, option=option)


def measured_free(text: str, free: int, option: str = "--fit") -> MemoryBudget:
    """``--fit cuda``: the free memory of the GPU that is here (its context already out)."""
    return MemoryBudget(text.strip(), free, "", "the free memory of the GPU here, measured", 0,
                        option=option)


def free_here(text: str, option: str = "--fit") -> MemoryBudget:
    """``cuda`` / ``cuda:N``: the free memory of that GPU now, measured (needs CUDA)."""
    import torch

    from torchinspect.device import available_bytes

    if not torch.cuda.is_available():
        raise InspectError(f"{option} {text}: no CUDA device is available to measure",
                           hint=f"name the GPU or its memory, e.g. {option} h100 or {option} 80GB")
    free = available_bytes(text.strip().lower() if ":" in text else "cuda")
    return measured_free(text, int(free or 0), option)


def prediction_gpu(budgets: Iterable[MemoryBudget], gpu: str | None, *,
                   option: str = "--gpu") -> str | None:
    """The GPU a prediction is for: ``gpu`` (``--gpu``), else the card the budgets name (None:
    neither, the default applies). Two different cards (``--fit h100 --gpu a10``) are a usage
    error: one prediction has one cuBLAS workspace."""
    named = [(f"{b.option} {b.text}", b.gpu) for b in budgets if b.gpu is not None]
    if gpu is not None:
        named.insert(0, (f"{option} {gpu}", find_gpu(gpu, option=option)))
    for where, card in named[1:]:
        first, other = named[0]
        if card is not other:
            given = where.rsplit(" ", 1)[0]
            raise InspectError(f"{first} and {where} name different GPUs ({other.name}, "
                               f"{card.name})", hint=f"predict for one: {where} alone predicts "
                               f"for the {card.name}; a size ({given} 24GB) names no GPU",
                               status=ExitStatus.USAGE)
    return gpu if gpu is not None else named[0][1].name if named else None
