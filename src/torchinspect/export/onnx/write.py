"""Run the exporter and put its products in place: the .onnx (atomically), its external
data, and (when asked) the exporter's own markdown report. Every one of them follows the
no-overwrite/``--force`` rule checked up front by :func:`~.plan.check_outputs`."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.export.onnx.explain import explain_failure
from torchinspect.export.onnx.plan import (
    ExportPlan,
    bound_arguments,
    default_input_names,
    default_output_names,
    export_leaves,
)
from torchinspect.export.onnx.quiet import quiet_exporters
from torchinspect.io.atomic import atomic_path, atomic_write_bytes, check_target, make_temp_dir


def write_onnx(plan: ExportPlan) -> tuple[Path | None, Path | None]:
    """Export into a private temporary folder beside the target, then move the results into
    place. Returns (external data file, exporter report), each None when not written."""
    t0 = time.perf_counter()
    # a marked temporary folder (io/atomic.py): a killed export's is removed by the next run
    marked = make_temp_dir(plan.target) if plan.target.parent.is_dir() else \
        Path(tempfile.mkdtemp(prefix=".torchinspect-export-"))
    tmpdir = marked / "export"  # beside the mark: everything in it is the exporter's
    tmpdir.mkdir()
    try:
        program = _run_exporter(plan, tmpdir)
        if program is not None:
            _rename(plan, program)
        plan.seconds["export"] = time.perf_counter() - t0
        report = _keep_report(tmpdir / "artifacts", plan) if plan.report else None
        t0 = time.perf_counter()
        data_path = _save(plan, program, tmpdir / plan.target.name)
        plan.seconds["save"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(marked, ignore_errors=True)
    return data_path, report


def _run_exporter(plan: ExportPlan, tmpdir: Path) -> Any:
    """The ONNXProgram (dynamo), or None with the file written in ``tmpdir`` (legacy); a
    failure becomes one :class:`InspectError` naming the op or construct."""
    import torch

    try:
        with quiet_exporters():
            if plan.legacy:
                with torch.no_grad():
                    n_out = len(export_leaves(plan.model(*plan.args, **plan.kwargs)))
                _export_legacy(plan, tmpdir / plan.target.name, n_out)
                return None
            return torch.onnx.export(
                plan.model, plan.args, kwargs=plan.kwargs or None, dynamo=True,
                opset_version=plan.opset, dynamic_shapes=plan.dynamic_shapes,
                report=plan.report is not None, artifacts_dir=tmpdir / "artifacts", verbose=False)
    except InspectError:
        raise
    except Exception as exc:  # noqa: BLE001 - every exporter failure becomes one message
        saved = _keep_report(tmpdir / "artifacts", plan) if plan.report else None
        what = explain_failure(exc, plan.model, plan.opset)
        if saved:
            hint = f"the exporter's report: {saved}"
        elif not plan.legacy:
            hint = ("rerun with --exporter-report for the exporter's own report beside the "
                    "output, or TORCHINSPECT_DEBUG=1 for its traceback")
        else:
            hint = "rerun with TORCHINSPECT_DEBUG=1 for the exporter's traceback"
        if plan.marked and "dynamic dims" in what:
            hint += "; --static exports with fixed shapes"
        elif not plan.legacy:
            hint += "; --legacy tries the TorchScript exporter"
        raise InspectError(f"{plan.case.name}: ONNX export failed: {what}", hint=hint) from exc


def _export_legacy(plan: ExportPlan, path: Path, n_outputs: int) -> None:
    import torch

    leaves = export_leaves((plan.args, plan.kwargs))
    names = _checked(plan.input_names, len(leaves), "--input-names", "tensor inputs") \
        or default_input_names(plan)
    outputs = _checked(plan.output_names, n_outputs, "--output-names", "outputs") \
        or default_output_names(n_outputs)
    # the dynamic axes by ONNX input name (marked holds forward parameter names)
    bound = bound_arguments(plan.model, plan.args, plan.kwargs) or {}
    position = {id(t): i for i, t in enumerate(leaves)}
    axes: dict[str, dict[int, str]] = {}
    for pname, dims in plan.marked.items():
        tensors = export_leaves(bound.get(pname))
        i = position.get(id(tensors[0])) if len(tensors) == 1 else None
        if i is not None and i < len(names):
            axes[names[i]] = {d: ("batch" if d == 0 else f"{pname}_{d}") for d in dims}
    if axes:
        axes.update({o: {0: "batch"} for o in outputs})
    torch.onnx.export(plan.model, plan.args, str(path), kwargs=plan.kwargs or None, dynamo=False,
                      opset_version=plan.opset, input_names=names or None, output_names=outputs,
                      dynamic_axes=axes or None)


def _checked(names: list[str] | None, count: int, option: str, what: str) -> list[str] | None:
    if names is not None and len(names) != count:
        raise InspectError(f"{option}: {len(names)} name(s) for the model's {count} {what}",
                           hint=f"give {count} comma-separated names, in order")
    return names


def _rename(plan: ExportPlan, program: Any) -> None:
    """Name the graph's inputs and outputs: the user's names, else the forward's parameter
    names and ``output``/``output_N`` (the exporter calls an output ``linear_2``)."""
    graph = program.model.graph
    inputs, outputs = list(graph.inputs), list(graph.outputs)
    new_in = _checked(plan.input_names, len(inputs), "--input-names", "inputs in the graph") \
        or default_input_names(plan)
    new_out = _checked(plan.output_names, len(outputs), "--output-names", "outputs") \
        or default_output_names(len(outputs))
    distinct = len({id(v) for v in outputs}) == len(outputs) and \
        not {id(v) for v in outputs} & {id(v) for v in inputs}
    if not distinct and plan.output_names is not None:
        raise InspectError("--output-names: an output of this model is also an input or "
                           "another output, so the outputs cannot be named apart",
                           hint="leave out --output-names")
    taken = {v.name for v in graph.initializers.values()}
    for node in graph:
        taken |= {v.name for v in node.outputs}
    pairs = list(zip(inputs, new_in, strict=False)) if len(new_in) == len(inputs) else []
    if distinct:
        pairs += list(zip(outputs, new_out, strict=True))
    clash = sorted({n for v, n in pairs if n in taken and n != v.name} - {v.name for v, _ in pairs})
    if clash:
        if plan.input_names is not None or plan.output_names is not None:
            raise InspectError(f"--input-names/--output-names: {', '.join(clash)} is already "
                               "the name of a value inside the graph", hint="choose other names")
        return  # the exporter's own names stay
    for value, name in pairs:
        value.name = name


def _keep_report(artifacts: Path, plan: ExportPlan) -> Path | None:
    """Move the exporter's markdown report beside the output; None when it wrote none."""
    if plan.report is None or not artifacts.is_dir():
        return None
    reports = sorted(artifacts.glob("*.md"))
    if not reports:
        return None
    atomic_write_bytes(plan.report, reports[-1].read_bytes(), force=plan.force,
                       protect=plan.protect)
    for r in reports:
        r.unlink()
    return plan.report


def _save(plan: ExportPlan, program: Any, tmp_file: Path) -> Path | None:
    """Save (dynamo) or move (legacy, already written) into place atomically; data file first."""
    target, data = plan.target, plan.data_file
    with atomic_path(target, force=plan.force, protect=plan.protect) as tmp:
        if program is not None:
            with quiet_exporters():
                program.save(tmp, external_data=plan.external_data)
        else:
            shutil.copyfile(tmp_file, tmp)
            for f in sorted(tmp_file.parent.iterdir()):  # legacy external data (> 2 GB)
                if f.name != tmp_file.name and f.is_file():
                    dest = check_target(target.parent / f.name, force=plan.force,
                                        protect=plan.protect)
                    os.replace(f, dest)
        written = tmp.parent / data.name
        if written.exists():
            os.replace(written, check_target(data, force=plan.force, protect=plan.protect))
            return data
    if os.path.lexists(data) and program is not None:  # an old data file must not pose as
        check_target(data, force=plan.force, protect=plan.protect)  # this one's: --force only
        data.unlink()
    return None
