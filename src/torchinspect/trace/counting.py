"""MAC counting at the dispatcher: every aten op that reaches the backend passes through.

The formulas are the registry of ``trace/formulas.py`` (ours, users', then
``torch.utils.flop_counter``'s, whose FLOPs are exact doubles of MACs).
``F.scaled_dot_product_attention`` is counted once at the function level, whatever
backend runs it (math decomposition on meta, flash on CPU, flash/efficient/cuDNN on
CUDA), so the count never depends on the device and causal calls can be stated.

Convention (torchvision's "GFLOPS"): one multiply-add = 1 MAC; only matrix products
and convolutions are counted (bias additions, elementwise ops, normalization, pooling
and softmax are not). Ops that do such work are listed in ``uncounted`` with their
call counts; pure views, copies, creation and shape ops are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torchinspect.trace.formulas import SDPA_OP, MacFormulaEntry, mac_formulas, op_name

# Ops that move, view, create or query data: not "work without a formula".
IGNORED_OPS: frozenset[str] = frozenset(
    """
    view _unsafe_view reshape _reshape_alias expand expand_as permute transpose t
    squeeze unsqueeze slice select split split_with_sizes chunk unbind as_strided alias
    detach detach_ flatten unflatten narrow view_as movedim diagonal unfold lift_fresh
    lift_fresh_copy _to_copy to copy_ clone contiguous cat stack constant_pad_nd repeat
    index_select index gather embedding roll flip pixel_shuffle pixel_unshuffle
    channel_shuffle native_channel_shuffle _unsafe_index zeros zeros_like ones ones_like
    empty empty_like empty_strided full full_like fill_ zero_ arange scalar_tensor
    new_empty new_zeros new_ones new_full new_empty_strided randn rand randint randperm
    normal_ uniform_ _local_scalar_dense item sym_size sym_stride sym_numel is_same_size
    _assert_async _assert_tensor_metadata _assert_scalar set_ resize_ tril triu meshgrid
    split_copy unbind_copy slice_copy select_copy view_copy expand_copy permute_copy
    transpose_copy t_copy unsqueeze_copy squeeze_copy _unsafe_split masked_fill
    masked_fill_ where _to_dense dequantize quantize_per_tensor quantize_per_channel
    q_scale q_zero_point q_per_channel_scales q_per_channel_zero_points int_repr
    _make_per_tensor_quantized_tensor _empty_affine_quantized
    _empty_per_channel_affine_quantized linspace eye rsub_ bitwise_not logical_not
    eq ne lt le gt ge isnan isinf any all prim.device
    """.split()
)


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
        self.formulas = mac_formulas()  # one snapshot per trace: registry, then torch's
        self.observe: Callable[[tuple[Any, ...]], None] | None = None  # every op's args
        self._by_packet: dict[Any, MacFormulaEntry | None] = {}

    def add(self, op: str, macs: int) -> None:
        bucket = self.sink()
        bucket[op] = bucket.get(op, 0) + int(macs)
        self.op_calls[op] = self.op_calls.get(op, 0) + 1

    def count(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self.suppress:
            return
        packet = func._overloadpacket
        if packet not in self._by_packet:
            self._by_packet[packet] = self.formulas.get(op_name(packet))
        entry = self._by_packet[packet]
        if entry is not None:
            self.add(entry.op, entry.formula(args, kwargs, out))
            return
        name = op_name(packet)
        if name in DATA_DEPENDENT_OPS or (name == "index" and _bool_index(args)):
            self.data_dependent[name] = self.data_dependent.get(name, 0) + 1
        if name.rstrip("_") in IGNORED_OPS or name in IGNORED_OPS:
            return
        self.uncounted[name] = self.uncounted.get(name, 0) + 1


_GROUPED = (torch.ops.aten._grouped_mm,) if hasattr(torch.ops.aten, "_grouped_mm") else ()


class _DispatchCounter(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing is compiled inside this mode; keeping the default (True) would wrap
        # __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # torch._dynamo (about 1 s of start-up for every command).
        return False

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
        if isinstance(func, torch._ops.OpOverload):
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
