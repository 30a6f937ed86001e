"""Atomic writes: a temporary file in the target's folder, fsync, then os.replace.

A crash or Ctrl-C leaves either the old file or the new one, never half a file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from torchinspect.errors import InspectError


def check_target(target: str | os.PathLike[str], *, force: bool = True,
                 protect: Sequence[str | os.PathLike[str] | None] = ()) -> Path:
    """Refuse, before any work, an output that is one of the inputs (the same file under
    another name too), that exists without ``force``, or whose folder does not exist."""
    target = Path(target)
    for p in protect:
        if p and target.exists() and Path(p).exists() and os.path.samefile(target, p):
            raise InspectError(f"{target}: refusing to overwrite the input file",
                               hint="write to a new file name")
    if target.exists() and not force:
        raise InspectError(f"{target} already exists", hint="pass --force to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InspectError(f"{target}: folder {parent} does not exist", hint="create it first")
    return target


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], *, force: bool = True,
                protect: Sequence[str | os.PathLike[str] | None] = (),
                sync: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success it replaces ``target``.

    ``force=False`` refuses an existing target; ``protect`` lists input files that must
    never be overwritten (the same file under another name counts too). ``sync=False``
    skips the fsync: still atomic when the process is killed (the data is in the page
    cache), but an OS crash may leave a truncated file. Only for files a reader checks and
    can redo (the per-batch parts of ``inspect features``).
    """
    target = check_target(target, force=force, protect=protect)
    parent = target.parent if str(target.parent) else Path(".")
    # The temporary file keeps the target's own name inside a private folder: torch.save
    # names the archive's root folder after the file, so the result is the same as a
    # direct save (``model/data.pkl`` for model.pt), only atomic.
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    tmp_path = tmp_dir / target.name
    try:
        tmp_path.touch()  # writers may open it without O_CREAT
        yield tmp_path
        if sync:
            with open(tmp_path, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes, **kw: object) -> None:
    with atomic_path(target, **kw) as tmp:  # type: ignore[arg-type]
        tmp.write_bytes(data)


def atomic_write_text(target: str | os.PathLike[str], text: str, **kw: object) -> None:
    atomic_write_bytes(target, text.encode("utf-8"), **kw)
