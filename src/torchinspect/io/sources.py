"""Tensor byte sources for streaming convert: read one tensor's bytes in chunks.

torch zip (via the restricted reader) and safetensors inputs are read with ``os.pread`` from
the file, so converting a multi-GB checkpoint holds one chunk at a time in memory. Other
inputs (legacy files, pickles that need torch's own reader, trusted full pickles) come from
``torch.load(mmap=True)`` tensors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchinspect.io.formats import CheckpointFormat, detect_format, model_archive_error
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.state_dict import find_state_dict
from torchinspect.io.torchzip import NeedsTorch, TensorRef, read_torch_zip_structure

CHUNK = 16 * 1024 * 1024  # bytes; a multiple of every element size


@dataclass
class TensorSource:
    """One input tensor: metadata plus a way to read its (contiguous) bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    device: str
    tie: str  # equal for tensors that are the same view of the same storage
    file_offset: int | None = None  # absolute offset when read from the file
    tensor: Any = None  # a torch tensor when loaded through torch

    def read(self, fd: int | None, pos: int, n: int) -> bytes | memoryview:
        """``n`` bytes of this tensor starting at byte ``pos``."""
        if self.tensor is not None:
            import torch

            flat = self.tensor.contiguous().reshape(-1)
            return memoryview(flat.view(torch.uint8).numpy()[pos:pos + n]) if flat.numel() else b""
        if fd is None or self.file_offset is None:
            raise RuntimeError(f"no byte source for tensor {self.name!r}")
        return os.pread(fd, n, self.file_offset + pos)

    def chunks(self, fd: int | None, size: int = CHUNK) -> Iterator[bytes | memoryview]:
        if self.tensor is not None:
            import torch

            flat = self.tensor.contiguous().reshape(-1)
            if flat.numel() == 0:
                return
            arr = flat.view(torch.uint8).numpy()
            for pos in range(0, self.nbytes, size):
                yield memoryview(arr[pos:pos + size])
            return
        if fd is None or self.file_offset is None:
            raise RuntimeError(f"no byte source for tensor {self.name!r}")
        for pos in range(0, self.nbytes, size):
            n = min(size, self.nbytes - pos)
            data = os.pread(fd, n, self.file_offset + pos)
            if len(data) != n:
                raise OSError(f"short read at byte {self.file_offset + pos}")
            yield data


@dataclass
class LoadedInput:
    path: Path
    format: CheckpointFormat
    tensors: list[TensorSource]
    container_key: str | None
    extras: dict[str, Any]  # other container entries (TensorRefs for the zip reader)
    metadata: dict[str, str]
    streamed: bool  # True when bytes come straight from the file


def open_input(path: str | os.PathLike[str], *, key: str | None = None,
               trust_pickle: bool = False, need_objects: bool = False) -> LoadedInput:
    """Describe the input's state_dict tensors and how to read them.

    ``need_objects=True`` (for --keep-extra) loads through torch so that container extras
    are real Python/torch objects.
    """
    from torchinspect.io.state_dict import container_extras

    path = Path(path)
    fmt = detect_format(path)
    if fmt.is_model_archive:
        raise model_archive_error(path, fmt)
    if fmt is CheckpointFormat.safetensors:
        header = read_safetensors_header(path)
        tensors = [TensorSource(e.name, e.shape, e.dtype, e.nbytes, "cpu", f"st:{e.begin}:{e.end}",
                                e.begin) for e in header.entries.values()]
        return LoadedInput(path, fmt, tensors, None, {}, header.metadata, True)
    if fmt is CheckpointFormat.torch_zip and not need_objects:
        try:
            obj, archive = read_torch_zip_structure(path)
            sd, used = find_state_dict(obj, key, is_tensor=lambda x: isinstance(x, TensorRef),
                                       source=str(path))
            if not all(r.is_contiguous for r in sd.values()):
                raise NeedsTorch("non-contiguous tensor")
        except NeedsTorch:
            pass
        else:
            tensors = []
            for name, r in sd.items():
                base = archive.storage_offset(r.storage.key)
                from torchinspect.io.torchzip import DTYPE_SIZES

                off = base + r.offset * DTYPE_SIZES[r.dtype]
                tensors.append(TensorSource(name, r.shape, r.dtype, r.nbytes, r.storage.location,
                                            f"{r.storage.key}:{r.offset}:{r.shape}:{r.dtype}", off))
            return LoadedInput(path, fmt, tensors, used, container_extras(obj, used), {}, True)
    return _open_via_torch(path, fmt, key, trust_pickle)


def _open_via_torch(path: Path, fmt: CheckpointFormat, key: str | None,
                    trust_pickle: bool) -> LoadedInput:
    from torchinspect.io.state_dict import container_extras
    from torchinspect.io.torch_load import load_state_dict_with_devices

    obj, sd, used, locations = load_state_dict_with_devices(path, fmt, key, trust_pickle)
    tensors = []
    for name, t in sd.items():
        ptr = t.untyped_storage().data_ptr()
        tie = f"{ptr}:{t.storage_offset()}:{tuple(t.shape)}:{tuple(t.stride())}:{t.dtype}"
        tensors.append(TensorSource(name, tuple(t.shape), str(t.dtype).removeprefix("torch."),
                                    t.numel() * t.element_size(), locations.get(ptr, str(t.device)),
                                    tie, None, t.detach()))
    return LoadedInput(path, fmt, tensors, used, container_extras(obj, used), {}, False)
