import torch
import torch.nn.functional as F
from torch import nn

INPUT = ["16"]


class Net(nn.Module):
    """A two-layer MLP written with the functional API."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(64, 16) * 0.1)
        self.b1 = nn.Parameter(torch.zeros(64))
        self.w2 = torch.randn(3, 64) * 0.1  # expect: TI002

    def forward(self, x):
        h = F.relu(F.linear(x, self.w1, self.b1))
        return F.linear(h, self.w2)


class Fixed(Net):
    def __init__(self):
        super().__init__()
        self.w2 = nn.Parameter(torch.randn(3, 64) * 0.1)
