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
import zipfile
from pathlib import PurePosixPath

from torchinspect.errors import InspectError, UnsafeCheckpointError

_PICKLE_OBJECT_PREFIXES = ("custom_obj_", "opaque_obj_")


def _archive_root(names: list[str]) -> str:
    for n in names:
        if n.endswith("archive_format"):
            return n[: -len("archive_format")]
    return ""


def unsafe_payloads(path: str) -> list[str]:
    """Names of the archive members that only an unrestricted unpickler would load."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InspectError(f"{path}: not a readable .pt2 archive ({exc})",
                           hint="save it with torch.export.save(exported_program, path)") from None
    with zf:
        names = zf.namelist()
        root = _archive_root(names)
        if not any(n.endswith("archive_format") for n in names):
            return ["legacy (pre-2.7) archive format"]
        bad: list[str] = []
        for name in names:
            rel = name[len(root):] if name.startswith(root) else name
            parts = PurePosixPath(rel)
            if rel.startswith(("data/weights/", "data/constants/")):
                if rel.endswith("_config.json"):
                    try:
                        config = json.loads(zf.read(name)).get("config", {})
                    except (ValueError, AttributeError):
                        bad.append(f"{rel} (unreadable config)")
                        continue
                    for fqn, meta in config.items():
                        if meta.get("use_pickle"):
                            bad.append(f"{rel}: {fqn} (pickled)")
                        if str(meta.get("path_name", "")).startswith(_PICKLE_OBJECT_PREFIXES):
                            bad.append(f"{rel}: {fqn} (pickled object)")
                elif parts.suffix == ".pt":
                    bad.append(f"{rel} (legacy pickled payload)")
            elif rel.startswith("data/sample_inputs/"):
                if not _weights_only_loadable(zf.read(name)):
                    bad.append(f"{rel} (sample inputs need an unrestricted unpickler)")
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
