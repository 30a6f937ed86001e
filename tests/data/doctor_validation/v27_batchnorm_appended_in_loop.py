from torch import nn

INPUT = ["3,12,12"]


class Net(nn.Module):
    def __init__(self, depth=3, fixed=False):
        super().__init__()
        layers = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
        norm = nn.BatchNorm2d(16)
        for _ in range(depth):
            layers.append(nn.Conv2d(16, 16, 3, padding=1, bias=False))
            if fixed:
                layers.append(nn.BatchNorm2d(16))
            else:
                layers.append(norm)  # expect: TI023
            layers.append(nn.ReLU())
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class Fixed(Net):
    def __init__(self):
        super().__init__(fixed=True)
