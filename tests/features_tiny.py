"""A tiny conv net for the features tests (loaded as tests/features_tiny.py:Tiny)."""

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        x = self.pool(self.relu(self.conv(x)))
        return self.fc(torch.flatten(x, 1))
