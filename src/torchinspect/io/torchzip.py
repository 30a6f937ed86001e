"""Read a torch.save zip checkpoint's structure without torch and without tensor data.

The pickle in ``data.pkl`` is read by a restricted unpickler whose ``find_class`` knows a
dozen harmless names (tensor rebuild functions, storage types, dtypes, OrderedDict) and maps
each to a plain-Python stand-in; any other global stops the read with
:class:`NeedsTorch` so the caller falls back to ``torch.load(weights_only=True)``, which
gives the real refusal. No code from the file runs, and no tensor byte is read: each tensor
becomes a :class:`TensorRef` with its shape, dtype, saved device and byte location, so a
2 GB checkpoint is described in milliseconds with a few MB of memory.
"""

from __future__ import annotations

import builtins
import collections
import io
import math
import os
import pickle
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.dtypes import SIZES
from torchinspect.errors import InspectError
from torchinspect.io.formats import zip_prefix
from torchinspect.io.zipcheck import STORED, open_zip

# torch storage class name -> (dtype name, itemsize); the sizes are dtypes.py's
STORAGE_DTYPES: dict[str, tuple[str, int]] = {cls: (name, SIZES[name]) for cls, name in {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "UntypedStorage": "uint8",
}.items()}
DTYPE_SIZES = SIZES  # bytes per element by torch dtype name (dtypes.py)

class NeedsTorch(Exception):
    """The pickle uses a global outside this reader's allowlist; let torch.load decide."""


@dataclass(frozen=True)
class StorageRef:
    key: str  # record name under data/
    dtype: str
    location: str  # device the storage was saved on, e.g. "cuda:0"
    numel: int  # elements of the storage's dtype

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_SIZES[self.dtype]


@dataclass(frozen=True)
class TensorRef:
    """A tensor described by its pickle: where its bytes are, not the bytes."""

    storage: StorageRef
    offset: int  # in elements of dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_SIZES.get(self.dtype, 1)

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, st in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and st != expected:
                return False
            expected *= size
        return True


@dataclass(frozen=True)
class StorageType:
    name: str


@dataclass(frozen=True)
class DType:
    name: str

    def __str__(self) -> str:
        return f"torch.{self.name}"


def _rebuild_tensor_v2(storage: StorageRef, offset: int, size: Any, stride: Any,
                       requires_grad: bool = False, hooks: Any = None, metadata: Any = None) -> TensorRef:
    return TensorRef(storage, int(offset), tuple(size), tuple(stride), storage.dtype)


def _rebuild_tensor_v3(storage: StorageRef, offset: int, size: Any, stride: Any,
                       requires_grad: bool, hooks: Any, dtype: DType, metadata: Any = None) -> TensorRef:
    return TensorRef(storage, int(offset), tuple(size), tuple(stride), dtype.name)


def _rebuild_parameter(data: TensorRef, requires_grad: bool = True, hooks: Any = None) -> TensorRef:
    return data


def _rebuild_parameter_with_state(data: TensorRef, requires_grad: bool, hooks: Any, state: Any) -> TensorRef:
    return data


def _codecs_encode(obj: str, encoding: str = "utf-8") -> bytes:
    return obj.encode("latin1" if encoding == "latin1" else encoding)


class PlainNamespace(dict[str, Any]):
    """``argparse.Namespace`` read as plain data (its fields)."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.update(state)


def _path(*parts: Any) -> str:
    return "/".join(str(p) for p in parts)


def _defaultdict(factory: Any = None, *args: Any) -> dict[Any, Any]:
    return dict(*args)


def _deque(items: Any = (), maxlen: Any = None) -> list[Any]:
    return list(items)


SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    # harmless globals of training scripts (io/torch_load.HARMLESS_GLOBALS), as plain data
    ("argparse", "Namespace"): PlainNamespace,
    **{("pathlib", n): _path for n in ("PosixPath", "WindowsPath", "PurePosixPath",
                                       "PureWindowsPath", "Path")},
    ("collections", "defaultdict"): _defaultdict,
    ("collections", "Counter"): dict,
    ("collections", "deque"): _deque,
    **{(m, n): getattr(builtins, n) for m in ("builtins", "__builtin__")
       for n in ("list", "dict", "int", "float", "str", "tuple", "set")},
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch", "Size"): tuple,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
    ("_codecs", "encode"): _codecs_encode,
}


class MetaUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        fn = SAFE_GLOBALS.get((module, name))
        if fn is not None:
            return fn
        if module == "torch" and name in STORAGE_DTYPES:
            return StorageType(name)
        if (module, name) == ("torch.storage", "UntypedStorage"):  # float8, uint16/32/64
            return StorageType("UntypedStorage")
        if module == "torch" and name in DTYPE_SIZES:
            return DType(name)
        raise NeedsTorch(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] in ("storage", b"storage")):
            raise NeedsTorch(f"persistent id {pid!r}")
        _, stype, key, location, numel = pid
        if not isinstance(stype, StorageType):
            raise NeedsTorch("unknown storage type")
        dtype = STORAGE_DTYPES[stype.name][0]
        location = location.decode() if isinstance(location, bytes) else str(location)
        return StorageRef(str(key), dtype, location, int(numel))


#: data.pkl larger than this is refused before it is read (a state_dict's pickle is a few MB;
#: optimizer state with Python lists tens of MB).
MAX_PICKLE_BYTES = 1 << 30


@dataclass
class TorchZip:
    """A torch.save zip archive: its pickle prefix and where each storage's bytes are."""

    path: Path
    prefix: str
    data_offsets: dict[str, int]  # storage key -> absolute byte offset of its data
    record_sizes: dict[str, int] = field(default_factory=dict)  # storage key -> bytes held
    compressed: frozenset[str] = frozenset()  # storage keys whose records are deflated

    def storage_offset(self, key: str) -> int:
        try:
            return self.data_offsets[key]
        except KeyError:
            raise InspectError(f"{self.path}: storage data/{key} is missing from the archive",
                               hint="the file is corrupt; fetch it again") from None


def open_torch_zip(path: str | os.PathLike[str]) -> tuple[TorchZip, bytes]:
    """Open the archive (validated first, io/zipcheck.py): the record table and the
    ``data.pkl`` bytes torch would read."""
    archive = open_zip(path)
    prefix = zip_prefix(archive.names)
    if prefix is None:
        raise InspectError(f"{archive.path}: no data.pkl in the zip archive's first folder",
                           hint="pass a file written by torch.save")
    pkl = archive.read(prefix + "data.pkl", limit=MAX_PICKLE_BYTES)
    _check_small_records(archive, prefix)
    records = {m.name[len(prefix) + 5:]: m for m in archive.members.values()
               if m.name.startswith(prefix + "data/")}
    return TorchZip(archive.path, prefix, {k: m.data_offset for k, m in records.items()},
                    {k: m.file_size for k, m in records.items()},
                    frozenset(k for k, m in records.items() if m.method != STORED)), pkl


# the small records torch.load parses besides data.pkl: what it accepts in each
_SMALL_RECORDS = {"byteorder": rb"little|big", "version": rb"\d+\n?", ".format_version": rb"\d+\n?",
                  ".storage_alignment": rb"\d+\n?", ".data/version": rb"\d+\n?",
                  ".data/serialization_id": rb"\d+"}


def _check_small_records(archive: Any, prefix: str) -> None:
    """The records torch.load reads beside the pickle (byte order, versions, alignment, the
    serialization id) hold what it can parse: a file torch refuses is never called loadable."""
    for name, pattern in _SMALL_RECORDS.items():
        if prefix + name in archive.members:
            value = archive.read(prefix + name, limit=64)
            if re.fullmatch(pattern, value) is None:
                raise InspectError(f"{archive.path}: record {name} holds {value[:20]!r}, not "
                                   "what torch.load reads (corrupt checkpoint)",
                                   hint="the file is corrupt; fetch it again")


def read_torch_zip_structure(path: str | os.PathLike[str]) -> tuple[Any, TorchZip]:
    """Unpickle ``data.pkl`` into plain Python with :class:`TensorRef` leaves (no data read).

    Every storage record must hold exactly the bytes the pickle says and every tensor must
    lie inside its storage (:func:`check_storages`), else :class:`InspectError`. Raises
    :class:`NeedsTorch` when the pickle needs anything outside the small allowlist, or a
    record is compressed (the caller then uses ``torch.load(weights_only=True)``, which
    refuses or handles it).
    """
    archive, pkl = open_torch_zip(path)
    try:
        obj = MetaUnpickler(io.BytesIO(pkl), encoding="utf-8").load()
    except NeedsTorch:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, struct.error, RecursionError, OverflowError) as exc:
        raise NeedsTorch(f"pickle not understood: {exc}") from None
    refs = iter_tensor_refs(obj)
    for ref in refs:
        key = ref.storage.key
        archive.storage_offset(key)  # present
        held = archive.record_sizes[key]
        if held != ref.storage.nbytes:
            raise InspectError(f"{archive.path}: storage data/{key} holds {held:,} bytes, its "
                               f"tensors say {ref.storage.nbytes:,} ({ref.storage.numel:,} "
                               f"{ref.storage.dtype}) (corrupt checkpoint)",
                               hint="the file is corrupt; fetch it again")
    check_views(archive.path, refs)
    if any(ref.storage.key in archive.compressed for ref in refs):
        raise NeedsTorch("compressed storage record")
    return obj, archive


def check_views(path: Path, refs: list[TensorRef]) -> None:
    """Every tensor (offset, sizes, strides) lies inside its storage; else InspectError."""
    for ref in refs:
        if len(ref.shape) != len(ref.stride) or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < _INT64
                for d in (*ref.shape, *ref.stride)) or not _fits_int64(ref.shape):
            raise InspectError(f"{path}: a tensor of storage {ref.storage.key} has an invalid shape "
                               f"{ref.shape} or stride {ref.stride} (corrupt checkpoint)",
                               hint="the file is corrupt; fetch it again")
        if ref.offset < 0 or (ref.numel and (ref.offset + _extent(ref)) * DTYPE_SIZES.get(ref.dtype, 1)
                              > ref.storage.nbytes):
            raise InspectError(f"{path}: a tensor (offset {ref.offset:,}, shape {list(ref.shape)}) "
                               f"reaches past the end of its storage {ref.storage.key} "
                               f"({ref.storage.nbytes:,} bytes) (corrupt checkpoint)",
                               hint="the file is corrupt; fetch it again")


_INT64 = 2**63  # torch sizes are int64: no dimension, stride or product reaches it


def _fits_int64(shape: tuple[int, ...]) -> bool:
    """The product of the non-zero dimensions fits int64 (torch computes it even for an
    empty tensor: [0, 2**62, 4] is refused by torch.load, so by every reader here too)."""
    n = 1
    for d in shape:
        n *= max(d, 1)
    return n < _INT64


def _extent(ref: TensorRef) -> int:
    """Elements spanned by a strided view (1 + the largest index offset)."""
    return 1 + sum((n - 1) * s for n, s in zip(ref.shape, ref.stride, strict=True) if n > 0)


def iter_tensor_refs(obj: Any, _depth: int = 0) -> list[TensorRef]:
    """Every TensorRef inside nested dicts/lists/tuples."""
    out: list[TensorRef] = []
    stack: list[Any] = [obj]
    seen: set[int] = set()  # a forged pickle can make a container hold itself (memo GET)
    while stack:
        cur = stack.pop()
        if isinstance(cur, TensorRef):
            out.append(cur)
            continue
        if not isinstance(cur, (dict, list, tuple, set, frozenset)) or id(cur) in seen:
            continue
        seen.add(id(cur))
        stack.extend(cur.values() if isinstance(cur, dict) else cur)
    return out
