"""Tensor file writers.

* :func:`write_tensors` — a dict of tensors as one atomic file (``safetensors``: one file
  with string metadata; ``pt``: ``torch.save`` of the dict; ``npy``: one ``.npy`` per
  tensor), through :func:`torchinspect.io.atomic.atomic_path`: a crash or Ctrl-C leaves the
  old file or the new one, never half a file.
* :func:`write_safetensors_stream` / :func:`write_pt_stream` — streaming writers into a
  path the caller made atomic (``inspect convert``): each tensor's bytes come chunk by chunk
  from :class:`OutTensor.chunks`, so peak memory is one chunk, not the checkpoint.
* :func:`plan_shards` — the greedy grouping of Hugging Face shards (the sharded layout
  itself is written by ``inspect convert --shard-size``: torchinspect.checkpoints).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.arguments import MAX_BYTES
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.io.atomic import atomic_path
from torchinspect.io.safetensors import encode_header
from torchinspect.io.torchzip import read_torch_zip_structure
from torchinspect.io.zipcrc import CrcStream, ZipPatchError, crc_mismatches, set_stored_crcs

FORMATS = ("safetensors", "pt", "npy")
SUFFIX = {"safetensors": ".safetensors", "pt": ".pt", "npy": ".npy"}


def parse_size(text: str | int, option: str = "--shard-size") -> int:
    """``5GB``/``500MB``/``2GiB``/``1000``/an int -> bytes (positive)."""
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
    if not value <= MAX_BYTES:  # also inf (1e999) and NaN
        raise InspectError(f"{option} {text!r}: over {MAX_BYTES:,} bytes (1 PiB, more than any "
                           "disk or memory holds)", hint="e.g. 5GB or 500MB")
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


# ------------------------------------------------------------------ streaming writers

Chunks = Iterable[bytes | memoryview]


@dataclass(frozen=True)
class OutTensor:
    """One entry of a streamed state_dict: a tensor whose bytes ``chunks()`` yields (in
    ``dtype``, C order), or a plain value (``is_tensor=False``) stored as it is. Entries
    with the same ``tie`` are one storage in a ``.pt`` file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    chunks: Callable[[], Chunks]
    tie: str = ""
    is_tensor: bool = True
    value: Any = None


def pwrite_all(fd: int, chunks: Chunks, pos: int) -> int:
    """Write every chunk at ``pos`` onward; returns the end position."""
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        while view.nbytes:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n
    return pos


def write_safetensors_stream(path: Path, tensors: Sequence[OutTensor],
                             metadata: Mapping[str, str]) -> None:
    """A safetensors file: the header, then each tensor's bytes at its offset."""
    header, offsets = encode_header([(t.name, t.dtype, t.shape, t.nbytes) for t in tensors],
                                    dict(metadata))
    out = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(out, header)
        base = len(header)
        for t, (begin, end) in zip(tensors, offsets, strict=True):
            if pwrite_all(out, t.chunks(), base + begin) != base + end:
                raise RuntimeError(f"wrote the wrong number of bytes for {t.name!r}")
    finally:
        os.close(out)


def write_pt_stream(path: Path, entries: Sequence[OutTensor]) -> None:
    """A ``torch.save`` zip of the entries, written without holding the tensors.

    ``torch.save`` writes a data-less skeleton (``skip_data``); each storage is then filled
    from its chunks. The skeleton's ``data/<key>`` records have the right sizes but CRC-32
    0; each record's CRC is computed while its bytes stream through and then written into
    the zip headers (central directory and data descriptor), so zipfile/``unzip -t`` accept
    the file. Plain values go into the skeleton as they are.
    """
    import torch
    from torch.serialization import skip_data

    skeleton: dict[str, Any] = {}
    by_tie: dict[str, Any] = {}
    for e in entries:
        if not e.is_tensor:
            skeleton[e.name] = e.value
            continue
        t = by_tie.get(e.tie)
        if t is None or t.dtype != torch_dtype(e.dtype):
            t = torch.empty(e.shape, dtype=torch_dtype(e.dtype))  # untouched: no RAM used
            by_tie[e.tie] = t
        skeleton[e.name] = t
    with skip_data():
        torch.save(skeleton, path)
    del skeleton, by_tie
    _fill_pt_records(path, entries)


def _fill_pt_records(path: Path, entries: Sequence[OutTensor]) -> None:
    obj, archive = read_torch_zip_structure(path)
    records: dict[str, tuple[int, int]] = {}  # member name -> (crc32, bytes written)
    out = os.open(path, os.O_RDWR)
    try:
        for e in entries:
            if not e.is_tensor:
                continue
            key = obj[e.name].storage.key
            member = f"{archive.prefix}data/{key}"
            if member in records:
                continue
            stream = CrcStream(e.chunks())
            pwrite_all(out, stream, archive.storage_offset(key))
            records[member] = (stream.crc, stream.nbytes)
        set_stored_crcs(out, records)
    except ZipPatchError as exc:
        raise InspectError(f"could not finish the .pt zip archive ({exc})",
                           hint="report this; OUT was not written", status=ExitStatus.INTERNAL) from None
    finally:
        os.close(out)
    _check_zip_crcs(path, records)


def _check_zip_crcs(path: Path, records: dict[str, tuple[int, int]]) -> None:
    """Headers only: every record's CRC-32 is the streamed one, in the central directory
    and in its local header/data descriptor (the bytes are compared by the caller's
    verification)."""
    import zipfile

    with zipfile.ZipFile(path) as zf:
        wrong = [n for n, (crc, size) in records.items()
                 if zf.getinfo(n).CRC != crc or zf.getinfo(n).file_size != size]
    wrong += crc_mismatches(path)
    if wrong:
        raise InspectError(f"verification failed: zip CRC-32 not set for {wrong[0]!r}",
                           hint="report this; OUT was not written", status=ExitStatus.INTERNAL)


def torch_dtype(name: str) -> Any:
    """``"float16"`` -> ``torch.float16``."""
    import torch

    return getattr(torch, name)
