from torch import nn


def add_heads(model, width, names):
    """Attach one regression head per target to ``model``."""
    model.heads = {name: nn.Linear(width, 1) for name in names}  # expect: TI001


def add_registered_heads(model, width, names):
    model.heads = nn.ModuleDict({name: nn.Linear(width, 1) for name in names})
