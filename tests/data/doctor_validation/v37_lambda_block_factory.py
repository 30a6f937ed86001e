import torch
from torch import nn

INPUT = ["3,16,16"]


class Net(nn.Module):
    bias = True

    def __init__(self):
        super().__init__()
        block = lambda c_in, c_out: nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=self.bias), nn.BatchNorm2d(c_out), nn.ReLU())  # expect: TI016  # noqa: E731
        self.features = nn.Sequential(block(3, 16), block(16, 32))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x).mean((2, 3)), 1))


class Fixed(Net):
    bias = False
