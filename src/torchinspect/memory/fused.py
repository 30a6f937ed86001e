"""``nn.TransformerEncoderLayer``'s eval fast path, as CUDA runs it, for a fake run.

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


@contextlib.contextmanager
def fast_path() -> Iterator[None]:
    """CUDA's encoder-layer fast path for fake tensors, for the duration of the block."""
    cls = nn.TransformerEncoderLayer
    original = cls.forward

    def forward(self: Any, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Any:
        if takes_fast_path(self, src):
            mask, _ = self.self_attn.merge_masks(src_mask, src_key_padding_mask, src)
            return encoder_layer(self, src, mask)
        return original(self, src, src_mask, src_key_padding_mask, is_causal)

    cls.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.forward = original  # type: ignore[method-assign]
