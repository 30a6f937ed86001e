import torch
from torch import nn

INPUT = ["24"]


class Residual(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(24, 64)
        block = Residual(64)
        self.body = nn.Sequential(*[block] * 3)  # expect: TI017
        self.head = nn.Linear(64, 2)

    def forward(self, x):
        return self.head(self.body(self.embed(x)))


class Fixed(Net):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*[Residual(64) for _ in range(3)])
