"""More classic mistakes for ``inspect doctor``, each with ``fixed=True`` for its clean twin.

Every class is a small MLP/conv net on ``(1, 32)`` (or ``(1, 3, 16, 16)``) input that runs and
gives an output; with ``fixed=False`` one statement holds the mistake (marked ``# mistake``),
with ``fixed=True`` that statement is written the right way and nothing else changes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IN, HIDDEN, CLASSES = 32, 64, 10


class InplaceAfterSigmoid(nn.Module):
    """TI010: ``nn.ReLU(inplace=True)`` on a sigmoid's output, which sigmoid's backward needs."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, HIDDEN)
        self.gate = nn.ReLU(inplace=not fixed)  # mistake when inplace=True
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.fc(x))
        h = self.gate(h)
        return self.head(h)


class WrongWidth(nn.Module):
    """TI011: the head expects 32 features but gets 64: the forward raises."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN if fixed else IN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc(x))
        return self.head(h)  # mistake when the head expects IN features


class ParameterInForward(nn.Module):
    """TI012: the head's weight is a new ``nn.Parameter`` on every call."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        if fixed:
            self.w = nn.Parameter(torch.randn(HIDDEN, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc(x))
        w = self.w if self.fixed else nn.Parameter(torch.randn(HIDDEN, CLASSES))  # mistake
        return h @ w


class LogOfSoftmax(nn.Module):
    """TI013: ``torch.log(F.softmax(...))`` instead of ``F.log_softmax``."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(F.relu(self.fc(x)))
        if self.fixed:
            return F.log_softmax(logits, dim=-1)
        return torch.log(F.softmax(logits, dim=-1))  # mistake


class HostTensor(nn.Module):
    """TI014: a position vector made with ``torch.arange`` without ``device=``."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            ramp = torch.arange(IN, device=x.device, dtype=x.dtype) / IN
        else:
            ramp = torch.arange(IN, dtype=x.dtype) / IN  # mistake
        return self.head(F.relu(self.fc(x + ramp)))


class SyncInForward(nn.Module):
    """TI015: ``.item()`` in forward to pick a branch (a device sync, a graph break)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.fixed:
            h = h.clamp(max=10.0)
        elif h.max().item() > 10.0:  # mistake
            h = h.clamp(max=10.0)
        return self.head(F.relu(h))


class ConvBiasBatchNorm(nn.Module):
    """TI016: a conv with a bias straight into BatchNorm (the bias is cancelled)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, HIDDEN, 3, padding=1, bias=fixed is False)  # mistake: bias=True
        self.bn = nn.BatchNorm2d(HIDDEN)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(F.relu(self.bn(self.conv(x))))
        return self.head(h.flatten(1))


class RepeatedLayer(nn.Module):
    """TI017: ``nn.ModuleList([layer] * 4)``: one layer four times, not four layers."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, HIDDEN)
        if fixed:
            self.blocks = nn.ModuleList([nn.Linear(HIDDEN, HIDDEN) for _ in range(4)])
        else:
            layer = nn.Linear(HIDDEN, HIDDEN)
            self.blocks = nn.ModuleList([layer] * 4)  # mistake
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc(x))
        for block in self.blocks:
            h = F.relu(block(h))
        return self.head(h)


class DataInForward(nn.Module):
    """TI018: ``self.scale.data`` in forward (no gradient reaches ``scale``)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.scale = nn.Parameter(torch.ones(IN))
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale if self.fixed else self.scale.data  # mistake
        return self.head(F.relu(self.fc(x * scale)))


class ConstantInit(nn.Module):
    """TI019: the hidden layer initialised to a constant (all units identical)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)
        if not fixed:
            nn.init.constant_(self.fc.weight, 0.01)  # mistake

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.fc(x)))


class Float64Layer(nn.Module):
    """TI020: one layer in float64 (the input is cast up and back)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        dtype = torch.float32 if fixed else torch.float64  # mistake: float64
        self.fc = nn.Linear(IN, HIDDEN, dtype=dtype)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x.to(self.fc.weight.dtype)).float()
        return self.head(F.relu(h))


class TrainableBuffer(nn.Module):
    """TI021: a learnable temperature registered as a buffer (the optimizer never sees it)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(IN, CLASSES)
        if fixed:
            self.temperature = nn.Parameter(torch.ones(1))
        else:
            self.register_buffer("temperature", torch.ones(1, requires_grad=True))  # mistake

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) / self.temperature


class DoubleLogSoftmax(nn.Module):
    """TI022: ``F.log_softmax`` output handed to ``F.cross_entropy`` (it applies its own)."""

    label: torch.Tensor

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.register_buffer("label", torch.tensor([3]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(F.relu(self.fc(x)))
        target = self.label.expand(x.shape[0])
        if self.fixed:  # per-sample losses: the zoo's outputs keep the batch dimension
            return F.cross_entropy(logits, target, reduction="none")
        return F.cross_entropy(F.log_softmax(logits, dim=-1), target, reduction="none")  # mistake


class SharedBatchNorm(nn.Module):
    """TI023: one BatchNorm called after two different convs (one set of statistics)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        if fixed:
            self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        if self.fixed:
            h = F.relu(self.bn2(self.conv2(h)))
        else:
            h = F.relu(self.bn1(self.conv2(h)))  # mistake: bn1 again
        return self.head(h.mean((2, 3)))


class RewrappedActivation(nn.Module):
    """TI024: ``torch.tensor(h)`` of an activation (a copy without autograd history)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc(x))
        if not self.fixed:
            h = torch.tensor(h)  # mistake
        return self.head(h)


class SoftmaxOneUnit(nn.Module):
    """TI025: a single output unit through softmax (always 1.0)."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.fc = nn.Linear(IN, HIDDEN)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logit = self.head(F.relu(self.fc(x)))
        if self.fixed:
            return torch.sigmoid(logit)
        return F.softmax(logit, dim=1)  # mistake


class KeptHidden(nn.Module):
    """TI026: a GRU's hidden state kept on the module, still attached to the graph."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.rnn = nn.GRU(IN, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.state: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, state = self.rnn(x, self.state)
        if self.fixed:
            self.state = state.detach()
        else:
            self.state = state  # mistake
        return self.head(out[:, -1])


class ViewAsTranspose(nn.Module):
    """TI027: ``x.view(B, C, T)`` of a (B, T, C) sequence, meant as a transpose."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        self.conv = nn.Conv1d(IN, HIDDEN, 3, padding=1)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        if self.fixed:
            h = x.transpose(1, 2)
        else:
            h = x.view(b, c, t)  # mistake
        return self.head(F.relu(self.conv(h)).mean(-1))
