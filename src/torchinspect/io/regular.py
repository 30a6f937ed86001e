"""Read a file named by the user or inside a checkpoint: a regular file, read once, size-capped.

``open(path).read()`` hangs on a FIFO, never ends on ``/dev/zero`` and follows a symlink
anywhere. :func:`read_regular` opens without blocking, checks the opened file (not the name)
is a regular file under the limit, and reads exactly its size.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from torchinspect.errors import InspectError, not_regular


def open_regular(path: str | os.PathLike[str], *, what: str | None = None,
                 follow: bool = True) -> int:
    """An O_RDONLY descriptor of ``path``, refused (InspectError) unless it is a regular file.

    ``follow=False`` refuses a symlink at the last component too (O_NOFOLLOW)."""
    label = what or str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and Path(path).is_symlink():
            raise InspectError(f"{label}: is a symbolic link; a checkpoint's files must be "
                               "regular files inside its folder",
                               hint="copy the file it points to into the folder") from None
        raise InspectError(f"{label}: cannot read: {exc.strerror}",
                           hint="check the path and permissions") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InspectError(not_regular(label, st.st_mode), hint="name a regular file")
    return fd


def read_regular(path: str | os.PathLike[str], *, limit: int, what: str | None = None,
                 follow: bool = True) -> bytearray:
    """All bytes of the regular file ``path`` (read once, into one writable buffer that
    tensors may view without a copy), refused over ``limit`` bytes."""
    label = what or str(path)
    fd = open_regular(path, what=label, follow=follow)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise InspectError(f"{label}: holds {size:,} bytes, over the {limit:,}-byte limit "
                               "for it", hint="check that this is the file you meant")
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = os.readv(fd, [view[got:got + (1 << 28)]])
            if not n:
                raise InspectError(f"{label}: shrank while it was read (another program is "
                                   "writing it)", hint="read it again when the writer is done")
            got += n
        return buf
    finally:
        os.close(fd)


def member(folder: Path, name: str, *, what: str) -> Path:
    """``folder/name``, a file that a checkpoint's index or metadata names, refused
    (InspectError) unless it stays inside the folder the user named.

    ``name`` must be a plain relative name (no absolute path, no ``..``, no backslash, no NUL).
    The file may be a symbolic link only to a place inside ``folder`` (both resolved), with one
    exception: the Hugging Face cache. A snapshot folder
    (``.../models--ORG--NAME/snapshots/REVISION/``) holds nothing but links into the same
    repository's ``blobs/`` folder (``../../blobs/SHA``), so for a folder whose resolved path is
    such a snapshot, the repository's ``blobs/`` folder counts as inside. A link anywhere else
    (another checkpoint, ``/etc``, the user's home) is refused, naming both ends."""
    if (not name or os.path.isabs(name) or "\\" in name or "\0" in name
            or any(part in ("", ".", "..") for part in name.split("/"))):
        raise InspectError(f"{what}: {name!r} is not a plain file name inside {folder}",
                           hint="the index or metadata is corrupt, or built to read files "
                           "outside its folder; do not load it")
    path = folder / name
    real = os.path.realpath(path)
    roots = inside_roots(folder)
    if not any(real.startswith(root) for root in roots):
        raise InspectError(f"{what}: {name} is a symbolic link to {real}, outside {folder}",
                           hint="copy the file into the folder (a checkpoint's files are read "
                           "only inside the folder you name)")
    return path


def inside_roots(folder: Path) -> tuple[str, ...]:
    """The resolved folders (with a trailing separator) whose files count as inside ``folder``:
    itself, and the ``blobs/`` of the Hugging Face cache repository it is a snapshot of."""
    real = Path(os.path.realpath(folder))
    roots = [str(real) + os.sep]
    repo = real.parent.parent
    if real.parent.name == "snapshots" and (repo / "blobs").is_dir() and not (repo / "blobs").is_symlink():
        roots.append(os.path.realpath(repo / "blobs") + os.sep)
    return tuple(roots)
