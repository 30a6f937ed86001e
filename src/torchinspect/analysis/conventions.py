"""The counting conventions every MAC/FLOP figure is stated with (text and JSON).

What is counted is read from the MAC-formula registry (``trace/formulas.py``), so the
"Counted:" note names every family of ops that has a formula, and nothing else.
"""

from __future__ import annotations

import textwrap

MACS_CONVENTION = (
    "MACs = multiply-accumulates (1 multiply-add = 1); FLOPs = 2 x MACs "
    "(torchvision's published 'GFLOPS' are MACs)."
)
NOT_COUNTED = "elementwise, normalization, pooling, softmax"
NOTE_WIDTH = 78  # notes below a table fit an 80-column terminal


def counted_families() -> list[str]:
    from torchinspect.trace.formulas import counted_families as families  # torch

    return families()


def conventions() -> dict[str, str]:
    counted = ", ".join(counted_families())
    return {"macs": MACS_CONVENTION,
            "counted": f"Counted: {counted}, bias excluded; not counted: {NOT_COUNTED}."}


def convention_notes() -> list[str]:
    """The same facts in lines short enough for an 80-column terminal: reports show them as
    notes below their tables (a long heading wrapped over a narrow table reads badly)."""
    counted = ", ".join(counted_families())
    return [
        "MACs = multiply-accumulates (1 multiply-add = 1); FLOPs = 2 x MACs.",
        "torchvision's published 'GFLOPS' are MACs.",
        *textwrap.wrap(f"Counted: {counted}; bias excluded.", NOTE_WIDTH,
                       subsequent_indent="  "),
        f"Not counted: {NOT_COUNTED}.",
    ]
