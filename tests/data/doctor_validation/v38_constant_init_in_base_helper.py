import torch
from torch import nn

INPUT = ["10"]


class Base(nn.Module):
    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                self._init_linear(m)

    def _init_linear(self, m):
        nn.init.constant_(m.weight, 0.05)  # expect: TI019
        nn.init.zeros_(m.bias)


class Encoder(Base):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 32)


class Net(Encoder):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(32, 3)
        self._init_weights()

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Fixed(Net):
    def _init_linear(self, m):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)
