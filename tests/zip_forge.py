"""Build hostile zip archives byte by byte (duplicate names, lying headers, compression bombs).

``zipfile`` refuses to write most of these, so this writes the records itself: local header +
data for each member, the central directory, the end record. Every field a test wants to lie
about can be set per member.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Member:
    name: str
    data: bytes  # the bytes in the file (compressed for method 8)
    method: int = 0
    file_size: int | None = None  # declared uncompressed size (default: len(data))
    crc: int | None = None  # default: CRC-32 of data (of the content for method 0)
    local_name: str | None = None  # what the local header says (default: name)
    local_sizes: tuple[int, int] | None = None  # (compressed, uncompressed) in the local header

    def sizes(self) -> tuple[int, int]:
        return len(self.data), len(self.data) if self.file_size is None else self.file_size


def deflated(name: str, content: bytes) -> Member:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return Member(name, c.compress(content) + c.flush(), 8, len(content), zlib.crc32(content))


def bomb_stream(prefix: bytes, zeros_mib: int) -> bytes:
    """A raw deflate stream of ``prefix`` then ``zeros_mib`` MiB of zeros, built without ever
    holding the zeros: one full-flushed 1 MiB block repeated (about 1 KB each)."""
    head = zlib.compressobj(6, zlib.DEFLATED, -15)
    first = head.compress(prefix) + head.flush(zlib.Z_FULL_FLUSH)
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    one_mib = block.compress(b"\0" * (1 << 20)) + block.flush(zlib.Z_FULL_FLUSH)
    return first + one_mib * zeros_mib + zlib.compressobj(6, zlib.DEFLATED, -15).flush()


def build_zip(members: list[Member], *, prepend: bytes = b"", comment: bytes = b"") -> bytes:
    out = bytearray(prepend)
    central = bytearray()
    for m in members:
        offset = len(out) - len(prepend)  # offsets as if nothing were prepended
        csize, usize = m.sizes()
        crc = zlib.crc32(m.data) if m.crc is None else m.crc
        lname = (m.local_name if m.local_name is not None else m.name).encode()
        lc, lu = m.local_sizes or (csize, usize)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0x800, m.method, 0, 0x21,
                           crc, lc, lu, len(lname), 0) + lname + m.data
        name = m.name.encode()
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0x800, m.method, 0,
                               0x21, crc, csize, usize, len(name), 0, 0, 0, 0, 0, offset) + name
    cd_offset = len(out) - len(prepend)
    out += central
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members),
                       len(central), cd_offset, len(comment)) + comment
    return bytes(out)


def torch_members(obj: object) -> list[Member]:
    """The records of ``torch.save(obj)``, in order, as stored members."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(buf) as zf:
        return [Member(i.filename, zf.read(i)) for i in zf.infolist()]


def with_member(members: list[Member], name_suffix: str, new: Member, *, before: bool) -> list[Member]:
    """``members`` plus ``new`` under the same name as the member ending in ``name_suffix``,
    placed right before or after it (a duplicated name)."""
    i = next(k for k, m in enumerate(members) if m.name.endswith(name_suffix))
    dup = replace(new, name=members[i].name)
    return members[:i] + [dup, members[i]] + members[i + 1:] if before else \
        members[:i + 1] + [dup] + members[i + 1:]
