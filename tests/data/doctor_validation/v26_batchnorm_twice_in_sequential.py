from torch import nn

INPUT = ["3,16,16"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        norm = nn.BatchNorm2d(16)
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), norm, nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, bias=False), norm, nn.ReLU())  # expect: TI023
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class Fixed(Net):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
