import torch
import torch.nn.functional as F
from torch import nn

INPUT = ["12"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        logit = self.body(x)
        p = torch.sigmoid(logit)
        return torch.cat([torch.log(p), torch.log1p(-p)], dim=-1)  # expect: TI013


class Fixed(Net):
    def forward(self, x):
        logit = self.body(x)
        return torch.cat([F.logsigmoid(logit), F.logsigmoid(-logit)], dim=-1)
