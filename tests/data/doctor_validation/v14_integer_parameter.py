import torch
from torch import nn

INPUT = ["long:1,12"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(100, 64)
        self.positions = nn.Parameter(torch.arange(12), requires_grad=False)  # expect: TI021
        self.pos = nn.Embedding(12, 64)
        self.head = nn.Linear(64, 2)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(self.positions[: ids.shape[1]])
        return self.head(h.mean(1))


class Fixed(Net):
    def __init__(self):
        super().__init__()
        del self.positions
        self.register_buffer("positions", torch.arange(12), persistent=False)
