"""Why won't this state_dict load? Compare two sides key by key, from metadata only.

Side A is the target (a model, or a reference checkpoint), side B the weights to load into
it: "missing" keys are in A but not B, "unexpected" keys in B but not A — the words of
``load_state_dict``. Checkpoint sides are read with :func:`read_checkpoint_meta` (no tensor
data, no torch import); ``values=True`` loads data (memory-mapped) to compare numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.io.keys import KeyGroup, group_keys
from torchinspect.io.meta import TensorMeta, TensorSet, read_checkpoint_meta
from torchinspect.io.state_dict import PrefixRemap, find_prefix_remaps

FOLDED_SUFFIXES = (".num_batches_tracked",)


class Verdict(StrEnum):
    strict = "strict"  # loads with strict=True
    partial = "partial"  # loads with strict=False (some keys missing/unexpected)
    incompatible = "incompatible"  # nothing matches, or a shape mismatch (load_state_dict raises)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "kind": self.kind, "format": self.format,
            "container_key": self.container_key, "saved_devices": self.devices,
            "tensors": len(self.tensors), "bytes": self.total_bytes, "file_size": self.file_size,
            "extras": self.extras, "notes": self.notes,
        }


def checkpoint_side(path: str | os.PathLike[str], *, key: str | None = None,
                    trust_pickle: bool = False) -> DiffSide:
    """A checkpoint file as a diff side (metadata only)."""
    meta = read_checkpoint_meta(path, key=key, trust_pickle=trust_pickle)
    return DiffSide(str(path), "checkpoint", meta.tensors, str(meta.format), meta.container_key,
                    meta.extras, [], meta.file_size, Path(path), key)


def model_side(label: str, state_dict: dict[str, Any], notes: list[str] | None = None) -> DiffSide:
    """A model's ``state_dict()`` (meta tensors are fine) as a diff side."""
    tensors = {k: TensorMeta(tuple(v.shape), str(v.dtype).removeprefix("torch."), "model",
                             v.numel() * v.element_size()) for k, v in state_dict.items()
               if hasattr(v, "shape")}
    return DiffSide(label, "model", tensors, None, None, {}, list(notes or []))


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

    @property
    def verdict(self) -> Verdict:
        if self.shape_mismatches or not self.matched:
            return Verdict.incompatible
        if self.missing or self.unexpected:
            return Verdict.partial
        return Verdict.strict

    @property
    def target_total(self) -> int:
        return len(self.matched) + len(self.missing) + len(self.shape_mismatches)

    def verdict_text(self) -> str:
        v = self.verdict
        if v is Verdict.strict:
            return f"loads with strict=True ({len(self.matched)} tensors)"
        if v is Verdict.partial:
            return f"loads with strict=False: {len(self.matched)} of {self.target_total} tensors"
        if self.shape_mismatches:
            return (f"incompatible: {len(self.shape_mismatches)} shape mismatch(es); "
                    f"load_state_dict raises even with strict=False")
        return "incompatible: no key matches"

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
            "groups": {w: [g.to_dict() for g in self.grouped(w)]
                       for w in ("missing", "unexpected", "shape_mismatches", "dtype_mismatches")},
        }


def _is_folded(key: str) -> bool:
    return key.endswith(FOLDED_SUFFIXES)


def diff_state_dicts(a: DiffSide, b: DiffSide, *, auto_prefix: bool = False,
                     fold_batch_counters: bool = True) -> DiffResult:
    """Compare B (weights) against A (target) by key, shape and dtype.

    ``auto_prefix`` applies the best prefix remap of B's keys (see
    :func:`find_prefix_remaps`) before comparing; candidates are reported either way.
    ``num_batches_tracked`` entries missing on one side are folded (BatchNorm fills them
    in) rather than listed. Values are compared separately by :func:`compare_values`.
    """
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
    matched, missing, shape_mm, dtype_mm, folded = [], [], [], [], []
    for k, ta in a.tensors.items():
        tb = b_tensors.get(k)
        if tb is None:
            (folded if fold_batch_counters and _is_folded(k) else missing).append(k)
            continue
        if ta.shape != tb.shape:
            shape_mm.append(Mismatch(k, ta, tb))
            continue
        matched.append(k)
        if ta.dtype != tb.dtype:
            dtype_mm.append(Mismatch(k, ta, tb))
    unexpected = []
    for k in b_tensors:
        if k not in a.tensors:
            (folded if fold_batch_counters and _is_folded(k) else unexpected).append(k)
    return DiffResult(a, b, matched, missing, unexpected, shape_mm, dtype_mm, folded, remaps,
                      applied, renamed)


def compare_values(result: DiffResult, *, trust_pickle: bool = False, rtol: float = 1e-5,
                   atol: float = 1e-8) -> list[ValueDiff]:
    """Per-tensor max abs diff / allclose for the matched keys (both sides need data)."""
    import torch

    from torchinspect.errors import InspectError
    from torchinspect.io.checkpoint import read_state_dict

    if result.a.path is None or result.b.path is None:
        raise InspectError("--values needs data on both sides: pass two checkpoint files",
                           hint="a model side is built without weights (on the meta device)")
    sa, _, _ = read_state_dict(result.a.path, key=result.a.key, trust_pickle=trust_pickle)
    sb_raw, _, _ = read_state_dict(result.b.path, key=result.b.key, trust_pickle=trust_pickle)
    sb = {result.renamed.get(k, k): v for k, v in sb_raw.items()}
    out = []
    for k in result.matched:
        x, y = sa[k], sb[k]
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
        out.append(ValueDiff(k, diff, bool(torch.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True)),
                             False))
    result.values, result.rtol, result.atol = out, rtol, atol
    return out
