"""Models with a classic bug each, for ``inspect doctor`` to find.

Every model runs and gives an output; the bug is in how it is written:

* :class:`LayerList` keeps Linear layers in a plain Python list, so ``parameters()``,
  ``state_dict()``, ``.to()`` and the optimizer never see them (use ``nn.ModuleList``).
* :class:`TensorAttribute` stores a tensor as a plain attribute instead of a buffer, so it
  is missing from ``state_dict()`` and stays behind on ``.to(device)``.
* :class:`FunctionalDropout` calls ``F.dropout`` without ``training=self.training``, so it
  keeps dropping activations in eval mode.
* :class:`UnusedBranch` owns a submodule that ``forward`` never calls (dead parameters;
  DDP then needs ``find_unused_parameters=True``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IN_FEATURES = 32


class LayerList(nn.Module):
    """Bug: ``self.layers`` is a list, not an ``nn.ModuleList``."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, depth: int = 3,
                 num_classes: int = 10) -> None:
        super().__init__()
        dims = [in_features] + [hidden] * depth
        self.layers = [nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


class TensorAttribute(nn.Module):
    """Bug: ``self.scale`` is a tensor attribute, not ``register_buffer("scale", ...)``."""

    def __init__(self, in_features: int = IN_FEATURES, num_classes: int = 10) -> None:
        super().__init__()
        self.scale = torch.full((in_features,), 0.5)
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * self.scale)


class FunctionalDropout(nn.Module):
    """Bug: ``F.dropout(x, p)`` defaults to ``training=True``, whatever the module mode."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, num_classes: int = 10,
                 p: float = 0.5) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.dropout(F.relu(self.fc1(x)), p=self.p)
        return self.fc2(x)


class UnusedBranch(nn.Module):
    """Bug: ``self.aux_head`` is built (and counted) but ``forward`` never calls it."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)
        self.aux_head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))
