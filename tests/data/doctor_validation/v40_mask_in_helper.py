import torch
from torch import nn

INPUT = ["6,16"]


class Net(nn.Module):
    """A causal self-attention block."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def _causal_mask(self, x):
        t = x.shape[1]
        return torch.triu(torch.ones(t, t), diagonal=1).bool()  # expect: TI014

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / 4.0
        scores = scores.masked_fill(self._causal_mask(x), float("-inf"))
        return self.out(torch.softmax(scores, dim=-1) @ v)


class Fixed(Net):
    def _causal_mask(self, x):
        t = x.shape[1]
        return torch.triu(torch.ones(t, t, device=x.device), diagonal=1).bool()
