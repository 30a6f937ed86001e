from torch import nn

INPUT = ["5,6"]


class Net(nn.Module):
    """A stateful GRU that carries its hidden state from one batch to the next."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 16, batch_first=True)
        self.head = nn.Linear(16, 2)
        self.hidden = None

    def forward(self, x):
        out, self.hidden = self.rnn(x, self.hidden)  # expect: TI026
        return self.head(out[:, -1])


class Fixed(Net):
    def forward(self, x):
        out, hidden = self.rnn(x, self.hidden)
        self.hidden = hidden.detach()
        return self.head(out[:, -1])
