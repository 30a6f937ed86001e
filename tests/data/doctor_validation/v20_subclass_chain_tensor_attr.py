import torch
from torch import nn

INPUT = ["3,8,8"]


class Base(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)

    def normalize(self, x):
        return x

    def forward(self, x):
        return torch.relu(self.conv(self.normalize(x)))


class Normalized(Base):
    def __init__(self, channels):
        super().__init__(channels)
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)  # expect: TI002
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)  # expect: TI002

    def normalize(self, x):
        return (x - self.mean) / self.std


class Net(Normalized):
    def __init__(self):
        super().__init__(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(super().forward(x).mean((2, 3)))


class NormalizedBuffers(Base):
    def __init__(self, channels):
        super().__init__(channels)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def normalize(self, x):
        return (x - self.mean) / self.std


class Fixed(NormalizedBuffers):
    def __init__(self):
        super().__init__(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(super().forward(x).mean((2, 3)))
