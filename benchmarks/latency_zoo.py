"""Two small models for the latency sets that torchvision and the zoo lack.

``GRUNet``: a 2-layer GRU over 64 steps of 256 features (the development set's RNN).
``TextEncoder``: ``nn.TransformerEncoder``, 6 layers of width 512 over 128 tokens (an
encoder-only transformer of the validation set, unlike the HF and vision ones).
``FastEncoder``: ``nn.TransformerEncoder``, 4 layers of width 384 (6 heads, GELU) over 197
tokens (the development set's fast-path transformer; added with sweep 2).
"""

from __future__ import annotations

import torch
from torch import nn


class GRUNet(nn.Module):
    example_input = "1,64,256"

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(256, 512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1])


class TextEncoder(nn.Module):
    example_input = "1,128,512"

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.head = nn.Linear(512, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


class FastEncoder(nn.Module):
    example_input = "1,197,384"

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(384, 6, 1536, batch_first=True, dropout=0.0,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(384, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)[:, 0])
