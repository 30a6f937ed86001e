"""`inspect params`: parameter totals, per module, per dtype, frozen and tied tensors.

Parameters are static, so no forward runs here (and no input is needed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.analysis.prepare import LoadOptions, prepare
from torchinspect.errors import InspectError
from torchinspect.report import KeyValues, Report, Table, Text, fmt_bytes, nbytes
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

    def to_json(self) -> dict[str, Any]:
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

    def to_report(self) -> Report:
        s = self.stats
        sections: list[Any] = [Text([f"{self.model}: parameters counted once per tensor "
                                     "(tied weights once); bytes at each tensor's dtype"])]
        sections.append(Table(
            f"Parameters by module (depth {self.depth})",
            ["Module", "Type", "Params", "Trainable", "Frozen", "Bytes", "Buffers"],
            [[r.name or "(model)", r.type, r.params, r.trainable, r.frozen, nbytes(r.bytes),
              r.buffers] for r in self.rows],
            align=["left", "left", "right", "right", "right", "right", "right"], primary=True))
        sections.append(Table("By dtype", ["Dtype", "Params", "Bytes"],
                              [[k, v.count, nbytes(v.bytes)] for k, v in s.by_dtype.items()],
                              align=["left", "right", "right"]))
        items: list[tuple[str, Any]] = [
            ("Total params", f"{s.total:,}"), ("Trainable params", f"{s.trainable:,}"),
            ("Non-trainable params", f"{s.frozen:,}"), ("Param memory", fmt_bytes(s.param_bytes)),
            ("Buffers (elements)", f"{s.buffers:,}"), ("Buffer memory", fmt_bytes(s.buffer_bytes)),
        ]
        if s.quantized:
            items.append(("Quantized (packed) weights", f"{s.quantized:,}"))
        sections.append(KeyValues("Totals", items))
        if s.frozen_names:
            shown = s.frozen_names[:20]
            more = [f"… and {len(s.frozen_names) - 20} more"] if len(s.frozen_names) > 20 else []
            sections.append(Text([*shown, *more], title=f"Frozen parameters ({len(s.frozen_names)})"))
        if s.tied:
            sections.append(Text([f"{a} is {b} (counted once)" for a, b in s.tied],
                                 title="Tied parameters"))
        if self.notes:
            sections.append(Text([f"note: {n}" for n in self.notes], style="yellow"))
        return Report("params", self.to_json(), sections)


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
    from torchinspect.trace.static import collect_static

    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    modules, stats = collect_static(model)
    return ParamsResult(name, depth, stats, rows_at_depth(modules, depth), list(notes or []))


def count_params(model_or_spec: Any, *, depth: int = 3, device: str = "auto",
                 options: LoadOptions | None = None) -> ParamsResult:
    """Count parameters: ``count_params("resnet18").total == 11_689_512``."""
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    prep = prepare(model_or_spec, None, device=device, options=options, need_inputs=False)
    return params_from_model(prep.model, name=prep.name, depth=depth, notes=prep.notes)
