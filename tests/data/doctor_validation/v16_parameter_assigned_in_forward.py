import torch
from torch import nn

INPUT = ["20"]


class Net(nn.Module):
    """A learnable gain made on the first call, Keras-style (a "lazy" weight)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 48)
        self.head = nn.Linear(48, 4)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        self.gain = nn.Parameter(torch.ones(h.shape[-1]))  # expect: TI012
        return self.head(h * self.gain)


class Fixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 48)
        self.gain = nn.Parameter(torch.ones(48))
        self.head = nn.Linear(48, 4)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return self.head(h * self.gain)
