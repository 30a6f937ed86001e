"""CUDA's autocast policy, for fake tensors that run on the CPU device.

PyTorch's autograd engine needs a live CUDA context to run a backward over CUDA tensors, so
on a machine without a GPU the fake run uses CPU fake tensors. CPU autocast casts the same
ops down (matmul, linear, conv, bmm, SDPA) but keeps many ops in low precision that CUDA
autocast runs in float32 (layer_norm, softmax, sum, exp, pow, upsampling, ...), and that
changes what is allocated and saved. `cuda_autocast_on_cpu` registers, for the time of
one run, AutocastCPU kernels that apply CUDA's lists (``aten/src/ATen/autocast_mode.cpp``:
lower precision, fp32, fp32-unless-a-dtype-is-given, promote; ops CUDA leaves alone run
unchanged) and removes them afterwards. A test checks every name here against the
AutocastCUDA registrations of the installed torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from torchinspect.memory.kernels import in_prediction
from torchinspect.privtorch import aten_overrides, autocast_cpu_excluded

LOWER = (
    "_convolution", "_convolution.deprecated", "convolution", "conv1d", "conv2d", "conv3d",
    "conv_tbc", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "prelu",
    "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "dot", "vdot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "group_norm", "rms_norm",
    "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa", "norm.Scalar",
    "norm.ScalarOpt_dim", "grid_sampler",
)
FP32_UNLESS_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList",
)
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "tensordot", "scatter_add",
           "index_put")
# CPU autocast casts these, CUDA autocast leaves them to the op itself
UNCHANGED = (
    "cat", "stack", "index_copy", "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d",
    "adaptive_max_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "_native_multi_head_attention", "max_unpool2d",
    "max_unpool3d", "fractional_max_pool2d", "fractional_max_pool3d", "_addmm_activation",
)

def _eligible(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64


def _cast(value: Any, dtype: torch.dtype, cache: dict[int, Any] | None = None) -> Any:
    if _eligible(value) and value.dtype != dtype:
        # autocast caches the low-precision copy of a weight (an fp32 leaf that requires grad)
        # for the whole autocast region: a module called 100 times casts its weight once
        if cache is not None and value.dtype == torch.float32 and value.requires_grad \
                and value.is_leaf and not value._is_view():
            hit = cache.get(id(value))
            if hit is None or hit[0] is not value:
                hit = cache[id(value)] = (value, value.to(dtype))
            return hit[1]
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, cache) for v in value)
    return value


def _widest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype | None:
    widest = None
    for v in (*args, *kwargs.values()):
        if _eligible(v):
            widest = v.dtype if widest is None else torch.promote_types(widest, v.dtype)
    return widest


def _kernel(op: Any, policy: str, cache: dict[int, Any]) -> Any:
    names = [a.name for a in op._schema.arguments]
    dtype_at = names.index("dtype") if "dtype" in names else None

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with autocast_cpu_excluded():
            if policy == "lower":
                low = torch.get_autocast_dtype("cpu")
                args = _cast(args, low, cache)
                kwargs = {k: _cast(v, low, cache) for k, v in kwargs.items()}
            elif policy == "fp32":
                args = _cast(args, torch.float32)
                kwargs = {k: _cast(v, torch.float32) for k, v in kwargs.items()}
            elif policy == "fp32_unless_dtype":
                given = kwargs.get("dtype") is not None or (
                    dtype_at is not None and len(args) > dtype_at and args[dtype_at] is not None)
                if not given and any(_eligible(a) for a in args) and dtype_at is not None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            elif policy == "promote":
                wide = _widest(args, kwargs)
                if wide is not None:
                    args, kwargs = _cast(args, wide), {k: _cast(v, wide) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _resolve(name: str) -> Any:
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def policies() -> dict[str, str]:
    """Every op name here and its CUDA policy."""
    table: dict[str, str] = {}
    for names, policy in ((LOWER, "lower"), (FP32, "fp32"), (FP32_UNLESS_DTYPE, "fp32_unless_dtype"),
                          (PROMOTE, "promote"), (UNCHANGED, "unchanged")):
        table.update(dict.fromkeys(names, policy))
    return table


@contextlib.contextmanager
def cuda_autocast_on_cpu(dtype: torch.dtype) -> Iterator[None]:
    """CPU autocast to ``dtype`` with CUDA's op lists, for the duration of the block."""
    cache: dict[int, Any] = {}
    try:
        with aten_overrides(carried=in_prediction) as overrides:
            for name, policy in policies().items():
                op = _resolve(name)
                if op is not None:
                    overrides.impl(op, _kernel(op, policy, cache), "AutocastCPU")
            with torch.autocast("cpu", dtype=dtype):
                yield
    finally:
        cache.clear()
