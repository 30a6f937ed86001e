"""The verdict of `inspect diff`: whether ``A.load_state_dict(B)`` works by PyTorch's own rules,
what it assumes, the code that loads B as it says, and (``--values``) how far the numbers
differ. The sides and their key match are read by io/compare.py (metadata only)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.io.compare import (
    DiffSide,
    KeyMatch,
    Mismatch,
    comparable,
    fmt_shape,
    match_keys,
    tensor_value,
)
from torchinspect.io.entries import FilePool
from torchinspect.io.state_dict import py_str
from torchinspect.io.tensors import open_input

_TORCH_FILES = ("torch_zip", "torch_legacy")


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
class DiffResult(KeyMatch):
    """The result of ``diff_state_dicts``: the key match, its verdict by PyTorch's rules, the
    conditions it assumes and the code that loads B as it says; ``values`` when compared."""

    values: list[ValueDiff] | None = None
    rtol: float = 1e-5
    atol: float = 1e-8

    @property
    def verdict(self) -> Verdict:
        if not self.loads:
            return Verdict.partial if self.matched and not self.shape_mismatches \
                else Verdict.incompatible
        if self.unexpected or self.tied_fill:
            return Verdict.complete
        return Verdict.strict

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
            shown = ", ".join(f"{m.key} {fmt_shape(m.a.shape)} in A, {fmt_shape(m.b.shape)} in B"
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


def diff_state_dicts(a: Any, b: Any, *, auto_prefix: bool = False,
                     fold_batch_counters: bool = True) -> DiffResult:
    """Compare B (weights) against A (target) by key, shape and dtype, and say whether
    ``A.load_state_dict(B)`` works.

    ``a`` and ``b``: a checkpoint path, a state_dict, a module, or a ``DiffSide``
    (``checkpoint_side``/``model_side`` give options such as a container key).

    ``auto_prefix`` applies the best prefix remap of B's keys (see
    ``find_prefix_remaps``) before comparing; candidates are reported either way.
    ``num_batches_tracked`` entries missing on one side are folded (BatchNorm fills them
    in) rather than listed. Values are compared separately by ``compare_values``.
    """
    match = match_keys(a, b, auto_prefix=auto_prefix, fold_batch_counters=fold_batch_counters)
    return DiffResult(**{f.name: getattr(match, f.name) for f in fields(match)})


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
            x, y = comparable(tensor_value(sa[k], files)), comparable(tensor_value(sb[k], files))
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


