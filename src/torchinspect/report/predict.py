"""``inspect bench --predict GPU`` -> Report: predicted latency, per layer type, labelled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.latency.calibrated import validation_text
from torchinspect.report.base import Report, Table, Text, fmt_si, si

if TYPE_CHECKING:
    from torchinspect.latency import Prediction, TrainPrediction

SCHEMA_VERSION = 1


def header(p: Prediction) -> list[str]:
    return [f"{p.model} on {p.gpu_label}: PREDICTED, not measured (input {p.inputs})",
            f"table: {p.source}",
            validation_text(p.validation),
            f"host: {p.host.describe()}; x host factor {p.host_factor:.2f}"]


def train_header(p: TrainPrediction) -> list[str]:
    mixed = f", forward under autocast {p.autocast}" if p.autocast else ""
    factors = ", ".join(f"{k} {v:.2f}" for k, v in p.host_factors.items())
    return [f"{p.model} on {p.gpu_label}: one eager training step, PREDICTED, not measured "
            f"(input {p.inputs}; {p.weights} weights{mixed}; {p.optimizer}, foreach)",
            f"table: {p.source}",
            validation_text(p.validation, what="training steps"),
            f"host: {p.host.describe()}; x host factors {factors}"]


def _ms(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def totals_table(p: Prediction) -> Table:
    rows = [[r.dtype, r.batch, _ms(r.gpu_ms), _ms(r.eager_ms), _ms(r.host_ms), r.binds,
             r.kernels, si(r.flops)] for r in p.results]
    return Table("Predicted latency (ms)",
                 ["dtype", "batch", "graph ms", "eager ms", "host ms", "binds", "kernels", "FLOPs"],
                 rows, align=["left", "right", "right", "right", "right", "left", "right", "right"],
                 primary=True,
                 footer=["graph: CUDA-graph replay (kernels + per-kernel gaps); eager: the larger "
                         "of GPU time and host dispatch time, whichever binds"])


def layer_table(r: Any, top: int = 12) -> Table:
    total = r.gpu_ms * 1e3 or 1.0
    rows = [[row.layer, row.ops, _ms(row.us / 1e3), f"{100 * row.us / total:.0f}%",
             si(row.flops, empty="0"), fmt_si(row.bytes) + "B", f"{row.intensity:.1f}", row.bound]
            for row in r.layers[:top]]
    more = len(r.layers) - top
    footer = [f"{more} more layer types in the JSON"] if more > 0 else []
    return Table(f"{r.dtype} batch {r.batch}: predicted time by layer type",
                 ["layer", "ops", "ms", "%", "FLOPs", "bytes", "FLOP/B", "bound"], rows,
                 align=["left", "right", "right", "right", "right", "right", "right", "left"],
                 footer=footer, optional=["FLOPs", "bytes"])


def uncalibrated_line(r: Any) -> str:
    if not r.uncalibrated_ops:
        return f"{r.dtype} batch {r.batch}: not calibrated: none (every op has measured efficiency data)"
    names = ", ".join(f"{k} x{v}" for k, v in sorted(r.uncalibrated_ops.items(),
                                                       key=lambda kv: -kv[1])[:5])
    return (f"{r.dtype} batch {r.batch}: not calibrated: {sum(r.uncalibrated_ops.values())} ops "
            f"({names}) predicted from the roofline alone: {r.uncalibrated_ms:.3f} ms")


def prediction_report(p: Prediction) -> Report:
    sections: list[Any] = [Text(header(p)), totals_table(p)]
    for r in p.results:
        sections.append(layer_table(r))
    sections.append(Text([uncalibrated_line(r) for r in p.results]))
    if p.notes:
        sections.append(Text([f"note: {n}" for n in p.notes], style="yellow"))
    return Report("bench-predict", {"predicted": p.to_dict()}, sections, version=SCHEMA_VERSION)


def train_totals(p: TrainPrediction) -> Table:
    rows = [[r.batch, _ms(r.step_ms), _ms(r.forward_ms), _ms(r.backward_ms), _ms(r.optimizer_ms),
             _ms(sum(r.gpu_ms.values())), _ms(sum(r.host_ms.values())), r.binds, r.kernels]
            for r in p.results]
    return Table("Predicted training step (ms)",
                 ["batch", "step", "forward", "backward", "optimizer", "GPU", "host", "binds",
                  "kernels"], rows,
                 align=["right", "right", "right", "right", "right", "right", "right", "left",
                        "right"], primary=True,
                 footer=["each phase as CUDA events at its boundaries measure it: host and GPU "
                         "on one timeline (eager); GPU: the kernels alone; host: dispatch alone"])


def train_layers(r: Any, top: int = 12) -> Table:
    total = sum(row.us for row in r.layers) or 1.0
    rows = [[row.layer, row.ops, _ms(row.us / 1e3), f"{100 * row.us / total:.0f}%",
             si(row.flops, empty="0"), row.bound] for row in r.layers[:top]]
    more = len(r.layers) - top
    return Table(f"batch {r.batch}: forward + backward GPU time by layer type",
                 ["layer", "ops", "ms", "%", "FLOPs", "bound"], rows,
                 align=["left", "right", "right", "right", "right", "left"],
                 footer=[f"{more} more layer types in the JSON"] if more > 0 else [],
                 optional=["FLOPs"])


def train_report(p: TrainPrediction) -> Report:
    sections: list[Any] = [Text(train_header(p)), train_totals(p)]
    sections += [train_layers(r) for r in p.results]
    uncal = [f"batch {r.batch}: not calibrated: " + ", ".join(
        f"{k} x{v}" for k, v in sorted(r.uncalibrated_ops.items(), key=lambda kv: -kv[1])[:5])
        + " (roofline and the small-kernel floor)" for r in p.results if r.uncalibrated_ops]
    if uncal:
        sections.append(Text(uncal))
    if p.notes:
        sections.append(Text([f"note: {n}" for n in p.notes], style="yellow"))
    return Report("bench-predict", {"predicted": p.to_dict()}, sections, version=SCHEMA_VERSION)


def against_measured(p: Prediction, measured: dict[str, Any]) -> Table:
    """Predicted beside measured for the configurations a real run timed."""
    rows = []
    for c in measured.get("configs", []):
        r = p.find(c["dtype"], c.get("batch"))
        timing = c.get("timing") or {}
        med = (timing.get("stats") or {}).get("median")
        if r is None or med is None:
            continue
        ms = med * 1e3
        graphs = (measured.get("flags") or {}).get("cuda_graphs")
        pred = r.gpu_ms if graphs else r.eager_ms
        rows.append([c["dtype"], c.get("batch"), "graph" if graphs else "eager", _ms(pred),
                     _ms(ms), f"{100 * (pred / ms - 1):+.0f}%"])
    return Table(f"Predicted ({p.gpu}) against measured", ["dtype", "batch", "mode", "predicted ms",
                                                          "measured ms", "error"], rows,
                 align=["left", "right", "left", "right", "right", "right"])
