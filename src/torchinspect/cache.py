"""The user's cache: what this tool measured on this machine, kept between runs, and read
back as a stranger's file.

One folder, ``$XDG_CACHE_HOME/torchinspect`` (``~/.cache/torchinspect`` when the variable is
unset or not an absolute path, as the XDG base-directory rules say). Every file in it is a
JSON document ``{"schema": "torchinspect-cache/NAME", "version": N, "key": {...}, "data":
...}``: the version of its writer's schema, the machine (and versions) it was measured on,
and the measurement.

Everything in the folder may have been planted or damaged by someone else, so:

* the folder is private: created 0700, refused (with a note, and no cache) when it is a
  symbolic link, not a folder, or owned by another user; made 0700 when it is ours but open
  to others;
* a file is opened relative to the folder's own descriptor with ``O_NOFOLLOW`` and
  ``O_NONBLOCK``, and read only when it is a regular file of ours (never a symlink, FIFO,
  device or socket), under a size cap, once;
* the text must be UTF-8 JSON without NaN/Infinity, of this entry's schema, version and
  key; then the caller's ``check`` validates every value it uses (types, finite ranges: a
  negative or absurd number is refused). Anything else is ignored with a note and measured
  again, never trusted and never an error;
* a write goes to a temporary file with an unpredictable name created ``O_EXCL|O_NOFOLLOW``
  (0600) in that folder, fsynced, and renamed over the entry (``os.replace``): a planted
  symlink or FIFO is never written through, a killed run leaves the old entry or the new
  one, and two runs at once cannot mix their bytes (the last rename wins).

A cache is never worth failing a command for: :func:`read` and :func:`write` return a note
(one line) where something was refused or could not be done, and the caller adds it to its
result's notes. Nothing here imports torch (only errors.py).
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
import secrets
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchinspect.errors import file_kind

SCHEMA_PREFIX = "torchinspect-cache/"
#: a cache file larger than this is refused unread (the largest, the cuDNN calibration of a
#: big model, is a few hundred KB)
MAX_BYTES = 16 << 20
#: temporary files of a killed writer older than this are removed by the next writer
STALE_TEMP_S = 600.0
_TEMP_SUFFIX = ".tmp"


class _Refused(Exception):
    """Why the cache folder or a file in it is not used (the text of a note)."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/torchinspect``, or ``~/.cache/torchinspect`` (a relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG rules say)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchinspect"


def machine_key(**extra: Any) -> dict[str, Any]:
    """What identifies this machine in a cache key: host name, architecture and CPU model,
    plus ``extra`` (the versions and devices a measurement depends on)."""
    return {"host": platform.node(), "arch": platform.machine(), "cpu": cpu_model(), **extra}


def cpu_model() -> str:
    """The CPU model (``model name`` of /proc/cpuinfo on Linux), else platform's processor."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@dataclass
class Entry:
    """What :func:`read` found: ``data`` (validated by the caller's check) or None, and a
    one-line ``note`` when a file was there but not used."""

    data: Any = None
    note: str | None = None


def _open_folder(root: Path, *, create: bool) -> int:
    """A descriptor of the private folder ``root`` (created 0700 when ``create``); refused
    when it is a link, not a folder, or not ours. None of its parents is checked: they are
    the user's own (a ``~/.cache`` that is a link to another disk is fine)."""
    if create:
        try:
            os.makedirs(root.parent, mode=0o700, exist_ok=True)
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        if os.path.islink(root):
            raise _Refused(f"the cache folder {root} is a symbolic link; not using it") from None
        if exc.errno == errno.ENOTDIR:
            raise _Refused(f"the cache folder {root} is not a folder; not using it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
        os.close(fd)
        raise _Refused(f"the cache folder {root} belongs to another user (uid {st.st_uid}); "
                       "not using it")
    if stat.S_IMODE(st.st_mode) & 0o077:  # ours, but open to others: make it private
        os.fchmod(fd, 0o700)
    return fd


def _file_name(name: str) -> str:
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"cache entry name {name!r} is not a plain file name")
    return f"{name}.json"


def read(name: str, *, version: int, key: Mapping[str, Any], check: Callable[[Any], Any],
         what: str, limit: int = MAX_BYTES, root: Path | None = None,
         describe: Callable[[Any], str] | None = None) -> Entry:
    """The entry ``name`` of the cache (``root``: the folder, default :func:`cache_root`),
    when it holds schema ``name`` version ``version`` for exactly ``key``; ``check(data)``
    returns the value to use and raises ``ValueError`` (or TypeError/KeyError) naming what is
    wrong. ``what`` names the cache in notes ("host-cost cache"); ``describe(key)`` words a
    foreign key ("an NVIDIA A100 (cuDNN 9.1, torch 2.11)")."""
    root = root or cache_root()
    path = root / _file_name(name)
    if not os.path.lexists(path):
        return Entry()
    try:
        raw = _read_file(root, path.name, limit)
    except _Refused as exc:
        return Entry(note=f"ignored the {what} {path}: {exc}; measuring again")
    except OSError as exc:
        return Entry(note=f"ignored the {what} {path}: cannot read it ({exc.strerror or exc}); "
                     "measuring again")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_PREFIX + name:
            raise ValueError("not a torchinspect cache file of this kind")
        if doc.get("version") != version:
            raise ValueError(f"schema version {_short(doc.get('version'))}, not {version}")
        if doc.get("key") != dict(key):
            found = doc.get("key")
            words = describe(found) if describe is not None else "another machine or version"
            ours = describe(dict(key)) if describe is not None else "this one"
            return Entry(note=f"ignored the {what} {path}: it was measured on {words}, not "
                         f"{ours}; measuring again")
        return Entry(data=check(doc.get("data")))
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
        return Entry(note=f"ignored the {what} {path}: corrupt ({_short(reason, 120)}); "
                     "measuring again")


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_file(root: Path, file_name: str, limit: int) -> bytes:
    """The bytes of ``root/file_name``: a regular file of ours under ``limit`` bytes, opened
    without following a link and without blocking on a FIFO, read once."""
    dir_fd = _open_folder(root, create=False)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(file_name, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Refused("it is a symbolic link, not a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Refused(f"it is {file_kind(st.st_mode)}, not a regular file")
            if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
                raise _Refused(f"it belongs to another user (uid {st.st_uid})")
            if st.st_size > limit:
                raise _Refused(f"it holds {st.st_size:,} bytes, over the {limit:,}-byte limit")
            chunks, left = [], st.st_size + 1  # one byte more: a file that grew is seen
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            if len(data) > limit:
                raise _Refused(f"it grew past the {limit:,}-byte limit while it was read")
            return data
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def write(name: str, data: Any, *, version: int, key: Mapping[str, Any], what: str,
          root: Path | None = None) -> str | None:
    """Save ``data`` (JSON: finite numbers, str keys) as the entry ``name`` for ``key``,
    atomically (see the module docstring). Returns None, or a one-line note saying why the
    cache was not written (the measurement itself stands)."""
    root = root or cache_root()
    file_name = _file_name(name)
    try:
        text = json.dumps({"schema": SCHEMA_PREFIX + name, "version": version, "key": dict(key),
                           "data": data}, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:  # a bug of the caller: never written
        raise ValueError(f"cache entry {name}: not JSON ({exc})") from None
    payload = text.encode("utf-8", "backslashreplace")
    try:
        dir_fd = _open_folder(root, create=True)
    except _Refused as exc:
        return f"did not save the {what}: {exc}"
    except OSError as exc:
        return f"did not save the {what} in {root}: {exc.strerror or exc}"
    tmp = f".{name}.{secrets.token_hex(8)}{_TEMP_SUFFIX}"
    try:
        _clean_stale(dir_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = f"no space left on the device ({len(payload):,} bytes needed)"
        else:
            reason = exc.strerror or str(exc)
        return f"did not save the {what} {root / file_name}: {reason}"
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass  # renamed into place (the usual case), or never created
        os.close(dir_fd)


def _clean_stale(dir_fd: int) -> None:
    """Remove the temporary files of killed writers (ours: ``.NAME.HEX.tmp``, old)."""
    now = time.time()
    for entry in os.listdir(dir_fd):
        if not (entry.startswith(".") and entry.endswith(_TEMP_SUFFIX)):
            continue
        try:
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
            if now - st.st_mtime > STALE_TEMP_S:
                os.unlink(entry, dir_fd=dir_fd)
        except OSError:
            pass


# ------------------------------------------------------------------ schema checks


def number(value: Any, what: str, *, low: float, high: float, low_open: bool = False,
           integer: bool = False) -> float:
    """``value`` when it is a JSON number (not a bool), finite, in ``[low, high]`` (``(low,
    high]`` with ``low_open``) and whole with ``integer``; ValueError naming ``what``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high \
            and (not integer or float(value).is_integer())
    if not ok:
        side = "(" if low_open else "["
        raise ValueError(f"{what} = {_short(value)} is not {'a whole number' if integer else 'a number'} "
                         f"in {side}{low:g}, {high:g}]")
    return value


def text(value: Any, what: str, *, most: int = 200) -> str:
    """``value`` when it is a string of at most ``most`` characters; ValueError otherwise."""
    if not isinstance(value, str) or len(value) > most:
        raise ValueError(f"{what} is not a string of at most {most} characters")
    return value
