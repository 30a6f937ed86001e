import torch.nn.functional as F
from torch import nn

INPUT = ["30"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(30, 64)
        self.fc2 = nn.Linear(64, 64)
        self.head = nn.Linear(64, 5)

    def _block(self, layer, h):
        h = F.gelu(layer(h))
        return F.dropout(h, p=0.25)  # expect: TI004

    def forward(self, x):
        h = self._block(self.fc1, x)
        h = self._block(self.fc2, h)
        return self.head(h)


class Fixed(Net):
    def _block(self, layer, h):
        h = F.gelu(layer(h))
        return F.dropout(h, p=0.25, training=self.training)
