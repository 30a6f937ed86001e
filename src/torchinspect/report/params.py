"""`inspect params` -> Report: per-module table, by dtype, totals, frozen and tied tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Table, Text, fmt_bytes, nbytes

if TYPE_CHECKING:
    from torchinspect.analysis.params import ParamsResult


def params_report(r: ParamsResult) -> Report:
    s = r.stats
    sections: list[Any] = [Text([f"{r.model}: parameters counted once per tensor "
                                 "(tied weights once); bytes at each tensor's dtype"])]
    sections.append(Table(
        f"Parameters by module (depth {r.depth})",
        ["Module", "Type", "Params", "Self", "Trainable", "Frozen", "Bytes", "Buffers"],
        [[m.name or "(model)", m.type, m.params, m.self_params, m.trainable, m.frozen,
          nbytes(m.bytes), m.buffers] for m in r.rows],
        align=["left", "left"] + ["right"] * 6, primary=True,
        footer=["Params, Trainable, Frozen, Bytes and Buffers include the modules inside; "
                "Self: parameters registered on the module itself."]))
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
    if r.notes:
        sections.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return Report("params", r.to_dict(), sections, version=2)  # v2: inclusive rows, self_params
