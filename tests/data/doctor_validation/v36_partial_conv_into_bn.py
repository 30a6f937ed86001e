from functools import partial

import torch
from torch import nn

INPUT = ["3,16,16"]

conv3x3 = partial(nn.Conv2d, kernel_size=3, padding=1)


class Net(nn.Module):
    def __init__(self, conv=conv3x3):
        super().__init__()
        self.conv = conv(3, 16)  # expect: TI016
        self.bn = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


class Fixed(Net):
    def __init__(self):
        super().__init__(conv=partial(nn.Conv2d, kernel_size=3, padding=1, bias=False))
