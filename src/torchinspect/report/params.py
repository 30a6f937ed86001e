"""`inspect params` -> Report: per-module table, by dtype, totals, frozen and tied tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.analysis.saved_params import SavedParams
from torchinspect.report.base import KeyValues, Report, Table, Text, fmt_bytes, nbytes

if TYPE_CHECKING:
    from torchinspect.analysis.params import ParamsResult
    from torchinspect.analysis.saved_params import SavedParams


def params_report(r: ParamsResult | SavedParams) -> Report:
    if isinstance(r, SavedParams):
        return saved_params_report(r)
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
                "Self: parameters registered on the module itself."],
        optional=["Frozen", "Trainable", "Buffers", "Self"]))
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


def saved_params_report(r: SavedParams) -> Report:
    """A weights file without its architecture: counts from its metadata, buffers guessed."""
    where = f" (entry {r.container_key!r})" if r.container_key else ""
    sections: list[Any] = [Text([
        f"{r.model}{where}: {r.format} weights without an architecture; counted from the "
        "file's metadata (no tensor data read); tied tensors once"])]
    sections.append(Table(
        f"Saved tensors by key prefix (depth {r.depth})",
        ["Prefix", "Tensors", "Elements", "Self", "Bytes", "Likely buffers"],
        [[m.name or "(all)", m.tensors, m.elements, m.self_elements, nbytes(m.bytes),
          m.likely_buffers] for m in r.rows],
        align=["left"] + ["right"] * 5, primary=True,
        footer=["A prefix row includes the keys under it; Self: tensors saved on the prefix "
                "itself. Likely buffers: elements of keys named like buffers (running_mean, "
                "num_batches_tracked, ...) or of integer dtype."]))
    sections.append(Table("By dtype", ["Dtype", "Tensors", "Elements", "Bytes"],
                          [[k, v.tensors, v.elements, nbytes(v.bytes)]
                           for k, v in r.by_dtype.items()],
                          align=["left", "right", "right", "right"]))
    sections.append(KeyValues("Totals", [
        ("Tensors", f"{r.tensors:,}"),
        ("Elements", f"{r.elements:,}"),
        ("Likely parameters", f"{r.likely_params:,}"),
        ("Likely buffers", f"{r.likely_buffer_elements:,} elements in {len(r.likely_buffers):,} tensors"),
        ("Tensor bytes", fmt_bytes(r.bytes)),
        ("File size", fmt_bytes(r.file_size)),
    ]))
    if r.tied:
        sections.append(Text([" = ".join(g) + " (one tensor on disk, counted once)"
                              for g in r.tied], title="Tied tensors"))
    if r.other_entries:
        sections.append(Text(r.other_entries, title="Non-tensor entries (not counted)"))
    sections.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return Report("params-checkpoint", r.to_dict(), sections)
