"""`inspect features` -> Report: the layer listing, or what an extraction wrote."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.dtypes import SIZES
from torchinspect.report.base import KeyValues, Report, Shown, Table, Text, fmt_bytes, nbytes
from torchinspect.sources.origin import describe_weights

if TYPE_CHECKING:
    from torchinspect.features import FeatureResult, LayerListing


def _shape(shape: list[int] | None) -> str:
    return "-" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def listing_report(r: LayerListing) -> Report:
    sections: list[Any] = [Text([f"{r.model}: layers for --layers, output shapes at input {r.input}",
                                 "a module called several times gives its first call; "
                                 "FX names (relu_1) reach later calls"])]
    sections.append(Table(
        f"Modules ({len(r.modules)})", ["Name", "Type", "Output shape", "Calls"],
        [[m.name, m.type, _shape(m.shape), m.calls] for m in r.modules],
        align=["left", "left", "left", "right"], primary=True))
    if r.nodes:
        sections.append(Table(f"FX nodes ({len(r.nodes)})", ["Name", "Output shape"],
                              [[n.name, _shape(n.shape)] for n in r.nodes], align=["left", "left"]))
    if r.fx_error:
        sections.append(Text([f"no FX node names: the model cannot be traced by FX ({r.fx_error}); "
                              "module names work"], style="yellow"))
    if r.notes:
        sections.append(Text(r.notes, title="Notes"))
    return Report("features", {"mode": "list", **r.to_dict()}, sections)


def features_report(r: FeatureResult) -> Report:
    sections: list[Any] = []
    sections.append(Table(
        f"{r.model}: features in {r.output}", ["Tensor", "Shape per row", "Dtype", "Bytes per row"],
        [[name, _shape(t["shape"]), t["dtype"], nbytes(_row_bytes(t))] for name, t in r.layers.items()],
        align=["left", "left", "left", "right"], primary=True))
    items: list[tuple[str, Any]] = [
        ("Rows", f"{r.rows:,}"),
        ("Added by this run", f"{r.new_rows:,}"),
        ("Already there (skipped)", f"{r.skipped:,}"),
        ("Unreadable inputs", _unreadable(r)),
        ("Shards", f"{len(r.shards)} {r.file_format} file(s), {fmt_bytes(r.bytes)}"),
        ("Weights", weights_text(r.weights)),
        ("Capture", r.method),
        ("Device", f"{r.device}" + (f" × {r.world_size} processes" if r.world_size > 1 else "")),
        ("Saved dtype", r.save_dtype),
        ("Preprocessing", _prep(r.preprocess)),
        ("Time", Shown(round(r.seconds, 3), f"{r.seconds:.2f} s")),
        ("Rows/s", Shown(round(r.rows_per_s, 2), f"{r.rows_per_s:,.1f}") if r.new_rows
         else Shown(None, "- (nothing added)")),
    ]
    if r.forward_seconds is not None and r.seconds > 0 and r.new_rows:
        share = 100 * (1 - r.forward_seconds / r.seconds)
        items.append(("Time outside the forward", f"{share:.1f}%"))
    sections.append(KeyValues("Run", items))
    if r.failed:
        shown = [f"{f['id']}: {f['error']}" for f in r.failed[:50]]
        more = [f"… and {len(r.failed) - 50} more (see manifest.json)"] if len(r.failed) > 50 else []
        title = "Skipped (--skip-unreadable)" if r.skip_unreadable else "Unreadable"
        sections.append(Text([*shown, *more], title=f"{title} ({len(r.failed)})", style="yellow"))
    notes = list(r.notes)
    if r.ignored_files:
        names = ", ".join(r.ignored_files[:10]) + (f" and {len(r.ignored_files) - 10} more"
                                                   if len(r.ignored_files) > 10 else "")
        notes.append(f"{len(r.ignored_files)} file(s) in the input folders are not inputs "
                     f"(ignored): {names}")
    if notes:
        sections.append(Text(notes, title="Notes"))
    return Report("features", {"mode": "extract", **r.to_dict()}, sections)


def weights_text(w: dict[str, Any]) -> str:
    """``random init (seed 0, sha256 ...): no weights loaded``, or the weights file and the
    start of its sha256."""
    text = describe_weights(w)
    return text + ": no weights loaded" if w.get("source") == "random-init" else text


def _unreadable(r: FeatureResult) -> str:
    text = f"{len(r.failed):,}"
    if r.failed and r.new_failed != len(r.failed):
        text += f" ({r.new_failed:,} in this run)"
    return text + (" (accepted: --skip-unreadable)" if r.failed and r.skip_unreadable else "")


def _row_bytes(t: dict[str, Any]) -> int:
    n = 1
    for d in t["shape"]:
        n *= d
    size = SIZES.get(t["dtype"], 4)
    return n * size


def _prep(p: dict[str, Any]) -> str:
    if p.get("mode") == "random":
        return "random input (--input)"
    if p.get("mode") == "none":
        return "none (pixels in [0, 1])"
    if p.get("mode") == "tensors":
        return "none: tensor files as they are"
    parts = []
    if p.get("resize"):
        parts.append(f"resize {p['resize']}")
    if p.get("crop"):
        parts.append(f"crop {p['crop'][0]}x{p['crop'][1]}")
    if p.get("mean"):
        parts.append("mean " + ",".join(f"{v:g}" for v in p["mean"]))
    if p.get("std"):
        parts.append("std " + ",".join(f"{v:g}" for v in p["std"]))
    return "; ".join(parts) + (f" ({p['source']})" if p.get("source") else "")
