"""The two sides of a state_dict comparison, read from files or state_dicts, and their key
match by PyTorch's loading rules (metadata only). The verdict of `inspect diff` and the load
code it prints are checkpoints/diff.py.

Side A is the target (a model, or a reference checkpoint), side B the weights to load into
it: "missing" keys are in A but not B, "unexpected" keys in B but not A — the words of
``load_state_dict``. Checkpoint sides are read with ``read_checkpoint_meta`` (no tensor
data, no torch import); ``tensor_value`` reads one tensor's data when values are compared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.formats import CheckpointFormat
from torchinspect.io.keys import KeyGroup, group_keys
from torchinspect.io.meta import TensorMeta, TensorSet, read_checkpoint_meta
from torchinspect.io.state_dict import PrefixRemap, find_prefix_remaps, state_entry_kind

FOLDED_SUFFIXES = (".num_batches_tracked",)


@dataclass
class DiffSide(TensorSet):
    """One side of a diff: a name, its tensors' metadata, and where they came from."""

    label: str
    kind: str  # "checkpoint" or "model"
    tensors: dict[str, TensorMeta]
    format: str | None = None
    container_key: str | None = None
    extras: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    file_size: int | None = None
    path: Path | None = None  # for --values: reload data from here
    key: str | None = None
    trusted: bool = False  # read with --trust-pickle (the load line then needs weights_only=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "kind": self.kind, "format": self.format,
            "container_key": self.container_key, "saved_devices": self.devices,
            "tensors": len(self.tensors), "bytes": self.total_bytes, "file_size": self.file_size,
            "extras": self.extras, "notes": self.notes,
        }


def checkpoint_side(path: str | os.PathLike[str], *, key: str | None = None,
                    trust_pickle: bool = False, fmt: CheckpointFormat | None = None) -> DiffSide:
    """A checkpoint (file, sharded index/folder, DCP folder) as a diff side (metadata only).
    ``fmt``: the already detected format of a single file (detection runs once per file)."""
    meta = read_checkpoint_meta(path, key=key, trust_pickle=trust_pickle, fmt=fmt)
    return DiffSide(str(path), "checkpoint", meta.tensors, str(meta.format), meta.container_key,
                    meta.extras, list(meta.notes), meta.file_size, Path(path), key, trust_pickle)


def entry_meta(key: str, v: Any, device: str = "model") -> TensorMeta | None:
    """TensorMeta of one ``state_dict()`` value (tensor, extra state, packed params)."""
    kind = state_entry_kind(key, v)
    if kind is None:
        return None
    if kind == "tensor":
        storage = None if v.is_meta or v.is_quantized else \
            f"{v.untyped_storage().data_ptr()}@{v.storage_offset()}"
        return TensorMeta(tuple(v.shape), str(v.dtype).removeprefix("torch."), device,
                          v.numel() * v.element_size(), storage)
    if kind == "packed":
        w = v[0]
        return TensorMeta(tuple(w.shape), str(w.dtype).removeprefix("torch."), device,
                          w.numel() * w.element_size(), None, kind)
    return TensorMeta((), kind, device, 0, None, kind)


def model_side(label: str, state_dict: dict[str, Any], notes: list[str] | None = None,
               tied: list[list[str]] | None = None) -> DiffSide:
    """A model's ``state_dict()`` (meta tensors are fine) as a diff side. Tensors, modules'
    extra state and quantized packed params all count: ``load_state_dict`` expects them.
    ``tied``: groups of keys that are one parameter in the model (see ``tied_groups``)."""
    group_of = {k: f"tied:{i}" for i, g in enumerate(tied or []) for k in g}
    tensors = {}
    for k, v in state_dict.items():
        m = entry_meta(k, v)
        if m is not None:
            tensors[k] = replace(m, storage=group_of[k]) if k in group_of else m
    return DiffSide(label, "model", tensors, None, None, {}, list(notes or []))


def tied_groups(model: Any) -> list[list[str]]:
    """Keys of ``model.state_dict()`` that are the same parameter/buffer object (tied
    embedding and LM head): loading one of them sets all."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    for name, b in model.named_buffers(remove_duplicate=False):
        by_id.setdefault(id(b), []).append(name)
    return [g for g in by_id.values() if len(g) > 1]


@dataclass(frozen=True)
class Mismatch:
    key: str
    a: TensorMeta
    b: TensorMeta

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "a_shape": list(self.a.shape), "b_shape": list(self.b.shape),
                "a_dtype": self.a.dtype, "b_dtype": self.b.dtype}


@dataclass
class KeyMatch:
    """Side B matched against target A key by key (metadata only): what
    ``A.load_state_dict(B)`` would find. ``checkpoints/diff.py``'s ``DiffResult`` adds the
    verdict, its conditions and the load code."""

    a: DiffSide
    b: DiffSide
    matched: list[str]  # same key, same shape (dtype may differ: load_state_dict casts)
    missing: list[str]
    unexpected: list[str]
    shape_mismatches: list[Mismatch]
    dtype_mismatches: list[Mismatch]
    folded: list[str]  # num_batches_tracked entries left out of missing/unexpected
    remaps: list[PrefixRemap]
    applied_remap: PrefixRemap | None
    renamed: dict[str, str]  # B key -> key after the applied remap
    notes: list[str] = field(default_factory=list)
    tied_fill: list[str] = field(default_factory=list)  # missing in B, set through a tie in A
    # nothing matched as saved: the shape mismatches the best prefix remap would still leave
    remap_mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        """Every entry of the target gets a value (no shape mismatch, nothing missing)."""
        return bool(self.matched) and not self.shape_mismatches and not self.missing

    @property
    def target_total(self) -> int:
        return len(self.matched) + len(self.missing) + len(self.shape_mismatches) + len(self.tied_fill)

    def grouped(self, which: str) -> list[KeyGroup]:
        if which in ("shape_mismatches", "dtype_mismatches"):
            items: list[Mismatch] = getattr(self, which)
            detail = {m.key: (m.a.shape, m.b.shape, m.a.dtype, m.b.dtype) for m in items}
            return group_keys([m.key for m in items], detail)
        return group_keys(getattr(self, which))


def _is_folded(key: str) -> bool:
    return key.endswith(FOLDED_SUFFIXES)


def as_side(value: Any, label: str) -> DiffSide:
    """A DiffSide from a checkpoint path, a state_dict (any mapping) or a module."""
    if isinstance(value, DiffSide):
        return value
    if isinstance(value, (str, os.PathLike)):
        return checkpoint_side(value)
    if isinstance(value, Mapping):
        return model_side(label, dict(value))
    state_dict = getattr(value, "state_dict", None)
    if callable(state_dict) and hasattr(value, "named_parameters"):
        return model_side(type(value).__name__, state_dict(), tied=tied_groups(value))
    raise InspectError(f"diff side {label}: expected a checkpoint path, a state_dict or a "
                       f"module, got {type(value).__name__}",
                       hint="e.g. diff_state_dicts(model, 'ckpt.pth')")


def match_keys(a: Any, b: Any, *, auto_prefix: bool = False,
               fold_batch_counters: bool = True) -> KeyMatch:
    """Match B (weights) against A (target) by key, shape and dtype, by PyTorch's loading rules.

    ``a`` and ``b``: a checkpoint path, a state_dict, a module, or a ``DiffSide``
    (``checkpoint_side``/``model_side`` give options such as a container key).

    ``auto_prefix`` applies the best prefix remap of B's keys (see
    ``find_prefix_remaps``) before comparing; candidates are reported either way.
    ``num_batches_tracked`` entries missing on one side are folded (BatchNorm fills them
    in) rather than listed. The verdict and load code over it: ``checkpoints/diff.py``.
    """
    a, b = as_side(a, "A"), as_side(b, "B")
    remaps = find_prefix_remaps(a.tensors.keys(), b.tensors.keys())
    applied = remaps[0] if auto_prefix and remaps else None
    renamed: dict[str, str] = {}
    b_tensors = b.tensors
    if applied is not None:
        b_tensors = {}
        for k, v in b.tensors.items():
            new = applied.apply(k)
            if new != k:
                renamed[k] = new
            b_tensors[new] = v
    matched: list[str] = []
    missing: list[str] = []
    folded: list[str] = []
    shape_mm: list[Any] = []
    dtype_mm: list[Any] = []
    notes: list[str] = []
    tied_fill: list[str] = []
    for k, ta in a.tensors.items():
        tb = b_tensors.get(k)
        if tb is None:
            (folded if fold_batch_counters and _is_folded(k) else missing).append(k)
            continue
        if ta.kind in ("extra_state", "packed_dtype"):
            matched.append(k)  # set_extra_state / the packing dtype: no shape to check
            continue
        if not _shapes_load(ta.shape, tb.shape):
            shape_mm.append(Mismatch(k, ta, tb))
            if ta.kind == "packed" or tb.kind == "packed":
                notes.append(f"{k}: torch.ao quantized packed params load without a shape check; "
                             "load_state_dict would silently change this layer's shape")
            continue
        if ta.shape != tb.shape:
            notes.append(f"{k}: a {fmt_shape(tb.shape)} tensor loads into a 0-dim parameter "
                         "(PyTorch takes its single element)")
        matched.append(k)
        if ta.dtype != tb.dtype:
            dtype_mm.append(Mismatch(k, ta, tb))
        if tb.nbytes == 0 and ta.nbytes and tb.kind == "tensor":
            notes.append(f"{k}: B holds an empty placeholder")
    if missing:  # a missing key tied to a matched one gets its value through the tie
        by_storage: dict[str, list[str]] = {}
        for k in matched:
            st = a.tensors[k].storage
            if st and st.startswith("tied:"):
                by_storage.setdefault(st, []).append(k)
        still = []
        for k in missing:
            st = a.tensors[k].storage
            if st and st in by_storage:
                tied_fill.append(k)
                notes.append(f"{k}: not in B, but tied to {by_storage[st][0]} in A (gets its value)")
            else:
                still.append(k)
        missing = still
    unexpected: list[str] = []
    for k in b_tensors:
        if k not in a.tensors:
            (folded if fold_batch_counters and _is_folded(k) else unexpected).append(k)
    remap_mm: list[Mismatch] = []
    if not matched and remaps and applied is None:  # what the remap the report offers leaves
        remap_mm = match_keys(a, b, auto_prefix=True,
                              fold_batch_counters=fold_batch_counters).shape_mismatches
    return KeyMatch(a, b, matched, missing, unexpected, shape_mm, dtype_mm, folded, remaps,
                    applied, renamed, notes=notes, tied_fill=tied_fill,
                    remap_mismatches=remap_mm)


def _shapes_load(target: tuple[int, ...], source: tuple[int, ...]) -> bool:
    """PyTorch's rule (Module._load_from_state_dict): equal shapes, or a (1,) tensor into a
    0-dim parameter (backward compatibility with 0.3 checkpoints)."""
    return target == source or (target == () and source == (1,))


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def tensor_value(src: Any, files: Any) -> Any:
    """The torch value of one TensorSource (read from the file when streamed)."""
    import torch

    if not src.is_tensor:
        return src.value
    if src.tensor is not None:
        return src.tensor
    if src.loader is not None:
        return src.loader()
    data = bytearray(src.read(files, 0, src.nbytes)) if src.nbytes else bytearray()
    dtype = getattr(torch, src.dtype)
    if not data:
        return torch.empty(src.shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(src.shape)


def comparable(v: Any) -> Any:
    """A plain tensor to compare: quantized tensors (and packed weights) dequantized."""
    import torch

    if isinstance(v, tuple) and v and isinstance(v[0], torch.Tensor):
        v = v[0]
    if not isinstance(v, torch.Tensor):
        return None
    return v.dequantize() if v.is_quantized else v
