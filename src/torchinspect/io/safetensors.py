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

from torchinspect.errors import InspectError, first_line
from torchinspect.io.formats import SAFETENSORS_MAX_HEADER

# safetensors dtype code -> (torch dtype name, bytes per element)
ST_DTYPES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2),
    "BF16": ("bfloat16", 2), "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2),
    "I8": ("int8", 1), "U8": ("uint8", 1), "BOOL": ("bool", 1), "U16": ("uint16", 2),
    "U32": ("uint32", 4), "U64": ("uint64", 8), "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1), "F8_E8M0": ("float8_e8m0fnu", 1), "C64": ("complex64", 8),
}
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


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse and validate a safetensors header without reading any tensor data."""
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
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(path, f"header is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    data_len = size - 8 - n
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, "__metadata__ must map strings to strings")
    entries: dict[str, SafetensorsEntry] = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise _bad(path, f"entry {name!r} is not an object")
        code, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(code, str) or code not in ST_DTYPES:
            raise _bad(path, f"tensor {name!r} has unknown dtype {code!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise _bad(path, f"tensor {name!r} has an invalid shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offs) or offs[0] > offs[1]):
            raise _bad(path, f"tensor {name!r} has invalid data_offsets {offs!r}")
        if offs[1] > data_len:
            raise _bad(path, f"tensor {name!r} ends at byte {offs[1]:,}, past the "
                       f"{data_len:,} bytes of data (truncated?)")
        dtype, itemsize = ST_DTYPES[code]
        expected = math.prod(shape) * itemsize
        if offs[1] - offs[0] != expected:
            raise _bad(path, f"tensor {name!r} has {offs[1] - offs[0]:,} bytes but shape "
                       f"{shape} of {dtype} needs {expected:,}")
        entries[name] = SafetensorsEntry(name, dtype, tuple(shape), 8 + n + offs[0], 8 + n + offs[1])
    spans = sorted((e.begin, e.end, e.name) for e in entries.values() if e.end > e.begin)
    for (_b0, e0, n0), (b1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if b1 < e0:
            raise _bad(path, f"tensors {n0!r} and {n1!r} have overlapping data_offsets")
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
