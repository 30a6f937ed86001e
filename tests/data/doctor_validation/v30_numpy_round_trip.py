import numpy as np
import torch
from torch import nn

INPUT = ["12"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 32)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        h = self.fc(x)
        h = torch.from_numpy(np.maximum(h.detach().cpu().numpy(), 0.0))  # expect: TI024 also: TI015
        return self.head(h)


class Fixed(Net):
    def forward(self, x):
        h = torch.clamp_min(self.fc(x), 0.0)
        return self.head(h)
