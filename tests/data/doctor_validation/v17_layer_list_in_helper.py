import torch
from torch import nn

INPUT = ["12"]


class Net(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        self.stem = nn.Linear(12, width)
        self._make_body(width, depth)
        self.head = nn.Linear(width, 2)

    def _make_body(self, width, depth):
        self.body = [nn.Linear(width, width) for _ in range(depth)]  # expect: TI001

    def forward(self, x):
        h = torch.relu(self.stem(x))
        for layer in self.body:
            h = torch.relu(layer(h))
        return self.head(h)


class Fixed(Net):
    def _make_body(self, width, depth):
        self.body = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
