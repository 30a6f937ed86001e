"""Atomic writes: a temporary file in the target's folder, fsync, then os.replace.

A crash or Ctrl-C leaves either the old file or the new one, never half a file; folders
(DCP checkpoints) are swapped in one step (:func:`atomic_folder`). Temporary names are
unique (``.NAME.<random>.tmp``) and marked, so the next run removes those of killed runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from torchinspect.device import fmt_size
from torchinspect.errors import InspectError, not_regular


def check_target(target: str | os.PathLike[str], *, force: bool = True,
                 protect: Sequence[str | os.PathLike[str] | None] = ()) -> Path:
    """Refuse, before any work, an output that is one of the inputs (the same file under
    another name too, a file of an input folder, a shard of an input index), that exists
    without ``force``, that is not a regular file (a folder, a device such as /dev/null), or
    whose folder does not exist or is not writable. A symlink to a file is followed: the file
    is replaced and the link kept. Returns the path to write."""
    target = Path(target)
    check_utf8_name(target)
    if _special(target) or _special(Path(os.path.realpath(target))):
        raise InspectError(f"{target}: refusing to replace a device or process file",
                           hint="leave out the output option to print to the terminal, or "
                           "name a file")
    if target.is_symlink() and target.exists():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise InspectError(f"{target} is a folder", hint=f"name a file, e.g. {target}/out.json")
    if target.exists() and not target.is_file():
        raise InspectError(f"{not_regular(target, target.stat().st_mode)}: refusing to replace it",
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


def check_utf8_name(target: Path) -> None:
    """Refuse, before any work, an output whose name is not valid UTF-8 (bytes a terminal
    gave through ``surrogateescape``): safetensors, JSON and the zip formats store names as
    UTF-8, and the file would be written under one name and read under another."""
    try:
        os.fsencode(target).decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = os.fsencode(target)[exc.start]
        raise InspectError(f"{printable_path(target)}: the file name is not valid UTF-8 (byte "
                           f"0x{bad:02x})", hint="name the output in UTF-8 (ASCII is safest)") from None


def printable_path(path: Path) -> str:
    """``path`` with undecodable bytes shown as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


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
    from torchinspect.io.layouts import read_hf_index  # the readers: not at start-up

    try:
        return set(read_hf_index(Path(index)).values())
    except InspectError:
        return set()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str], *, force: bool = True,
                protect: Sequence[str | os.PathLike[str] | None] = (),
                sync: bool = True, unchanged: Snapshot | None | bool = True,
                need: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success it replaces ``target``.

    ``force=False`` refuses an existing target, also one that another run created while this
    one was writing (the result is linked into place, never renamed over a file);
    ``protect`` lists input files that must never be overwritten (the same file under
    another name counts too). A replaced file keeps its permission bits; a new one follows
    the umask. A full disk is one line naming ``target``. ``sync=False`` skips the fsync:
    still atomic when the process is killed (the data is in the page cache), but an OS crash
    may leave a truncated file. Only for files a reader checks and can redo (the per-batch
    parts of ``inspect features``). Temporary folders of killed runs are removed by the next
    run that writes into the same folder (see :func:`clean_stale_temps`). ``unchanged`` (a
    :func:`snapshot` of ``target`` taken when the run started, None for "absent") makes the
    replace conditional: if another run wrote ``target`` meanwhile, this one is refused
    instead of both saying "wrote" (the check and the rename hold the folder's lock).
    ``need``: the bytes the output will take, when known (a full disk names them).
    """
    target = check_target(target, force=force, protect=protect)
    tmp_dir = make_temp_dir(target)
    # The temporary file keeps the target's own name inside a private folder: torch.save
    # names the archive's root folder after the file, so the result is the same as a
    # direct save (``model/data.pkl`` for model.pt), only atomic.
    tmp_path = tmp_dir / target.name
    try:
        with disk_full_names(target, need, tmp_dir):
            tmp_path.touch()  # writers may open it without O_CREAT
            yield tmp_path
            if sync:
                with open(tmp_path, "rb") as fh:
                    os.fsync(fh.fileno())
        os.chmod(tmp_path, _mode_for(target, 0o666))
        if unchanged is True:
            publish(tmp_path, target, force=force)
        else:
            with _folder_lock(target.parent):
                if snapshot(target) != unchanged:
                    raise InspectError(f"{target} was written by another run while this one "
                                       "ran; not replaced (one writer at a time)",
                                       hint="run one at a time, or write to different files")
                publish(tmp_path, target, force=force)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


#: what :func:`snapshot` returns: a file's identity and version, None when there is none
Snapshot = tuple[int, int, int, int]


def snapshot(target: str | os.PathLike[str]) -> Snapshot | None:
    """``target``'s (device, inode, mtime ns, size), or None when it does not exist."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself (no lock file left behind), held for a
    check-and-rename; a no-op where flock does not exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def atomic_folder(target: str | os.PathLike[str], *, force: bool,
                  replaceable: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield a new empty folder; on success it takes ``target``'s place in one step.

    The folder is written under a unique temporary name beside ``target`` and swapped in
    with ``renameat2(RENAME_EXCHANGE)`` (Linux): a kill at any point leaves the old folder or
    the new one, and the old one is deleted only after the swap. Without that call the old
    folder is first moved into the temporary folder (a kill in that instant leaves it there,
    not at ``target``). ``force=False`` refuses a folder that appears meanwhile. The caller
    checks what ``target`` holds before (only outputs of this tool may be replaced), and
    ``replaceable(target)`` checks it again just before the swap (it raises to refuse)."""
    target = Path(target)
    tmp_dir = make_temp_dir(target)
    new = tmp_dir / target.name
    try:
        new.mkdir()
        with disk_full_names(target, None, new):
            yield new
        os.chmod(new, _mode_for(target, 0o777))
        if replaceable is not None:
            replaceable(target)
        if target.exists() and force:
            exchange(new, target)  # the old folder is now at ``new``, removed with tmp_dir
        else:
            rename_noreplace(new, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


# ------------------------------------------------------------------ temporary folders

TEMP_MARK = ".torchinspect-temp"  # inside each temporary folder: "pid host"
STALE_AFTER_S = 24 * 3600  # a temp folder whose writer may still run is kept this long


def make_temp_dir(target: Path) -> Path:
    """``.NAME.<random>.tmp`` beside ``target``, marked as this process's before anything else
    is written into it (the first time a process writes into a folder, the stale temporary
    folders of earlier runs are removed). Ctrl-C cannot fall between the folder and its mark
    (both are made with SIGINT/SIGTERM held back); a full disk is one line naming ``target``,
    and leaves no folder behind."""
    check_utf8_name(target)
    parent = target.parent if str(target.parent) else Path(".")
    key = os.path.realpath(parent)
    if key not in _CLEANED:  # once per folder and process: a folder of 10,000 parts
        _CLEANED.add(key)
        clean_stale_temps(parent)
    mark = f"{os.getpid()} {socket.gethostname()}\n".encode()
    with signals_held():
        try:
            tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise disk_full_error(target, None) from None
            raise InspectError(f"{target}: cannot create a temporary folder in {parent} "
                               f"({exc.strerror or exc})",
                               hint="check the folder's permissions and the free disk space") from None
        try:
            fd = os.open(tmp_dir / TEMP_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                os.write(fd, mark)
            finally:
                os.close(fd)
        except OSError as exc:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            if exc.errno in _DISK_FULL:
                raise disk_full_error(target, None) from None
            raise InspectError(f"{target}: cannot write in the temporary folder {tmp_dir} "
                               f"({exc.strerror or exc})",
                               hint="check the folder's permissions and the free disk space") from None
    return tmp_dir


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered after the block) in the main thread: for a few
    system calls that must not be split (a folder and its clean-up mark)."""
    import signal
    import threading

    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


_CLEANED: set[str] = set()  # folders this process has cleaned


def clean_stale_temps(folder: Path) -> list[Path]:
    """Remove the ``.*.tmp`` folders in ``folder`` that this tool created (they hold
    :data:`TEMP_MARK`) and whose writer is gone: its process no longer runs on this host,
    or the folder is older than :data:`STALE_AFTER_S`. Anything else is never touched.
    Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(folder.glob(".*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        mark = tmp / TEMP_MARK
        try:
            if tmp.is_symlink() or not tmp.is_dir():
                continue
            if not mark.is_file():  # not ours: never touched, unless it is empty and old
                if time.time() - tmp.stat().st_mtime > 60 and _is_empty(tmp):
                    tmp.rmdir()  # (a writer killed between mkdir and mark; rmdir: only empty)
                    removed.append(tmp)
                continue
            pid_text, _, host = mark.read_text(encoding="utf-8").strip().partition(" ")
            age = time.time() - mark.stat().st_mtime
        except (OSError, UnicodeDecodeError):
            continue
        here = host == socket.gethostname()
        alive = here and pid_text.isdigit() and _alive(int(pid_text))
        # an empty mark a minute old: its writer died writing it (a full disk), never ran
        unmarked = not pid_text and age > 60
        if (here and not alive) or unmarked or age > STALE_AFTER_S:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _is_empty(folder: Path) -> bool:
    """No entry in ``folder`` (its listing closed at once, never left to the collector)."""
    with os.scandir(folder) as entries:
        return next(entries, None) is None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------ putting it in place


def publish(tmp: Path, target: Path, *, force: bool) -> None:
    """Move the finished ``tmp`` to ``target``: replace it with ``force``, else create it
    exclusively (a second run that finishes later fails instead of both saying "wrote")."""
    if force:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)  # fails if target exists, atomically
    except FileExistsError:
        raise _appeared(target) from None
    except OSError:  # a file system without hard links
        rename_noreplace(tmp, target)


def _appeared(target: Path) -> InspectError:
    return InspectError(f"{target} was created by another run while this one was writing it; "
                        "this run's result was discarded",
                        hint="pass --force to replace it, or write to another name")


_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """Linux renameat2; False where the C library or the file system lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), ctypes.c_uint(flags))
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    if err == errno.EEXIST or (err == errno.ENOTEMPTY and flags == _RENAME_NOREPLACE):
        raise _appeared(dst)
    raise OSError(err, os.strerror(err), str(dst))


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (an empty folder counts: it is only
    replaced when it is still empty)."""
    if _renameat2(src, dst, _RENAME_NOREPLACE):
        return
    if dst.is_dir() and _is_empty(dst):
        os.rmdir(dst)
    if dst.exists():
        raise _appeared(dst)
    os.rename(src, dst)


def exchange(new: Path, target: Path) -> None:
    """Swap ``new`` and ``target`` (both exist); afterwards ``new`` holds the old content."""
    if target.is_dir() and _is_empty(target):
        os.rmdir(target)  # an empty folder: nothing to keep
        rename_noreplace(new, target)
        return
    if _renameat2(new, target, _RENAME_EXCHANGE):
        return
    old = new.with_name(new.name + ".old")
    os.rename(target, old)
    os.rename(new, target)
    os.rename(old, new)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (os.umask sets
    it, and writer threads create files meanwhile)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path, default: int) -> int:
    """The permission bits a replaced ``target`` had, or ``default`` less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return default & ~current_umask()


# ------------------------------------------------------------------ full disks

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(exc: BaseException | None) -> bool:
    """ENOSPC and friends, also wrapped (torch.save's RuntimeError, DCP's CheckpointException)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
            return True
        text = str(exc)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        failures = getattr(exc, "failures", None)
        if isinstance(failures, dict):
            return any(is_disk_full(f[0] if isinstance(f, tuple) else f) for f in failures.values())
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        seen += 1
    return False


def _statvfs_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


@contextlib.contextmanager
def disk_full_names(target: Path, need: int | None = None,
                    written: Path | None = None) -> Iterator[None]:
    """A write that fails for lack of space becomes one line naming ``target`` and the space
    needed (exit 2): ``need`` bytes when the caller knows them, else at least what was
    already written into ``written`` (a temporary file or folder). torch.save reports a full
    disk as "file write failed": the free space decides."""
    try:
        yield
    except BaseException as exc:
        parent = target.parent if str(target.parent) else Path(".")
        full = is_disk_full(exc) or ("write failed" in str(exc) and _statvfs_full(parent))
        if not full or isinstance(exc, KeyboardInterrupt):
            raise
        at_least = need is None
        size = need if need is not None else (_tree_bytes(written) if written else None)
        raise disk_full_error(target, size, at_least=at_least) from None


def disk_full_error(target: Path, need: int | None, *, at_least: bool = False) -> InspectError:
    """The one line for a full disk: ``target``, the space it needs and what is free."""
    parent = target.parent if str(target.parent) else Path(".")
    try:
        st = os.statvfs(parent)
        free = f", {fmt_size(st.f_bavail * st.f_frsize)} free"
    except OSError:
        free = ""
    if need:
        needed = f"{'more than ' if at_least else ''}{fmt_size(need)} needed{free}"
    else:
        needed = f"more space needed{free}"
    return InspectError(f"{target}: no space left on the device while writing it ({needed}; "
                        "nothing was replaced, the partial output was removed)",
                        hint=f"free disk space in {parent}, or write it to another disk")


def _tree_bytes(path: Path) -> int:
    """Bytes in a file or folder (a temporary output so far); 0 where unreadable."""
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except OSError:
        return 0


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes, **kw: object) -> None:
    with atomic_path(target, need=len(data), **kw) as tmp:  # type: ignore[arg-type]
        tmp.write_bytes(data)


def atomic_write_text(target: str | os.PathLike[str], text: str, **kw: object) -> None:
    atomic_write_bytes(target, text.encode("utf-8"), **kw)
