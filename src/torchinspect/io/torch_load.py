"""The one call to ``torch.load``: weights_only, CPU, mmap for zip files; errors explained.

There is no automatic unsafe retry: a weights-only refusal becomes
:class:`UnsafeCheckpointError` naming the offending globals, and only an explicit
``trust_pickle=True`` (the ``--trust-pickle`` flag) loads a full pickle.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import struct
import zipfile
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, UnsafeCheckpointError
from torchinspect.io.formats import CheckpointFormat, zip_prefix

_CUT_SHORT = "the download or copy was probably cut short; fetch the file again"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def scan_pickle_globals(data: bytes, max_pickles: int = 4) -> list[str]:
    """Statically list ``module.name`` globals a pickle stream would import (nothing runs).

    Handles GLOBAL, INST and STACK_GLOBAL (protocol 4+); reads up to ``max_pickles``
    consecutive pickles (a legacy torch file is several).
    """
    found: list[str] = []
    stream = io.BytesIO(data)
    for _ in range(max_pickles):
        strings: list[str] = []
        try:
            for op, arg, _pos in pickletools.genops(stream):
                if op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                    found.append(arg.replace(" ", "."))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.append(f"{strings[-2]}.{strings[-1]}")
                elif isinstance(arg, str):
                    strings.append(arg)
        except Exception:  # noqa: BLE001 - a broken stream just ends the scan
            break
        if stream.tell() >= len(data):
            break
    return list(dict.fromkeys(found))


def unsafe_globals(path: Path, fmt: CheckpointFormat) -> list[str]:
    """Globals in the checkpoint that a weights-only load does not allow."""
    import torch
    from torch import _weights_only_unpickler as wou

    if fmt is CheckpointFormat.torch_zip:
        try:
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
        except Exception:  # noqa: BLE001 - fall back to our own scanner (STACK_GLOBAL etc.)
            with zipfile.ZipFile(path) as zf:
                data = zf.read((zip_prefix(zf.namelist()) or "") + "data.pkl")
    else:
        data = path.read_bytes()[: 64 * 1024 * 1024]
    allowed = set(wou._get_allowed_globals()) | set(wou._get_user_allowed_globals())
    return sorted(g for g in scan_pickle_globals(data) if g not in allowed)


def torch_load(path: str | os.PathLike[str], fmt: CheckpointFormat, *,
               trust_pickle: bool = False, mmap: bool = True, map_location: Any = "cpu") -> Any:
    """``torch.load`` with weights_only (unless trusted), CPU storages, mmap for zip files."""
    import torch

    path = Path(path)
    use_mmap = mmap and fmt is CheckpointFormat.torch_zip
    try:
        return torch.load(str(path), map_location=map_location, weights_only=not trust_pickle,
                          mmap=use_mmap)
    except pickle.UnpicklingError as exc:
        if trust_pickle:
            raise InspectError(f"{path}: cannot unpickle: {_first_line(exc)}",
                               hint="the file is corrupt or not a torch.save checkpoint") from None
        bad = unsafe_globals(path, fmt)
        if bad:
            raise UnsafeCheckpointError(str(path), bad) from None
        raise InspectError(
            f"{path}: a weights-only load refused the file: {_clean_reason(exc)}",
            hint="only if you trust this file and where it came from, pass --trust-pickle "
            "(it runs code from the file)",
        ) from None
    except (EOFError, RuntimeError, OSError, ValueError, zipfile.BadZipFile, struct.error,
            KeyError, IndexError, TypeError, AttributeError, MemoryError) as exc:
        raise _explain(path, fmt, exc) from None


def _clean_reason(exc: BaseException) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "Unsupported global" in line or "Unsupported operand" in line:
            return line.strip()[:300]
    return _first_line(exc)


def _explain(path: Path, fmt: CheckpointFormat, exc: BaseException) -> InspectError:
    msg = _first_line(exc)
    low = msg.lower()
    if isinstance(exc, MemoryError):
        return InspectError(f"{path}: ran out of memory while loading", hint="free memory or use a machine with more RAM")
    if isinstance(exc, EOFError) or "ran out of input" in low or "unexpected eof" in low:
        return InspectError(f"{path} ends early (truncated checkpoint)", hint=_CUT_SHORT)
    if "central directory" in low or "failed reading" in low or "failed finding" in low:
        return InspectError(f"{path}: truncated or corrupt zip checkpoint ({msg})", hint=_CUT_SHORT)
    if "invalid magic number" in low:
        return InspectError(f"{path}: not a torch.save checkpoint ({msg})",
                            hint="pass a file written by torch.save, or a .safetensors file")
    if "cuda" in low and "deserialize" in low:
        return InspectError(f"{path}: storages saved on a GPU could not be mapped to CPU ({msg})",
                            hint="report this; the reader maps every storage to CPU")
    if fmt is CheckpointFormat.torch_zip and ("size" in low or "storage" in low or "offset" in low):
        return InspectError(f"{path}: corrupt or truncated checkpoint ({msg})", hint=_CUT_SHORT)
    return InspectError(f"{path}: cannot read checkpoint ({type(exc).__name__}: {msg})",
                        hint="the file is corrupt, truncated, or not a torch.save checkpoint")


def load_state_dict_with_devices(path: Path, fmt: CheckpointFormat, key: str | None,
                                 trust_pickle: bool) -> tuple[Any, dict[str, Any], str | None,
                                                              dict[int, str]]:
    """Weights-only load (mmap, on CPU) that also records the device each storage was saved on.

    Returns ``(obj, state_dict, key_used, saved_location_by_storage_data_ptr)``.
    """
    from torchinspect.io.state_dict import extract_state_dict

    locations: dict[int, str] = {}

    def record(storage: Any, location: str) -> Any:
        locations[storage.data_ptr()] = location
        return storage

    obj = torch_load(path, fmt, trust_pickle=trust_pickle, mmap=True, map_location=record)
    sd, used = extract_state_dict(obj, key, source=str(path))
    return obj, sd, used, locations
