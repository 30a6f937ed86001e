import torch
from torch import nn

INPUT = ["48"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(48, 96), nn.Tanh())
        self.heads = {"age": nn.Linear(96, 1), "gender": nn.Linear(96, 2)}  # expect: TI001

    def forward(self, x):
        h = self.trunk(x)
        return torch.cat([head(h) for head in self.heads.values()], dim=-1)


class Fixed(Net):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"age": nn.Linear(96, 1), "gender": nn.Linear(96, 2)})
