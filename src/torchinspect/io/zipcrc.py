"""Set the CRC-32 of stored (uncompressed) zip records whose bytes were written in place.

``inspect convert`` writes a ``.pt`` file as a ``torch.save`` skeleton (written under
``torch.serialization.skip_data``, so every ``data/<key>`` record is the right size but
holds no tensor bytes and a CRC-32 of 0) and then fills each record with ``os.pwrite``.
``torch.load`` never checks CRCs; ``zipfile``, ``unzip -t`` and other zip readers do. This
module writes the CRC-32 (computed by the caller while streaming the bytes) into every
place a zip reader may look for it:

* the central directory entry;
* the local file header, or when the record has a data descriptor (general-purpose flag
  bit 3, which torch's writer sets on every record), the descriptor that follows the data;
  a local header with bit 3 keeps CRC and sizes 0, as the zip specification requires.

Sizes are not changed: they are checked (in the central directory, its ZIP64 extra field,
and a ZIP64 data descriptor) against the byte counts the caller wrote, and any difference
stops with an error instead of producing a file whose records do not match their bytes.
The archive is parsed and validated by io/zipcheck.py (the rule every reader applies).
Only ``struct`` reads of the headers; no record data is read.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator

from torchinspect.io.zipcheck import ZipError, ZipMember, parse_zip

_DESCRIPTOR = b"PK\x07\x08"


class ZipPatchError(ZipError):
    """The archive is not laid out as expected; nothing more was written."""


class CrcStream:
    """Wrap an iterator of byte chunks; accumulate their CRC-32 and length as they pass
    (read ``crc`` once the iteration has ended). No chunk is kept."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self._chunks = chunks
        self.crc = 0
        self.nbytes = 0

    def __iter__(self) -> Iterator[memoryview]:
        for chunk in self._chunks:
            view = memoryview(chunk).cast("B")
            self.crc = zlib.crc32(view, self.crc)
            self.nbytes += view.nbytes
            yield view


def _pwrite_exact(fd: int, data: bytes, pos: int) -> None:
    if os.pwrite(fd, data, pos) != len(data):
        raise ZipPatchError(f"short write of {len(data)} bytes at {pos}")


def read_central_directory(fd: int) -> list[ZipMember]:
    """The archive's members, validated by io/zipcheck.py's rule (ZipPatchError otherwise)."""
    try:
        return parse_zip(fd)
    except ZipPatchError:
        raise
    except ZipError as exc:
        raise ZipPatchError(str(exc)) from None


def set_stored_crcs(fd: int, records: dict[str, tuple[int, int]]) -> None:
    """Write CRC-32s of stored records: ``records`` maps member name -> (crc32, byte count).

    ``fd`` is open for reading and writing. Every named record must exist, be stored
    (uncompressed) and have exactly that many bytes.
    """
    todo = dict(records)
    for entry in read_central_directory(fd):
        if entry.name not in todo:
            continue
        crc, nbytes = todo.pop(entry.name)
        if entry.method != 0:
            raise ZipPatchError(f"{entry.name}: record is compressed (method {entry.method})")
        if entry.file_size != nbytes or entry.compressed_size != nbytes:
            raise ZipPatchError(f"{entry.name}: record holds {entry.file_size} bytes, "
                                f"{nbytes} were written")
        if entry.flags & 0x08:
            _write_descriptor_crc(fd, entry, crc, nbytes, entry.data_offset + nbytes)
        else:
            _pwrite_exact(fd, struct.pack("<I", crc), entry.header_offset + 14)
        _pwrite_exact(fd, struct.pack("<I", crc), entry.central_offset + 16)
    if todo:
        raise ZipPatchError(f"records missing from the central directory: {sorted(todo)[:3]}")


def _write_descriptor_crc(fd: int, entry: ZipMember, crc: int, nbytes: int, data_end: int) -> None:
    """The data descriptor: [signature] crc32, sizes (4 or, for ZIP64, 8 bytes each)."""
    head = os.pread(fd, 28, data_end)
    pos = data_end + 4 if head[:4] == _DESCRIPTOR else data_end
    body = head[pos - data_end:]
    sizes4 = struct.unpack_from("<II", body, 4) if len(body) >= 12 else None
    sizes8 = struct.unpack_from("<QQ", body, 4) if len(body) >= 20 else None
    if sizes4 != (nbytes, nbytes) and sizes8 != (nbytes, nbytes):
        raise ZipPatchError(f"{entry.name}: data descriptor does not follow the record's "
                            f"{nbytes} bytes")
    _pwrite_exact(fd, struct.pack("<I", crc), pos)


def crc_mismatches(path: str | os.PathLike[str]) -> list[str]:
    """Problems of the archive's headers (a central directory CRC-32 that differs from its
    local header's or data descriptor's, among the rest of io/zipcheck.py's rule); empty when
    none. Reads headers only (the data CRCs themselves are checked by ``zipfile``'s ``testzip``).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        parse_zip(fd)
    except ZipError as exc:
        return [str(exc)]
    finally:
        os.close(fd)
    return []
