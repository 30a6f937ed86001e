import torch
from torch import nn

INPUT = ["10"]


class Net(nn.Module):
    """An autoencoder whose code is re-wrapped with torch.tensor."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(10, 32)
        self.decoder = nn.Linear(32, 10)

    def forward(self, x):
        code = torch.tanh(self.encoder(x))
        code = torch.tensor(code)  # expect: TI024
        return self.decoder(code)


class Fixed(Net):
    def forward(self, x):
        code = torch.tanh(self.encoder(x))
        return self.decoder(code)
