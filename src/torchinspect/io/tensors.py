"""Per-entry reader for diff and convert: each state_dict entry's metadata plus a way to
read its bytes, without loading the checkpoint into torch where it can.

Two readers, two jobs:

* io/checkpoint.py (:func:`read_checkpoint`) *loads* a whole weights file into torch objects
  (``torch.load(weights_only=True)`` or safetensors' ``load_file``): for commands that put
  the weights into a model (``summary --weights``, ``--arch``, features, export...).
* this module (:func:`open_input`) *describes* a checkpoint entry by entry and streams each
  tensor's bytes from the file: ``diff`` (metadata only, through
  :func:`~torchinspect.io.meta.read_checkpoint_meta`) and ``convert`` (metadata + bytes).

What :func:`open_input` reads, by layout (see io/layouts.py):

* safetensors: the header (pure Python, io/safetensors.py's validity rule); bytes with ``os.pread``.
* torch.save zip: the archive validated (io/zipcheck.py), then ``data.pkl`` through the
  restricted pure-Python unpickler (io/torchzip.py), no torch import; record sizes and
  tensor views checked against the pickle; bytes with ``os.pread`` from the stored records.
* legacy (non-zip) torch.save: the same unpickler over its pickles, storage records located
  by their 8-byte counts (io/torchlegacy.py); bytes with ``os.pread`` too.
* anything those readers do not know (quantized tensors, unknown globals, trusted full
  pickles): ``torch.load(weights_only=True, mmap=True)`` with the saved device recorded.
* Hugging Face sharded checkpoints (``*.index.json`` or their folder): each shard as above.
* torch.distributed.checkpoint folders: ``.metadata`` through DCP's own reader; bytes one
  tensor at a time through ``dcp.load(no_dist=True)``.

Only :data:`CHUNK`-sized pieces of tensor data are in memory at a time (one tensor for DCP).
The data model (:class:`TensorSource`, :class:`LoadedInput`, :class:`FilePool`) lives in
io/entries.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.entries import CHUNK, FilePool, LoadedInput, TensorSource
from torchinspect.io.formats import CheckpointFormat, model_archive_error
from torchinspect.io.layouts import (
    Layout,
    deepspeed_error,
    open_dcp,
    open_hf_sharded,
    resolve_layout,
    shard_notes,
)
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.state_dict import container_extras, find_state_dict, state_entry_kind
from torchinspect.io.torch_load import load_state_dict_with_devices, plain_pickle_error
from torchinspect.io.torchlegacy import read_torch_legacy_structure
from torchinspect.io.torchscript import NOT_LOADED_NOTE, read_torchscript_structure
from torchinspect.io.torchzip import (
    DTYPE_SIZES,
    NeedsTorch,
    TensorRef,
    iter_tensor_refs,
    read_torch_zip_structure,
)

__all__ = ["CHUNK", "FilePool", "LoadedInput", "TensorSource", "open_input", "torch_entry"]


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
    path = Path(path)
    layout = resolve_layout(path) if fmt is None else None
    if layout is not None and layout.kind != "file":
        if layout.kind == "hf_sharded":
            return open_hf_sharded(layout, open_input, key=key, trust_pickle=trust_pickle,
                                   need_bytes=need_bytes)
        return open_dcp(layout, key=key, trust_pickle=trust_pickle)
    if layout is not None:
        path, fmt, notes = layout.path, layout.format, layout.notes
    else:
        notes = shard_notes(path)
        layout = Layout("file", path, fmt)
    assert fmt is not None
    if fmt is CheckpointFormat.torchscript and not need_objects:
        return _open_torchscript(path, key, need_bytes, notes)
    if fmt.is_model_archive:
        raise model_archive_error(path, fmt)
    if fmt is CheckpointFormat.pickle:
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
            is_ref = lambda x: isinstance(x, TensorRef)  # noqa: E731
            tensors = [_entry_from_ref(n, r, state_entry_kind(n, r, is_ref) or "tensor", path, archive)
                       for n, r in sd.items()]
            inp = LoadedInput(path, fmt, tensors, used, container_extras(obj, used, sd), {},
                              True, _top(obj), size, notes, [path])
            _check_deepspeed(inp, obj)
            return inp
    inp, obj = _open_via_torch(path, fmt, key, trust_pickle)
    inp.notes[:0] = notes
    _check_deepspeed(inp, obj)
    return inp


def _open_torchscript(path: Path, key: str | None, need_bytes: bool, notes: list[str]) -> LoadedInput:
    """A TorchScript archive's tensors from its data.pkl, never through torch.jit.load."""
    sd, archive = read_torchscript_structure(path)
    if key is not None:
        raise InspectError(f"--key {key}: a TorchScript archive holds one module, not a "
                           "container of entries", hint="drop --key")
    if need_bytes and not all(r.is_contiguous for r in sd.values()):
        raise InspectError(f"{path}: a TorchScript archive with non-contiguous tensors cannot be "
                           "streamed without loading it", hint="only with --trust-pickle "
                           "(it runs code from the file); or re-save it contiguous")
    is_ref = lambda x: isinstance(x, TensorRef)  # noqa: E731
    tensors = [_entry_from_ref(n, r, state_entry_kind(n, r, is_ref) or "tensor", path, archive)
               for n, r in sd.items()]
    return LoadedInput(path, CheckpointFormat.torchscript, tensors, None, {}, {}, True, list(sd),
                       path.stat().st_size, [*notes, NOT_LOADED_NOTE], [path])


def _read_structure(path: Path, fmt: CheckpointFormat) -> tuple[Any, Any]:
    """The restricted pure-Python reader of a zip or legacy torch.save file."""
    if fmt is CheckpointFormat.torch_legacy:
        return read_torch_legacy_structure(path)
    return read_torch_zip_structure(path)


def _holds_ref(v: Any) -> bool:
    return bool(iter_tensor_refs(v))


def _top(obj: Any) -> list[str]:
    return [str(k) for k in obj] if isinstance(obj, dict) else []


def _check_deepspeed(inp: LoadedInput, obj: Any) -> None:
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
