"""The one table of what each aten op is: its kind, whether it launches a GPU kernel, and
whether it runs on cuBLAS.

Torch says most of it itself, and is asked first for what the hand table does not name:

- an output that aliases an input without writing it (``op._schema.returns[i].alias_info``,
  ``Tensor(a)`` in native_functions.yaml) is a **view**; ``Tag.inplace_view`` (``t_``,
  ``squeeze_``) changes a tensor's metadata in place: a view too;
- ``Tag.view_copy`` (``permute_copy``, ``slice_copy``) is a **copy**;
- ``Tag.reduction`` (``sum``, ``amax``, ``var_mean``) is a **reduction**, ``Tag.pointwise``
  (``add``, ``relu``, ``clamp``) is **elementwise**;
- the ``prim`` namespace holds TorchScript's queries (``prim.device``): **metadata**;
  ``c10d``/``_c10d_functional`` ops are **collective**.

The hand table (`HAND_KINDS`) is for what the schema and the tags cannot say: which
kernels are matrix products, convolutions, fused attention or normalisation; which ops
create, move, select or test data rather than compute on it; and which matrix products go to
cuBLAS (`CUBLAS_OPS`). A name the hand table lists wins over torch's tags (``clone`` is
tagged pointwise, and is a copy). ``tests/test_op_table.py`` checks every name here against
the installed torch.

Who asks: the MAC counter (``trace/counting.py``: ops that do no arithmetic are not listed as
"not counted"), the latency predictor (``latency/ops.py``: which kernels an op launches and
which efficiency curve prices it) and the memory tracker (``memory/tracker.py``: which ops take
a cuBLAS handle and its workspace). Adding an op's kind touches this module and its test.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class OpKind(StrEnum):
    """What an op does, for the predictors and the counter."""

    view = "view"  # an output aliases an input: no kernel
    metadata = "metadata"  # sizes, strides, assertions, the scalar of a 0-d tensor: no kernel
    copy = "copy"  # moves data: clone, cat, pad, permute_copy, scatter, dtype casts
    creation = "creation"  # new tensors: zeros, arange, randn (empty: an allocation only)
    compare = "compare"  # boolean tests: eq, lt, isnan, logical_not, any, all
    select = "select"  # elements chosen by a mask or a position: where, masked_fill, tril
    gather = "gather"  # rows read by index: embedding, index_select, gather, index
    matmul = "matmul"
    conv = "conv"
    attention = "attention"  # fused attention kernels (flash, memory-efficient, cuDNN)
    norm = "norm"  # batch, layer, group and RMS normalisation kernels
    reduction = "reduction"  # sum, mean, softmax, cumsum, topk, sort
    pool = "pool"
    elementwise = "elementwise"  # add, relu, clamp, upsampling, dropout's mask
    rnn = "rnn"  # fused recurrent kernels (cuDNN, oneDNN, MPS) and cells
    quantize = "quantize"  # conversions to and from quantized tensors
    collective = "collective"  # c10d communication
    other = "other"  # nothing here or in torch's tags says


# Kinds that move, view, create, select or test data without arithmetic: the MAC counter does
# not list them among the ops it has no formula for.
NO_ARITHMETIC: frozenset[OpKind] = frozenset({
    OpKind.view, OpKind.metadata, OpKind.copy, OpKind.creation, OpKind.compare, OpKind.select,
    OpKind.gather, OpKind.quantize})

# What the schema and tags cannot say (names as `op_name` gives them; an in-place variant
# ``fill_`` is found under ``fill``).
HAND_KINDS: dict[OpKind, frozenset[str]] = {kind: frozenset(names.split()) for kind, names in {
    OpKind.view: "_unsafe_view meshgrid",  # views whose schemas declare no alias
    OpKind.metadata: """sym_size sym_stride sym_numel is_same_size _assert_async
        _assert_tensor_metadata _assert_scalar set_ resize_ detach_ _local_scalar_dense item
        _has_compatible_shallow_copy_type _nested_tensor_from_mask_left_aligned q_scale
        q_zero_point q_per_channel_scales q_per_channel_zero_points""",
    OpKind.matmul: """mm addmm bmm baddbmm addbmm addmv mv dot vdot matmul _addmm_activation
        _scaled_mm _int_mm _weight_int8pack_mm _grouped_mm _scaled_grouped_mm""",
    OpKind.conv: """convolution _convolution cudnn_convolution _conv_depthwise2d
        mkldnn_convolution convolution_overrideable _slow_conv2d_forward slow_conv3d_forward
        convolution_backward convolution_backward_overrideable""",
    OpKind.attention: """scaled_dot_product_attention _scaled_dot_product_flash_attention
        _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
        _scaled_dot_product_flash_attention_for_cpu _native_multi_head_attention
        _scaled_dot_product_flash_attention_backward
        _scaled_dot_product_efficient_attention_backward
        _scaled_dot_product_cudnn_attention_backward
        _scaled_dot_product_flash_attention_for_cpu_backward""",
    OpKind.norm: """native_batch_norm _native_batch_norm_legit_no_training
        _native_batch_norm_legit _batch_norm_with_update _batch_norm_no_update cudnn_batch_norm
        native_layer_norm native_group_norm _fused_rms_norm rms_norm native_batch_norm_backward
        cudnn_batch_norm_backward batch_norm_backward native_layer_norm_backward
        native_group_norm_backward _fused_rms_norm_backward""",
    OpKind.reduction: """_softmax _log_softmax softmax log_softmax _safe_softmax cumsum cumprod
        topk sort _softmax_backward_data _log_softmax_backward_data""",
    OpKind.pool: """max_pool1d max_pool2d max_pool2d_with_indices max_pool3d_with_indices
        avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool2d _adaptive_avg_pool2d
        _adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
        max_pool2d_with_indices_backward max_pool3d_with_indices_backward avg_pool2d_backward
        avg_pool3d_backward _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward
        adaptive_max_pool2d_backward""",
    OpKind.gather: """embedding embedding_bag _embedding_bag index_select gather index
        _unsafe_index embedding_dense_backward""",
    OpKind.copy: """clone _to_copy to copy contiguous _to_dense cat stack constant_pad_nd roll
        flip repeat pixel_shuffle pixel_unshuffle channel_shuffle native_channel_shuffle
        index_put _unsafe_index_put scatter scatter_add reflection_pad2d replication_pad2d
        col2im im2col""",
    OpKind.creation: """empty empty_like empty_strided new_empty new_empty_strided
        _empty_affine_quantized _empty_per_channel_affine_quantized zeros zeros_like ones
        ones_like full full_like new_zeros new_ones new_full fill zero scalar_tensor arange
        linspace eye rand rand_like randn randn_like randint randint_like randperm normal
        uniform bernoulli""",
    OpKind.compare: "eq ne lt le gt ge isnan isinf logical_not bitwise_not any all",
    OpKind.select: "where masked_fill tril triu",
    OpKind.elementwise: """dropout feature_dropout alpha_dropout native_dropout
        hardswish_backward hardsigmoid_backward upsample_nearest2d_backward
        upsample_bilinear2d_backward _foreach_add _foreach_mul _foreach_lerp _foreach_addcmul
        _foreach_addcdiv _foreach_sqrt _foreach_div _foreach_sub _foreach_neg _foreach_maximum
        _fused_adamw _fused_adam _fused_sgd
        upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d
        _upsample_nearest_exact2d _upsample_nearest_exact3d upsample_linear1d
        upsample_bilinear2d _upsample_bilinear2d_aa upsample_bicubic2d upsample_trilinear3d
        grid_sampler_2d grid_sampler_3d""",
    OpKind.rnn: """_cudnn_rnn _cudnn_rnn_backward miopen_rnn mkldnn_rnn_layer _lstm_mps lstm gru
        rnn_tanh rnn_relu
        lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _thnn_fused_lstm_cell
        _thnn_fused_gru_cell""",
    OpKind.quantize: """quantize_per_tensor quantize_per_channel dequantize int_repr
        _make_per_tensor_quantized_tensor""",
}.items()}

# Matrix products that run on cuBLAS/cuBLASLt (aten/src/ATen/native/cuda/Blas.cpp): each takes
# the thread's cuBLAS handle, whose workspace the caching allocator gives on first use.
# ``matmul`` is composite (its mm/bmm are the calls); ``_grouped_mm`` runs CUTLASS kernels.
CUBLAS_OPS: frozenset[str] = frozenset("""mm addmm bmm baddbmm addbmm _addmm_activation addmv mv
    dot vdot _scaled_mm _int_mm""".split())

# Creation ops that only allocate (no fill kernel)
ALLOCATE_ONLY: frozenset[str] = frozenset("""empty empty_like empty_strided new_empty
    new_empty_strided _empty_affine_quantized _empty_per_channel_affine_quantized""".split())

_COLLECTIVE_NAMESPACES = ("c10d.", "_c10d_functional.", "_c10d_functional_autograd.")
_BY_NAME: dict[str, OpKind] = {name: kind for kind, names in HAND_KINDS.items() for name in names}


@dataclass(frozen=True)
class OpInfo:
    """One op: its kind, and what the predictors ask of it."""

    name: str
    kind: OpKind
    free: bool  # launches no GPU kernel (views, metadata, an allocation without a fill)
    cublas: bool  # runs on cuBLAS (takes a handle and its workspace)
    source: str  # where the kind came from: "table", "schema", "tags", "namespace", "default"

    @property
    def arithmetic(self) -> bool:
        """Does it compute (rather than move, view, create, select or test data)?"""
        return self.kind not in NO_ARITHMETIC


def op_name(op: Any) -> str:
    """The name of an op as tables show it: ``aten.mm``/``aten::mm``/the packet/the overload
    -> ``mm``; other namespaces keep theirs (``quantized.conv2d``, ``prim.device``)."""
    if not isinstance(op, str):
        op = getattr(op, "_overloadpacket", op)  # an OpOverload (aten.mm.default) -> aten.mm
        op = getattr(op, "_qualified_op_name", None) or str(op)
    return op.replace("::", ".").removeprefix("aten.")


def packet(name: str) -> Any:
    """The installed ``OpOverloadPacket`` of a name as `op_name` gives it, or None."""
    import torch

    namespace, _, base = name.rpartition(".")
    try:
        return getattr(getattr(torch.ops, namespace or "aten"), base)
    except (AttributeError, RuntimeError):
        return None


def _base(name: str) -> str:
    """The functional name of an in-place variant (``fill_`` -> ``fill``; ``__and__`` kept)."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _from_torch(name: str) -> tuple[OpKind, str] | None:
    """The kind torch's own schema and tags give an op, if they say."""
    import torch

    found = packet(name)
    if found is None:
        return None
    overloads = [getattr(found, o) for o in found.overloads()]
    tags = {t for op in overloads for t in op.tags}
    if torch.Tag.inplace_view in tags or any(
            r.alias_info is not None and not r.alias_info.is_write
            for op in overloads for r in op._schema.returns):
        return OpKind.view, "schema"
    for tag, kind in ((torch.Tag.view_copy, OpKind.copy), (torch.Tag.reduction, OpKind.reduction),
                      (torch.Tag.pointwise, OpKind.elementwise)):
        if tag in tags:
            return kind, "tags"
    return None


def _classify(name: str) -> tuple[OpKind, str]:
    kind = _BY_NAME.get(name) or _BY_NAME.get(_base(name))
    if kind is not None:
        return kind, "table"
    if name.startswith("prim."):
        return OpKind.metadata, "namespace"
    if name.startswith(_COLLECTIVE_NAMESPACES):
        return OpKind.collective, "namespace"
    return _from_torch(name) or (OpKind.other, "default")


_INFO: dict[str, OpInfo] = {}


def op_info(op: Any) -> OpInfo:
    """What ``op`` is (an OpOverload, a packet, or a name as `op_name` gives it)."""
    name = op_name(op)
    info = _INFO.get(name)
    if info is None:
        kind, source = _classify(name)
        base = _base(name)
        free = kind in (OpKind.view, OpKind.metadata) or (
            kind is OpKind.creation and base in ALLOCATE_ONLY)
        info = _INFO[name] = OpInfo(name, kind, free, name in CUBLAS_OPS, source)
    return info


def op_kind(op: Any) -> OpKind:
    """The `OpKind` of ``op``."""
    return op_info(op).kind


def table_names() -> list[str]:
    """Every op name the hand tables list (for their test against the installed torch)."""
    return sorted({*_BY_NAME, *CUBLAS_OPS, *ALLOCATE_ONLY})
