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


# The same facts in lines short enough for an 80-column terminal: reports show them as notes
# below their tables (a long heading wrapped over a narrow table reads badly).
CONVENTION_NOTES = (
    "MACs = multiply-accumulates (1 multiply-add = 1); FLOPs = 2 x MACs.",
    "torchvision's published 'GFLOPS' are MACs.",
    "Counted: matmul/linear, conv, attention (SDPA); bias excluded.",
    "Not counted: elementwise, normalization, pooling, softmax.",
)


def conventions() -> dict[str, str]:
    return {"macs": MACS_CONVENTION, "counted": COUNTED_CONVENTION}
