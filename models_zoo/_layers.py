"""Layer helpers shared by the zoo models."""

from __future__ import annotations

import torch
from torch import nn


def embedding(num_embeddings: int, embedding_dim: int, *, padding_idx: int | None = None,
              dtype: torch.dtype | None = None) -> nn.Embedding:
    """``nn.Embedding`` with its default N(0, 1) init, skipped on the meta device.

    ``nn.Embedding`` initialises with ``normal_``, whose meta implementation imports
    ``torch._dynamo`` (about 1.5 s on a small machine); a meta tensor needs no values.
    """
    weight = torch.empty(num_embeddings, embedding_dim, dtype=dtype)
    if weight.device.type != "meta":
        nn.init.normal_(weight)
        if padding_idx is not None:
            with torch.no_grad():
                weight[padding_idx].zero_()
    return nn.Embedding.from_pretrained(weight, freeze=False, padding_idx=padding_idx)
