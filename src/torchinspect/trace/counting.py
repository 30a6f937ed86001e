"""MAC counting at the dispatcher: every aten op that reaches the backend passes through.

The formulas are the registry of ``trace/formulas.py`` (ours, users', then
``torch.utils.flop_counter``'s, whose FLOPs are exact doubles of MACs).
``F.scaled_dot_product_attention`` is counted once at the function level, whatever
backend runs it (math decomposition on meta, flash on CPU, flash/efficient/cuDNN on
CUDA), so the count never depends on the device and causal calls can be stated.

Convention (torchvision's "GFLOPS"): one multiply-add = 1 MAC; only matrix products
and convolutions are counted (bias additions, elementwise ops, normalization, pooling
and softmax are not). Ops that do such work are listed in ``uncounted`` with their
call counts; ops that only move, view, create, select or test data (their kind in the op
table, ``trace/ops.py``) are not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchinspect.privtorch import OpOverload, QuietDispatchMode
from torchinspect.trace.formulas import SDPA_OP, MacTable
from torchinspect.trace.ops import op_info, op_name


def grouped_mm_meta(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of ``_grouped_mm`` on meta without the CUDA-only dtype checks (shape only)."""
    a, b = args[0], args[1]
    offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
    out_dtype = kwargs.get("out_dtype", args[4] if len(args) > 4 else None) or a.dtype
    groups = int(offs.shape[0]) if offs is not None else int(b.shape[0])
    shape: tuple[int, ...]
    if a.dim() == 2 and b.dim() == 3:
        shape = (a.shape[0], b.shape[-1])
    elif a.dim() == 3 and b.dim() == 3:
        shape = (a.shape[0], a.shape[1], b.shape[-1])
    elif a.dim() == 3 and b.dim() == 2:
        shape = (a.shape[1], b.shape[-1])
    else:
        shape = (groups, a.shape[0], b.shape[-1])
    return torch.empty(shape, dtype=out_dtype, device="meta")


# Ops whose output size depends on tensor values: work after them depends on the input data.
DATA_DEPENDENT_OPS: frozenset[str] = frozenset(
    "nonzero nonzero_static masked_select _unique _unique2 unique_dim unique_consecutive "
    "torchvision.nms torchvision.batched_nms".split())


def _bool_index(args: tuple[Any, ...]) -> bool:
    """``x[mask]``: boolean indexing keeps as many rows as the mask has True values."""
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


class MacCounter:
    """Counts MACs per op into ``sink()`` (the innermost running module's dict)."""

    def __init__(self, sink: Callable[[], dict[str, int]]) -> None:
        self.sink = sink
        self.op_calls: dict[str, int] = {}  # calls of each counted op
        self.uncounted: dict[str, int] = {}
        self.notes: dict[str, int] = {}  # note text -> occurrences
        self.data_dependent: dict[str, int] = {}  # value-dependent ops seen -> calls
        self.suppress = 0
        self.table = MacTable()  # one snapshot per trace: registry, then torch's
        self.formulas = self.table.entries
        self.observe: Callable[[tuple[Any, ...]], None] | None = None  # every op's args

    def add(self, op: str, macs: int) -> None:
        bucket = self.sink()
        bucket[op] = bucket.get(op, 0) + int(macs)
        self.op_calls[op] = self.op_calls.get(op, 0) + 1

    def count(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self.suppress:
            return
        entry = self.table.entry(func)
        if entry is not None:
            self.add(entry.op, entry.formula(args, kwargs, out))
            return
        name = op_name(func)
        if name in DATA_DEPENDENT_OPS or (name == "index" and _bool_index(args)):
            self.data_dependent[name] = self.data_dependent.get(name, 0) + 1
        if not op_info(name).arithmetic:  # moves, views, creates, selects or tests data
            return
        self.uncounted[name] = self.uncounted.get(name, 0) + 1


_GROUPED = (torch.ops.aten._grouped_mm,) if hasattr(torch.ops.aten, "_grouped_mm") else ()


class _DispatchCounter(QuietDispatchMode):
    def __init__(self, counter: MacCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except RuntimeError:
            # _grouped_mm's meta kernel insists on CUDA dtypes (bf16): its shape is still known
            if func._overloadpacket not in _GROUPED or not args[0].is_meta:
                raise
            out = grouped_mm_meta(args, kwargs)
        if isinstance(func, OpOverload):
            self.counter.count(func, args, kwargs, out)
        if self.counter.observe is not None:
            self.counter.observe(args)
        return out


class _FunctionCounter(TorchFunctionMode):
    """Counts F.scaled_dot_product_attention once, before any backend decomposes it."""

    def __init__(self, counter: MacCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention and not self.counter.suppress:
            entry = self.counter.formulas[SDPA_OP]
            self.counter.add(SDPA_OP, entry.formula(args, kwargs, None))
            causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            if causal:
                self.counter.notes["causal"] = self.counter.notes.get("causal", 0) + 1
            elif mask is not None:
                self.counter.notes["masked"] = self.counter.notes.get("masked", 0) + 1
            self.counter.suppress += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.counter.suppress -= 1
        return func(*args, **kwargs)


class counting:
    """Context manager: both modes active, innermost last (dispatch sees what functions leave)."""

    def __init__(self, counter: MacCounter) -> None:
        self.counter = counter
        self._modes: list[Any] = [_FunctionCounter(counter), _DispatchCounter(counter)]

    def __enter__(self) -> MacCounter:
        for m in self._modes:
            m.__enter__()
        return self.counter

    def __exit__(self, *exc: Any) -> None:
        for m in reversed(self._modes):
            m.__exit__(*exc)


def sdpa_notes(notes: dict[str, int]) -> list[str]:
    out = []
    if notes.get("causal"):
        out.append(f"{notes['causal']} scaled_dot_product_attention call(s) with is_causal=True "
                   "counted dense (an upper bound: causal kernels skip about half of QKᵀ and AV)")
    if notes.get("masked"):
        out.append(f"{notes['masked']} scaled_dot_product_attention call(s) with attn_mask "
                   "counted dense (masked positions are not skipped)")
    return out
