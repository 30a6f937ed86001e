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
    another name too, a file of an input folder, a shard of an input index), that exists
    without ``force``, that is not a regular file (a folder, a device such as /dev/null), or
    whose folder does not exist or is not writable. A symlink to a file is followed: the file
    is replaced and the link kept. Returns the path to write."""
    target = Path(target)
    if _special(target) or _special(Path(os.path.realpath(target))):
        raise InspectError(f"{target}: refusing to replace a device or process file",
                           hint="leave out the output option to print to the terminal, or "
                           "name a file")
    if target.is_symlink() and target.exists():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise InspectError(f"{target} is a folder", hint=f"name a file, e.g. {target}/out.json")
    if target.exists() and not target.is_file():
        raise InspectError(f"{target} is not a regular file (a device, pipe or socket): "
                           "refusing to replace it",
                           hint="leave out the output option to print to the terminal, or "
                           "name a file")
    reason = protected(target, protect)
    if reason:
        raise InspectError(f"{target}: refusing to overwrite {reason}",
                           hint="write to a new file name outside the inputs")
    if target.exists() and not force:
        raise InspectError(f"{target} already exists", hint="pass --force to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InspectError(f"{target}: folder {parent} does not exist", hint="create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InspectError(f"{target}: folder {parent} is not writable",
                           hint="choose another folder, or fix its permissions")
    return target


def _special(path: Path) -> bool:
    """/dev/stdout, /dev/null, /proc/self/fd/1, ...: never replaced by a renamed file."""
    parts = Path(os.path.abspath(path)).parts
    return len(parts) > 1 and parts[1] in ("dev", "proc", "sys")


def protected(target: Path, protect: Sequence[str | os.PathLike[str] | None]) -> str | None:
    """Why ``target`` is one of the inputs in ``protect`` (files or folders), or None."""
    real = Path(os.path.realpath(target))
    for p in protect:
        if not p or not os.path.exists(p):
            continue
        if os.path.isdir(p):  # a checkpoint folder: its files (a new file beside them is fine)
            folder = Path(os.path.realpath(p))
            if target.exists() and folder in real.parents:
                return f"a file of the input folder {p}"
            continue
        if target.exists() and os.path.samefile(target, p):
            return "the input file"
        if str(p).endswith(".index.json") and real.name in _index_files(p):
            if real.parent == Path(os.path.realpath(p)).parent:
                return f"a shard of the input {p}"
    return None


def _index_files(index: str | os.PathLike[str]) -> set[str]:
    """The shard file names a Hugging Face ``*.index.json`` lists (empty if unreadable)."""
    import json

    try:
        with open(index, encoding="utf-8") as fh:
            weight_map = json.load(fh).get("weight_map") or {}
        return {str(v) for v in weight_map.values()}
    except (OSError, ValueError, AttributeError):
        return set()


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
