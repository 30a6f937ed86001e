import torch
from torch import nn

INPUT = ["3,16,16"]


def stage(widths, bias):
    layers = []
    for c_in, c_out in zip(widths, widths[1:], strict=False):
        layers.append(nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias))  # expect: TI016
        layers.append(nn.BatchNorm2d(c_out))
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Net(nn.Module):
    bias = True

    def __init__(self):
        super().__init__()
        self.features = stage([3, 16, 32, 32], self.bias)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


class Fixed(Net):
    bias = False
