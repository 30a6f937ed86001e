"""Taking over an output folder of ``inspect features``: the lock, stale temporary files,
what an earlier run left (recovery), and the check that a resume adds rows of the same
model with the same settings.

One writer per folder: rank 0 takes an exclusive ``flock`` on ``OUT/.lock`` for the whole
run and writes who holds it (pid, host, start time) into the file; a second run fails at
once with exit 2 and names the holder. The lock file stays (removing it would let a waiting
process lock a deleted file). The kernel drops the lock when the holder dies, so a killed
run never leaves the folder locked. torchrun's other ranks never touch the lock: they wait
at the process group's barrier while rank 0 recovers the folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.features import store
from torchinspect.sources.origin import describe_weights

LOCK = ".lock"
# Settings that must match for a rerun to add rows to an existing folder.
SAME_SETTINGS = ("model", "weights", "layers", "pool", "save_dtype", "file_format", "preprocess")
# what atomic_path leaves when killed: ".<target name>.<random>.tmp" folders beside the target
_TEMP_RE = re.compile(r"^\.(features-\d{3}-r\d{3}-\d{5}\S*|manifest\.json|\.progress-r\d{3}-run\d{3}\.json"
                      r"|part-\d+-r\d+-\d+\.safetensors)\.[A-Za-z0-9_]+\.tmp$")
_PART_RE = re.compile(r"^part-(\d+)-r(\d+)-(\d+)\.safetensors$")


class FolderLock:
    """An exclusive, non-blocking ``flock`` on ``folder/.lock``; a context manager."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self.fd: int | None = None

    def __enter__(self) -> FolderLock:
        try:
            import fcntl
        except ImportError:  # no flock on this platform: one writer is up to the user
            return self
        with store.writing(self.path):  # never through a link planted at the lock's name
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_NONBLOCK", 0), 0o666)
            except OSError as exc:
                if not os.path.islink(self.path):
                    raise
                raise InspectError(f"{self.path} is a symbolic link, not this tool's lock file",
                                   hint="remove it, or write to another folder") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InspectError(f"{self.path} is not a regular file (this tool's lock file is)",
                               hint="remove it, or write to another folder")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise InspectError(
                f"{self.path.parent} is being written by another `inspect features` run ({holder})",
                hint="wait for it to finish (rerun then to resume), or write to another folder",
                status=ExitStatus.USAGE) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": store.now()}
        os.write(fd, (json.dumps(info) + "\n").encode())
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it has not written its pid yet"


def remove_stale_temps(folder: Path) -> list[str]:
    """Temporary files and folders of this tool's atomic writes in ``folder`` and its
    ``.parts``: under the folder's lock no writer of ours is alive, so every one is stale
    (age does not matter). Returns the names removed."""
    removed = []
    for where in (folder, folder / store.PARTS):
        if not where.is_dir():
            continue
        for entry in where.iterdir():
            if _TEMP_RE.match(entry.name):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(entry.name)
    return removed


# ------------------------------------------------------------------ the manifest found


def read_manifest(folder: Path, *, restart: bool) -> dict[str, Any] | None:
    """The folder's manifest if it is ours; None if there is none (or ``restart`` replaces
    an unreadable one of ours). A manifest of something else is never touched."""
    path = folder / store.MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        if restart and _has_our_files(folder):
            return None  # ours but corrupt: --restart starts the folder over
        raise InspectError(f"{path}: unreadable ({type(exc).__name__})",
                           hint="pass --restart to start the folder over" if _has_our_files(folder)
                           else "write to another folder") from None
    if not isinstance(data, dict) or data.get("format") != store.FORMAT_ID:
        raise InspectError(f"{path} is not a torchinspect features manifest: refusing to "
                           "replace it", hint="write to another folder")
    return data


def refuse_foreign(folder: Path) -> None:
    """Before the lock file is created: a folder holding another tool's manifest.json (valid
    JSON, not ours) is left exactly as it is."""
    try:
        data = json.loads((folder / store.MANIFEST).read_text())
    except (OSError, ValueError):
        return  # none, or unreadable: read_manifest decides under the lock
    if not isinstance(data, dict) or data.get("format") != store.FORMAT_ID:
        raise InspectError(f"{folder / store.MANIFEST} is not a torchinspect features manifest: "
                           "refusing to replace it", hint="write to another folder")


def _has_our_files(folder: Path) -> bool:
    """Shards, parts or progress files: the lock file is no evidence (taken before this)."""
    return any(store.SHARD_RE.match(f.name) or f.name == store.PARTS
               or f.name.startswith(".progress-r") for f in folder.iterdir())


def check_same(folder: Path, manifest: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Refuse to add rows made with other settings or another model's weights."""
    differs = [k for k in SAME_SETTINGS if manifest.get(k) != settings.get(k)]
    if not differs:
        return
    detail = ""
    if "weights" in differs:
        detail = (f"; weights: the folder has {describe_weights(manifest.get('weights'))}, "
                  f"this run {describe_weights(settings.get('weights'))}")
    raise InspectError(
        f"{folder} holds features written with other settings ({', '.join(differs)}){detail}",
        hint="use another output folder, or pass --restart to discard its rows and start over")


# ------------------------------------------------------------------ recovery


def recover(folder: Path, settings: dict[str, Any], *, restart: bool, fmt: str,
            shard_bytes: int) -> dict[str, Any]:
    """Rank 0, holding the lock, before any rank reads: make the folder consistent; return
    the manifest (with ``tensors`` rebuilt from recovered parts when it had none)."""
    manifest = read_manifest(folder, restart=restart)
    if restart:
        clear(folder)
        manifest = None
    remove_stale_temps(folder)
    if manifest is not None:
        check_same(folder, manifest, settings)
    if manifest is None:
        manifest = {"format": store.FORMAT_ID, "version": 1, **settings, "status": "incomplete",
                    "rows": 0, "shards": [], "inputs": [], "failed": [], "runs": []}
    progress = store.read_progress(folder)
    recorded = _recover_parts(folder, manifest, progress, fmt=fmt, shard_bytes=shard_bytes)
    for f in folder.iterdir():  # shards written but never recorded: a kill in between
        if store.SHARD_RE.match(f.name) and f.name not in recorded:
            f.unlink()
    manifest = store.merge(manifest, progress)
    store.write_json(folder / store.MANIFEST, manifest)
    store.drop_progress(folder, progress)
    return manifest


def _recover_parts(folder: Path, manifest: dict[str, Any], progress: list[dict[str, Any]], *,
                   fmt: str, shard_bytes: int) -> set[str]:
    """Leftover parts of a killed run become shards of their own run/rank (added to
    ``progress``); returns every shard file name the folder records."""
    parts: dict[tuple[int, int], list[Path]] = {}
    pdir = folder / store.PARTS
    if pdir.is_dir():
        for p in sorted(pdir.iterdir()):
            if m := _PART_RE.match(p.name):
                parts.setdefault((int(m[1]), int(m[2])), []).append(p)
    for (run, rank), plist in sorted(parts.items()):
        pr = next((x for x in progress if x["run"] == run and x["rank"] == rank), None)
        if pr is None:
            pr = {"run": run, "rank": rank, "shards": [], "failed": []}
            progress.append(pr)
        done = {i for s in pr["shards"] for i in s["ids"]} | {e["id"] for e in manifest["inputs"]}
        _parts_to_shards(folder, plist, pr, done, fmt=fmt, shard_bytes=shard_bytes,
                         metadata={"model": str(manifest.get("model"))})
    return {name for s in manifest["shards"] for name in (s["file"], *s["files"].values())} | {
        name for pr in progress for s in pr["shards"] for name in (s["file"], *s["files"].values())}


def _parts_to_shards(folder: Path, plist: list[Path], pr: dict[str, Any], done: set[str], *,
                     fmt: str, shard_bytes: int, metadata: Mapping[str, str]) -> None:
    rows: list[dict[str, torch.Tensor]] = []
    ids: list[str] = []
    nbytes = 0

    def flush() -> None:
        nonlocal rows, ids, nbytes
        if ids:
            tensors = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
            name = f"features-{pr['run']:03d}-r{pr['rank']:03d}-{len(pr['shards']):05d}"
            pr["shards"].append(store.write_shard(folder, tensors, ids, fmt=fmt, metadata=metadata,
                                                  name=name).to_dict())
            pr.setdefault("tensors", None)
            pr["tensors"] = pr["tensors"] or store.tensors_info(tensors)
        rows, ids, nbytes = [], [], 0

    for p in plist:
        part_ids, tensors = _read_part(p)
        if part_ids and not set(part_ids) & done:
            rows.append(tensors)
            ids.extend(part_ids)
            nbytes += sum(t.numel() * t.element_size() for t in tensors.values())
        if nbytes >= shard_bytes:
            flush()
    flush()
    for p in plist:
        p.unlink(missing_ok=True)


def _read_part(path: Path) -> tuple[list[str], dict[str, torch.Tensor]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            ids = json.loads((fh.metadata() or {}).get("ids", "[]"))
            return ids, {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    except Exception:  # truncated by an OS crash (parts are not fsynced): redo its rows
        return [], {}


def clear(folder: Path) -> None:
    """--restart: remove what earlier runs of this command wrote (nothing else)."""
    for f in list(folder.iterdir()):
        if store.SHARD_RE.match(f.name) or f.name == store.MANIFEST or f.name.startswith(".progress-r"):
            f.unlink()
    pdir = folder / store.PARTS
    if pdir.is_dir():
        for p in pdir.iterdir():
            if _PART_RE.match(p.name) or _TEMP_RE.match(p.name):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if not any(pdir.iterdir()):
            pdir.rmdir()
