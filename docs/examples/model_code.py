"""Small misbehaving models for docs/concepts/model-code.md (each a Linear(4, 2))."""

import sys

import torch
from torch import nn


class Prints(nn.Module):
    """Prints from __init__ and forward: the prints go to stderr, the report to stdout."""

    example_input = "1,4"

    def __init__(self):
        super().__init__()
        print("building Prints")
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        print("forward of Prints")
        return self.fc(x)


class Exits(nn.Module):
    """Ends the process from its forward."""

    example_input = "1,4"

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        sys.exit(0)


class SetsDtype(nn.Module):
    """Changes torch's default dtype for everything built after it."""

    example_input = "1,4"

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        torch.set_default_dtype(torch.float64)

    def forward(self, x):
        return self.fc(x)


class Plain(nn.Module):
    example_input = "1,4"

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
