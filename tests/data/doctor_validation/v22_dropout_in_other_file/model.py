from torch import nn
from v22_ops import residual, residual_mode_aware

INPUT = ["32"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(2))
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        for block in self.blocks:
            x = residual(x, block)
        return self.head(x)


class Fixed(Net):
    def forward(self, x):
        for block in self.blocks:
            x = residual_mode_aware(x, block, self.training)
        return self.head(x)
