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
Only ``struct`` reads of the headers; no record data is read.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_DESCRIPTOR = b"PK\x07\x08"
_U32_MAX = 0xFFFFFFFF
_U16_MAX = 0xFFFF


class ZipPatchError(ValueError):
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


@dataclass(frozen=True)
class CentralEntry:
    name: str
    offset: int  # of the central directory entry
    flags: int
    method: int
    crc: int
    compressed_size: int
    file_size: int
    header_offset: int  # of the local file header


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) != n:
        raise ZipPatchError(f"short read of {n} bytes at {pos}")
    return data


def _pwrite_exact(fd: int, data: bytes, pos: int) -> None:
    if os.pwrite(fd, data, pos) != len(data):
        raise ZipPatchError(f"short write of {len(data)} bytes at {pos}")


def _central_directory(fd: int) -> tuple[int, int, int]:
    """(offset, size, number of entries) of the central directory."""
    size = os.fstat(fd).st_size
    tail_len = min(size, 22 + _U16_MAX + 20)
    tail = _pread_exact(fd, tail_len, size - tail_len)
    at = tail.rfind(_EOCD)
    while at >= 0 and at + 22 + struct.unpack_from("<H", tail, at + 20)[0] != tail_len:
        at = tail.rfind(_EOCD, 0, at)  # an EOCD signature inside the comment
    if at < 0:
        raise ZipPatchError("no end of central directory record")
    _, _, _, _, count, cd_size, cd_offset, _ = struct.unpack_from("<4sHHHHIIH", tail, at)
    if count == _U16_MAX or cd_size == _U32_MAX or cd_offset == _U32_MAX:
        eocd_pos = size - tail_len + at
        if eocd_pos < 20:
            raise ZipPatchError("ZIP64 end of central directory locator missing")
        loc = _pread_exact(fd, 20, eocd_pos - 20)
        if loc[:4] != _ZIP64_LOCATOR:
            raise ZipPatchError("ZIP64 end of central directory locator missing")
        (z64_pos,) = struct.unpack_from("<Q", loc, 8)
        z64 = _pread_exact(fd, 56, z64_pos)
        if z64[:4] != _ZIP64_EOCD:
            raise ZipPatchError("bad ZIP64 end of central directory record")
        count, cd_size, cd_offset = struct.unpack_from("<QQQ", z64, 32)
    if cd_offset + cd_size > size:
        raise ZipPatchError("central directory runs past the end of the file")
    return cd_offset, cd_size, count


def _zip64_values(extra: bytes, wanted: list[str]) -> dict[str, int]:
    """Values of the ZIP64 extra field (0x0001), in the order the spec lists them."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 0x0001:
            body = extra[pos + 4:pos + 4 + length]
            if len(body) < 8 * len(wanted):
                raise ZipPatchError("ZIP64 extra field too short")
            return dict(zip(wanted, struct.unpack_from(f"<{len(wanted)}Q", body), strict=True))
        pos += 4 + length
    if wanted:
        raise ZipPatchError("ZIP64 extra field missing")
    return {}


def read_central_directory(fd: int) -> list[CentralEntry]:
    cd_offset, cd_size, count = _central_directory(fd)
    cd = _pread_exact(fd, cd_size, cd_offset)
    entries: list[CentralEntry] = []
    pos = 0
    for _ in range(count):
        if cd[pos:pos + 4] != _CENTRAL:
            raise ZipPatchError(f"bad central directory entry at {cd_offset + pos}")
        (flags, method, crc, csize, usize, name_len, extra_len, comment_len,
         header_offset) = struct.unpack_from("<HH4xIIIHHH8xI", cd, pos + 8)
        name_raw = cd[pos + 46:pos + 46 + name_len]
        extra = cd[pos + 46 + name_len:pos + 46 + name_len + extra_len]
        wanted = [k for k, v in (("file_size", usize), ("compressed_size", csize),
                                 ("header_offset", header_offset)) if v == _U32_MAX]
        big = _zip64_values(extra, wanted)
        name = name_raw.decode("utf-8" if flags & 0x800 else "cp437")
        entries.append(CentralEntry(name, cd_offset + pos, flags, method, crc,
                                    big.get("compressed_size", csize), big.get("file_size", usize),
                                    big.get("header_offset", header_offset)))
        pos += 46 + name_len + extra_len + comment_len
    return entries


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
        local = _pread_exact(fd, 30, entry.header_offset)
        if local[:4] != _LOCAL:
            raise ZipPatchError(f"{entry.name}: bad local file header")
        flags, name_len, extra_len = struct.unpack_from("<H", local, 6) + struct.unpack_from("<HH", local, 26)
        data_end = entry.header_offset + 30 + name_len + extra_len + nbytes
        if flags & 0x08:
            _write_descriptor_crc(fd, entry, crc, nbytes, data_end)
        else:
            _pwrite_exact(fd, struct.pack("<I", crc), entry.header_offset + 14)
        _pwrite_exact(fd, struct.pack("<I", crc), entry.offset + 16)
    if todo:
        raise ZipPatchError(f"records missing from the central directory: {sorted(todo)[:3]}")


def _write_descriptor_crc(fd: int, entry: CentralEntry, crc: int, nbytes: int, data_end: int) -> None:
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
    """Members whose central directory CRC-32 differs from their local header/descriptor's.

    Reads headers only (the data CRCs themselves are checked by ``zipfile``'s ``testzip``).
    """
    problems = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for entry in read_central_directory(fd):
            local = _pread_exact(fd, 30, entry.header_offset)
            flags, local_crc = struct.unpack_from("<H", local, 6)[0], struct.unpack_from("<I", local, 14)[0]
            name_len, extra_len = struct.unpack_from("<HH", local, 26)
            if flags & 0x08:
                end = entry.header_offset + 30 + name_len + extra_len + entry.compressed_size
                head = _pread_exact(fd, 8, end)
                local_crc = struct.unpack_from("<I", head, 4 if head[:4] == _DESCRIPTOR else 0)[0]
            if local_crc != entry.crc:
                problems.append(entry.name)
    finally:
        os.close(fd)
    return problems
