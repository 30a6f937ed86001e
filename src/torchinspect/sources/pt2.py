"""Safety gate for torch.export ``.pt2`` archives (the reader is io/pt2.py).

Without ``--trust-pickle`` a ``.pt2`` is read by :func:`torchinspect.io.pt2.load_exported_program`
only: the file is read once, its members must be the exact layout ``torch.export.save``
writes, and the program is rebuilt from those bytes with safe primitives. ``torch.export.load``
(pickles, legacy fallbacks, AOTInductor libraries) runs only with ``--trust-pickle``.
"""

from __future__ import annotations

from torchinspect.io.pt2 import RefusedArchiveError, read_layout, refusals


def unsafe_payloads(path: str) -> list[str]:
    """Members (with why) that only ``--trust-pickle`` may load; raises InspectError for a
    layout no writer makes (``..``, absolute names, unknown or outside members)."""
    return refusals(path, read_layout(path))


def check_pt2(path: str, trust_pickle: bool) -> None:
    """Raise (exit 2) when loading ``path`` could run code from it. With ``trust_pickle`` the
    zip and its member names are still checked (no writer makes ``..`` or duplicates)."""
    layout = read_layout(path)
    if trust_pickle:
        return
    bad = refusals(path, layout)
    if bad:
        raise RefusedArchiveError(path, bad)
