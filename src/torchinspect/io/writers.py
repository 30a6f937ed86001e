"""Tensor file writers: one atomic file (safetensors, pt, npy) and HF-style sharded safetensors.

Every file is written through :func:`torchinspect.io.atomic.atomic_path`: a crash or
Ctrl-C leaves the old file or the new one, never half a file.

* :func:`write_tensors` — a dict of tensors as one file (``safetensors``: one file with
  string metadata; ``pt``: ``torch.save`` of the dict; ``npy``: one ``.npy`` per tensor).
* :func:`write_sharded` — a state dict split into ``NAME-00001-of-00003.safetensors`` files of
  at most ``max_shard_bytes`` each plus ``NAME.safetensors.index.json``
  (``{"metadata": {"total_size": N}, "weight_map": {tensor: file}}``), the layout
  ``transformers``/``huggingface_hub`` read.
* :func:`plan_shards` — the grouping alone, for writers that stream their own shards.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.atomic import atomic_path, atomic_write_text

FORMATS = ("safetensors", "pt", "npy")
SUFFIX = {"safetensors": ".safetensors", "pt": ".pt", "npy": ".npy"}


def parse_size(text: str | int, option: str = "--shard-size") -> int:
    """``5GB``/``500MB``/``2GiB``/``1000``/an int -> bytes (positive)."""
    import re

    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([KMGT]?)(i?)B?\s*", str(text),
                         flags=re.IGNORECASE)
        if not m or (m[3] and not m[2]):
            raise InspectError(f"{option} {text!r}: expected a size like 5GB or 500MB",
                               hint="units: KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB")
        base = 1024 if m[3] else 1000
        value = float(m[1]) * base ** " KMGT".index(m[2].upper() or " ")
    if value < 1:
        raise InspectError(f"{option} {text!r}: must be at least 1 byte", hint="e.g. 5GB or 500MB")
    return int(value)


def tensor_nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def _prepare(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Contiguous CPU tensors that own their storage (safetensors refuses shared storage)."""
    out = {}
    for name, t in tensors.items():
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.untyped_storage().nbytes() != tensor_nbytes(t):
            t = t.clone()
        out[name] = t
    return out


def write_tensors(path: str | os.PathLike[str], tensors: Mapping[str, Any], *,
                  fmt: str = "safetensors", metadata: Mapping[str, str] | None = None,
                  force: bool = True, protect: Sequence[str | os.PathLike[str]] = (),
                  sync: bool = True) -> list[Path]:
    """Write ``tensors`` atomically; returns the files written.

    ``npy`` writes one file per tensor, named ``<stem>.<tensor name>.npy`` next to ``path``
    (NumPy has no bfloat16: such tensors are refused with a hint). ``metadata`` is kept in
    the safetensors header and in the ``pt`` dict under ``__metadata__``. ``sync``: see
    :func:`torchinspect.io.atomic.atomic_path`.
    """
    if fmt not in FORMATS:
        raise InspectError(f"unknown tensor format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    path = Path(path)
    data = _prepare(tensors)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    protect = tuple(protect)
    if fmt == "safetensors":
        from safetensors.torch import save_file

        with atomic_path(path, force=force, protect=protect, sync=sync) as tmp:
            save_file(data, str(tmp), metadata=meta or None)
        return [path]
    if fmt == "pt":
        import torch

        obj: dict[str, Any] = dict(data)
        if meta:
            obj["__metadata__"] = meta
        with atomic_path(path, force=force, protect=protect, sync=sync) as tmp:
            torch.save(obj, tmp)
        return [path]
    import numpy as np
    import torch

    written = []
    stem = path.name[: -len(".npy")] if path.name.endswith(".npy") else path.name
    for name, t in data.items():
        if t.dtype == torch.bfloat16:
            raise InspectError(f"tensor {name!r} is bfloat16, which .npy files cannot hold",
                               hint="use --format safetensors or pt, or --save-dtype fp16/fp32")
        target = path.with_name(f"{stem}.{name}.npy")
        with atomic_path(target, force=force, protect=protect, sync=sync) as tmp, open(tmp, "wb") as fh:
            np.save(fh, t.numpy(), allow_pickle=False)
        written.append(target)
    return written


@dataclass
class ShardPlan:
    """Tensor names grouped into shards of at most ``max_bytes`` (one oversized tensor: alone)."""

    shards: list[list[str]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @property
    def total_size(self) -> int:
        return sum(self.sizes)


def plan_shards(sizes: Mapping[str, int], max_bytes: int) -> ShardPlan:
    """Greedy in the given order, like ``huggingface_hub.split_torch_state_dict_into_shards``."""
    if max_bytes <= 0:
        raise InspectError(f"shard size {max_bytes} must be positive", hint="e.g. 1GB or 500MB")
    plan = ShardPlan()
    for name, n in sizes.items():
        if not plan.shards or (plan.sizes[-1] + n > max_bytes and plan.sizes[-1] > 0):
            plan.shards.append([])
            plan.sizes.append(0)
        plan.shards[-1].append(name)
        plan.sizes[-1] += n
    return plan


def write_sharded(folder: str | os.PathLike[str], tensors: Mapping[str, Any], *,
                  max_shard_bytes: int, name: str = "model",
                  metadata: Mapping[str, str] | None = None, force: bool = True,
                  protect: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """HF-style sharded safetensors; returns the index path (or the single file's path).

    One shard is written as ``NAME.safetensors`` without an index, as ``transformers`` does.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InspectError(f"{folder} is not a folder", hint="create it first")
    plan = plan_shards({k: tensor_nbytes(v) for k, v in tensors.items()}, max_shard_bytes)
    if len(plan.shards) <= 1:
        target = folder / f"{name}.safetensors"
        write_tensors(target, tensors, metadata=metadata, force=force, protect=protect)
        return target
    n = len(plan.shards)
    weight_map: dict[str, str] = {}
    for i, names in enumerate(plan.shards, 1):
        fname = f"{name}-{i:05d}-of-{n:05d}.safetensors"
        write_tensors(folder / fname, {k: tensors[k] for k in names},
                      metadata={"format": "pt", **(metadata or {})}, force=force, protect=protect)
        weight_map.update(dict.fromkeys(names, fname))
    index = {"metadata": {"total_size": plan.total_size, **(metadata or {})},
             "weight_map": weight_map}
    target = folder / f"{name}.safetensors.index.json"
    atomic_write_text(target, json.dumps(index, indent=2) + "\n", force=force, protect=protect)
    return target


def read_index(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``*.safetensors.index.json`` written by :func:`write_sharded` (or by HF)."""
    path = Path(path)
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InspectError(f"{path}: cannot read the shard index ({exc.__class__.__name__})",
                           hint="the index must be the JSON file next to the shards") from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise InspectError(f"{path}: not a safetensors index (no weight_map)",
                           hint="pass NAME.safetensors.index.json")
    return index
