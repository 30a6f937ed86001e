import torch
import torch.nn.functional as F
from torch import nn

INPUT = ["8"]


class Net(nn.Module):
    """A binary classifier with one output unit."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return F.softmax(self.body(x), dim=1)  # expect: TI025


class Fixed(Net):
    def forward(self, x):
        return torch.sigmoid(self.body(x))
