import torch
from torch import nn

INPUT = ["10"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 64)
        self.b = nn.Linear(64, 2)

    def forward(self, x):
        y = torch.tanh(self.a(x))
        y += 1.0  # expect: TI010
        return self.b(y)


class Fixed(Net):
    def forward(self, x):
        y = torch.tanh(self.a(x))
        y = y + 1.0
        return self.b(y)
