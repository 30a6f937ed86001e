from torch import nn

INPUT = ["3,24,24"]


class Net(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, bias=bias),  # expect: TI016
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(self.pool(self.stem(x)).flatten(1))


class Fixed(Net):
    def __init__(self):
        super().__init__(bias=False)
