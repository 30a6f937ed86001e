"""safetensors: validate the header ourselves, read tensors, write files (shared tensors OK).

The header is parsed in pure Python (no torch), so metadata reads stay cheap. Validation
happens before the safetensors library sees the file: a header length past the end of the
file, over 100 MB, not JSON, or offsets that overlap or run past the data each give one
:class:`InspectError` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.dtypes import SIZES
from torchinspect.errors import InspectError, first_line
from torchinspect.io.formats import SAFETENSORS_MAX_HEADER

# safetensors dtype code -> (torch dtype name, bytes per element); the sizes are dtypes.py's
ST_DTYPES: dict[str, tuple[str, int]] = {code: (name, SIZES[name]) for code, name in {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64",
}.items()}
TORCH_TO_ST: dict[str, str] = {name: code for code, (name, _) in ST_DTYPES.items()}
TORCH_TO_ST["complex64"] = "C64"


@dataclass(frozen=True)
class SafetensorsEntry:
    name: str
    dtype: str  # torch dtype name, e.g. "float16"
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass
class SafetensorsHeader:
    path: Path
    header_len: int
    entries: dict[str, SafetensorsEntry]
    metadata: dict[str, str] = field(default_factory=dict)


def _bad(path: Path, what: str, hint: str | None = None) -> InspectError:
    return InspectError(f"{path}: invalid safetensors file: {what}",
                        hint=hint or "the file is corrupt or was cut short; fetch it again")


#: Largest element count (and byte count) of one tensor: what an int64 holds.
_MAX_COUNT = 2 ** 63 - 1


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


class _DuplicateKey(ValueError):
    pass


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX_COUNT


def _parse_header(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise _bad(path, f"the header names {exc.args[0]!r} twice") from None
    except RecursionError:
        raise _bad(path, "the header's JSON is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(path, f"header is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    return header


def _entry(path: Path, name: str, info: Any, base: int, data_len: int) -> SafetensorsEntry:
    if not isinstance(info, dict):
        raise _bad(path, f"entry {name!r} is not an object")
    code, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(code, str) or code not in ST_DTYPES:
        raise _bad(path, f"tensor {name!r} has unknown dtype {code!r}")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape) \
            or math.prod(shape) > _MAX_COUNT:
        raise _bad(path, f"tensor {name!r} has an invalid shape {str(shape)[:80]} (dimensions "
                   "must be integers from 0 to 2**63-1, with a product that fits too)")
    if not isinstance(offs, list) or len(offs) != 2 or not all(_is_count(o) for o in offs) \
            or offs[0] > offs[1]:
        raise _bad(path, f"tensor {name!r} has invalid data_offsets {str(offs)[:80]}")
    if offs[1] > data_len:
        raise _bad(path, f"tensor {name!r} ends at byte {offs[1]:,}, past the "
                   f"{data_len:,} bytes of data (truncated?)")
    dtype, itemsize = ST_DTYPES[code]
    expected = math.prod(shape) * itemsize
    if offs[1] - offs[0] != expected:
        raise _bad(path, f"tensor {name!r} has {offs[1] - offs[0]:,} bytes but shape "
                   f"{shape} of {dtype} needs {expected:,}")
    return SafetensorsEntry(name, dtype, tuple(shape), base + offs[0], base + offs[1])


def _check_tiling(path: Path, entries: dict[str, SafetensorsEntry], base: int, size: int) -> None:
    """The tensors cover the data section exactly, one after another (the safetensors
    library's rule): no overlap, no gap, no trailing bytes."""
    pos, prev = base, None
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin < pos:
            raise _bad(path, f"tensors {prev!r} and {e.name!r} have overlapping data_offsets")
        if e.begin > pos:
            raise _bad(path, f"{e.begin - pos:,} bytes before tensor {e.name!r} belong to no "
                       "tensor (a gap in the data)")
        pos, prev = e.end, e.name
    if pos != size:
        raise _bad(path, f"{size - pos:,} bytes after the last tensor belong to no tensor "
                   "(trailing data)")


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse and validate a safetensors header without reading any tensor data.

    The one validity rule for safetensors, shared by every reader (diff, convert, summary):
    header length within the file and under 100 MB; the header a JSON object without
    duplicate keys or deep nesting; ``__metadata__`` strings only; every tensor a known
    dtype, a shape of non-negative integers, and offsets whose size matches the shape; the
    tensors tile the data section exactly (no overlap, gap or trailing bytes).
    """
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        raise _bad(path, f"only {size} bytes, shorter than the 8-byte header length")
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > SAFETENSORS_MAX_HEADER:
            raise _bad(path, f"header length {n:,} bytes is over the 100 MB limit")
        if 8 + n > size:
            raise _bad(path, f"header length {n:,} bytes runs past the end of the "
                       f"{size:,}-byte file (truncated?)")
        raw = fh.read(n)
    header = _parse_header(path, raw)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, "__metadata__ must map strings to strings")
    entries = {name: _entry(path, name, info, 8 + n, size - 8 - n) for name, info in header.items()}
    _check_tiling(path, entries, 8 + n, size)
    return SafetensorsHeader(path, n, entries, dict(meta))


def load_safetensors(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Validate the header, then load every tensor on CPU. Returns (tensors, __metadata__)."""
    header = read_safetensors_header(path)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise _bad(Path(path), first_line(exc)) from None
    return tensors, header.metadata


def scalar_metadata(extras: dict[str, Any]) -> dict[str, str]:
    """Scalars (int, float, str, bool) of a checkpoint container, as safetensors metadata."""
    out: dict[str, str] = {}
    for k, v in extras.items():
        if isinstance(v, (bool, int, float, str)) and not isinstance(v, bytes):
            out[str(k)] = str(v)
    return out


def encode_header(entries: list[tuple[str, str, tuple[int, ...], int]],
                  metadata: dict[str, str]) -> tuple[bytes, list[tuple[int, int]]]:
    """Header bytes (length prefix + JSON padded to 8 bytes) for tensors laid out in order.

    ``entries`` holds (name, torch dtype name, shape, nbytes). Returns the header bytes and
    each tensor's (begin, end) offset relative to the start of the data section.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offsets = []
    pos = 0
    for name, dtype, shape, nbytes in entries:
        if dtype not in TORCH_TO_ST:
            raise InspectError(f"tensor {name!r}: dtype {dtype} cannot be stored in safetensors",
                               hint="write a .pt file instead")
        header[name] = {"dtype": TORCH_TO_ST[dtype], "shape": list(shape),
                        "data_offsets": [pos, pos + nbytes]}
        offsets.append((pos, pos + nbytes))
        pos += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offsets
