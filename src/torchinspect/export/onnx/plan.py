"""The plan of one export: checks made before any work (output files, packages, memory),
the model and inputs on their device, the dynamic shapes, and the graph's input and output
names. :class:`ExportPlan` is the state that travels through the phases of
:func:`~torchinspect.export.onnx.export_onnx`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect import device as devices
from torchinspect.arguments import as_list
from torchinspect.errors import InspectError
from torchinspect.io.atomic import check_target


def export_leaves(value: Any) -> list[Any]:
    """The tensors in the order torch.export flattens them (pytree leaves only), so input and
    output names line up with the ONNX graph; shapes.tensor_leaves also opens dataclasses,
    which the exporter does not."""
    import torch

    from torchinspect.privtorch import tree_leaves

    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor)]


def bound_arguments(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Forward parameter name -> value, or None when the signature cannot be bound."""
    try:
        sig = inspect.signature(model.forward)
        b = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    return dict(b.arguments)


def specialized_dims(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 marked: dict[str, list[int]], extra: list[tuple[str, int]],
                 inputs: list[Any]) -> tuple[dict[str, list[int]], list[tuple[str, int, int]]]:
    """``marked`` without the batch dims the written file keeps static, and those dims as
    (input, dim, size). ONNX inputs follow the order of the tensor leaves."""
    if not marked:
        return marked, []
    leaves = export_leaves((args, kwargs))
    if len(inputs) != len(leaves):
        return marked, []
    position = {id(t): i for i, t in enumerate(leaves)}
    bound = bound_arguments(model, args, kwargs) or {}
    kept: dict[str, list[int]] = {}
    fixed: list[tuple[str, int, int]] = []
    for pname, dims in marked.items():
        tensors = export_leaves(bound.get(pname))
        i = position.get(id(tensors[0])) if tensors else None
        onnx_dims = inputs[i].shape if i is not None else None
        asked = {d % tensors[0].dim() for n, d in extra if n == pname} if tensors else set()
        for d in dims:
            # only the batch dims marked here: a --dynamic dim the file did not keep dynamic
            # stays a verification failure (the user asked for it)
            if d not in asked and onnx_dims is not None and d < len(onnx_dims) \
                    and isinstance(onnx_dims[d], int):
                fixed.append((pname, d, onnx_dims[d]))
            else:
                kept.setdefault(pname, []).append(d)
    return kept, fixed


def parse_dynamic(specs: Sequence[str]) -> list[tuple[str, int]]:
    """``NAME:DIM`` texts -> (input name, dim index)."""
    out = []
    for s in as_list(specs):  # one "NAME:DIM" text is one spec
        name, _, dim = s.rpartition(":")
        if not name or not dim.lstrip("-").isdigit():
            raise InspectError(f"--dynamic {s!r} is not NAME:DIM",
                               hint="e.g. --dynamic input_ids:1 makes dim 1 of input_ids dynamic")
        out.append((name, int(dim)))
    return out


def dynamic_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, static: bool,
                    extra: list[tuple[str, int]]) -> tuple[Any, dict[str, list[int]]]:
    """torch.export dynamic_shapes (by forward parameter name) and the dims made dynamic."""
    import torch

    from torchinspect.privtorch import tree_map

    bound = bound_arguments(model, args, kwargs)
    leaves = export_leaves((args, kwargs))
    batch = int(leaves[0].shape[0]) if leaves and leaves[0].dim() else None
    marked: dict[str, list[int]] = {}
    if bound is None:
        if extra:
            raise InspectError("--dynamic needs input names, but the model's forward signature "
                               "cannot be read", hint="leave out --dynamic")
        return None, marked
    known = {n for n, v in bound.items() if isinstance(v, torch.Tensor)}
    for name, _ in extra:
        if name not in known:
            raise InspectError(f"--dynamic {name}: no tensor input of that name",
                               hint=f"tensor inputs: {', '.join(sorted(known)) or 'none'}")
    bdim = torch.export.Dim("batch", min=1)
    dims: dict[str, Any] = {}

    def spec_for(pname: str, t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return None
        d: dict[int, Any] = {}
        if not static and batch is not None and t.dim() and int(t.shape[0]) == batch:
            d[0] = bdim
        for name, dim in extra:
            if name == pname:
                if not -t.dim() <= dim < t.dim():
                    raise InspectError(f"--dynamic {name}:{dim}: {name} has {t.dim()} dims",
                                       hint=f"use a dim between 0 and {t.dim() - 1}")
                dim %= t.dim()
                key = f"{name}_{dim}"
                dims.setdefault(key, torch.export.Dim(key))
                d[dim] = dims[key]
        if d:
            marked.setdefault(pname, []).extend(sorted(d))
        return d or None

    spec = {}
    for pname, value in bound.items():
        if isinstance(value, torch.Tensor):
            spec[pname] = spec_for(pname, value)
        else:
            spec[pname] = tree_map(functools.partial(spec_for, pname), value)
    if not marked:
        return None, marked
    return spec, marked



@dataclass
class ExportPlan:
    """Everything the phases of one export share: what to write, from what, and how."""

    case: Any
    target: Path
    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    opset: int | None
    legacy: bool
    static: bool
    pt2_fixed: bool  # a .pt2 program: shapes fixed by its own guards
    extra: list[tuple[str, int]]  # --dynamic NAME:DIM
    verify: bool
    atol: float
    rtol: float
    force: bool
    protect: tuple[str, ...]
    external_data: bool | None
    report: Path | None  # where the exporter's markdown report goes (None: not asked)
    input_names: list[str] | None  # None: the forward's parameter names
    output_names: list[str] | None  # None: output, or output_0 .. output_N
    dynamic_shapes: Any = None
    marked: dict[str, list[int]] = field(default_factory=dict)  # input -> dims made dynamic
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def data_file(self) -> Path:
        """Where external data goes: ``FILE.onnx.data`` beside the file."""
        return self.target.with_name(self.target.name + ".data")

    @property
    def exporter(self) -> str:
        return "legacy" if self.legacy else "dynamo"


def report_file(target: Path) -> Path:
    """``X.export-report.md`` beside ``X.onnx``."""
    return target.with_name(target.stem + ".export-report.md")


def check_outputs(target: Path, *, force: bool, protect: Sequence[str], report: bool) -> None:
    """Every file an export may write (the .onnx, its ``.onnx.data``, the report) follows one
    rule, checked before any work: never an input, an existing one only with ``force``."""
    if target.suffix.lower() != ".onnx":
        raise InspectError(f"{target}: the output should end in .onnx",
                           hint="e.g. -o model.onnx")
    check_target(target, force=force, protect=protect)
    data = target.with_name(target.name + ".data")
    if os.path.lexists(data):  # a stale one would pose as this file's: replaced or removed
        check_target(data, force=force, protect=protect)
    if report:
        check_target(report_file(target), force=force, protect=protect)


def _need_packages(verify: bool | None, legacy: bool) -> bool:
    """Whether to verify; refuses when a package the export needs is missing."""
    if verify is None or verify:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            if verify:
                raise InspectError("--verify needs onnxruntime",
                                   hint="pip install onnxruntime (or pass --no-verify)") from None
            verify = False
        else:
            verify = True
    try:
        import onnx  # noqa: F401
        if not legacy:
            import onnxscript  # noqa: F401
    except ImportError as exc:
        raise InspectError(f"ONNX export needs the {exc.name} package",
                           hint="pip install onnx onnxscript onnxruntime") from None
    return verify


def plan_export(case: Any, path: str | os.PathLike[str], *, opset: int | None, legacy: bool,
                static: bool, dynamic: Sequence[str], verify: bool | None, atol: float,
                rtol: float, force: bool, external_data: bool | None, device: str,
                protect: Sequence[str], report: bool, input_names: Sequence[str] | None,
                output_names: Sequence[str] | None) -> ExportPlan:
    """Check everything that can fail before the export, then build the model on its device."""
    target = Path(path)
    protect = tuple(p for p in protect if p)
    check_outputs(target, force=force, protect=protect, report=report)
    verify = _need_packages(verify, legacy)
    extra = parse_dynamic(dynamic)
    dev = devices.real_device(devices.parse_device(device))
    if case.on_meta:  # refuse up front, with the size, before building anything
        devices.ensure_fits(case.name, devices.weight_bytes(case.model), dev,
                            hint="ONNX export needs the weights in memory: use a machine with "
                            "more memory, or --device cuda when the GPU has room")
    model = case.real_model(dev)
    args, kwargs = case.inputs_on(dev)
    # a torch.export program (.pt2) keeps the shape guards it was exported with: a batch
    # dimension made dynamic here would only fail at verification
    pt2_fixed = str(getattr(case, "kind", "")) == "export" and not static and not extra
    return ExportPlan(
        case=case, target=target, model=model, args=args, kwargs=kwargs, opset=opset,
        legacy=legacy, static=static or pt2_fixed, pt2_fixed=pt2_fixed, extra=extra,
        verify=verify, atol=atol, rtol=rtol, force=force, protect=protect,
        external_data=external_data, report=report_file(target) if report else None,
        input_names=_names(input_names, "--input-names"),
        output_names=_names(output_names, "--output-names"), notes=list(case.notes))


def _names(names: Sequence[str] | None, option: str) -> list[str] | None:
    """``a,b`` or repeated options -> a list of unique, non-empty names."""
    if names is None:
        return None
    out = [n.strip() for item in as_list(names) for n in str(item).split(",")]
    if not out or any(not n for n in out):
        raise InspectError(f"{option} {','.join(as_list(names))!r}: an empty name",
                           hint=f"e.g. {option} a,b")
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise InspectError(f"{option}: {', '.join(dup)} named twice", hint="give each one name")
    return out


def default_input_names(plan: ExportPlan) -> list[str]:
    """One name per tensor input, in the order of the ONNX graph's inputs: the forward's
    parameter name (``x``), numbered when a parameter holds several tensors (``xs_0``)."""
    bound = bound_arguments(plan.model, plan.args, plan.kwargs)
    if bound is None:
        return []
    by_id: dict[int, str] = {}
    for pname, value in bound.items():
        tensors = export_leaves(value)
        for i, t in enumerate(tensors):
            by_id.setdefault(id(t), pname if len(tensors) == 1 and t is value else f"{pname}_{i}")
    names = [by_id.get(id(t), "") for t in export_leaves((plan.args, plan.kwargs))]
    return names if all(names) and len(set(names)) == len(names) else []


def default_output_names(count: int) -> list[str]:
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
