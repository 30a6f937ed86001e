"""Checkpoint metadata without tensor data: keys, shapes, dtypes, saved devices, container.

safetensors: the header. torch.save zip files: the pickle read by a restricted pure-Python
unpickler (io/torchzip.py), no torch import at all. Anything that reader does not know
(and legacy non-zip files) falls back to ``torch.load(weights_only=True, mmap=True)``
with a ``map_location`` that records each storage's saved device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.io.formats import (
    CheckpointFormat,
    weights_file,
)
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.state_dict import container_extras, find_state_dict
from torchinspect.io.torchzip import NeedsTorch, TensorRef, read_torch_zip_structure


@dataclass(frozen=True)
class TensorMeta:
    """Shape, dtype (torch name, e.g. ``"float16"``), saved device and size of one tensor."""

    shape: tuple[int, ...]
    dtype: str
    device: str = "cpu"
    nbytes: int = 0
    storage: str | None = None  # storage identity inside the file (tied tensors share it)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "device": self.device,
                "nbytes": self.nbytes}


class TensorSet:
    """Totals over a ``tensors`` mapping of TensorMeta (checkpoint metadata, diff sides)."""

    tensors: dict[str, TensorMeta]

    @property
    def devices(self) -> list[str]:
        return sorted({t.device for t in self.tensors.values()})

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


@dataclass
class CheckpointMeta(TensorSet):
    """What :func:`read_checkpoint_meta` found. ``tensors`` is the state_dict's metadata."""

    path: Path
    format: CheckpointFormat
    tensors: dict[str, TensorMeta]
    container_key: str | None = None  # e.g. "state_dict", "model_ema", "model/state_dict"
    top_level_keys: list[str] = field(default_factory=list)
    extras: dict[str, str] = field(default_factory=dict)  # other container entries, described
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors __metadata__
    file_size: int = 0


def _describe(v: Any) -> str:
    if isinstance(v, (bool, int, float)) or v is None:
        return repr(v)
    if isinstance(v, str):
        return repr(v[:60])
    if isinstance(v, dict):
        return f"dict ({len(v)} entries)"
    if isinstance(v, (list, tuple)):
        return f"{type(v).__name__} ({len(v)} items)"
    return type(v).__name__


def read_checkpoint_meta(path: str | os.PathLike[str], *, key: str | None = None,
                         trust_pickle: bool = False) -> CheckpointMeta:
    """Read keys, shapes, dtypes and saved devices without materializing tensor data.

    ``key`` chooses the container entry as in :func:`extract_state_dict`. A torch zip
    checkpoint or a safetensors file costs a few MB whatever its size, and does not import
    torch. Raises :class:`InspectError` / :class:`UnsafeCheckpointError` exactly like
    :func:`read_checkpoint` (TorchScript/.pt2 archives included).
    """
    path, fmt, size = weights_file(path)
    if fmt is CheckpointFormat.safetensors:
        header = read_safetensors_header(path)
        tensors = {n: TensorMeta(e.shape, e.dtype, "cpu", e.nbytes, f"{e.begin}")
                   for n, e in header.entries.items()}
        return CheckpointMeta(path, fmt, tensors, metadata=header.metadata, file_size=size)
    obj: Any = None
    if fmt is CheckpointFormat.torch_zip:
        try:
            obj, _archive = read_torch_zip_structure(path)
        except NeedsTorch:
            obj = None
    if obj is not None:
        sd, used = find_state_dict(obj, key, is_tensor=lambda x: isinstance(x, TensorRef),
                                   source=str(path))
        tensors = {k: _ref_meta(v) for k, v in sd.items()}
    else:
        obj, tensors, used = _meta_via_torch(path, fmt, key, trust_pickle)
    top = [str(k) for k in obj] if isinstance(obj, dict) else []
    extras = {k: _describe(v) for k, v in container_extras(obj, used).items()}
    return CheckpointMeta(path, fmt, tensors, used, top, extras, {}, size)


def _ref_meta(ref: TensorRef) -> TensorMeta:
    return TensorMeta(ref.shape, ref.dtype, ref.storage.location, ref.nbytes,
                      f"{ref.storage.key}@{ref.offset}")


def _meta_via_torch(path: Path, fmt: CheckpointFormat, key: str | None,
                    trust_pickle: bool) -> tuple[Any, dict[str, TensorMeta], str | None]:
    from torchinspect.io.torch_load import load_state_dict_with_devices

    obj, sd, used, locations = load_state_dict_with_devices(path, fmt, key, trust_pickle)
    tensors = {}
    for k, t in sd.items():
        ptr = t.untyped_storage().data_ptr()
        dtype = str(t.dtype).removeprefix("torch.")
        tensors[k] = TensorMeta(tuple(t.shape), dtype, locations.get(ptr, str(t.device)),
                                t.numel() * t.element_size(), f"{ptr}@{t.storage_offset()}")
    return obj, tensors, used
