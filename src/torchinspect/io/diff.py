"""Why won't this state_dict load? Compare two sides key by key, from metadata only.

Side A is the target (a model, or a reference checkpoint), side B the weights to load into
it: "missing" keys are in A but not B, "unexpected" keys in B but not A — the words of
``load_state_dict``. Checkpoint sides are read with ``read_checkpoint_meta`` (no tensor
data, no torch import); ``values=True`` loads data (memory-mapped) to compare numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.entries import FilePool
from torchinspect.io.formats import CheckpointFormat
from torchinspect.io.keys import KeyGroup, group_keys
from torchinspect.io.meta import TensorMeta, TensorSet, read_checkpoint_meta
from torchinspect.io.state_dict import PrefixRemap, find_prefix_remaps, py_str, state_entry_kind
from torchinspect.io.tensors import open_input

FOLDED_SUFFIXES = (".num_batches_tracked",)


class Verdict(StrEnum):
    """What ``A.load_state_dict(B)`` does, by PyTorch's own rules.

    Exit codes of ``inspect diff``: strict and complete 0; partial 1 (0 with --allow-partial);
    incompatible 1.
    """

    strict = "strict"  # loads with strict=True
    complete = "complete"  # every target entry gets a value; B has extra keys (strict=False)
    partial = "partial"  # strict=False leaves some target entries without a value
    incompatible = "incompatible"  # nothing matches, or a shape mismatch (load_state_dict raises)

    @property
    def loads(self) -> bool:
        """Every entry of the target gets a value."""
        return self in (Verdict.strict, Verdict.complete)


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


@dataclass(frozen=True)
class ValueDiff:
    key: str
    max_abs_diff: float
    allclose: bool
    equal: bool

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "max_abs_diff": self.max_abs_diff, "allclose": self.allclose,
                "equal": self.equal}


@dataclass
class DiffResult:
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
    values: list[ValueDiff] | None = None
    rtol: float = 1e-5
    atol: float = 1e-8

    notes: list[str] = field(default_factory=list)
    tied_fill: list[str] = field(default_factory=list)  # missing in B, set through a tie in A
    # nothing matched as saved: the shape mismatches the best prefix remap would still leave
    remap_mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        if self.shape_mismatches or not self.matched:
            return Verdict.incompatible
        if self.missing:
            return Verdict.partial
        if self.unexpected or self.tied_fill:
            return Verdict.complete
        return Verdict.strict

    @property
    def target_total(self) -> int:
        return len(self.matched) + len(self.missing) + len(self.shape_mismatches) + len(self.tied_fill)

    def verdict_text(self) -> str:
        v = self.verdict
        when = ", ".join(self.conditions())
        when = f" {when}" if when else ""
        if v is Verdict.strict:
            return f"loads with strict=True ({len(self.matched)} tensors){when}"
        if v is Verdict.complete:
            why = []
            if self.unexpected:
                why.append(f"{len(self.unexpected)} unexpected key(s) in B are ignored")
            if self.tied_fill:
                why.append(f"{len(self.tied_fill)} tied key(s) absent from B get their value "
                           "through the tie")
            return (f"loads with strict=False{when}: every one of the {self.target_total} target "
                    f"tensors gets a value; {'; '.join(why)}")
        if v is Verdict.partial:
            return (f"partial load: only {len(self.matched)} of {self.target_total} target tensors "
                    f"get a value with strict=False{when} ({len(self.missing)} missing)")
        if self.shape_mismatches:
            return (f"incompatible: {len(self.shape_mismatches)} shape mismatch(es); "
                    f"load_state_dict raises even with strict=False{self._head_hint()}")
        if self.remaps and self.applied_remap is None:
            best = self.remaps[0]
            text = (f"incompatible: no key matches as saved; {best.condition()} "
                    f"(--auto-prefix) B names {best.matched} of A's {best.total} keys")
            mm = self.remap_mismatches
            if not mm:
                return text
            shown = ", ".join(f"{m.key} {_fmt(m.a.shape)} in A, {_fmt(m.b.shape)} in B"
                              for m in mm[:2])
            more = f" and {len(mm) - 2} more" if len(mm) > 2 else ""
            return (f"{text}, but {len(mm)} of them have other shapes ({shown}{more}), so "
                    f"load_state_dict would still raise{self._head_hint(mm)}")
        return "incompatible: no key matches"

    def head_classes(self, mismatches: list[Mismatch] | None = None) -> int | None:
        """B's number of classes when every shape mismatch is one output layer that differs
        only in its first dimension (a classifier head: ``fc.weight``, ``fc.bias``), and A is
        a model built here (``--arg num_classes=N`` can rebuild it); None otherwise."""
        mm = self.shape_mismatches if mismatches is None else mismatches
        if self.a.kind != "model" or not mm:
            return None
        owners = {m.key.rpartition(".")[0] for m in mm}
        outs = {m.b.shape[0] for m in mm if m.b.shape}
        same_rest = all(len(m.a.shape) == len(m.b.shape) and m.a.shape[1:] == m.b.shape[1:]
                        and m.a.shape for m in mm)
        return outs.pop() if len(owners) == 1 and len(outs) == 1 and same_rest else None

    def _head_hint(self, mismatches: list[Mismatch] | None = None) -> str:
        n = self.head_classes(mismatches)
        if n is None:
            return ""
        mm = self.shape_mismatches if mismatches is None else mismatches
        head = mm[0].key.rpartition(".")[0]
        return (f"; the mismatch is the head {head} ({mm[0].a.shape[0]} outputs in A, {n} in B): "
                f"if A's builder takes num_classes (torchvision's do), --arg num_classes={n} "
                "builds A with B's head")

    def conditions(self) -> list[str]:
        """What the verdict assumes about how B is loaded: the container entry taken, CPU
        storages for tensors saved on another device, the applied key remap."""
        if self.verdict is Verdict.incompatible or self.b.kind != "checkpoint":
            return []
        out = []
        if self.b.container_key:
            out.append(f"taking {_subscript(self.b.container_key)} from the file")
        saved = [d for d in self.b.devices if d != "cpu"]
        if saved and self.b.format in _TORCH_FILES:
            out.append(f'with map_location="cpu" (saved on {", ".join(saved)})')
        if self.applied_remap is not None:
            out.append(self.applied_remap.condition())
        if self._needs_plain_dict:
            out.append(f"as a plain dict (BatchNorm then fills the {len(self.filled)} absent "
                       "num_batches_tracked)")
        return out

    @property
    def filled(self) -> list[str]:
        """The target's num_batches_tracked that B lacks (folded): BatchNorm fills them."""
        return [k for k in self.folded if k in self.a.tensors]

    @property
    def _needs_plain_dict(self) -> bool:
        """BatchNorm fills an absent num_batches_tracked only when the state_dict carries no
        version (``_metadata``, which torch.load restores on a saved ``state_dict()``);
        a remap builds a new dict anyway, safetensors has none."""
        return bool(self.filled) and self.applied_remap is None and self.b.format in _TORCH_FILES

    def load_code(self) -> tuple[list[str], str]:
        """Lines of Python that load B into ``model`` as the verdict says, or no lines and why.

        For one torch.save or safetensors file that loads (and a DCP folder holding exactly the
        model's keys and dtypes); the lines assume the target module is called ``model``."""
        why_not = self._no_load_code()
        if why_not:
            return [], why_not
        b, path = self.b, py_str(str(self.b.path))
        if b.format == "dcp":
            return ["import torch.distributed.checkpoint as dcp", "sd = model.state_dict()",
                    f"dcp.load(sd, checkpoint_id={path})",
                    "model.load_state_dict(sd)"], ""
        lines = _read_lines(b, path)
        if b.container_key is None and b.extras:  # scalars beside the tensors of a flat dict
            names = ", ".join(py_str(k) for k in b.extras)
            lines.append(f"sd = {{k: v for k, v in sd.items() if k not in {{{names}}}}}")
        if self.applied_remap is not None:
            lines.append(f"sd = {{{self.applied_remap.python('k')}: v for k, v in sd.items()}}")
        elif self._needs_plain_dict and not (b.container_key is None and b.extras):
            lines.append("sd = dict(sd)  # no saved _metadata: BatchNorm fills num_batches_tracked")
        lines.append("model.load_state_dict(sd)" if self.verdict is Verdict.strict else
                     "model.load_state_dict(sd, strict=False)")
        return lines, ""

    def _no_load_code(self) -> str:
        """Why no load lines are printed ("" when they are)."""
        b = self.b
        if self.verdict is Verdict.incompatible:
            return "it does not load"
        if b.kind != "checkpoint" or b.path is None:
            return "B is not a checkpoint file"
        if b.format == "dcp" and (self.verdict is not Verdict.strict or self.applied_remap
                                  or self.folded or self.dtype_mismatches):
            return ("a DCP folder loads in place only into the same keys and dtypes; "
                    "`inspect convert` it to one .safetensors file first")
        if b.format not in (*_TORCH_FILES, "safetensors", "dcp"):
            return (f"{b.format} is not one file torch.load or safetensors reads; "
                    "`inspect convert` it to one .safetensors file first")
        return ""

    def grouped(self, which: str) -> list[KeyGroup]:
        if which in ("shape_mismatches", "dtype_mismatches"):
            items: list[Mismatch] = getattr(self, which)
            detail = {m.key: (m.a.shape, m.b.shape, m.a.dtype, m.b.dtype) for m in items}
            return group_keys([m.key for m in items], detail)
        return group_keys(getattr(self, which))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": str(self.verdict), "verdict_text": self.verdict_text(),
            "loadable": len(self.matched), "total": self.target_total,
            "a": self.a.to_dict(), "b": self.b.to_dict(),
            "matched": self.matched, "missing": self.missing, "unexpected": self.unexpected,
            "shape_mismatches": [m.to_dict() for m in self.shape_mismatches],
            "dtype_mismatches": [m.to_dict() for m in self.dtype_mismatches],
            "folded": self.folded,
            "prefix_remaps": [r.to_dict() for r in self.remaps],
            "applied_remap": self.applied_remap.to_dict() if self.applied_remap else None,
            "renamed": self.renamed,
            "values": None if self.values is None else [v.to_dict() for v in self.values],
            "conditions": self.conditions(), "load_code": "\n".join(self.load_code()[0]) or None,
            "no_load_code": self.load_code()[1] or None,
            "notes": self.notes, "tied_fill": self.tied_fill,
            "remap_shape_mismatches": [m.to_dict() for m in self.remap_mismatches],
            "head_classes": self.head_classes() or self.head_classes(self.remap_mismatches), "extra_state": {"a": self.a.extra_state, "b": self.b.extra_state},
            "tied": {"a": self.a.tied, "b": self.b.tied},
            "groups": {w: [g.to_dict() for g in self.grouped(w)]
                       for w in ("missing", "unexpected", "shape_mismatches", "dtype_mismatches")},
        }


_TORCH_FILES = ("torch_zip", "torch_legacy")


def _read_lines(b: DiffSide, path: str) -> list[str]:
    """The lines that read one torch.save or safetensors file into ``sd``."""
    if b.format == "safetensors":
        return ["from safetensors.torch import load_file", f"sd = load_file({path})"]
    where = ', map_location="cpu"' if any(d != "cpu" for d in b.devices) else ""
    line = f"sd = torch.load({path}{where}, weights_only={not b.trusted})"
    if b.container_key:
        line += _subscript(b.container_key)
    if b.trusted:
        line += "  # --trust-pickle: runs code from the file"
    return ["import torch", line]


def _subscript(container_key: str) -> str:
    """``model/state_dict`` -> ``["model"]["state_dict"]`` (the entry torch.load's result holds)."""
    return "".join(f"[{py_str(part)}]" for part in container_key.split("/"))


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


def diff_state_dicts(a: Any, b: Any, *, auto_prefix: bool = False,
                     fold_batch_counters: bool = True) -> DiffResult:
    """Compare B (weights) against A (target) by key, shape and dtype.

    ``a`` and ``b``: a checkpoint path, a state_dict, a module, or a ``DiffSide``
    (``checkpoint_side``/``model_side`` give options such as a container key).

    ``auto_prefix`` applies the best prefix remap of B's keys (see
    ``find_prefix_remaps``) before comparing; candidates are reported either way.
    ``num_batches_tracked`` entries missing on one side are folded (BatchNorm fills them
    in) rather than listed. Values are compared separately by ``compare_values``.
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
            notes.append(f"{k}: a {_fmt(tb.shape)} tensor loads into a 0-dim parameter "
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
        remap_mm = diff_state_dicts(a, b, auto_prefix=True,
                                    fold_batch_counters=fold_batch_counters).shape_mismatches
    return DiffResult(a, b, matched, missing, unexpected, shape_mm, dtype_mm, folded, remaps,
                      applied, renamed, notes=notes, tied_fill=tied_fill,
                      remap_mismatches=remap_mm)


def _shapes_load(target: tuple[int, ...], source: tuple[int, ...]) -> bool:
    """PyTorch's rule (Module._load_from_state_dict): equal shapes, or a (1,) tensor into a
    0-dim parameter (backward compatibility with 0.3 checkpoints)."""
    return target == source or (target == () and source == (1,))


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def compare_values(result: DiffResult, *, trust_pickle: bool = False, rtol: float = 1e-5,
                   atol: float = 1e-8) -> list[ValueDiff]:
    """Per-tensor max abs diff / allclose for the matched keys (both sides need data).

    Tensors are read one pair at a time through the checkpoint reader (any layout);
    quantized tensors are compared dequantized."""
    import torch

    if result.a.path is None or result.b.path is None:
        raise InspectError("--values needs data on both sides: pass two checkpoint files",
                           hint="a model side is built without weights (on the meta device)")
    ia = open_input(result.a.path, key=result.a.key, trust_pickle=trust_pickle)
    ib = open_input(result.b.path, key=result.b.key, trust_pickle=trust_pickle)
    sa = {t.name: t for t in ia.tensors}
    sb = {result.renamed.get(t.name, t.name): t for t in ib.tensors}
    out = []
    with FilePool() as files:
        for k in result.matched:
            x, y = _comparable(tensor_value(sa[k], files)), _comparable(tensor_value(sb[k], files))
            if x is None or y is None:
                continue  # extra state / packing dtype: not numbers
            if x.shape != y.shape:
                y = y.reshape(x.shape)  # (1,) into a 0-dim parameter
            equal = x.dtype == y.dtype and torch.equal(x, y)
            if equal:
                out.append(ValueDiff(k, 0.0, True, True))
                continue
            wide = torch.float64 if torch.float64 in (x.dtype, y.dtype) else torch.float32
            xf, yf = x.to(wide), y.to(wide)
            if xf.numel() == 0:
                out.append(ValueDiff(k, 0.0, True, False))
                continue
            diff = float((xf - yf).abs().max())
            out.append(ValueDiff(k, diff, bool(torch.allclose(xf, yf, rtol=rtol, atol=atol,
                                                              equal_nan=True)), False))
    result.values, result.rtol, result.atol = out, rtol, atol
    return out


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


def _comparable(v: Any) -> Any:
    """A plain tensor to compare: quantized tensors (and packed weights) dequantized."""
    import torch

    if isinstance(v, tuple) and v and isinstance(v[0], torch.Tensor):
        v = v[0]
    if not isinstance(v, torch.Tensor):
        return None
    return v.dequantize() if v.is_quantized else v
