"""A Llama-shaped decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases).

Built to be cheap to trace: no precomputed RoPE tables or causal masks (cos/sin come
from the positions inside forward, attention is ``F.scaled_dot_product_attention`` with
``is_causal=True`` and ``enable_gqa=True``), so a 70B model costs nothing on the meta
device and nothing large is allocated when a small preset is built on CPU.

It generates with a KV cache of its own, by torchinspect's cache protocol (see the serving
page of the docs): ``make_cache(batch, max_len)`` returns an empty `KVCache`, and
``forward(ids, cache=cache)`` attends to what the cache holds, appends the new keys and
values, and returns ``(logits, cache)``. Without ``cache`` the forward is the plain one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.zoo._layers import embedding


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 128_256
    d_model: int = 8192
    n_layers: int = 80
    n_heads: int = 64
    n_kv_heads: int = 8
    ffn_dim: int = 28_672
    norm_eps: float = 1e-5
    rope_theta: float = 500_000.0
    tie_embeddings: bool = False
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError("the head dimension d_model/n_heads must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


PRESETS: dict[str, LlamaConfig] = {
    # Llama-3-70B shapes: 70,553,706,496 parameters.
    "llama-70b": LlamaConfig(),
    "llama-tiny": LlamaConfig(
        vocab_size=1000, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=172,
        rope_theta=10_000.0,
    ),
}


def rope(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos, sin of shape (T, head_dim) for rotate-half RoPE, computed from the positions."""
    exponent = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponent)
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, D); rotate the two halves of D."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class KVCache:
    """Keys and values of every layer, (batch, n_kv_heads, tokens, head_dim) each, grown by
    concatenation as tokens come (as transformers' ``DynamicCache`` grows)."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        first = self.keys[0]
        return 0 if first is None else int(first.shape[2])

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None and old_v is not None:
            k, v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, dtype: torch.dtype, index: int = 0) -> None:
        super().__init__()
        self.index = index  # its layer's place in the KV cache
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(cfg.d_model, kv_dim, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(cfg.d_model, kv_dim, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None, past: int = 0) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.index, k, v)
        mask = None
        if past and t > 1:  # new tokens after cached ones: each sees the cache and its past
            mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=past == 0 and t > 1,
            enable_gqa=self.n_kv_heads != self.n_heads
        )
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, dtype: torch.dtype, index: int = 0) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dtype)
        self.attn = Attention(cfg, dtype, index)
        self.post_attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dtype)
        self.mlp = SwiGLU(cfg, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                *cached: Any) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin, *cached)
        return x + self.mlp(self.post_attn_norm(x))


class Llama(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocab)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        dtype = getattr(torch, cfg.dtype, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype={cfg.dtype!r} is not a floating-point torch dtype (e.g. bfloat16)")
        self.embed_tokens = embedding(cfg.vocab_size, cfg.d_model, dtype=dtype)
        self.layers = nn.ModuleList(DecoderLayer(cfg, dtype, i) for i in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps, dtype=dtype)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False, dtype=dtype)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def make_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty cache for generating (the cache protocol; it grows, so neither the batch
        nor the length is needed ahead)."""
        return KVCache(len(self.layers))

    def forward(self, input_ids: torch.Tensor,
                cache: KVCache | None = None) -> torch.Tensor | tuple[torch.Tensor, KVCache]:
        x = self.embed_tokens(input_ids)
        past = cache.length if cache is not None else 0
        positions = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
        cos, sin = rope(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        cached = () if cache is None else (cache, past)  # the plain forward's calls unchanged
        for layer in self.layers:
            x = layer(x, cos, sin, *cached)
        logits = self.lm_head(self.norm(x))
        return logits if cache is None else (logits, cache)


def llama(preset: str = "llama-tiny", **overrides: Any) -> Llama:
    """Build a preset, with any LlamaConfig field overridden (``--arg n_layers=2``)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown llama preset {preset!r}; choose from {', '.join(PRESETS)}")
    fields = asdict(PRESETS[preset])
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(
            f"unexpected llama argument(s) {', '.join(unknown)}; valid: {', '.join(fields)}"
        )
    return Llama(replace(PRESETS[preset], **overrides))


def example(preset: str = "llama-tiny", seq_len: int = 128):
    """Token ids (1, seq_len) in [0, vocab_size) of the preset."""
    vocab = PRESETS[preset].vocab_size
    return ExampleInputs((TensorSpec((1, seq_len), "int64", None, vocab),))
