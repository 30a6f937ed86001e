"""Trigger models and clean twins for ``inspect doctor`` (one pair per check TI001..TI009).

The triggers that are classic bugs of their own live in :mod:`torchinspect.zoo.pitfalls`
(layer list, tensor attribute, functional dropout, unused branch); this module holds their
clean twins and the pairs for the other checks. Each twin differs from its trigger only in
the line that matters, so ``inspect doctor`` on the twin must stay silent for that code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IN_FEATURES = 32


# ---------------------------------------------------------------- TI001..TI004 clean twins


class LayerModuleList(nn.Module):
    """Clean twin of ``pitfall-layer-list``: the layers live in an ``nn.ModuleList``."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, depth: int = 3,
                 num_classes: int = 16) -> None:
        super().__init__()
        dims = [in_features] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


class TensorBuffer(nn.Module):
    """Clean twin of ``pitfall-tensor-attr``: ``scale`` is a registered buffer."""

    scale: torch.Tensor

    def __init__(self, in_features: int = IN_FEATURES, num_classes: int = 16) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((in_features,), 0.5))
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * self.scale)


class ModeAwareDropout(nn.Module):
    """Clean twin of ``pitfall-functional-dropout``: ``F.dropout(..., training=self.training)``."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, num_classes: int = 16,
                 p: float = 0.5) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.dropout(F.relu(self.fc1(x)), p=self.p, training=self.training)
        return self.fc2(x)


class UsedBranch(nn.Module):
    """Clean twin of ``pitfall-unused-branch``: the aux head's output is returned too."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, num_classes: int = 16) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)
        self.aux_head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return self.head(h), self.aux_head(h)


# ---------------------------------------------------------------- TI005 NaN gradients


class PairwiseDistance(nn.Module):
    """Euclidean distances between all tokens, written by hand.

    ``eps=0`` is the bug: the distance of a token to itself is ``sqrt(0)``, whose
    derivative is infinite; times the zero difference it gives NaN gradients, which then
    reach every parameter before it. ``eps>0`` (or ``torch.cdist``) keeps them finite.
    """

    def __init__(self, eps: float = 0.0) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        diff = x.unsqueeze(-2) - x.unsqueeze(-3)  # (B, T, T, D)
        return torch.sqrt((diff * diff).sum(-1) + self.eps)


class DistanceHead(nn.Module):
    """Token embeddings -> pairwise distances -> classifier (a metric-learning head)."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, tokens: int = 8,
                 num_classes: int = 16, eps: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, hidden)
        self.distance = PairwiseDistance(eps)
        self.head = nn.Linear(tokens, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, tokens, in_features)
        d = self.distance(self.embed(x))  # (B, T, T)
        return self.head(d).mean(1)


# ---------------------------------------------------------------- TI006 Tensor Core alignment


class MisalignedMLP(nn.Module):
    """An MLP whose widths are not multiples of 8 (``aligned=True``: 96/256/248 instead)."""

    def __init__(self, aligned: bool = False) -> None:
        super().__init__()
        dims = (96, 256, 248, 16) if aligned else (100, 250, 250, 10)
        self.fc1 = nn.Linear(dims[0], dims[1])
        self.fc2 = nn.Linear(dims[1], dims[2])
        self.head = nn.Linear(dims[2], dims[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.fc2(F.relu(self.fc1(x)))))


# ---------------------------------------------------------------- TI007 oversized layer


class FlattenHead(nn.Module):
    """A small conv stack whose classifier flattens the feature map (VGG style).

    ``pool="flatten"``: ``Linear(64*8*8, 1024)`` holds ~97% of all parameters.
    ``pool="avg"``: global average pooling first, ``Linear(64, 1024)`` (the clean twin).
    """

    def __init__(self, pool: str = "flatten", num_classes: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.pool = nn.Flatten() if pool == "flatten" else nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        width = 64 * 8 * 8 if pool == "flatten" else 64
        self.classifier = nn.Sequential(nn.Linear(width, 1024), nn.ReLU(), nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 3, 32, 32)
        return self.classifier(self.pool(self.features(x)))


# ---------------------------------------------------------------- TI008 frozen / BatchNorm


class FrozenBackboneBN(nn.Module):
    """A frozen backbone and a head with BatchNorm1d after a Linear.

    ``freeze=True, norm="batch"`` (the trigger): the backbone's parameters have
    ``requires_grad=False`` and the BatchNorm1d sees one value per channel at batch 1
    (``model.train()`` then raises "Expected more than 1 value per channel").
    ``freeze=False, norm="layer"`` is the clean twin.
    """

    def __init__(self, freeze: bool = True, norm: str = "batch", in_features: int = IN_FEATURES,
                 hidden: int = 64, num_classes: int = 16) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(),
                                      nn.Linear(hidden, hidden), nn.ReLU())
        self.neck = nn.Linear(hidden, hidden)
        self.norm = nn.BatchNorm1d(hidden) if norm == "batch" else nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, num_classes)
        if freeze:
            for p in self.backbone.parameters():
                p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.norm(self.neck(self.backbone(x)))))


# ---------------------------------------------------------------- TI009 rounded-down outputs


class UnpaddedConvPool(nn.Module):
    """Conv + two 2x2 max-pools on 28x28 input.

    ``padding=0`` (the trigger): 28 -> 26 -> 13 -> 6, so the second pool never sees the
    13th row and column. ``padding=1`` keeps 28 -> 28 -> 14 -> 7 (nothing dropped).
    """

    def __init__(self, padding: int = 0, num_classes: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=padding)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool2 = nn.MaxPool2d(2)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(F.relu(self.conv(x)))
        x = self.pool2(F.relu(self.conv2(x)))
        return self.head(x)
