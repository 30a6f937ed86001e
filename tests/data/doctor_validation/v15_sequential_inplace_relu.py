from torch import nn

INPUT = ["14"]


class Net(nn.Module):
    def __init__(self, inplace=True):
        super().__init__()
        self.fc = nn.Linear(14, 64)
        self.gate = nn.Sequential(nn.Sigmoid(), nn.ReLU(inplace=inplace))
        self.out = nn.Linear(64, 2)

    def forward(self, x):
        h = self.gate(self.fc(x))  # expect: TI010
        return self.out(h)


class Fixed(Net):
    def __init__(self):
        super().__init__(inplace=False)
