import torch
import torch.nn.functional as F
from torch import nn

INPUT = ["20"]


class Net(nn.Module):
    """Returns its own training loss against a fixed label."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 6))
        self.register_buffer("target", torch.tensor([1]))

    def forward(self, x):
        log_probs = torch.log_softmax(self.body(x), dim=-1)
        return F.cross_entropy(log_probs, self.target.expand(x.shape[0]))  # expect: TI022


class Fixed(Net):
    def forward(self, x):
        log_probs = torch.log_softmax(self.body(x), dim=-1)
        return F.nll_loss(log_probs, self.target.expand(x.shape[0]))
