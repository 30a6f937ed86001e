"""A model with several inputs: a tensor, a dict of tensors, and a keyword-only tensor."""

from __future__ import annotations

import torch
from torch import nn

from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.zoo._layers import embedding

NUM_CATEGORIES = 20
NUMERIC_DIM = 8


class MultiInputNet(nn.Module):
    """forward(image, features: {"numeric", "category"}, *, mask) -> {"logits", "embedding"}.

    ``mask`` (1, n_patches) weights the image patches; the output is a dict, so tools see
    nested inputs and outputs.
    """

    def __init__(
        self,
        num_classes: int = 5,
        embed_dim: int = 32,
        num_categories: int = NUM_CATEGORIES,
        numeric_dim: int = NUMERIC_DIM,
    ) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, embed_dim, kernel_size=8, stride=8)  # 32x32 -> 4x4 patches
        self.numeric = nn.Sequential(nn.Linear(numeric_dim, embed_dim), nn.ReLU())
        self.category = embedding(num_categories, embed_dim)
        self.head = nn.Linear(3 * embed_dim, num_classes)

    def forward(
        self,
        image: torch.Tensor,
        features: dict[str, torch.Tensor],
        *,
        mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        patches = self.patchify(image).flatten(2)  # (B, C, P)
        if mask is None:
            pooled = patches.mean(dim=2)
        else:
            weights = mask.to(patches.dtype).unsqueeze(1)  # (B, 1, P)
            pooled = (patches * weights).sum(dim=2) / weights.sum(dim=2).clamp_min(1.0)
        num = self.numeric(features["numeric"])
        cat = self.category(features["category"])
        embedding = torch.cat([pooled, num, cat], dim=1)
        return {"logits": self.head(embedding), "embedding": embedding}


def example():
    """image (1,3,32,32), features {numeric (1,8), category long (1,)}, mask=(1,16) float."""
    features = {
        "numeric": TensorSpec((1, NUMERIC_DIM)),
        "category": TensorSpec((1,), "int64", None, NUM_CATEGORIES),
    }
    return ExampleInputs(
        (TensorSpec((1, 3, 32, 32)), features),
        {"mask": TensorSpec((1, 16), "float32", "mask")},
    )
