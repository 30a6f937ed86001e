import torch.nn.functional as F
from torch import nn

INPUT = ["20"]


class Block(nn.Module):
    def __init__(self, width, fixed=False):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.fixed = fixed

    def forward(self, x):
        x = F.gelu(self.lin(x))
        if self.fixed:
            return F.dropout(x, 0.3, self.training)
        return F.dropout(x, 0.3)  # expect: TI004


class Net(nn.Module):
    def __init__(self, fixed=False):
        super().__init__()
        self.inp = nn.Linear(20, 128)
        self.block = Block(128, fixed)
        self.out = nn.Linear(128, 5)

    def forward(self, x):
        return self.out(self.block(self.inp(x)))


class Fixed(Net):
    def __init__(self):
        super().__init__(fixed=True)
