"""Checkpoint metadata without tensor data: keys, shapes, dtypes, saved devices, container.

A thin view of the one reader, :func:`torchinspect.io.tensors.open_input` (safetensors
header, the restricted zip reader, torch's weights-only loader as the fallback, sharded and
DCP layouts), with ``need_bytes=False``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.io.formats import CheckpointFormat
from torchinspect.io.state_dict import describe_value
from torchinspect.io.tensors import open_input


@dataclass(frozen=True)
class TensorMeta:
    """Shape, dtype (torch name, e.g. ``"float16"``), saved device and size of one entry.

    ``kind`` is ``"tensor"`` or one of the non-tensor state_dict entries ``load_state_dict``
    consumes: ``"extra_state"`` (a module's ``get_extra_state()``), ``"packed"`` (torch.ao
    quantized Linear's ``(qweight, bias)``: shape and dtype of the weight), ``"packed_dtype"``.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str = "cpu"
    nbytes: int = 0
    storage: str | None = None  # storage identity inside the file (tied tensors share it)
    kind: str = "tensor"

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "device": self.device,
                "nbytes": self.nbytes, "kind": self.kind}


class TensorSet:
    """Totals over a ``tensors`` mapping of TensorMeta (checkpoint metadata, diff sides).

    Bytes count each storage view once (tied tensors are one tensor on disk); ``tied`` lists
    the groups of keys that share one.
    """

    tensors: dict[str, TensorMeta]

    @property
    def devices(self) -> list[str]:
        return sorted({t.device for t in self.tensors.values()})

    @property
    def total_bytes(self) -> int:
        seen: set[str] = set()
        total = 0
        for t in self.tensors.values():
            if t.storage is not None and t.nbytes:
                if t.storage in seen:
                    continue
                seen.add(t.storage)
            total += t.nbytes
        return total

    @property
    def tied(self) -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for k, t in self.tensors.items():
            if t.storage is not None and t.nbytes and t.kind == "tensor":
                groups.setdefault(t.storage, []).append(k)
        return [g for g in groups.values() if len(g) > 1]

    @property
    def extra_state(self) -> list[str]:
        return [k for k, t in self.tensors.items() if k.endswith("_extra_state")]


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
    notes: list[str] = field(default_factory=list)


def read_checkpoint_meta(path: str | os.PathLike[str], *, key: str | None = None,
                         trust_pickle: bool = False,
                         fmt: CheckpointFormat | None = None) -> CheckpointMeta:
    """Read keys, shapes, dtypes and saved devices without materializing tensor data.

    ``key`` chooses the container entry as in :func:`extract_state_dict`; ``fmt`` skips
    format detection when the caller already ran :func:`detect_format`. A torch zip
    checkpoint, a safetensors file or a sharded index costs a few MB whatever its size and
    does not import torch. Raises :class:`InspectError` / :class:`UnsafeCheckpointError`
    exactly like :func:`read_checkpoint` (TorchScript/.pt2 archives included).
    """
    inp = open_input(path, key=key, trust_pickle=trust_pickle, need_bytes=False, fmt=fmt)
    tensors = {t.name: TensorMeta(t.shape, t.dtype, t.device, t.nbytes, t.tie, t.kind)
               for t in inp.tensors}
    extras = {k: describe_value(v) for k, v in inp.extras.items()}
    return CheckpointMeta(inp.path, inp.format, tensors, inp.container_key, inp.top_level_keys,
                          extras, inp.metadata, inp.file_size, inp.notes)
