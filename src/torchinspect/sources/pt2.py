"""Safety gate for torch.export ``.pt2`` archives.

``torch.export.load`` unpickles some payloads with ``weights_only=False`` (pickled weights
and constants, custom/opaque objects, legacy files) and retries a failed weights-only load
of the sample inputs without the restriction. So before handing a file to it we read the
archive ourselves and refuse, without ``--trust-pickle``, anything that would reach an
unrestricted unpickler. Plain tensor payloads and weights-only-loadable sample inputs pass.
"""

from __future__ import annotations

import io
import json
from pathlib import PurePosixPath

from torchinspect.errors import UnsafeCheckpointError
from torchinspect.io.zipcheck import check_zip_bytes, open_zip

_PICKLE_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")


#: A weights/constants config or sample inputs larger than this is refused unread.
_MAX_MEMBER_BYTES = 256 * 1024 * 1024


def unsafe_payloads(path: str) -> list[str]:
    """Names of the archive members that only an unrestricted unpickler would load.

    The archive is validated first (io/zipcheck.py): a duplicated member name, headers that
    disagree or a compression bomb are refused, so the members read here are the very bytes
    ``torch.export.load`` reads, from the folder it reads them (the first entry's).
    """
    archive = open_zip(path)
    root = archive.torch_prefix or ""
    names = [n[len(root):] for n in archive.names if n.startswith(root)]
    if "archive_format" not in names:
        return ["legacy (pre-2.7) archive format"]
    bad: list[str] = []
    for rel in names:
        if rel.startswith(("data/weights/", "data/constants/")):
            if rel.endswith("_config.json"):
                bad += _pickled_in_config(rel, archive.read(root + rel, limit=_MAX_MEMBER_BYTES))
            elif PurePosixPath(rel).suffix == ".pt":
                bad.append(f"{rel} (legacy pickled payload)")
        elif rel.startswith("data/sample_inputs/"):
            data = archive.read(root + rel, limit=_MAX_MEMBER_BYTES)
            if data.startswith(b"PK"):  # a torch.save zip inside the archive: the same rule
                check_zip_bytes(data, f"{path}: {rel}")
            if not _weights_only_loadable(data):
                bad.append(f"{rel} (sample inputs need an unrestricted unpickler)")
    return bad


def _pickled_in_config(rel: str, raw: bytes) -> list[str]:
    try:
        config = json.loads(raw).get("config", {})
        items = list(config.items())
    except (ValueError, AttributeError, RecursionError):
        return [f"{rel} (unreadable config)"]
    bad = []
    for fqn, meta in items:
        if not isinstance(meta, dict):
            bad.append(f"{rel}: {fqn} (unreadable entry)")
            continue
        if meta.get("use_pickle"):
            bad.append(f"{rel}: {fqn} (pickled)")
        if str(meta.get("path_name", "")).startswith(_PICKLE_OBJECT_PREFIXES):
            bad.append(f"{rel}: {fqn} (pickled object)")
    return bad


def _weights_only_loadable(data: bytes) -> bool:
    import torch

    if not data:
        return True
    try:
        torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception:
        return False
    return True


def check_pt2(path: str, trust_pickle: bool) -> None:
    """Raise UnsafeCheckpointError when loading ``path`` could run code from it."""
    if trust_pickle:
        return
    bad = unsafe_payloads(path)
    if bad:
        raise UnsafeCheckpointError(path, bad)
