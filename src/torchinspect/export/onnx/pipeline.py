"""The orchestrator: plan, export and save, check, describe, settle the dynamic dims, verify."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from torchinspect.arguments import ProgressFn, renamed_keywords
from torchinspect.export.onnx.describe import check_onnx_file, describe_export
from torchinspect.export.onnx.plan import (
    ExportPlan,
    dynamic_shapes,
    plan_export,
    specialized_dims,
)
from torchinspect.export.onnx.result import ExportResult
from torchinspect.export.onnx.verify import verify_export
from torchinspect.export.onnx.write import write_onnx
from torchinspect.guard import training_mode
from torchinspect.sources.case import ModelLike, ModelOptions, make_case
from torchinspect.trace.engine import model_kept


@renamed_keywords(case_or_model="model")
def export_onnx(model: ModelLike, path: str | os.PathLike[str], inputs: Any = None, *,
                opset: int | None = None, legacy: bool = False, static: bool = False,
                dynamic: Sequence[str] = (), verify: bool | None = None, atol: float = 1e-4,
                rtol: float = 1e-3, force: bool = False, external_data: bool | None = None,
                device: str = "cpu", protect: Sequence[str] = (), report: bool = False,
                input_names: Sequence[str] | None = None,
                output_names: Sequence[str] | None = None,
                options: ModelOptions | None = None,
                progress: ProgressFn | None = None) -> ExportResult:
    """Export to ONNX at ``path``, check it, and (``verify``) compare onnxruntime with PyTorch.

    ``verify=None`` verifies when onnxruntime is installed. ``external_data=None`` stores the
    weights in ``<file>.data`` only when they exceed 2 GB. ``report=True`` keeps the
    exporter's markdown report as ``<file stem>.export-report.md``. Inputs are named after
    the forward's parameters and outputs ``output`` (``output_0`` ...) unless
    ``input_names``/``output_names`` say otherwise. Never overwrites ``path``, its data file
    or the report unless ``force``, nor any file in ``protect``. ``progress(text)`` hears
    each phase as it starts (the exporter alone takes seconds to minutes).
    """
    say = progress if progress is not None else _silent
    case = make_case(model, inputs, options=options)
    plan = plan_export(case, path, opset=opset, legacy=legacy, static=static, dynamic=dynamic,
                       verify=verify, atol=atol, rtol=rtol, force=force,
                       external_data=external_data, device=device, protect=protect,
                       report=report, input_names=input_names, output_names=output_names)
    with model_kept(plan.model), training_mode(plan.model):  # attributes and buffers a forward sets are put back
        plan.dynamic_shapes, plan.marked = dynamic_shapes(
            plan.model, plan.args, plan.kwargs, static=plan.static, extra=plan.extra)
        say(f"exporting with torch.onnx ({plan.exporter}) and saving")
        data_path, report_path = write_onnx(plan)
    say("checking the file (onnx.checker)")
    t0 = time.perf_counter()
    check_onnx_file(plan.target)
    plan.seconds["check"] = time.perf_counter() - t0
    result = describe_export(case.name, plan.target, data_path, plan.exporter, atol, rtol)
    result.report_path = str(report_path) if report_path else None
    _settle_dynamic(plan, result)
    if plan.verify:
        say("verifying in onnxruntime against PyTorch")
        result.verify = verify_export(plan)
    result.seconds = plan.seconds
    result.weights = case.weights.to_dict()
    note = case.weights.note("the file holds untrained weights"
                             + (" (verified with them)" if plan.verify else ""))
    result.notes = [*plan.notes, *([note] if note else [])]
    return result


def _silent(text: str, /, *, final: bool = False) -> None:
    pass


def _settle_dynamic(plan: ExportPlan, result: ExportResult) -> None:
    """Dims asked to be dynamic that the exporter kept fixed (the model's code specialized
    them): the file takes only the example's size there, so verification keeps it too."""
    plan.marked, fixed = specialized_dims(plan.model, plan.args, plan.kwargs, plan.marked,
                                      plan.extra, result.inputs)
    for pname, dim, size in fixed:
        plan.notes.append(f"{pname} dim {dim}: kept fixed at {size} by the exporter (the model's "
                          "code specializes it), so the file accepts only that size there")
    if plan.opset is not None and result.opset is not None and result.opset != plan.opset:
        plan.notes.append(f"--opset {plan.opset}: the exporter wrote opset {result.opset} "
                          "instead (the version in the file's opset_import)")
    if plan.pt2_fixed:
        plan.notes.append("shapes fixed: a .pt2 program accepts only the shapes it was exported "
                          "with (re-export it with dynamic shapes, or pass --dynamic to try)")
    elif plan.static:
        plan.notes.append("shapes fixed (--static): the file accepts only the example's shapes")
    elif not plan.marked and not fixed:
        plan.notes.append("no input has a batch dimension to make dynamic; shapes are fixed")
