import torch
from torch import nn

INPUT = ["6,32"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 64)
        self.cls = nn.Linear(64, 3)

    def forward(self, x):
        b, t, _ = x.shape
        keep = torch.ones(b, t, 1)  # expect: TI014
        h = self.proj(x) * keep
        return self.cls(h.mean(1))


class Fixed(Net):
    def forward(self, x):
        b, t, _ = x.shape
        keep = torch.ones(b, t, 1, device=x.device, dtype=x.dtype)
        h = self.proj(x) * keep
        return self.cls(h.mean(1))
