import torch.nn.functional as F
from torch import nn

INPUT = ["30"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(30, 64)
        self.dec = nn.Linear(64, 30)

    def forward(self, x):
        h = F.relu(self.enc(x))
        w = self.enc.weight.data  # expect: TI018
        return self.dec(h) + F.linear(h, w.t())


class Fixed(Net):
    def forward(self, x):
        h = F.relu(self.enc(x))
        w = self.enc.weight
        return self.dec(h) + F.linear(h, w.t())
