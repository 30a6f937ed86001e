import torch
from torch import nn

INPUT = ["16"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4),
                                        nn.LogSoftmax(dim=1))
        self.criterion = nn.CrossEntropyLoss()
        self.register_buffer("labels", torch.tensor([2]))

    def forward(self, x):
        return self.criterion(self.classifier(x), self.labels.expand(x.shape[0]))  # expect: TI022


class Fixed(Net):
    def __init__(self):
        super().__init__()
        self.criterion = nn.NLLLoss()
