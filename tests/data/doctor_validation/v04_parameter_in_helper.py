import torch
from torch import nn

INPUT = ["16"]


class Affine(nn.Module):
    def __init__(self, n, fixed=False):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))
        self.fixed = fixed
        if fixed:
            self.shift = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        if self.fixed:
            return x * self.scale + self.shift
        shift = nn.Parameter(torch.zeros(x.shape[-1], device=x.device))  # expect: TI012
        return x * self.scale + shift


class Net(nn.Module):
    def __init__(self, fixed=False):
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.norm = Affine(64, fixed)
        self.head = nn.Linear(64, 3)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.fc(x))))


class Fixed(Net):
    def __init__(self):
        super().__init__(fixed=True)
