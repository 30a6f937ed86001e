"""An LSTM text classifier (token ids in, class logits out)."""

from __future__ import annotations

import torch
from torch import nn

from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.zoo._layers import embedding

VOCAB_SIZE = 10_000


class LSTMClassifier(nn.Module):
    """Embedding -> bidirectional LSTM -> linear over the last layer's final hidden states."""

    def __init__(
        self,
        vocab_size: int = VOCAB_SIZE,
        embed_dim: int = 64,
        hidden_size: int = 128,
        num_layers: int = 2,
        num_classes: int = 4,
        bidirectional: bool = True,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embedding = embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.directions = 2 if bidirectional else 1
        self.fc = nn.Linear(hidden_size * self.directions, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _, (h_n, _) = self.lstm(self.embedding(tokens))
        # h_n: (num_layers * directions, batch, hidden); keep the last layer's directions
        last = h_n[-self.directions :].transpose(0, 1).flatten(1)
        return self.fc(last)


def example(vocab_size: int = VOCAB_SIZE, seq_len: int = 32):
    """Token ids (1, seq_len) in [0, vocab_size)."""
    return ExampleInputs((TensorSpec((1, seq_len), "int64", None, vocab_size),))
