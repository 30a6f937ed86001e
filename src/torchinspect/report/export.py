"""`inspect export` -> Report: the ONNX file, its inputs/outputs, ops, and the verification."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Shown, Table, Text, fmt_bytes, nbytes
from torchinspect.sources.origin import describe_weights

if TYPE_CHECKING:
    from torchinspect.export.onnx import ExportResult


def _dims(shape: Sequence[int | str]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def export_report(r: ExportResult, *, show_all: bool = False) -> Report:
    """The export's report; ``show_all`` lists every op type (the table shows 20 otherwise)."""
    items: list[tuple[str, Any]] = [
        ("Model", r.model), ("File", r.path), ("Size", nbytes(r.bytes)),
    ]
    if r.data_path:
        items.append(("External data", f"{r.data_path} ({fmt_bytes(r.data_bytes)})"))
    items += [
        ("Exporter", "torch.export (dynamo=True)" if r.exporter == "dynamo" else "TorchScript (legacy)"),
        ("Opset", r.opset if r.opset is not None else "-"), ("Nodes", r.nodes),
        ("Initializers", f"{r.initializers:,} ({fmt_bytes(r.initializer_bytes)})"),
        ("onnx.checker (full_check)", "passed" if r.checked else "not run"),
        ("Verification", _verdict(r)),
        ("Weights", describe_weights(r.weights)),
        ("Export time", f"{r.seconds.get('export', 0) + r.seconds.get('save', 0):.2f} s"),
    ]
    if "verify" in r.seconds:
        items.append(("Check + verify time",
                      f"{r.seconds.get('check', 0) + r.seconds['verify']:.2f} s"))
    if r.report_path:
        items.append(("Exporter report", r.report_path))
    sections: list[Any] = [KeyValues("ONNX export", items)]
    sections.append(Table("Inputs and outputs", ["", "Name", "Dtype", "Shape", "Dynamic dims"],
                          [["input", i.name, i.dtype, _dims(i.shape), ", ".join(i.dynamic) or "-"]
                           for i in r.inputs] +
                          [["output", o.name, o.dtype, _dims(o.shape), ", ".join(o.dynamic) or "-"]
                           for o in r.outputs],
                          align=["left", "left", "left", "left", "left"]))
    if r.verify is not None:
        rows: list[list[Any]] = []
        for run in r.verify:
            if run.error:
                rows.append([run.batch, run.inputs, "-", "-", "-", "-", f"error: {run.error}"])
            for o in run.outputs:
                rows.append([run.batch, run.inputs, o.name, _dims(o.shape),
                             Shown(o.max_abs, f"{o.max_abs:.3g}"),
                             Shown(o.tolerance_used, _share(o.tolerance_used)),
                             "ok" if o.ok else "FAIL"])
        sections.append(Table(
            f"onnxruntime vs PyTorch (atol {r.atol:g}, rtol {r.rtol:g})",
            ["Batch", "Inputs", "Output", "Shape", "Max abs diff", "Tol. used", "Result"],
            rows, align=["right", "left", "left", "left", "right", "right", "left"],
            primary=True, footer=[
                "ok: every element within atol + rtol x |PyTorch value| (as torch.allclose);",
                "Tol. used: the worst element's share of its own tolerance (over 100%: FAIL)."]))
    shown = len(r.ops) if show_all else 20
    sections.append(Table("Op types", ["Op", "Nodes"],
                          [[k, v] for k, v in list(r.ops.items())[:shown]], align=["left", "right"],
                          footer=[f"… and {len(r.ops) - shown} more op types (--all lists them; "
                                  "JSON lists all)"] if len(r.ops) > shown else []))
    notes = [f"note: {n}" for n in r.notes] + [f"open {r.path} in Netron (netron.app) to browse it"]
    sections.append(Text(notes, style="yellow"))
    return Report("export", r.to_dict(), sections)


def _share(x: float) -> str:
    """``0.18%``, ``18%`` of the tolerance; ``>1000%`` for a hopeless one."""
    if x >= 10:
        return ">1000%"
    return f"{x * 100:.2g}%" if x < 0.1 else f"{x * 100:.0f}%"


def _verdict(r: ExportResult) -> str:
    if r.verify is None:
        return "not run (--no-verify, or onnxruntime is not installed)"
    batches = ", ".join(str(v.batch) for v in r.verify)
    if r.verified:
        return f"passed at batch {batches}"
    bad = [str(v.batch) for v in r.verify if not v.ok]
    return f"FAILED at batch {', '.join(bad)} (of {batches})"
