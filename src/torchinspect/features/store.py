"""The output folder of ``inspect features``: parts, shards, progress and the manifest.

Durability, in the order things happen for one rank:

1. every batch is written at once as an atomic *part* (``.parts/part-RUN-RANK-SEQ.safetensors``,
   its row ids in the header; renamed into place without an fsync): a killed run loses at
   most the batch in flight; after an OS crash an unreadable part is skipped and redone;
2. when the rows held in memory reach ``--shard-size`` (or the run ends, or is interrupted,
   or the next rows are not contiguous in the input order) they are written as one atomic
   *shard*, the shard is recorded in ``.progress-rRANK.json`` (atomic), then its parts are
   deleted;
3. rank 0 merges the previous ``manifest.json`` and every progress file into one manifest:
   shards sorted by the input position of their first row, so reading the shards in
   manifest order gives the rows in input order, as one process would have written them.

On start (rank 0, holding the folder's lock, before the others look; see resume.py):
leftover parts of a killed run become shards, shard files that nothing records are removed,
progress files are merged. Inputs already in the manifest (rows or failures) are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.io.atomic import atomic_write_text, current_umask
from torchinspect.io.writers import SUFFIX, write_tensors

MANIFEST = "manifest.json"
PARTS = ".parts"
FORMAT_ID = "torchinspect-features"
SHARD_RE = re.compile(r"^features-\d{3}-r\d{3}-\d{5}\.")


@dataclass
class ShardRecord:
    file: str  # safetensors/pt: the file; npy: the stem (one file per layer)
    files: dict[str, str]  # layer -> file
    ids: list[str]
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InspectError(f"{path}: unreadable ({type(exc).__name__})",
                           hint="pass --restart to start the folder over") from None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A failed write (a full disk, a read-only folder) is one line naming the file, exit 2;
    what was written before stays, so rerunning the command resumes."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise InspectError(f"{path}: cannot write ({why})",
                           hint="free space (or fix the folder), then rerun the same command to "
                           "resume", status=ExitStatus.USAGE) from None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    with writing(path):
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
        _umask_mode(path)


def _umask_mode(*paths: Path) -> None:
    """Every file of the folder gets the mode a new file gets here (0666 less the umask),
    whatever mode a writer's temporary file had."""
    mode = 0o666 & ~current_umask()
    for p in paths:
        os.chmod(p, mode)


def tensors_info(tensors: Mapping[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """The manifest's ``tensors`` entry: per-row shape and dtype of each saved tensor."""
    return {k: {"shape": list(t.shape[1:]), "dtype": str(t.dtype).removeprefix("torch.")}
            for k, t in tensors.items()}


class RankWriter:
    """Rows of one rank: parts per batch, shards per ``shard_bytes``."""

    def __init__(self, folder: Path, *, run: int, rank: int, fmt: str, shard_bytes: int,
                 metadata: Mapping[str, str]) -> None:
        self.folder = folder
        self.run, self.rank = run, rank
        self.fmt = fmt
        self.shard_bytes = shard_bytes
        self.metadata = dict(metadata)
        self.parts_dir = folder / PARTS
        with writing(self.parts_dir):
            self.parts_dir.mkdir(exist_ok=True)
        self.progress_path = folder / f".progress-r{rank:03d}-run{run:03d}.json"
        self.shards: list[ShardRecord] = []
        self.failed: list[dict[str, str]] = []
        self._rows: list[dict[str, torch.Tensor]] = []
        self._ids: list[str] = []
        self._parts: list[Path] = []
        self._bytes = 0
        self._part_seq = 0
        self.rows_written = 0
        self.tensors: dict[str, dict[str, Any]] = {}

    def add(self, ids: list[str], feats: dict[str, torch.Tensor]) -> None:
        """One batch of rows (CPU tensors, dim 0 = rows): a part now, a shard when full."""
        if ids and not self.tensors:
            self.tensors = tensors_info(feats)
        if ids:
            part = self.parts_dir / f"part-{self.run:03d}-r{self.rank:03d}-{self._part_seq:06d}.safetensors"
            # no fsync: a killed process leaves the part whole (page cache); an OS crash may
            # leave it truncated, and recovery then skips it and its rows are computed again
            with writing(part):
                write_tensors(part, feats, metadata={"ids": json.dumps(ids)}, sync=False)
            self._part_seq += 1
            self._parts.append(part)
            self._rows.append(feats)
            self._ids.extend(ids)
            self._bytes += sum(t.numel() * t.element_size() for t in feats.values())
        if self._bytes >= self.shard_bytes:
            self.flush()

    def fail(self, item_id: str, error: str) -> None:
        self.failed.append({"id": item_id, "error": error})

    def flush(self) -> None:
        """Write the rows held in memory as one shard, record it, drop its parts. A failed
        write keeps the rows and their parts (the folder stays resumable)."""
        if self._ids:
            tensors = {k: torch.cat([r[k] for r in self._rows]) for k in self._rows[0]}
            rec = write_shard(self.folder, tensors, self._ids, fmt=self.fmt,
                              name=f"features-{self.run:03d}-r{self.rank:03d}-{len(self.shards):05d}",
                              metadata=self.metadata)
            self.shards.append(rec)
            self.rows_written += len(self._ids)
            self._rows, self._ids, self._bytes = [], [], 0
        self._save_progress()
        for p in self._parts:
            p.unlink(missing_ok=True)
        self._parts = []

    def _save_progress(self) -> None:
        write_json(self.progress_path, {"run": self.run, "rank": self.rank,
                                        "shards": [s.to_dict() for s in self.shards],
                                        "failed": self.failed, "tensors": self.tensors})


def write_shard(folder: Path, tensors: dict[str, torch.Tensor], ids: list[str], *, fmt: str,
                name: str, metadata: Mapping[str, str]) -> ShardRecord:
    path = folder / f"{name}{SUFFIX[fmt]}"
    with writing(path):
        written = write_tensors(path, tensors, fmt=fmt, metadata={**metadata, "rows": str(len(ids))})
        _umask_mode(*written)
    if fmt == "npy":
        files = {k: p.name for k, p in zip(tensors, written, strict=True)}
    else:
        files = dict.fromkeys(tensors, path.name)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return ShardRecord(path.name if fmt != "npy" else name, files, list(ids), nbytes)


# ------------------------------------------------------------------ progress and merge


def read_progress(folder: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(folder.glob(".progress-r*-run*.json")):
        data = read_json(p)
        if data is not None:
            out.append(data)
    return out


def drop_progress(folder: Path, progress: list[dict[str, Any]]) -> None:
    """Once merged into the manifest: the progress files and an empty ``.parts``."""
    for pr in progress:
        (folder / f".progress-r{pr['rank']:03d}-run{pr['run']:03d}.json").unlink(missing_ok=True)
    pdir = folder / PARTS
    if pdir.is_dir() and not any(pdir.iterdir()):
        pdir.rmdir()


def merge(manifest: dict[str, Any], progress: list[dict[str, Any]],
          order: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Add the progress files' shards and failures; sort shards by first-row input position.

    ``order`` maps an input id to its position in the sorted input list; without it, the
    order already recorded in the manifest and the run/rank/sequence order are used.
    """
    manifest = dict(manifest)
    shards = list(manifest["shards"])
    failed = list(manifest["failed"])
    for pr in sorted(progress, key=lambda x: (x["run"], x["rank"])):
        shards.extend(pr["shards"])
        failed.extend(pr["failed"])
        if pr.get("tensors") and not manifest.get("tensors"):  # the first rows of the folder
            manifest["tensors"] = pr["tensors"]
    if order is None:
        known = {e["id"]: i for i, e in enumerate(manifest.get("inputs", []))}
        order = {}
        for s in shards:
            for i in s["ids"]:
                order.setdefault(i, known.get(i, len(known) + len(order)))
    big = 1 << 62
    shards.sort(key=lambda s: (order.get(s["ids"][0], big) if s["ids"] else big))
    inputs = []
    row = 0
    for s in shards:
        s["rows"] = [row, row + len(s["ids"])]
        for i in s["ids"]:
            inputs.append({"id": i, "row": row, "shard": s["file"]})
            row += 1
    have = {e["id"] for e in inputs}  # an input read on a later try is no longer a failure
    fails = {f["id"]: f for f in failed if f["id"] not in have}
    manifest.update(shards=shards, inputs=inputs, rows=row,
                    failed=sorted(fails.values(), key=lambda f: order.get(f["id"], big)))
    return manifest


def next_run(manifest: dict[str, Any]) -> int:
    """A run number no shard of this folder uses yet (killed runs left shards, no run entry)."""
    used = [int(m[1]) for s in manifest.get("shards", [])
            if (m := re.match(r"features-(\d+)-", s["file"]))]
    return max([len(manifest.get("runs", [])), *(u + 1 for u in used)])


def finish(folder: Path, order: Mapping[str, int], run_info: dict[str, Any], *,
           complete: bool, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Rank 0 after the barrier: merge every rank's progress into the one manifest."""
    manifest = read_json(folder / MANIFEST) or {}
    progress = read_progress(folder)
    run_info = {**run_info, "rows": sum(len(s["ids"]) for pr in progress for s in pr["shards"]),
                "failed": sum(len(pr["failed"]) for pr in progress)}
    manifest = merge(manifest, progress, order)
    manifest["runs"] = [*manifest.get("runs", []), {**run_info, "finished": now()}]
    manifest["status"] = "complete" if complete else "incomplete"
    manifest.update(extra or {})
    write_json(folder / MANIFEST, manifest)
    drop_progress(folder, progress)
    return manifest


@dataclass
class FeatureFolder:
    """Read back a features folder: ``rows(layer)`` in manifest (= input) order."""

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> FeatureFolder:
        folder = Path(path)
        if not (folder / MANIFEST).exists():
            raise InspectError(f"{folder}: no {MANIFEST}", hint="pass the -o folder of inspect features")
        manifest = read_json(folder / MANIFEST)
        if manifest is None or manifest.get("format") != FORMAT_ID:
            raise InspectError(f"{folder / MANIFEST} is not a torchinspect features manifest",
                               hint="pass the -o folder of inspect features")
        return cls(folder, manifest)

    def ids(self) -> list[str]:
        """The input id of every row, in row order (the labels a probe trains on)."""
        return [e["id"] for e in self.manifest.get("inputs", [])]

    def rows(self, layer: str) -> torch.Tensor:
        saved = list(self.manifest.get("tensors") or {})
        if layer not in saved:
            raise InspectError(f"{self.path}: no layer {layer!r} saved here",
                               hint=f"saved layers: {', '.join(saved) or 'none'}")
        parts = []
        for s in self.manifest["shards"]:
            f = self.path / s["files"][layer]
            fmt = self.manifest["file_format"]
            if fmt == "safetensors":
                from safetensors.torch import load_file

                parts.append(load_file(str(f))[layer])
            elif fmt == "pt":
                parts.append(torch.load(f, map_location="cpu", weights_only=True)[layer])
            else:
                import numpy as np

                parts.append(torch.from_numpy(np.load(f, allow_pickle=False)))
        return torch.cat(parts) if parts else torch.empty(0)
