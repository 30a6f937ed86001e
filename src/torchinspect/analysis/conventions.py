"""The counting conventions every MAC/FLOP figure is stated with (text and JSON)."""

from __future__ import annotations

MACS_CONVENTION = (
    "MACs = multiply-accumulates (1 multiply-add = 1); FLOPs = 2 x MACs "
    "(torchvision's published 'GFLOPS' are MACs)."
)
COUNTED_CONVENTION = (
    "Counted: matmul/linear, conv, attention (SDPA), bias excluded; not counted: "
    "elementwise, normalization, pooling, softmax."
)


def conventions() -> dict[str, str]:
    return {"macs": MACS_CONVENTION, "counted": COUNTED_CONVENTION}
