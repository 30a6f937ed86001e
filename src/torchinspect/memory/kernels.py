"""CUDA's choice of kernels where it changes memory, for a prediction on fake CPU tensors.

On CPU fake tensors some composite ops take their CPU route, which allocates and saves
differently from the GPU. For the time of a prediction, `cuda_kernels` registers
CompositeImplicitAutograd kernels (removed afterwards) that take the GPU's route, so every
caller (Python, ``nn.MultiheadAttention``, C++ composites) gets it:

* ``dropout``: CUDA runs the fused ``native_dropout`` (a 1-byte mask saved for backward); the
  CPU route multiplies by a float noise tensor (4 bytes an element).
* ``rms_norm``: CUDA runs one fused kernel that saves the input and a per-row ``rstd``; the CPU
  route saves the intermediate products of its composite.
* ``scaled_dot_product_attention``: CUDA picks flash attention (fp16/bf16, no mask) or
  memory-efficient attention (fp32, masks), which keep only the output and a log-sum-exp per
  row (``sdp_utils.cpp``: flash, then efficient, then math); the CPU route may build the full
  ``T x S`` score matrix. The same aten kernels are called here: their fake-tensor
  implementations give the shapes and their autograd formulas save what the GPU saves. What
  the GPU kernels refuse takes the explicit math path, as on the GPU.
* ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``: cuDNN's one-call RNN with its reserve space
  (``cudnn_rnn.py``) instead of the unrolled cells.
* ``nn.TransformerEncoderLayer`` in eval without grad: the fused fast path (``fused.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from torchinspect.privtorch import aten_overrides
from torchinspect.trace.attention import cuda_sdpa_kernel as choose


def attention(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
              is_causal: bool = False, *, scale: float | None = None,
              enable_gqa: bool = False) -> Any:
    """``scaled_dot_product_attention`` through the kernel CUDA picks (autocast has already
    cast the inputs: it sits above this kernel)."""
    mask, dropout, causal, gqa = attn_mask, dropout_p, is_causal, enable_gqa
    kernel = choose(q, k, v, mask, gqa, q.dtype)
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


def dropout(x: Any, p: float, train: bool) -> Any:
    """``dropout`` as CUDA runs it: ``native_dropout`` with a bool mask."""
    if not train or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return x * 0.0
    return torch.ops.aten.native_dropout(x, p, True)[0]


class _FusedRMSNorm(torch.autograd.Function):
    """What CUDA's fused RMSNorm allocates and saves: the output, and per row an fp32 rstd."""

    @staticmethod
    def forward(ctx: Any, x: Any, weight: Any, dims: int) -> Any:
        acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        rstd = x.new_empty((*x.shape[:x.dim() - dims], *([1] * dims)), dtype=acc)
        ctx.save_for_backward(x, rstd, weight)
        out = torch.empty_like(x)
        if weight is not None:
            out = out.to(torch.promote_types(x.dtype, weight.dtype))
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, _, weight = ctx.saved_tensors
        grad_w = torch.empty_like(weight) if weight is not None and ctx.needs_input_grad[1] else None
        return torch.empty_like(x), grad_w, None


def rms_norm(x: Any, shape: Any, weight: Any = None, eps: float | None = None) -> Any:
    return _FusedRMSNorm.apply(x, weight, len(shape))


def math_attention(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                   is_causal: bool = False, *, scale: float | None = None,
                   enable_gqa: bool = False) -> Any:
    """``scaled_dot_product_attention`` by its math route, the reference every other kernel
    is checked against: what another thread computes while the overrides are in place."""
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]


def composite_rms_norm(x: Any, shape: Any, weight: Any = None, eps: float | None = None) -> Any:
    """``rms_norm`` as torch's composite computes it (in fp32 for half types): what another
    thread computes while the overrides are in place."""
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    up = x.to(acc)
    eps = torch.finfo(acc).eps if eps is None else eps
    out = up.mul(torch.rsqrt(up.pow(2).mean(tuple(range(-len(shape), 0)), keepdim=True) + eps))
    out = out.type_as(x)
    return out if weight is None else out.mul(weight)


def in_prediction() -> bool:
    """A prediction's tracker runs in this thread (autograd's worker threads carry it)."""
    from torchinspect.memory.tracker import active_tracker

    return active_tracker() is not None


@contextlib.contextmanager
def cuda_kernels(*, leave: frozenset[str] = frozenset()) -> Iterator[None]:
    """The GPU's route for dropout, rms_norm and attention, for the duration of the block
    (in the predicting thread: any other runs torch's own, privtorch.aten_overrides).
    ``leave``: ops not registered here (summary's shared forward registers its own for
    ``scaled_dot_product_attention`` and ``rms_norm``, ``memory/watch.py``)."""
    from torchinspect.memory.cudnn_rnn import register
    from torchinspect.memory.fused import fast_path

    with aten_overrides(carried=in_prediction) as overrides:
        for name, kernel, elsewhere in (("scaled_dot_product_attention", attention, math_attention),
                                        ("dropout", dropout, None),
                                        ("rms_norm", rms_norm, composite_rms_norm)):
            if name not in leave:
                overrides.impl(name, kernel, elsewhere=elsewhere)
        register(overrides)
        with fast_path():
            yield
