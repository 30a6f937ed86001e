import torch
from torch import nn

INPUT = ["14"]


class Net(nn.Module):
    """Keeps the last features for a later visualisation."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(14, 32)
        self.head = nn.Linear(32, 3)
        self.last_features = None

    def _remember(self, h):
        self.last_features = h  # expect: TI026

    def forward(self, x):
        h = torch.relu(self.fc(x))
        self._remember(h)
        return self.head(h)


class Fixed(Net):
    def _remember(self, h):
        self.last_features = h.detach()
