"""`inspect params CKPT` without ``--arch``: what a weights file holds, from its metadata.

Counting tensors and elements, bytes per dtype and the key tree needs no model: it is read
from the file's headers or zip records by :func:`torchinspect.io.checkpoint.read_checkpoint_meta`
(no tensor data is read). What it cannot say is which tensors are parameters: a state_dict
holds buffers too (BatchNorm's running statistics, position ids), and only the architecture
registers them as one or the other. Keys are classified as *likely* buffers by their name or
an integer dtype, and every number says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.arguments import check_depth
from torchinspect.dtypes import FLOATING
from torchinspect.errors import InspectError
from torchinspect.io.checkpoint import read_checkpoint_meta
from torchinspect.io.formats import CheckpointFormat, detect_format

# state_dict names torch's own modules give their buffers (BatchNorm, HF position ids, ...)
BUFFER_NAMES = frozenset({"running_mean", "running_var", "num_batches_tracked", "position_ids",
                          "token_type_ids", "inv_freq", "attn_mask", "masked_bias", "mask"})


@dataclass
class KeyRow:
    """One key prefix (a module path) with everything saved under it (inclusive)."""

    name: str
    depth: int
    tensors: int = 0
    elements: int = 0
    bytes: int = 0
    likely_buffers: int = 0  # elements under it that are likely buffers
    self_elements: int = 0  # saved on this module path itself (not on one inside it)


@dataclass
class DtypeRow:
    tensors: int = 0
    elements: int = 0
    bytes: int = 0


@dataclass
class SavedParams:
    """The result of :func:`saved_params`: counts of a weights file, no architecture."""

    model: str
    format: str
    container_key: str | None
    depth: int
    tensors: int
    elements: int
    bytes: int
    likely_buffers: list[str]
    likely_buffer_elements: int
    by_dtype: dict[str, DtypeRow]
    rows: list[KeyRow]
    tied: list[list[str]] = field(default_factory=list)
    other_entries: list[str] = field(default_factory=list)  # non-tensor state (extra_state, ...)
    file_size: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def likely_params(self) -> int:
        return self.elements - self.likely_buffer_elements

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "format": self.format, "container_key": self.container_key,
            "depth": self.depth, "architecture": None,
            "tensors": self.tensors, "elements": self.elements, "bytes": self.bytes,
            "likely_params": self.likely_params,
            "likely_buffers": {"count": len(self.likely_buffers),
                               "elements": self.likely_buffer_elements,
                               "keys": list(self.likely_buffers)},
            "by_dtype": {k: vars(v) for k, v in self.by_dtype.items()},
            "tied": [list(g) for g in self.tied],
            "other_entries": list(self.other_entries),
            "file_size": self.file_size,
            "modules": [vars(r) for r in self.rows],
            "notes": list(self.notes),
        }


def is_likely_buffer(key: str, dtype: str) -> bool:
    """A guess from the name (``running_mean``...) or an integer/bool dtype: parameters are
    floating point, buffers often are not."""
    return key.rpartition(".")[2] in BUFFER_NAMES or dtype not in FLOATING


def is_bare_checkpoint(spec: Any, arch: str | None, trust_pickle: bool) -> bool:
    """``spec`` names a weights file given without ``--arch`` (not a model archive, not a
    Hugging Face folder, not ``file.py:Name``). With ``--trust-pickle`` the file may be a
    pickled module, so the model route is kept."""
    if not isinstance(spec, str) or arch is not None or trust_pickle:
        return False
    path = Path(spec.strip())
    if not path.is_file() or path.suffix == ".py":
        return False
    try:  # a TorchScript archive is listed from its data.pkl: loading it runs its code
        fmt = detect_format(path)
        return not fmt.is_model_archive or fmt is CheckpointFormat.torchscript
    except InspectError:
        return False  # the model route reports what is wrong with the file


def saved_params(path: str, *, depth: int = 3, key: str | None = None) -> SavedParams:
    """Counts of a weights file without its architecture (no tensor data read)."""
    check_depth(depth)
    meta = read_checkpoint_meta(path, key=key)
    seen: set[str] = set()
    rows: dict[str, KeyRow] = {"": KeyRow("", 0)}
    by_dtype: dict[str, DtypeRow] = {}
    buffers: list[str] = []
    buffer_elements = tensors = 0
    other = []
    for name, t in meta.tensors.items():
        if t.kind != "tensor":
            other.append(f"{name} ({t.kind})")
            continue
        tensors += 1
        shared = t.storage is not None and t.storage in seen  # tied: one tensor on disk
        if t.storage is not None:
            seen.add(t.storage)
        n = 0 if shared else _numel(t.shape)
        b = 0 if shared else t.nbytes
        likely = is_likely_buffer(name, t.dtype)
        if likely:
            buffers.append(name)
            buffer_elements += n
        d = by_dtype.setdefault(t.dtype, DtypeRow())
        d.tensors, d.elements, d.bytes = d.tensors + 1, d.elements + n, d.bytes + b
        _add(rows, name, depth, n, b, n if likely else 0)
    return SavedParams(
        model=str(path), format=str(meta.format), container_key=meta.container_key, depth=depth,
        tensors=tensors, elements=rows[""].elements, bytes=rows[""].bytes,
        likely_buffers=buffers, likely_buffer_elements=buffer_elements, by_dtype=by_dtype,
        rows=list(rows.values()), tied=meta.tied, other_entries=other, file_size=meta.file_size,
        notes=[*meta.notes, _BUFFER_NOTE])


_BUFFER_NOTE = ("no architecture: parameters cannot be told from buffers (running statistics, "
                "position ids) saved in the same state_dict; 'likely buffers' is a guess from "
                "key names and integer dtypes. --arch MODEL counts them exactly")


def _add(rows: dict[str, KeyRow], name: str, depth: int, n: int, b: int, buf: int) -> None:
    """Count one tensor in every prefix row above it (down to ``depth``)."""
    parts = name.split(".")[:-1]  # the module path (the last part is the tensor's name)
    for i in range(min(len(parts), depth) + 1):
        prefix = ".".join(parts[:i])
        row = rows.get(prefix)
        if row is None:
            row = rows[prefix] = KeyRow(prefix, i)
        row.tensors += 1
        row.elements += n
        row.bytes += b
        row.likely_buffers += buf
        if i == len(parts):  # saved on this module itself, not on one inside it
            row.self_elements += n


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
