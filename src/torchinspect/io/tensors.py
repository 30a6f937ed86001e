"""The one checkpoint reader: every state_dict entry's metadata plus a way to read its bytes.

:func:`open_input` is used by ``diff`` (metadata only, through :func:`read_checkpoint_meta`)
and ``convert`` (metadata + bytes). What it reads, by layout (see io/layouts.py):

* safetensors: the header (pure Python); bytes with ``os.pread``.
* torch.save zip: ``data.pkl`` through the restricted pure-Python unpickler (io/torchzip.py),
  no torch import; bytes with ``os.pread`` from the stored records.
* legacy (non-zip) torch.save: the same unpickler over its pickles, storage records located
  by their 8-byte counts (io/torchlegacy.py); bytes with ``os.pread`` too.
* anything those readers do not know (quantized tensors, unknown globals, trusted full
  pickles): ``torch.load(weights_only=True, mmap=True)`` with the saved device recorded.
* Hugging Face sharded checkpoints (``*.index.json`` or their folder): each shard as above.
* torch.distributed.checkpoint folders: ``.metadata`` through DCP's own reader; bytes one
  tensor at a time through ``dcp.load(no_dist=True)``.

Only :data:`CHUNK`-sized pieces of tensor data are in memory at a time (one tensor for DCP).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.io.formats import CheckpointFormat, model_archive_error
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.state_dict import container_extras, find_state_dict, state_entry_kind
from torchinspect.io.torchzip import DTYPE_SIZES, NeedsTorch, TensorRef, read_torch_zip_structure

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


def _tie(storage: str, nbytes: int, name: str) -> str:
    return storage if nbytes else f"empty:{name}"


def _entry_from_ref(name: str, ref: Any, kind: str, path: Path, archive: Any) -> TensorSource:
    if kind == "tensor":
        off = archive.storage_offset(ref.storage.key) + ref.offset * DTYPE_SIZES[ref.dtype]
        tie = f"{ref.storage.key}:{ref.offset}:{ref.shape}:{ref.stride}:{ref.dtype}"
        return TensorSource(name, ref.shape, ref.dtype, ref.nbytes, ref.storage.location,
                            _tie(tie, ref.nbytes, name), off, path=path)
    return TensorSource(name, (), kind, 0, "cpu", f"obj:{name}", kind=kind, value=ref)


def open_input(path: str | os.PathLike[str], *, key: str | None = None,
               trust_pickle: bool = False, need_objects: bool = False,
               need_bytes: bool = True, fmt: CheckpointFormat | None = None) -> LoadedInput:
    """Describe the input's state_dict entries and how to read them.

    ``path`` is a file, a Hugging Face ``*.index.json`` or checkpoint folder, or a DCP
    folder. ``fmt`` skips format detection when the caller already ran it.
    ``need_objects=True`` (for --keep-extra) loads through torch so that container extras
    are real Python/torch objects; ``need_bytes=False`` (metadata only) accepts tensors that
    cannot be streamed (non-contiguous views).
    """
    from torchinspect.io.layouts import Layout, resolve_layout

    path = Path(path)
    layout = resolve_layout(path) if fmt is None else None
    if layout is not None and layout.kind != "file":
        if layout.kind == "hf_sharded":
            from torchinspect.io.layouts import open_hf_sharded

            return open_hf_sharded(layout, key=key, trust_pickle=trust_pickle, need_bytes=need_bytes)
        from torchinspect.io.layouts import open_dcp

        return open_dcp(layout, key=key, trust_pickle=trust_pickle)
    if layout is not None:
        path, fmt, notes = layout.path, layout.format, layout.notes
    else:
        from torchinspect.io.layouts import shard_notes

        notes = shard_notes(path)
        layout = Layout("file", path, fmt)
    assert fmt is not None
    if fmt.is_model_archive:
        raise model_archive_error(path, fmt)
    if fmt is CheckpointFormat.pickle:
        from torchinspect.io.torch_load import plain_pickle_error

        raise plain_pickle_error(path)
    size = path.stat().st_size
    if fmt is CheckpointFormat.safetensors:
        header = read_safetensors_header(path)
        tensors = [TensorSource(e.name, e.shape, e.dtype, e.nbytes, "cpu",
                                _tie(f"st:{e.begin}:{e.end}", e.nbytes, e.name), e.begin, path=path)
                   for e in header.entries.values()]
        return LoadedInput(path, fmt, tensors, None, {}, header.metadata, True,
                           list(header.entries), size, notes, [path])
    if fmt in (CheckpointFormat.torch_zip, CheckpointFormat.torch_legacy) and not need_objects:
        try:
            obj, archive = _read_structure(path, fmt)
            sd, used = find_state_dict(obj, key, is_tensor=lambda x: isinstance(x, TensorRef),
                                       source=str(path))
            if need_bytes and not all(r.is_contiguous for r in sd.values()
                                      if isinstance(r, TensorRef)):
                raise NeedsTorch("non-contiguous tensor")
            if any(_holds_ref(v) for v in sd.values() if not isinstance(v, TensorRef)):
                raise NeedsTorch("tensors inside extra state / packed params")
        except NeedsTorch:
            pass
        else:
            from torchinspect.io.state_dict import state_entry_kind as kind_of

            is_ref = lambda x: isinstance(x, TensorRef)  # noqa: E731
            tensors = [_entry_from_ref(n, r, kind_of(n, r, is_ref) or "tensor", path, archive)
                       for n, r in sd.items()]
            inp = LoadedInput(path, fmt, tensors, used, container_extras(obj, used, sd), {},
                              True, _top(obj), size, notes, [path])
            _check_deepspeed(inp, obj)
            return inp
    inp, obj = _open_via_torch(path, fmt, key, trust_pickle)
    inp.notes[:0] = notes
    _check_deepspeed(inp, obj)
    return inp


def _read_structure(path: Path, fmt: CheckpointFormat) -> tuple[Any, Any]:
    """The restricted pure-Python reader of a zip or legacy torch.save file."""
    if fmt is CheckpointFormat.torch_legacy:
        from torchinspect.io.torchlegacy import read_torch_legacy_structure

        return read_torch_legacy_structure(path)
    return read_torch_zip_structure(path)


def _holds_ref(v: Any) -> bool:
    from torchinspect.io.torchzip import iter_tensor_refs

    return bool(iter_tensor_refs(v))


def _top(obj: Any) -> list[str]:
    return [str(k) for k in obj] if isinstance(obj, dict) else []


def _check_deepspeed(inp: LoadedInput, obj: Any) -> None:
    from torchinspect.io.layouts import deepspeed_error

    err = deepspeed_error(inp, obj)
    if err is not None:
        raise err


def _torch_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def torch_entry(name: str, v: Any, device: str, kind: str) -> TensorSource:
    """A TensorSource for a value loaded through torch (tensor, packed params, extra state)."""
    if kind == "tensor":
        nbytes = v.numel() * v.element_size()
        ptr = f"q{id(v)}" if v.is_quantized else v.untyped_storage().data_ptr()
        tie = f"{ptr}:{v.storage_offset()}:{tuple(v.shape)}:{tuple(v.stride())}:{v.dtype}"
        return TensorSource(name, tuple(v.shape), _torch_name(v.dtype), nbytes, device,
                            _tie(tie, nbytes, name), None, v.detach())
    if kind == "packed":
        w = v[0]
        return TensorSource(name, tuple(w.shape), _torch_name(w.dtype), w.numel() * w.element_size(),
                            device, f"obj:{name}", kind=kind, value=v)
    return TensorSource(name, (), kind, 0, device, f"obj:{name}", kind=kind, value=v)


def _open_via_torch(path: Path, fmt: CheckpointFormat, key: str | None,
                    trust_pickle: bool) -> tuple[LoadedInput, Any]:
    from torchinspect.io.torch_load import load_state_dict_with_devices

    obj, sd, used, locations = load_state_dict_with_devices(path, fmt, key, trust_pickle)
    tensors = []
    for name, v in sd.items():
        kind = state_entry_kind(name, v) or "tensor"
        where = v if kind == "tensor" else v[0] if kind == "packed" else None
        dev = locations.get(where.untyped_storage().data_ptr(), str(where.device)) \
            if where is not None and not where.is_quantized else "cpu"
        tensors.append(torch_entry(name, v, dev, kind))
    return LoadedInput(path, fmt, tensors, used, container_extras(obj, used, sd), {}, False,
                       _top(obj), path.stat().st_size, [], [path]), obj
