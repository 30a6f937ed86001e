from torch import nn

INPUT = ["4"]


class Net(nn.Module):
    """A policy network (REINFORCE-style) that normalizes over the wrong dimension."""

    def __init__(self, dim=0):
        super().__init__()
        self.policy = nn.Sequential(nn.Linear(4, 64), nn.LeakyReLU(), nn.Linear(64, 2), nn.Softmax(dim=dim))  # expect: TI025

    def forward(self, state):
        return self.policy(state)


class Fixed(Net):
    def __init__(self):
        super().__init__(dim=1)
