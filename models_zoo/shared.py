"""Models whose modules are shared: one instance registered under several parents, or called
more than once. Graphs must draw every call where it happens (the data flow), not once.

* :class:`SharedActResidual` -- two Linear layers and one ``nn.ReLU`` called twice, a skip
  connection joined by ``add``.
* :class:`SharedActUNet` -- a small U-Net whose every conv block holds the same ``nn.ReLU``;
  two skip connections joined by ``torch.cat``.
* :class:`SiameseNet` -- two inputs through one encoder (called twice), joined by ``sub``.
"""

from __future__ import annotations

import torch
from torch import nn


class SharedActResidual(nn.Module):
    """Two Linear layers and one ReLU called twice: ``act(fc2(act(fc1(x))) + x)``."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc2(self.act(self.fc1(x))) + x)


class _ConvBlock(nn.Module):
    """conv -> act -> conv -> act, ``act`` given by the parent (shared)."""

    def __init__(self, cin: int, cout: int, act: nn.Module) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv2(self.act(self.conv1(x))))


class SharedActUNet(nn.Module):
    """A two-level U-Net; one ``nn.ReLU`` held by every conv block (the pattern of many
    research U-Nets). ``enc1``/``enc2`` skips are concatenated into ``dec2``/``dec1``."""

    def __init__(self, in_channels: int = 3, num_classes: int = 2, width: int = 8) -> None:
        super().__init__()
        self.act = nn.ReLU()
        w = width
        self.enc1 = _ConvBlock(in_channels, w, self.act)
        self.enc2 = _ConvBlock(w, 2 * w, self.act)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = _ConvBlock(2 * w, 4 * w, self.act)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = _ConvBlock(4 * w, 2 * w, self.act)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = _ConvBlock(2 * w, w, self.act)
        self.head = nn.Conv2d(w, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        b = self.bottleneck(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


class SiameseNet(nn.Module):
    """forward(a, b): one encoder embeds both inputs; the head sees |enc(a) - enc(b)|."""

    def __init__(self, features: int = 16, embed: int = 8) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, embed), nn.ReLU())
        self.head = nn.Linear(embed, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.head(torch.abs(self.encoder(a) - self.encoder(b)))
