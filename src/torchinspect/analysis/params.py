"""`inspect params`: parameter totals, per module, per dtype, frozen and tied tensors.

Parameters are static, so no forward runs here (and no input is needed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.arguments import check_depth
from torchinspect.sources.case import ModelOptions, make_case
from torchinspect.trace.records import ModuleInfo, ParamStats


@dataclass
class ParamRow:
    name: str
    type: str
    depth: int
    params: int  # own + every descendant below --depth
    trainable: int
    frozen: int
    bytes: int
    buffers: int


@dataclass
class ParamsResult:
    """The result of :func:`count_params`."""

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
    """Modules down to ``depth`` (those holding parameters or buffers), deeper ones folded in."""
    rows = []
    for name, info in modules.items():
        if info.depth > depth or (info.total_params == 0 and info.total_buffers == 0):
            continue
        folded = info.depth == depth
        params = info.total_params if folded else info.params
        trainable = info.total_trainable if folded else info.trainable
        if not folded and params == 0 and info.buffers == 0 and name != "":
            params_row = ParamRow(name, info.type, info.depth, 0, 0, 0, 0, 0)
            rows.append(params_row)  # a container: its children follow
            continue
        rows.append(ParamRow(name, info.type, info.depth, params, trainable, params - trainable,
                             info.total_param_bytes if folded else info.param_bytes,
                             info.total_buffers if folded else info.buffers))
    return rows


def params_from_model(model: Any, *, name: str, depth: int = 3,
                      notes: list[str] | None = None) -> ParamsResult:
    from torchinspect.trace.moe import moe_notes
    from torchinspect.trace.static import collect_static

    check_depth(depth)
    modules, stats = collect_static(model)
    notes = list(notes or [])
    if stats.lazy:
        shown = ", ".join(stats.lazy[:4]) + (f" and {len(stats.lazy) - 4} more" if len(stats.lazy) > 4 else "")
        notes.append(f"{len(stats.lazy)} lazy parameter(s)/buffer(s) not materialized yet "
                     f"({shown}): not counted; summarize(model, inputs) or `inspect summary "
                     "--input` sizes them from a forward")
    notes.extend(moe_notes(model, modules)[:1])  # total vs active per token (no forward here)
    return ParamsResult(name, depth, stats, rows_at_depth(modules, depth), notes)


def count_params(model_or_spec: Any, *, depth: int = 3, device: str | None = None,
                 options: ModelOptions | None = None) -> ParamsResult:
    """Count parameters: ``count_params("resnet18").total == 11_689_512`` (no forward)."""
    check_depth(depth)
    case = make_case(model_or_spec, options=options, device=device, need_inputs=False)
    return params_from_model(case.model, name=case.name, depth=depth, notes=case.notes)
