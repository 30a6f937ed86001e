"""`inspect params`: parameter totals, per module, per dtype, frozen and tied tensors.

Parameters are static, so no forward runs here (and no input is needed). A module's row is
inclusive (its whole subtree; the root row is the model total) with ``self_params`` the
parameters registered on the module itself, as in summary and flops.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.analysis.doctor.structure import unregistered
from torchinspect.analysis.saved_params import SavedParams, is_bare_checkpoint, saved_params
from torchinspect.arguments import check_depth, renamed_keywords
from torchinspect.sources.case import ModelLike, ModelOptions, make_case
from torchinspect.trace.moe import moe_notes
from torchinspect.trace.records import ModuleInfo, ParamStats
from torchinspect.trace.static import collect_static


@dataclass
class ParamRow:
    name: str
    type: str
    depth: int
    params: int  # inclusive: the module and every module inside it
    trainable: int
    frozen: int
    bytes: int
    buffers: int
    self_params: int = 0  # registered on this module itself


@dataclass
class ParamsResult:
    """The result of ``count_params``."""

    model: str
    depth: int
    stats: ParamStats
    rows: list[ParamRow]
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.stats.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "depth": self.depth,
            "total": self.stats.total,
            "trainable": self.stats.trainable,
            "frozen": self.stats.frozen,
            "buffers": self.stats.buffers,
            "param_bytes": self.stats.param_bytes,
            "buffer_bytes": self.stats.buffer_bytes,
            "by_dtype": {k: asdict(v) for k, v in self.stats.by_dtype.items()},
            "frozen_params": list(self.stats.frozen_names),
            "tied": [{"name": a, "tied_to": b} for a, b in self.stats.tied],
            "quantized": self.stats.quantized,
            "modules": [asdict(r) for r in self.rows],
            "notes": list(self.notes),
        }


def rows_at_depth(modules: dict[str, ModuleInfo], depth: int) -> list[ParamRow]:
    """Modules down to ``depth`` holding parameters or buffers, with inclusive numbers (the
    root row is the model total; deeper modules are inside their ancestors' rows)."""
    return [ParamRow(name, info.type, info.depth, info.total_params, info.total_trainable,
                     info.total_params - info.total_trainable, info.total_param_bytes,
                     info.total_buffers, info.params)
            for name, info in modules.items()
            if info.depth <= depth and (info.total_params or info.total_buffers or name == "")]


def left_out_notes(model: Any) -> list[str]:
    """Parameters the model holds that the totals leave out: modules or parameters kept in
    plain Python lists/dicts are not registered, so no count (nor ``state_dict``) sees them."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return []
    if not isinstance(model, torch.nn.Module):
        return []
    out = []
    for f in unregistered(model):
        if f.data.get("parameters"):
            out.append(f"{f.module}: {f.what}, not registered: {f.data['parameters']:,} "
                       f"parameters left out of the totals (doctor TI001; fix: {f.fix})")
    return out


def params_from_model(model: Any, *, name: str, depth: int = 3,
                      notes: list[str] | None = None) -> ParamsResult:
    check_depth(depth)
    modules, stats = collect_static(model)
    notes = list(notes or [])
    if stats.lazy:
        shown = ", ".join(stats.lazy[:4]) + (f" and {len(stats.lazy) - 4} more" if len(stats.lazy) > 4 else "")
        notes.append(f"{len(stats.lazy)} lazy parameter(s)/buffer(s) not materialized yet "
                     f"({shown}): not counted; summarize(model, inputs) or `inspect summary "
                     "--input` sizes them from a forward")
    notes.extend(moe_notes(model, modules)[:1])  # total vs active per token (no forward here)
    notes.extend(left_out_notes(model))
    return ParamsResult(name, depth, stats, rows_at_depth(modules, depth), notes)


@renamed_keywords(model_or_spec="model")
def count_params(model: ModelLike, *, depth: int = 3, device: str | None = None,
                 options: ModelOptions | None = None) -> ParamsResult | SavedParams:
    """Count parameters: ``count_params("resnet18").total == 11_689_512`` (no forward).

    A weights file without ``--arch`` is counted from its metadata instead (a
    ``SavedParams``: tensors, elements, bytes per dtype, key tree; parameters cannot
    be told from buffers without the architecture)."""
    check_depth(depth)
    opts = options or ModelOptions()
    if isinstance(model, str) and is_bare_checkpoint(model, opts.arch, opts.trust_pickle):
        return saved_params(model, depth=depth, key=opts.key)
    case = make_case(model, options=opts, device=device, need_inputs=False)
    return params_from_model(case.model, name=case.name, depth=depth, notes=case.notes)
