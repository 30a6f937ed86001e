"""One validity rule for every zip archive this tool reads, applied before anything reads it.

torch.save checkpoints and torch.export ``.pt2`` archives are zip files, and zip readers
disagree on malformed ones: Python's ``zipfile`` returns the *last* entry of a duplicated
name, torch's miniz finds one by a case-insensitive binary search (often the *first*);
``zipfile`` shifts every offset when bytes are prepended, miniz does not; a local header may
name a different file, size or compression than the central directory. A safety check that
reads one copy while torch loads another checks nothing. So :func:`open_zip` parses the
archive itself and refuses (one :class:`InspectError`, exit 2) any archive where two readers
could see different bytes:

* the end-of-central-directory record is ambiguous (a second signature in the comment), the
  archive spans disks, bytes sit between the central directory and its end record, or the
  ZIP64 record and the classic one disagree;
* the central directory's entry count does not fill it exactly;
* a name appears twice (compared as raw bytes, ASCII case folded, as miniz looks names up),
  contains a NUL byte, or carries an Info-ZIP Unicode path field (another name for it);
* a member is encrypted or uses a compression other than stored/deflate, a stored member's
  two sizes differ, or a deflated member would expand past :data:`EXPAND_FLOOR` bytes and
  :data:`EXPAND_RATIO` times its compressed size (a compression bomb);
* a local header disagrees with its central entry (signature, name, compression, flags,
  CRC-32, sizes, the data descriptor), or members overlap or run into the central directory.

:meth:`ZipArchive.read` then reads a member exactly where torch reads it (the local header's
data offset), decompressing in bounded pieces: never more than the declared size, and the
CRC-32 is checked (a CRC of 0 means "not recorded", as torch's ``compute_crc32=False`` writes).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from torchinspect.errors import InspectError

_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
# general purpose flags torch's reader (miniz) refuses: encrypted (bit 0), compressed patched
# data (5), strong encryption (6), masked local headers (13)
_UNSUPPORTED_FLAGS = 0x0001 | 0x0020 | 0x0040 | 0x2000
_DOS_DIRECTORY = 0x10  # MS-DOS attribute in the low byte of the external attributes
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_DESCRIPTOR = b"PK\x07\x08"
_U32_MAX = 0xFFFFFFFF
_U16_MAX = 0xFFFF
STORED, DEFLATED = 0, 8
#: A deflated member may always expand to this many bytes ...
EXPAND_FLOOR = 16 * 1024 * 1024
#: ... and beyond it to at most this many times its compressed size. torch.save stores its
#: records uncompressed; a deflated pickle or JSON of a checkpoint shrinks about 3-15 times,
#: a compression bomb about 1,000 times.
EXPAND_RATIO = 50
_PIECE = 1 << 20  # compressed bytes fed to zlib at a time

_CORRUPT_HINT = "the file is damaged or not a well-formed zip archive; fetch it again from its source"


#: An archive open for reading (a file descriptor) or held in memory.
Source = int | bytes | bytearray


class ZipError(ValueError):
    """The archive breaks :func:`open_zip`'s rule (``str`` says how); raised by the parser."""


@dataclass(frozen=True)
class ZipMember:
    name: str
    method: int  # 0 stored, 8 deflate
    flags: int
    crc: int
    compressed_size: int
    file_size: int
    header_offset: int  # of the local file header
    data_offset: int  # where the member's (compressed) bytes start, from its local header
    central_offset: int  # of the central directory entry


@dataclass
class ZipArchive:
    """A validated archive: its members in central-directory order."""

    path: Path
    members: dict[str, ZipMember]
    file_size: int
    #: the whole archive, when it was read once into memory (:func:`open_zip_bytes`): members
    #: are then cut from these bytes, never read from the file again
    data: bytes | bytearray | None = None

    @property
    def names(self) -> list[str]:
        return list(self.members)

    @property
    def torch_prefix(self) -> str | None:
        """The folder torch reads every record from: the first entry's name up to its first
        ``/`` (``PyTorchStreamReader``'s rule), or None when that entry is in no folder."""
        first = next(iter(self.members), "")
        return first.split("/", 1)[0] + "/" if "/" in first else None

    def read(self, name: str, *, limit: int | None = None) -> bytes:
        """The member's bytes, exactly as torch reads them; ``limit`` refuses larger members."""
        m = self.members[name]
        if limit is not None and m.file_size > limit:
            raise InspectError(f"{self.path}: zip member {name} holds {m.file_size:,} bytes, "
                               f"over the {limit:,}-byte limit for it", hint=_CORRUPT_HINT)
        fd: Source = self.data if self.data is not None else os.open(self.path, os.O_RDONLY)
        try:
            data = _inflate(fd, m) if m.method == DEFLATED else _pread(fd, m.file_size, m.data_offset)
        except ZipError as exc:
            raise _error(self.path, str(exc)) from None
        finally:
            if isinstance(fd, int):
                os.close(fd)
        if m.crc and zlib.crc32(data) != m.crc:
            raise _error(self.path, f"{name}: CRC-32 does not match its bytes (damaged file)")
        return data

    def damaged_members(self) -> list[str]:
        """Members whose bytes do not match their recorded CRC-32 (one streaming pass over
        the file, 1 MiB at a time; a CRC of 0 means none was recorded and is skipped)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            bad = [m.name for m in self.members.values() if m.crc and _crc(fd, m) != m.crc]
        finally:
            os.close(fd)
        return bad


def _crc(fd: int, m: ZipMember) -> int | None:
    """CRC-32 of the member's bytes; None when they cannot be read (cut short, bad deflate)."""
    try:
        if m.method == DEFLATED:
            return zlib.crc32(_inflate(fd, m))  # bounded by the declared size (capped)
        crc, end = 0, m.data_offset + m.file_size
        for pos in range(m.data_offset, end, _PIECE):
            crc = zlib.crc32(_pread(fd, min(_PIECE, end - pos), pos), crc)
    except ZipError:
        return None
    return crc


def _error(path: Path, what: str) -> InspectError:
    return InspectError(f"{path}: invalid zip archive: {what}", hint=_CORRUPT_HINT)


def open_zip(path: str | os.PathLike[str]) -> ZipArchive:
    """Validate ``path`` as a zip archive (the rule in the module docstring) and index it.

    Reads only headers. Raises :class:`InspectError` naming the file and the problem.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InspectError(f"{path}: cannot read: {exc.strerror}", hint="check the path and permissions") from None
    try:
        members = parse_zip(fd)
        size = os.fstat(fd).st_size
    except ZipError as exc:
        raise _error(path, str(exc)) from None
    finally:
        os.close(fd)
    return ZipArchive(path, {m.name: m for m in members}, size)


def open_zip_bytes(data: bytes | bytearray, path: str | os.PathLike[str]) -> ZipArchive:
    """:func:`open_zip` for an archive already read into memory (``path`` names it in
    errors); :meth:`ZipArchive.read` then cuts members from ``data``, never from the file."""
    try:
        members = parse_zip(data)
    except ZipError as exc:
        raise _error(Path(path), str(exc)) from None
    return ZipArchive(Path(path), {m.name: m for m in members}, len(data), data)


def check_zip_bytes(data: bytes, what: str) -> None:
    """:func:`open_zip`'s rule for an archive held in memory (a zip inside a zip, e.g. a
    ``.pt2``'s sample inputs); ``what`` names it in the :class:`InspectError`."""
    try:
        parse_zip(data)
    except ZipError as exc:
        raise InspectError(f"{what}: invalid zip archive: {exc}", hint=_CORRUPT_HINT) from None


def parse_zip(fd: Source) -> list[ZipMember]:
    """Every member of the archive (open as ``fd``, or in memory), checked; :class:`ZipError`
    otherwise."""
    size = os.fstat(fd).st_size if isinstance(fd, int) else len(fd)
    cd_offset, cd_size, count = _end_records(fd, size)
    entries = _central_entries(fd, cd_offset, cd_size, count)
    _check_names(entries)
    members = [_with_local_header(fd, e, cd_offset) for e in entries]
    _check_layout(fd, members, cd_offset)
    return members


def _pread_some(fd: Source, n: int, pos: int) -> bytes:
    return os.pread(fd, n, pos) if isinstance(fd, int) else bytes(fd[pos:pos + n])


def _pread(fd: Source, n: int, pos: int) -> bytes:
    if pos < 0 or n < 0:
        raise ZipError(f"negative offset or size ({pos}, {n})")
    data = _pread_some(fd, n, pos)
    if len(data) != n:
        raise ZipError(f"the file ends before byte {pos + n:,} (truncated?)")
    return data


def _end_records(fd: Source, size: int) -> tuple[int, int, int]:
    """(offset, size, entry count) of the central directory; the end records checked."""
    tail_len = min(size, 22 + _U16_MAX)
    tail = _pread(fd, tail_len, size - tail_len)
    at = tail.rfind(_EOCD)
    if at < 0 or at + 22 > tail_len:
        raise ZipError("no end of central directory record (truncated?)")
    (disk, cd_disk, on_disk, count, cd_size, cd_offset,
     comment_len) = struct.unpack_from("<HHHHIIH", tail, at + 4)
    if at + 22 + comment_len != tail_len:
        raise ZipError("the end of central directory record is ambiguous (a signature inside "
                       "the comment, or bytes after the archive)")
    if disk or cd_disk or on_disk != count:
        raise ZipError("multi-disk archives are not supported")
    eocd_pos = size - tail_len + at
    end_of_cd = eocd_pos
    if eocd_pos >= 20 and _pread(fd, 4, eocd_pos - 20) == _ZIP64_LOCATOR:
        loc_disk, z64_pos, disks = struct.unpack("<IQI", _pread(fd, 16, eocd_pos - 16))
        if loc_disk or disks != 1 or z64_pos + 56 > eocd_pos - 20:
            raise ZipError("bad ZIP64 end of central directory locator")
        z64 = _pread(fd, 56, z64_pos)
        (record_size,) = struct.unpack_from("<Q", z64, 4)
        if z64[:4] != _ZIP64_EOCD or record_size < 44:  # 44: the fixed fields after the size
            raise ZipError("bad ZIP64 end of central directory record")  # (miniz refuses less)
        z_disk, z_cd_disk, z_on_disk, z_count, z_cd_size, z_cd_offset = struct.unpack_from("<IIQQQQ", z64, 16)
        if z_disk or z_cd_disk or z_on_disk != z_count:
            raise ZipError("multi-disk archives are not supported")
        for small, big, cap in ((count, z_count, _U16_MAX), (cd_size, z_cd_size, _U32_MAX),
                                (cd_offset, z_cd_offset, _U32_MAX)):
            if small not in (big, cap):
                raise ZipError("the ZIP64 and classic end of central directory records disagree")
        count, cd_size, cd_offset, end_of_cd = z_count, z_cd_size, z_cd_offset, z64_pos
    if cd_offset + cd_size != end_of_cd:
        raise ZipError("the central directory does not end where its end record starts "
                       "(bytes prepended, inserted or cut)")
    return cd_offset, cd_size, count


@dataclass(frozen=True)
class _Entry:
    raw_name: bytes
    name: str
    flags: int
    method: int
    crc: int
    compressed_size: int
    file_size: int
    header_offset: int
    offset: int  # of the central entry


def _zip64_extra(extra: bytes, wanted: list[str], where: str) -> dict[str, int]:
    """Values of the ZIP64 extra field (0x0001), in the order the specification lists them."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 0x0001 and wanted:
            body = extra[pos + 4:pos + 4 + length]
            if len(body) < 8 * len(wanted):
                raise ZipError(f"{where}: ZIP64 extra field too short")
            return dict(zip(wanted, struct.unpack_from(f"<{len(wanted)}Q", body), strict=True))
        pos += 4 + length
    if wanted:
        raise ZipError(f"{where}: ZIP64 extra field missing")
    return {}


def _has_extra(extra: bytes, tag: int) -> bool:
    pos = 0
    while pos + 4 <= len(extra):
        t, length = struct.unpack_from("<HH", extra, pos)
        if t == tag:
            return True
        pos += 4 + length
    return False


def _central_entries(fd: Source, cd_offset: int, cd_size: int, count: int) -> list[_Entry]:
    if count > cd_size // 46:
        raise ZipError(f"the central directory claims {count:,} entries in {cd_size:,} bytes")
    cd = _pread(fd, cd_size, cd_offset)
    entries: list[_Entry] = []
    pos = 0
    for _ in range(count):
        if cd[pos:pos + 4] != _CENTRAL or pos + 46 > len(cd):
            raise ZipError(f"bad central directory entry at byte {cd_offset + pos:,}")
        (flags, method, crc, csize, usize, name_len, extra_len, comment_len, disk,
         external, header_offset) = struct.unpack_from("<HH4xIIIHHHH2xII", cd, pos + 8)
        raw = cd[pos + 46:pos + 46 + name_len]
        extra = cd[pos + 46 + name_len:pos + 46 + name_len + extra_len]
        if pos + 46 + name_len + extra_len + comment_len > len(cd):
            raise ZipError(f"central directory entry at byte {cd_offset + pos:,} runs past the directory")
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
        wanted = [k for k, v in (("file_size", usize), ("compressed_size", csize),
                                 ("header_offset", header_offset)) if v == _U32_MAX]
        big = _zip64_extra(extra, wanted, repr(name))
        if disk not in (0, _U16_MAX):
            raise ZipError("multi-disk archives are not supported")
        if flags & _UNSUPPORTED_FLAGS:  # torch's miniz refuses these archives
            raise ZipError(f"{name!r} is encrypted, patched or masked (flags {flags:#06x})")
        if external & _DOS_DIRECTORY:  # miniz then reads it as a folder: no data
            raise ZipError(f"{name!r} is marked as a folder in the central directory")
        if _has_extra(extra, 0x7075):
            raise ZipError(f"{name!r} carries a second (Info-ZIP Unicode) name")
        entries.append(_Entry(raw, name, flags, method, crc, big.get("compressed_size", csize),
                              big.get("file_size", usize), big.get("header_offset", header_offset),
                              cd_offset + pos))
        pos += 46 + name_len + extra_len + comment_len
    if pos != len(cd):
        raise ZipError(f"the central directory holds more than its {count:,} entries")
    return entries


def _check_names(entries: list[_Entry]) -> None:
    seen: dict[bytes, str] = {}
    decoded: set[str] = set()
    for e in entries:
        if b"\0" in e.raw_name:
            raise ZipError(f"member name {e.name!r} contains a NUL byte")
        key = e.raw_name.lower()
        if key in seen or e.name in decoded:
            other = seen.get(key, e.name)
            raise ZipError(f"two members are named {e.name!r}" + ("" if other == e.name else
                                                                   f" and {other!r}")
                           + " (readers disagree on which one is read)")
        seen[key] = e.name
        decoded.add(e.name)
        if e.flags & 0x41:
            raise ZipError(f"{e.name!r} is encrypted")
        if e.method not in (STORED, DEFLATED):
            raise ZipError(f"{e.name!r} uses compression method {e.method} (only stored and "
                           "deflate are read)")
        if e.method == STORED and e.compressed_size != e.file_size:
            raise ZipError(f"{e.name!r} is stored but claims {e.compressed_size:,} bytes on disk "
                           f"and {e.file_size:,} bytes of content")
        if e.method == DEFLATED and e.file_size > max(EXPAND_FLOOR, EXPAND_RATIO * e.compressed_size):
            raise ZipError(f"{e.name!r} would expand from {e.compressed_size:,} to {e.file_size:,} "
                           f"bytes (a compression bomb; no checkpoint member expands over "
                           f"{EXPAND_RATIO} times)")


def _with_local_header(fd: Source, e: _Entry, cd_offset: int) -> ZipMember:
    if e.header_offset + 30 > cd_offset:
        raise ZipError(f"{e.name!r}: local header offset {e.header_offset:,} is not before the central directory")
    local = _pread(fd, 30, e.header_offset)
    if local[:4] != _LOCAL:
        raise ZipError(f"{e.name!r}: no local header at byte {e.header_offset:,}")
    flags, method, _t, _d, crc, csize, usize, name_len, extra_len = struct.unpack_from("<HHHHIIIHH", local, 6)
    raw = _pread(fd, name_len, e.header_offset + 30)
    extra = _pread(fd, extra_len, e.header_offset + 30 + name_len)
    where = repr(e.name)
    if raw != e.raw_name:
        raise ZipError(f"{where}: the local header names {raw.decode('cp437')!r}")
    if method != e.method or (flags ^ e.flags) & 0x849:
        raise ZipError(f"{where}: the local header's compression or flags differ from the central directory's")
    data_offset = e.header_offset + 30 + name_len + extra_len
    if flags & 0x08:  # sizes and CRC follow the data, in a data descriptor; the local header
        # holds zeros (or the ZIP64 placeholder), or the same values
        if crc not in (0, e.crc) or csize not in (0, _U32_MAX, e.compressed_size) \
                or usize not in (0, _U32_MAX, e.file_size):
            raise ZipError(f"{where}: the local header's CRC-32 or sizes differ from the central directory's")
        _check_descriptor(fd, e, data_offset + e.compressed_size, where)
    else:
        wanted = [k for k, v in (("file_size", usize), ("compressed_size", csize)) if v == _U32_MAX]
        big = _zip64_extra(extra, wanted, where)
        sizes = (big.get("compressed_size", csize), big.get("file_size", usize))
        if crc != e.crc or sizes != (e.compressed_size, e.file_size):
            raise ZipError(f"{where}: the local header's CRC-32 or sizes differ from the central directory's")
    return ZipMember(e.name, e.method, e.flags, e.crc, e.compressed_size, e.file_size,
                     e.header_offset, data_offset, e.offset)


def _check_descriptor(fd: Source, e: _Entry, at: int, where: str) -> None:
    head = _pread_some(fd, 28, at)
    body = head[4:] if head[:4] == _DESCRIPTOR else head
    fields4 = struct.unpack_from("<III", body) if len(body) >= 12 else None
    fields8 = struct.unpack_from("<IQQ", body) if len(body) >= 20 else None
    want = (e.crc, e.compressed_size, e.file_size)
    if fields4 != want and fields8 != want:
        raise ZipError(f"{where}: the data descriptor's CRC-32 or sizes differ from the central directory's")


def _descriptor_len(fd: Source, m: ZipMember) -> int:
    if not m.flags & 0x08:
        return 0
    end = m.data_offset + m.compressed_size
    sig = 4 if _pread_some(fd, 4, end) == _DESCRIPTOR else 0
    big = m.compressed_size >= _U32_MAX or m.file_size >= _U32_MAX
    return sig + (20 if big else 12)


def _check_layout(fd: Source, members: list[ZipMember], cd_offset: int) -> None:
    """Members lie before the central directory, one after another, never overlapping."""
    spans = sorted((m.header_offset, m.data_offset + m.compressed_size + _descriptor_len(fd, m), m.name)
                   for m in members)
    for (_s0, end0, n0), (s1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if s1 < end0:
            raise ZipError(f"members {n0!r} and {n1!r} overlap")
    if spans and spans[-1][1] > cd_offset:
        raise ZipError(f"{spans[-1][2]!r} runs into the central directory")


def _inflate(fd: Source, m: ZipMember) -> bytes:
    """Decompress a deflated member in pieces, never producing more than its declared size."""
    d = zlib.decompressobj(-15)
    out = bytearray()
    pos, end = m.data_offset, m.data_offset + m.compressed_size
    try:
        while pos < end and not d.eof:
            piece = _pread(fd, min(_PIECE, end - pos), pos)
            pos += len(piece)
            while piece and not d.eof:
                out += d.decompress(piece, m.file_size - len(out) + 1)
                if len(out) > m.file_size:
                    raise ZipError(f"{m.name!r} expands past its declared {m.file_size:,} bytes "
                                   "(a compression bomb or a lying size field)")
                piece = d.unconsumed_tail
        out += d.flush(m.file_size - len(out) + 1)
    except zlib.error as exc:
        raise ZipError(f"{m.name!r}: compressed bytes are damaged ({exc})") from None
    if not d.eof or len(out) != m.file_size:
        raise ZipError(f"{m.name!r}: expands to {len(out):,} bytes, its header says {m.file_size:,}")
    return bytes(out)
