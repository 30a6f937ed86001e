"""Read a legacy (non-zip) torch.save file's structure without torch and without tensor data.

``torch.save(obj, f, _use_new_zipfile_serialization=False)`` writes, one after another:
five pickles' worth of header and body, then the raw storages::

    pickle(MAGIC_NUMBER)  pickle(PROTOCOL_VERSION=1001)  pickle(sys_info dict)
    pickle(obj)           # tensors -> persistent ids ("storage", type, key, location, numel, view)
    pickle(sorted storage keys)
    for each key: int64 little-endian element count, then the storage's raw bytes

The pickles are read with the zip reader's restricted unpickler (io/torchzip.py: same
allowlist of globals, stand-ins instead of torch objects, nothing from the file runs); the
storage records are walked by their 8-byte counts only (``seek``, no data read), so each
tensor gets the absolute offset of its bytes and can be streamed like a zip record.
Anything this reader does not know raises :class:`NeedsTorch` (the caller falls back to
``torch.load(weights_only=True)``); a file whose records run past its end is an
:class:`InspectError`.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.torchzip import (
    STORAGE_DTYPES,
    MetaUnpickler,
    NeedsTorch,
    StorageRef,
    StorageType,
    check_views,
    iter_tensor_refs,
)

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
_CUT_SHORT = "the download or copy was probably cut short; fetch the file again"


class _HeaderUnpickler(MetaUnpickler):
    """The three header pickles hold ints and a dict: no global, no persistent id."""

    def find_class(self, module: str, name: str) -> Any:
        raise NeedsTorch(f"{module}.{name} in the legacy header")

    def persistent_load(self, pid: Any) -> Any:
        raise NeedsTorch("persistent id in the legacy header")


class _LegacyUnpickler(MetaUnpickler):
    """The body pickle: legacy persistent ids carry a 6th item, the (unused) view metadata."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storages: dict[str, StorageRef] = {}

    def persistent_load(self, pid: Any) -> StorageRef:
        if not isinstance(pid, tuple) or len(pid) not in (5, 6) or pid[0] not in ("storage", b"storage"):
            raise NeedsTorch(f"persistent id {pid!r}")  # e.g. ("module", cls, ...) of a full model
        if len(pid) == 6 and pid[5] is not None:
            raise NeedsTorch("storage view (pre-1.0 legacy file)")
        stype, key, location, numel = pid[1:5]
        if not isinstance(stype, StorageType) or not isinstance(numel, int) or numel < 0:
            raise NeedsTorch("unknown storage type")
        location = location.decode() if isinstance(location, bytes) else str(location)
        ref = StorageRef(str(key), STORAGE_DTYPES[stype.name][0], location, numel)
        known = self.storages.setdefault(ref.key, ref)
        if known.dtype != ref.dtype:
            raise NeedsTorch("one storage saved with two dtypes")
        return known


@dataclass
class LegacyFile:
    """A legacy torch.save file: where each storage's bytes start (the zip reader's
    :class:`~torchinspect.io.torchzip.TorchZip` counterpart)."""

    path: Path
    data_offsets: dict[str, int]  # storage key -> absolute byte offset of its data

    def storage_offset(self, key: str) -> int:
        try:
            return self.data_offsets[key]
        except KeyError:
            raise InspectError(f"{self.path}: storage {key} is missing from the file",
                               hint="the file is corrupt; fetch it again") from None


_PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                  IndexError, KeyError, struct.error, RecursionError, MemoryError, OverflowError)


def _load(unpickler: pickle.Unpickler) -> Any:
    try:
        return unpickler.load()
    except NeedsTorch:
        raise
    except _PICKLE_ERRORS as exc:
        raise NeedsTorch(f"pickle not understood: {type(exc).__name__}") from None


def read_torch_legacy_structure(path: str | os.PathLike[str]) -> tuple[Any, LegacyFile]:
    """Unpickle the file's object into plain Python with TensorRef leaves (no data read).

    Raises :class:`NeedsTorch` when the file needs anything outside the allowlist (a full
    model pickle, unknown globals, big-endian storages, pre-1.0 storage views) and
    :class:`InspectError` when its storage records are truncated or inconsistent.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        # pickle.Unpickler on a buffered file consumes exactly one pickle: fh.tell() is exact
        magic = _load(_HeaderUnpickler(fh))
        if magic != MAGIC_NUMBER:
            raise NeedsTorch("not the legacy magic number")
        if _load(_HeaderUnpickler(fh)) != PROTOCOL_VERSION:
            raise NeedsTorch("unknown legacy protocol version")
        sys_info = _load(_HeaderUnpickler(fh))
        if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
            raise NeedsTorch("big-endian or unknown sys_info")
        body = _LegacyUnpickler(fh, encoding="utf-8")
        obj = _load(body)
        keys = _load(_HeaderUnpickler(fh, encoding="utf-8"))
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise NeedsTorch("storage key list not understood")
        pos = fh.tell()
    storages = body.storages
    if set(keys) != set(storages):
        raise InspectError(f"{path}: the storage list does not match the tensors in the file",
                           hint="the file is corrupt; fetch it again")
    offsets: dict[str, int] = {}
    with open(path, "rb") as fh:
        for key in keys:
            fh.seek(pos)
            head = fh.read(8)
            if len(head) < 8:
                raise InspectError(f"{path} ends early (truncated checkpoint)", hint=_CUT_SHORT)
            (numel,) = struct.unpack("<q", head)
            ref = storages[key]
            if numel != ref.numel:
                raise InspectError(f"{path}: storage {key} holds {numel} elements, its tensors "
                                   f"say {ref.numel} (corrupt checkpoint)",
                                   hint="the file is corrupt; fetch it again")
            offsets[key] = pos + 8
            pos += 8 + ref.nbytes
            if pos > size:
                raise InspectError(f"{path} ends early: storage {key} runs past the end "
                                   "(truncated checkpoint)", hint=_CUT_SHORT)
    archive = LegacyFile(path, offsets)
    check_views(path, iter_tensor_refs(obj))
    return obj, archive
