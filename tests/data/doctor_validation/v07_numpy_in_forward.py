import torch
from torch import nn

INPUT = ["8"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 64)
        self.out = nn.Linear(64, 2)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        scale = float(h.mean().cpu().numpy())  # expect: TI015 also: TI011
        return self.out(h / (scale + 1.0))


class Fixed(Net):
    def forward(self, x):
        h = torch.relu(self.fc(x))
        scale = h.mean()
        return self.out(h / (scale + 1.0))
