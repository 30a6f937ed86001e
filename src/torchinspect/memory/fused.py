"""The eval fast paths of ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``, as
CUDA runs them, for a fake run.

In eval mode without grad, ``TransformerEncoderLayer.forward`` calls the fused
``torch._transformer_encoder_layer_fwd`` when its checks pass. On fake tensors one check
never passes ("some Tensor argument has_torch_function"), so the fake run took the slow path,
which allocates a new tensor for each residual add, activation and the attention's
``T x S`` pieces: a TransformerEncoder was predicted 13-17% high on an H100. `fast_path`
replaces the class's ``forward`` for the time of a prediction (put back afterwards; no
instance is touched) with one that makes the same checks, minus that one and the device
check, and then allocates what CUDA's kernel allocates (``transformer_encoder_layer_forward``
in aten/src/ATen/native/transformers/transformer.cpp, the fused-SDPA branch of
``native_multi_head_attention_cuda``): the qkv projection, SDPA through the kernel CUDA
picks, the output projection, in-place residual adds and ReLU, two layer norms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - PyTorch's own spelling

from torchinspect.privtorch import overriding_here


def _autocast() -> bool:
    return any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))


def takes_fast_path(layer: Any, src: Any) -> bool:
    """``TransformerEncoderLayer.forward``'s checks, as they come out on a CUDA tensor
    (``torch.backends.mha`` fast path on, PyTorch's default: the fake run itself switches it
    off, ``trace.engine.forward_mode``)."""
    attn = layer.self_attn
    args = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight,
            attn.out_proj.bias, layer.norm1.weight, layer.norm1.bias, layer.norm2.weight,
            layer.norm2.bias, layer.linear1.weight, layer.linear1.bias, layer.linear2.weight,
            layer.linear2.bias)
    return (src.dim() == 3
            and not layer.training and attn.batch_first and attn.in_proj_bias is not None
            and attn._qkv_same_embed_dim and bool(layer.activation_relu_or_gelu)
            and layer.norm1.eps == layer.norm2.eps and not src.is_nested
            and attn.num_heads % 2 == 0 and not _autocast()
            and not any(len(m._forward_hooks) + len(m._forward_pre_hooks)
                        for m in layer.modules())
            and not (torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in args)))


def encoder_layer(layer: Any, src: Any, mask: Any) -> Any:
    """What ``_transformer_encoder_layer_fwd`` allocates on CUDA."""
    attn, d = layer.self_attn, layer.self_attn.embed_dim
    x = src
    if layer.norm_first:
        x = F.layer_norm(x, (d,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    x = attention(x, attn, mask)
    x.add_(src)
    if not layer.norm_first:
        x = F.layer_norm(x, (d,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    residual = x
    if layer.norm_first:
        x = F.layer_norm(x, (d,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
    h = F.linear(x, layer.linear1.weight, layer.linear1.bias)
    h = F.gelu(h) if layer.activation_relu_or_gelu == 2 else h.relu_()
    x = F.linear(h, layer.linear2.weight, layer.linear2.bias)
    del h  # the C++ kernel frees the hidden activation before the residual add and norm
    x.add_(residual)
    if not layer.norm_first:
        x = F.layer_norm(x, (d,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
    return x


def attention(x: Any, attn: Any, mask: Any) -> Any:
    """``native_multi_head_attention_cuda``'s fused-SDPA branch (self-attention, no weights)."""
    b, t, d = x.shape
    heads = attn.num_heads
    qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)
    q, k, v = (c.view(b, -1, heads, d // heads).transpose(1, 2) for c in qkv.chunk(3, -1))
    if mask is not None and mask.dim() == 3:  # (B*H or B, T, S) -> (B, H, T, S)
        mask = mask.view(b, -1, t, mask.size(-1))
    y = F.scaled_dot_product_attention(q, k, v, mask)
    return F.linear(y.transpose(1, 2).reshape(b, -1, d), attn.out_proj.weight, attn.out_proj.bias)


def mha_takes_fast_path(attn: Any, query: Any, key: Any, value: Any) -> bool:
    """``MultiheadAttention.forward``'s checks for ``_native_multi_head_attention``, as they
    come out on CUDA tensors (self-attention, batch first, eval, no grad, no autocast)."""
    args = (query, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight,
            attn.out_proj.bias)
    return (query.dim() == 3 and query is key and key is value and not query.is_nested
            and not attn.training and attn.batch_first and attn._qkv_same_embed_dim
            and attn.in_proj_weight is not None and attn.in_proj_bias is not None
            and query.dtype == attn.in_proj_weight.dtype == attn.in_proj_bias.dtype
            and attn.num_heads % 2 == 0 and attn.bias_k is None and attn.bias_v is None
            and not attn.add_zero_attn and not _autocast()
            and not (torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in args)))


def native_attention(attn: Any, x: Any, mask: Any, need_weights: bool,
                     average: bool) -> tuple[Any, Any]:
    """What ``_native_multi_head_attention`` allocates on CUDA (transformers/attention.cpp):
    without weights the fused-SDPA branch (`attention`); with them the qkv projection, the
    packed ``q_k_v`` (the projection freed), ``T x S`` scores softmaxed in place, the context
    written over ``q``, its ``0213`` transpose for the output projection (freed after it),
    and the weights averaged over heads."""
    if not need_weights:
        return attention(x, attn, mask), None
    b, t, d = x.shape
    heads = attn.num_heads
    qkv = F.linear(x, attn.in_proj_weight)  # gemm_nt: the bias is added by the transform
    q_k_v = qkv.new_empty((3, b, heads, t, d // heads))
    del qkv
    scores = q_k_v.new_empty((b, heads, t, t))
    # the context (scores @ v) is written over q: no allocation
    flat = q_k_v.new_empty((b, t, d))
    proj = F.linear(flat, attn.out_proj.weight, attn.out_proj.bias)
    del flat, q_k_v
    if average:
        return proj, scores.sum(1).div_(heads)
    return proj, scores


@contextlib.contextmanager
def fast_path() -> Iterator[None]:
    """CUDA's encoder-layer and multi-head-attention fast paths for fake tensors, for the
    duration of the block, in the predicting thread (privtorch.overriding_here: any other
    thread runs the classes' own forward)."""
    cls, mha = nn.TransformerEncoderLayer, nn.MultiheadAttention
    original, original_mha = cls.forward, mha.forward

    def forward(self: Any, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Any:
        if overriding_here() and takes_fast_path(self, src):
            mask, _ = self.self_attn.merge_masks(src_mask, src_key_padding_mask, src)
            return encoder_layer(self, src, mask)
        return original(self, src, src_mask, src_key_padding_mask, is_causal)

    def mha_forward(self: Any, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                    need_weights: bool = True, attn_mask: Any = None,
                    average_attn_weights: bool = True, is_causal: bool = False) -> Any:
        if overriding_here() and mha_takes_fast_path(self, query, key, value):
            mask, _ = self.merge_masks(attn_mask, key_padding_mask, query)
            return native_attention(self, query, mask, need_weights, average_attn_weights)
        return original_mha(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                            average_attn_weights, is_causal)

    cls.forward = forward  # type: ignore[method-assign]
    mha.forward = mha_forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.forward = original  # type: ignore[method-assign]
        mha.forward = original_mha  # type: ignore[method-assign]
