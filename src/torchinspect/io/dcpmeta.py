"""Read a torch.distributed.checkpoint ``.metadata`` file without torch.

DCP's ``FileSystemReader.read_metadata`` is a plain ``pickle.load`` of a ``Metadata``
dataclass. This restricted unpickler knows only DCP's metadata classes (read as plain
records: a class name and the state pickle hands to ``__setstate__``), torch dtypes,
``torch.Size``, the layout/memory-format helpers and ``pathlib`` paths; any other global
raises :class:`~torchinspect.io.torchzip.NeedsTorch` (the caller then checks the globals and
uses DCP's own reader). Nothing from the file runs, and ``torch.distributed`` is not imported.
"""

from __future__ import annotations

import io
import pickle
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.io.torchzip import DTYPE_SIZES, SAFE_GLOBALS, DType, NeedsTorch

_MD = "torch.distributed.checkpoint.metadata"
_RECORDS = {
    (_MD, n) for n in ("Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
                       "BytesStorageMetadata", "MetadataIndex", "StorageMeta")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo")}


class Record:
    """A DCP metadata object as plain data: ``kind`` (class name) and its pickled state."""

    kind = ""
    state: Any = None

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict) \
                and (state[0] is None or isinstance(state[0], dict)):  # (dict, slots)
            state = {**(state[0] or {}), **state[1]}
        self.state = state

    def field(self, name: str, index: int | None = None) -> Any:
        if isinstance(self.state, dict):
            return self.state.get(name)
        if isinstance(self.state, tuple) and index is not None and index < len(self.state):
            return self.state[index]
        return None


_CLASSES: dict[tuple[str, str], type[Record]] = {
    key: type(key[1], (Record,), {"kind": key[1]}) for key in _RECORDS
}


class _DcpUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        cls = _CLASSES.get((module, name))
        if cls is not None:
            return cls
        if module == "torch" and name in DTYPE_SIZES:
            return DType(name)
        if (module, name) == ("torch", "Size"):
            return tuple
        if (module, name) in (("torch.serialization", "_get_layout"), (_MD, "_MEM_FORMAT_ENCODING")):
            return lambda value: value
        fn = SAFE_GLOBALS.get((module, name))
        if fn is not None and not module.startswith("torch"):
            return fn
        raise NeedsTorch(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise NeedsTorch("persistent id in DCP metadata")


@dataclass(frozen=True)
class DcpEntry:
    """One ``state_dict_metadata`` entry: a tensor (shape, dtype, chunks) or a bytes entry."""

    fqn: str
    is_tensor: bool
    shape: tuple[int, ...] = ()
    dtype: str = ""
    chunks: int = 0


@dataclass(frozen=True)
class DcpChunk:
    """One saved piece of a tensor: where it sits in the tensor and where its bytes are
    (a ``torch.save`` of the piece, ``length`` bytes at ``offset`` of ``relative_path``)."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    relative_path: str
    offset: int
    length: int
    transformed: bool  # stored through a DCP storage extension (compression, ...)


@dataclass
class DcpMetadata:
    entries: list[DcpEntry]
    planner_data: dict[str, tuple[str, ...]]  # fqn -> path in the saved (nested) state_dict
    chunks: dict[str, list[DcpChunk]] = field(default_factory=dict)  # tensor fqn -> its pieces


#: a .metadata larger than this is refused unread
MAX_METADATA_BYTES = 1 << 30


def read_dcp_metadata(path: Path) -> DcpMetadata:
    """Parse ``.metadata`` (read once: a regular file, not a link) into :class:`DcpMetadata`;
    :class:`NeedsTorch` for anything unknown."""
    from torchinspect.io.regular import read_regular

    raw = bytes(read_regular(path, limit=MAX_METADATA_BYTES, follow=False))
    try:
        md = _DcpUnpickler(io.BytesIO(raw), encoding="utf-8").load()
    except NeedsTorch:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, struct.error, RecursionError) as exc:
        raise NeedsTorch(f"DCP metadata not understood: {type(exc).__name__}") from None
    if not isinstance(md, Record) or md.kind != "Metadata":
        raise NeedsTorch("not a DCP Metadata object")
    sdm = md.field("state_dict_metadata")
    if not isinstance(sdm, dict):
        raise NeedsTorch("no state_dict_metadata")
    entries = []
    for fqn, item in sdm.items():
        if not isinstance(fqn, str) or not isinstance(item, Record):
            raise NeedsTorch("unexpected state_dict_metadata entry")
        if item.kind == "BytesStorageMetadata":
            entries.append(DcpEntry(fqn, False))
            continue
        if item.kind != "TensorStorageMetadata":
            raise NeedsTorch(f"unexpected entry {item.kind}")
        props, size, chunks = item.field("properties"), item.field("size"), item.field("chunks")
        dtype = props.field("dtype", 0) if isinstance(props, Record) else None
        if not isinstance(dtype, DType) or not isinstance(size, tuple) or not isinstance(chunks, list) \
                or not all(isinstance(d, int) and d >= 0 for d in size):
            raise NeedsTorch("tensor metadata not understood")
        entries.append(DcpEntry(fqn, True, tuple(size), dtype.name, len(chunks)))
    planner = md.field("planner_data")
    paths: dict[str, tuple[str, ...]] = {}
    if isinstance(planner, dict):
        for k, v in planner.items():
            if isinstance(k, str) and isinstance(v, (tuple, list)) and v:
                paths[k] = tuple(str(p) for p in v)
    return DcpMetadata(entries, paths, _chunks(sdm, md.field("storage_data")))


def _ints(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, (tuple, list)) and all(type(x) is int and x >= 0 for x in v):
        return tuple(v)
    return None


def _chunks(sdm: dict[str, Any], storage: Any) -> dict[str, list[DcpChunk]]:
    """Every tensor's pieces, each joined to its storage record (``storage_data`` is keyed
    by (fqn, chunk offsets)); a piece without one, or a malformed one, is NeedsTorch."""
    if not isinstance(storage, dict):
        raise NeedsTorch("no storage_data")
    where: dict[tuple[str, tuple[int, ...]], Record] = {}
    for k, v in storage.items():
        if not isinstance(k, Record) or k.kind != "MetadataIndex" or not isinstance(v, Record):
            raise NeedsTorch("storage_data not understood")
        fqn, offset = k.field("fqn", 0), _ints(k.field("offset", 1))
        if isinstance(fqn, str) and offset is not None:
            where[(fqn, offset)] = v
    out: dict[str, list[DcpChunk]] = {}
    for fqn, item in sdm.items():
        if item.kind != "TensorStorageMetadata":
            continue
        pieces = []
        for chunk in item.field("chunks"):
            offsets = _ints(chunk.field("offsets", 0)) if isinstance(chunk, Record) else None
            sizes = _ints(chunk.field("sizes", 1)) if isinstance(chunk, Record) else None
            info = where.get((fqn, offsets)) if offsets is not None else None
            if sizes is None or info is None:
                raise NeedsTorch(f"no storage record for a piece of {fqn!r}")
            rel, off, length = (info.field("relative_path", 0), info.field("offset", 1),
                                info.field("length", 2))
            if not isinstance(rel, str) or type(off) is not int or type(length) is not int \
                    or off < 0 or length < 0:
                raise NeedsTorch(f"storage record of {fqn!r} not understood")
            assert offsets is not None
            pieces.append(DcpChunk(offsets, sizes, rel, off, length,
                                   bool(info.field("transform_descriptors", 3))))
        out[fqn] = pieces
    return out
