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
from dataclasses import dataclass
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


@dataclass
class DcpMetadata:
    entries: list[DcpEntry]
    planner_data: dict[str, tuple[str, ...]]  # fqn -> path in the saved (nested) state_dict


def read_dcp_metadata(path: Path) -> DcpMetadata:
    """Parse ``.metadata`` into :class:`DcpMetadata`; :class:`NeedsTorch` for anything unknown."""
    raw = path.read_bytes()
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
    return DcpMetadata(entries, paths)
