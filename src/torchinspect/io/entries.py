"""What a checkpoint reader returns: one :class:`TensorSource` per state_dict entry (its
metadata and a way to read its bytes), gathered in a :class:`LoadedInput`; :class:`FilePool`
holds the read-only file descriptors the bytes come from.

The data model shared by io/tensors.py (single files) and io/layouts.py (shards, DCP
folders), in a module of its own so neither imports the other for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.io.formats import CheckpointFormat

CHUNK = 16 * 1024 * 1024  # bytes; a multiple of every element size


class FilePool:
    """Open read-only file descriptors by path (a sharded input reads several files)."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> FilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class TensorSource:
    """One state_dict entry: metadata plus a way to read its (contiguous) bytes.

    ``kind`` is ``"tensor"``, or for entries ``load_state_dict`` consumes that are not plain
    tensors: ``"extra_state"`` (a module's ``get_extra_state()``, ``value`` holds it),
    ``"packed"`` (torch.ao quantized Linear's ``(qweight, bias)``; shape/dtype of the
    weight) and ``"packed_dtype"``. ``tie`` is equal for tensors that are the same view of
    the same storage (never for empty tensors: nothing is shared).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    device: str
    tie: str
    file_offset: int | None = None  # absolute offset when read from ``path``
    tensor: Any = None  # a torch tensor when loaded through torch
    path: Path | None = None  # the file holding the bytes (shards differ)
    kind: str = "tensor"
    value: Any = None  # the entry itself for non-tensor kinds
    loader: Callable[[], Any] | None = None  # loads the tensor on demand (DCP)

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"

    def _flat(self) -> Any:
        import torch

        t = self.tensor if self.tensor is not None else self.loader() if self.loader else None
        if t is None:
            raise RuntimeError(f"no byte source for tensor {self.name!r}")
        flat = t.contiguous().reshape(-1)
        return flat.view(torch.uint8).numpy() if flat.numel() else None

    def read(self, files: FilePool, pos: int, n: int) -> bytes | memoryview:
        """``n`` bytes of this tensor starting at byte ``pos``."""
        if self.tensor is not None or self.loader is not None:
            arr = self._flat()
            return memoryview(arr[pos:pos + n]) if arr is not None else b""
        if self.path is None or self.file_offset is None:
            raise RuntimeError(f"no byte source for tensor {self.name!r}")
        return os.pread(files.fd(self.path), n, self.file_offset + pos)

    def chunks(self, files: FilePool, size: int = CHUNK) -> Iterator[bytes | memoryview]:
        if self.tensor is not None or self.loader is not None:
            arr = self._flat()
            if arr is None:
                return
            for pos in range(0, self.nbytes, size):
                yield memoryview(arr[pos:pos + size])
            return
        if self.path is None or self.file_offset is None:
            raise RuntimeError(f"no byte source for tensor {self.name!r}")
        fd = files.fd(self.path)
        for pos in range(0, self.nbytes, size):
            n = min(size, self.nbytes - pos)
            data = os.pread(fd, n, self.file_offset + pos)
            if len(data) != n:
                raise OSError(f"short read at byte {self.file_offset + pos} of {self.path}")
            yield data


@dataclass
class LoadedInput:
    path: Path
    format: CheckpointFormat
    tensors: list[TensorSource]
    container_key: str | None
    extras: dict[str, Any]  # other container entries (TensorRefs for the zip reader)
    metadata: dict[str, str]
    streamed: bool  # True when bytes come straight from the file(s)
    top_level_keys: list[str] = field(default_factory=list)
    file_size: int = 0
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # every file read (shards)
