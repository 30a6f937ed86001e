from torch import nn

INPUT = ["32"]


class Net(nn.Module):
    def __init__(self, depth=4, fixed=False):
        super().__init__()
        block = nn.Sequential(nn.Linear(32, 32), nn.ReLU())
        layers = []
        for _ in range(depth):
            if fixed:
                layers.append(nn.Sequential(nn.Linear(32, 32), nn.ReLU()))
            else:
                layers.append(block)  # expect: TI017
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.body(x))


class Fixed(Net):
    def __init__(self):
        super().__init__(fixed=True)
