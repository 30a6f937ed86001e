"""Checks and normal forms of the Python API's arguments, shared by every command core.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from typing import Any

from torchinspect.errors import InspectError


def as_list(value: Any) -> list[Any]:
    """A parameter that takes several texts (``layers``, ``select``, ``inputs`` ...): one
    string is one item, not its characters; None is none."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, os.PathLike)):  # one path is one item too
        return [value]
    return list(value)


def check_depth(depth: int) -> None:
    """The one depth check of the Python API (the CLI's --depth has min=0)."""
    if depth < 0:
        raise InspectError(f"depth={depth}: the depth must be 0 or more",
                           hint="e.g. depth=3 (0 shows the model as one row)")
