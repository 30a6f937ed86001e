"""CUDA's choice of kernels where it changes memory, for a prediction on fake CPU tensors.

Dropout: on CUDA ``F.dropout`` runs the fused ``native_dropout`` (a 1-byte mask saved for
backward); on CPU it multiplies by a float noise tensor (4 bytes an element). Routed to
``native_dropout`` as CUDA does.

Attention:
``F.scaled_dot_product_attention`` picks its kernel by device: on CPU fake tensors it takes
the math path (the full ``T x S`` score matrix, saved for backward), on a GPU flash attention
(fp16/bf16, no mask) or memory-efficient attention (fp32, masks), which keep only the output
and a log-sum-exp per row. :class:`CudaAttention` (a ``TorchFunctionMode``) calls the same
aten kernel CUDA would choose (``sdp_utils.cpp``: flash, then efficient, then math); their
fake-tensor implementations give the right shapes and their autograd formulas save what the
GPU saves. Anything the GPU kernels refuse goes to the explicit math path
(``_scaled_dot_product_attention_math``: the score matrix, as the GPU's math path keeps it).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
_DROPOUT = {F.dropout, torch.dropout, torch._C._VariableFunctions.dropout}


def _autocast_dtype(q: Any) -> Any:
    for kind in ("cpu", "cuda"):
        if q.device.type == kind and torch.is_autocast_enabled(kind):
            return torch.get_autocast_dtype(kind)
    return q.dtype


def _flat(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    out = dict(zip(names, args, strict=False))
    out.update(kwargs)
    return out


def choose(q: Any, k: Any, v: Any, mask: Any, gqa: bool, dtype: Any) -> str:
    """flash, efficient or math, as a GPU of compute capability 8.0+ chooses."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.size(-1) > 256:
        return "math"
    if q.size(-1) % 8 or v.size(-1) != q.size(-1):
        return "math"
    if dtype in (torch.float16, torch.bfloat16) and mask is None:
        return "flash"
    if gqa and k.size(-3) != q.size(-3):
        return "math"
    return "efficient" if dtype in (torch.float16, torch.bfloat16, torch.float32) else "math"


class CudaKernels(TorchFunctionMode):
    """Route dropout and ``scaled_dot_product_attention`` to the kernels CUDA would run."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _DROPOUT:
            return _dropout(func, args, kwargs)
        if func not in _SDPA:
            return func(*args, **kwargs)
        return _attention(func, args, kwargs)


def _dropout(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ("input", "p", "training", "inplace") if func is F.dropout else ("input", "p", "train")
    a = {**dict(zip(names, args, strict=False)), **kwargs}
    x, p = a["input"], float(a.get("p", 0.5))
    train = a.get("training", a.get("train", True))
    if not (train and 0.0 < p < 1.0 and x.numel() and x.is_floating_point()):
        return func(*args, **kwargs)
    out = torch.ops.aten.native_dropout(x, p, True)[0]
    return x.copy_(out) if a.get("inplace") else out


def _attention(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    a = _flat(args, kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], a.get("attn_mask")
    dropout, causal, scale = a.get("dropout_p", 0.0), a.get("is_causal", False), a.get("scale")
    gqa = bool(a.get("enable_gqa"))
    dtype = _autocast_dtype(q)
    kernel = choose(q, k, v, mask, gqa, dtype)
    if dtype != q.dtype:  # autocast casts the inputs of every attention kernel
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if kernel == "math":
        return torch.ops.aten._scaled_dot_product_attention_math(
            q, k, v, mask, dropout, causal, scale=scale, enable_gqa=gqa)[0]
    if kernel == "flash":
        return torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout, causal, False, scale=scale)[0]
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(
            mask.logical_not(), float("-inf"))
    elif mask is not None and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, mask, grad, dropout, causal, scale=scale)[0]
