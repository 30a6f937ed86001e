from torch import nn

INPUT = ["20"]


class Net(nn.Module):
    def __init__(self, zero=True):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                    nn.Linear(64, 4))
        for m in self.modules():
            if isinstance(m, nn.Linear) and zero:
                nn.init.zeros_(m.weight)  # expect: TI019
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.layers(x)


class Fixed(Net):
    def __init__(self):
        super().__init__(zero=False)
