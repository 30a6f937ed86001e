import torch
import torch.nn.functional as F
from torch import nn

INPUT = ["40"]


class Net(nn.Module):
    """Returns its own training loss against a fixed target (as some training wrappers do)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 7))
        self.register_buffer("target", torch.tensor([3]))

    def forward(self, x):
        probs = F.softmax(self.net(x), dim=-1)
        return F.cross_entropy(probs, self.target.expand(x.shape[0]))  # expect: TI013


class Fixed(Net):
    def forward(self, x):
        return F.cross_entropy(self.net(x), self.target.expand(x.shape[0]))
