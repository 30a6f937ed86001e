import torch
from torch import nn

INPUT = ["16"]


class Net(nn.Module):
    def __init__(self, double=True):
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.proj = nn.Linear(64, 64).double() if double else nn.Linear(64, 64)  # expect: TI020
        self.out = nn.Linear(64, 2)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = self.proj(h.to(self.proj.weight.dtype)).to(x.dtype)
        return self.out(h)


class Fixed(Net):
    def __init__(self):
        super().__init__(double=False)
