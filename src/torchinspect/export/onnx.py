"""ONNX export that is checked and verified, not hoped for.

:func:`export_onnx` exports with ``torch.onnx.export(dynamo=True)`` (the torch.export-based
exporter; ``legacy=True`` for the TorchScript one), batch dimension dynamic unless
``static``, saves atomically (external data beside the file for models over 2 GB), runs
``onnx.checker.check_model(full_check=True)`` and, with ``verify``, runs the file in
onnxruntime at batch 1 and 3 and compares every output with PyTorch on the same inputs.

A failed export raises :class:`InspectError` naming the op or construct that failed and the
module it sits in, and points at the exporter's own markdown report saved beside the output.
The core returns an :class:`ExportResult` and never prints.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.arguments import as_list
from torchinspect.errors import InspectError, first_line
from torchinspect.guard import training_mode
from torchinspect.io.atomic import check_target

TWO_GB = 2 * 1024**3
VERIFY_BATCHES = (1, 3)


@dataclass
class IOInfo:
    """One graph input or output: name, element type and dims (a str for a dynamic dim)."""

    name: str
    dtype: str
    shape: list[int | str]

    @property
    def dynamic(self) -> list[str]:
        return [d for d in self.shape if isinstance(d, str)]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "dynamic": self.dynamic}


@dataclass
class OutputDiff:
    name: str
    shape: list[int]
    max_abs: float
    max_rel: float
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyRun:
    """One onnxruntime run against PyTorch on the same inputs."""

    batch: int
    inputs: str
    outputs: list[OutputDiff] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(o.ok for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "inputs": self.inputs, "ok": self.ok, "error": self.error,
                "outputs": [o.to_dict() for o in self.outputs]}


@dataclass
class ExportResult:
    """What was written and how it checked out."""

    model: str
    path: str
    bytes: int
    data_path: str | None
    data_bytes: int
    exporter: str  # dynamo | legacy
    opset: int | None
    inputs: list[IOInfo]
    outputs: list[IOInfo]
    ops: dict[str, int]  # ONNX op type -> node count (top-level graph)
    initializers: int
    initializer_bytes: int
    checked: bool
    verify: list[VerifyRun] | None  # None: not run
    atol: float
    rtol: float
    seconds: dict[str, float]
    report_path: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return sum(self.ops.values())

    @property
    def verified(self) -> bool | None:
        if self.verify is None:
            return None
        return all(r.ok for r in self.verify)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["inputs"] = [i.to_dict() for i in self.inputs]
        d["outputs"] = [o.to_dict() for o in self.outputs]
        d["verify"] = None if self.verify is None else [r.to_dict() for r in self.verify]
        d["verified"] = self.verified
        d["nodes"] = self.nodes
        return d


# ------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters log graphs and progress; keep them off the user's terminal."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), _native_stdout_to_stderr():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _native_stdout_to_stderr() -> Iterator[None]:
    """C++ code (the TorchScript exporter's "Torch IR graph at exception" dump) writes to file
    descriptor 1, past Python's sys.stdout: send it to stderr so stdout stays the report
    (``--format json`` must stay parseable)."""
    import ctypes
    import sys

    try:
        sys.__stdout__.flush() if sys.__stdout__ else None
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (embedded, closed): nothing to protect
        yield
        return
    try:
        fflush = ctypes.CDLL(None).fflush
    except (OSError, AttributeError):  # no C library to flush (not POSIX)
        def fflush(_: None) -> int:
            return 0
    try:
        fflush(None)
        os.dup2(2, 1)
        yield
    finally:
        fflush(None)  # what C stdio buffered while redirected goes to stderr
        os.dup2(saved, 1)
        os.close(saved)


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    from torch.utils import _pytree as pytree

    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _bound(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Forward parameter name -> value, or None when the signature cannot be bound."""
    try:
        sig = inspect.signature(model.forward)
        b = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    return dict(b.arguments)


def _specialized(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 marked: dict[str, list[int]], extra: list[tuple[str, int]],
                 inputs: list[Any]) -> tuple[dict[str, list[int]], list[tuple[str, int, int]]]:
    """``marked`` without the batch dims the written file keeps static, and those dims as
    (input, dim, size). ONNX inputs follow the order of the tensor leaves."""
    if not marked:
        return marked, []
    leaves = _tensor_leaves((args, kwargs))
    if len(inputs) != len(leaves):
        return marked, []
    position = {id(t): i for i, t in enumerate(leaves)}
    bound = _bound(model, args, kwargs) or {}
    kept: dict[str, list[int]] = {}
    fixed: list[tuple[str, int, int]] = []
    for pname, dims in marked.items():
        tensors = _tensor_leaves(bound.get(pname))
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


def _dynamic_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, static: bool,
                    extra: list[tuple[str, int]]) -> tuple[Any, dict[str, list[int]]]:
    """torch.export dynamic_shapes (by forward parameter name) and the dims made dynamic."""
    import torch
    from torch.utils import _pytree as pytree

    bound = _bound(model, args, kwargs)
    leaves = _tensor_leaves((args, kwargs))
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
            spec[pname] = pytree.tree_map(lambda v, p=pname: spec_for(p, v), value)
    if not marked:
        return None, marked
    return spec, marked


# ------------------------------------------------------------------ failure messages


_OP_RE = re.compile(r"OpOverload\(op='([^']+)'")
_CALL_RE = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), '
                      r'in (\w+)\s*\n\s*(.+)')


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _module_of(chain: list[BaseException], names: dict[int, str]) -> str | None:
    """The innermost module of the model on the failing stack (or in the failing FX node)."""
    found: str | None = None
    for e in chain:
        tb = e.__traceback__
        while tb is not None:
            loc = tb.tb_frame.f_locals
            owner = loc.get("self")
            if owner is not None and id(owner) in names:
                found = names[id(owner)]
            node = loc.get("node")
            stack = getattr(node, "meta", {}).get("nn_module_stack") if node is not None else None
            if stack:
                path = list(stack.values())[-1][0]
                found = re.sub(r"^L\['self'\]\.?", "", str(path)).replace("._modules['", ".") \
                    .replace("']", "") or found
            tb = tb.tb_next
    return found


def explain_failure(exc: BaseException, model: Any, opset: int | None) -> str:
    """One line saying which op or construct made the export fail, and where."""
    names = {id(m): (n or "(model)") for n, m in model.named_modules(remove_duplicate=False)}
    chain = _chain(exc)
    where = _module_of(chain, names)
    mod = ""
    if where is not None:
        mtype = next((type(m).__name__ for n, m in model.named_modules() if (n or "(model)") == where), None)
        mod = f" in {where}" + (f" ({mtype})" if mtype else "")
    text = "\n".join(str(e) for e in chain)
    kinds = {type(e).__name__ for e in chain}
    call = _CALL_RE.search(text)
    at = f" at {Path(call.group(1)).name}:{call.group(2)}: {call.group(4).strip()}" if call else ""
    if "GuardOnDataDependentSymNode" in kinds or "data-dependent" in text or \
            "data dependent" in text:
        return f"data-dependent Python control flow{mod}{at} (a branch on a tensor's value)"
    op = _OP_RE.search(text)
    if "DispatchError" in kinds or "No ONNX function found" in text:
        opname = op.group(1) if op else "an op"
        return (f"unsupported op {opname}{mod or ' in the model' + chr(39) + 's own forward'}: "
                f"no ONNX translation at opset {opset if opset is not None else _default_opset()}")
    if "ConstraintViolation" in text or "Constraints violated" in text or \
            "specialized" in text.lower():
        return f"the dynamic dims conflict with the model{mod}{at}: {first_line(chain[-1])}"
    return f"{type(chain[-1]).__name__}{mod}{at}: {first_line(chain[-1])}"


def _default_opset() -> str:
    try:
        from torch.onnx._constants import ONNX_DEFAULT_OPSET
    except ImportError:  # pragma: no cover - private constant moved
        return "default"
    return str(ONNX_DEFAULT_OPSET)


# ------------------------------------------------------------------ export


def _export_dynamo(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, opset: int | None,
                   dynamic_shapes: Any, artifacts: Path) -> Any:
    import torch

    return torch.onnx.export(model, args, kwargs=kwargs or None, dynamo=True, opset_version=opset,
                             dynamic_shapes=dynamic_shapes, report=True, artifacts_dir=artifacts,
                             verbose=False)


def _export_legacy(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], path: Path, *,
                   opset: int | None, marked: dict[str, list[int]], n_outputs: int) -> None:
    import torch

    bound = _bound(model, args, kwargs) or {}
    names = [n for n, v in bound.items() if isinstance(v, torch.Tensor)]
    outputs = [f"output_{i}" for i in range(n_outputs)]
    axes: dict[str, dict[int, str]] = {n: {d: ("batch" if d == 0 else f"{n}_{d}") for d in dims}
                                       for n, dims in marked.items() if n in names}
    if axes:
        axes.update({o: {0: "batch"} for o in outputs})
    torch.onnx.export(model, args, str(path), kwargs=kwargs or None, dynamo=False,
                      opset_version=opset, input_names=names or None, output_names=outputs,
                      dynamic_axes=axes or None)


def export_onnx(case_or_model: Any, path: str | os.PathLike[str], inputs: Any = None, *,
                opset: int | None = None, legacy: bool = False, static: bool = False,
                dynamic: Sequence[str] = (), verify: bool | None = None, atol: float = 1e-4,
                rtol: float = 1e-3, force: bool = False, external_data: bool | None = None,
                device: str = "cpu", protect: Sequence[str] = ()) -> ExportResult:
    """Export to ONNX at ``path``, check it, and (``verify``) compare onnxruntime with PyTorch.

    ``verify=None`` verifies when onnxruntime is installed. ``external_data=None`` stores the
    weights in ``<file>.data`` only when they exceed 2 GB. Never overwrites ``path`` unless
    ``force``, nor any file in ``protect``.
    """
    from torchinspect import device as devices
    from torchinspect.sources.case import ModelCase, make_case

    case = case_or_model if isinstance(case_or_model, ModelCase) else make_case(case_or_model, inputs)
    target = Path(path)
    if target.suffix.lower() != ".onnx":
        raise InspectError(f"{target}: the output should end in .onnx",
                           hint="e.g. -o model.onnx")
    check_target(target, force=force, protect=protect)
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
    import torch

    dev = devices.real_device(devices.parse_device(device))
    if case.on_meta:  # refuse up front, with the size, before building anything
        devices.ensure_fits(case.name, devices.weight_bytes(case.model), dev,
                            hint="ONNX export needs the weights in memory: use a machine with "
                            "more memory, or --device cuda when the GPU has room")
    model = case.real_model(dev)
    args, kwargs = case.inputs_on(dev)
    extra = parse_dynamic(dynamic)
    # a torch.export program (.pt2) keeps the shape guards it was exported with: a batch
    # dimension made dynamic here would only fail at verification
    pt2_fixed = str(getattr(case, "kind", "")) == "export" and not static and not extra
    static = static or pt2_fixed
    seconds: dict[str, float] = {}
    notes: list[str] = list(case.notes)
    report_path = target.with_name(target.stem + ".export-report.md")
    from torchinspect.trace.engine import model_kept

    with model_kept(model), training_mode(model):  # attributes and buffers a forward sets are put back
        dyn, marked = _dynamic_shapes(model, args, kwargs, static=static, extra=extra)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=".torchinspect-export-",
                                         dir=target.parent if target.parent.is_dir() else None) as tmp:
            tmpdir = Path(tmp)
            try:
                with _quiet():
                    if legacy:
                        with torch.no_grad():
                            n_out = len(_tensor_leaves(model(*args, **kwargs)))
                        _export_legacy(model, args, kwargs, tmpdir / target.name, opset=opset,
                                       marked=marked, n_outputs=n_out)
                        program = None
                    else:
                        program = _export_dynamo(model, args, kwargs, opset=opset,
                                                 dynamic_shapes=dyn, artifacts=tmpdir / "artifacts")
            except Exception as exc:  # noqa: BLE001 - every exporter failure becomes one message
                saved = _keep_report(tmpdir / "artifacts", report_path, protect)
                what = explain_failure(exc, model, opset)
                hint = (f"the exporter's report: {saved}" if saved else
                        "rerun with TORCHINSPECT_DEBUG=1 for the exporter's traceback")
                if marked and "dynamic dims" in what:
                    hint += "; --static exports with fixed shapes"
                elif not legacy:
                    hint += "; --legacy tries the TorchScript exporter"
                raise InspectError(f"{case.name}: ONNX export failed: {what}", hint=hint) from exc
            seconds["export"] = time.perf_counter() - t0
            report = None if legacy else _keep_report(tmpdir / "artifacts", report_path, protect)
            t0 = time.perf_counter()
            data_path = _save(program, tmpdir / target.name, target, force=force, protect=protect,
                              external_data=external_data)
            seconds["save"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _check(target)
    seconds["check"] = time.perf_counter() - t0
    result = _describe(case.name, target, data_path, "legacy" if legacy else "dynamo", atol, rtol)
    # dims asked to be dynamic that the exporter kept fixed (the model's code specialized
    # them): the file takes only the example's size there, so verification keeps it too
    marked, fixed = _specialized(model, args, kwargs, marked, extra, result.inputs)
    for pname, dim, size in fixed:
        notes.append(f"{pname} dim {dim}: kept fixed at {size} by the exporter (the model's code "
                     "specializes it), so the file accepts only that size there")
    result.seconds = seconds
    result.report_path = str(report) if report else None
    if opset is not None and result.opset is not None and result.opset != opset:
        notes.append(f"--opset {opset}: the exporter wrote opset {result.opset} instead (the "
                     "version in the file's opset_import)")
    if pt2_fixed:
        notes.append("shapes fixed: a .pt2 program accepts only the shapes it was exported with "
                     "(re-export it with dynamic shapes, or pass --dynamic to try)")
    elif static:
        notes.append("shapes fixed (--static): the file accepts only the example's shapes")
    elif not marked and not fixed:
        notes.append("no input has a batch dimension to make dynamic; shapes are fixed")
    if verify:
        t0 = time.perf_counter()
        leaves = _tensor_leaves((args, kwargs))
        batch0 = int(leaves[0].shape[0]) if leaves and leaves[0].dim() else 1
        has_batch = any(0 in dims for dims in marked.values())
        sizes = list(VERIFY_BATCHES) if has_batch else [batch0]
        import onnxruntime as ort

        try:
            session = _session(target, ort)
        except Exception as exc:  # noqa: BLE001 - e.g. no CPU kernel for a bf16 Gemm
            shown = ", ".join(str(tuple(t.shape)) for t in leaves)
            result.verify = [VerifyRun(batch0, shown, error=(
                f"onnxruntime (CPU) cannot run the file: {first_line(exc)}; the file is "
                "written and passes the ONNX checker (--no-verify skips this step)"))]
            session = None
        if session is not None:
            with model_kept(model), training_mode(model):
                # the last run also moves every --dynamic dim (the first keeps the example's)
                result.verify = [_verify_run(model, session, args, kwargs, b, batch0, marked,
                                             extra if b == sizes[-1] else [], atol, rtol)
                                 for b in sizes]
        seconds["verify"] = time.perf_counter() - t0
    result.notes = notes
    return result


def _keep_report(artifacts: Path, dest: Path, protect: Sequence[str]) -> Path | None:
    """Move the exporter's markdown report beside the output; None when it wrote none."""
    if not artifacts.is_dir():
        return None
    reports = sorted(artifacts.glob("*.md"))
    if not reports:
        return None
    from torchinspect.io.atomic import atomic_write_bytes

    atomic_write_bytes(dest, reports[-1].read_bytes(), force=True,
                       protect=tuple(p for p in protect if p))
    for r in reports:
        r.unlink()
    return dest


def _save(program: Any, tmp_file: Path, target: Path, *, force: bool, protect: Sequence[str],
          external_data: bool | None) -> Path | None:
    """Save (dynamo) or move (legacy, already written) into place atomically; data file first."""
    from torchinspect.io.atomic import atomic_path

    data_name = target.name + ".data"
    with atomic_path(target, force=force, protect=tuple(p for p in protect if p)) as tmp:
        if program is not None:
            with _quiet():
                program.save(tmp, external_data=external_data)
        else:
            shutil.copyfile(tmp_file, tmp)
            for f in tmp_file.parent.iterdir():  # legacy external data (> 2 GB): its own files
                if f.name != tmp_file.name and f.is_file() and f.parent != tmp.parent:
                    os.replace(f, target.parent / f.name)
        data = tmp.parent / data_name
        if data.exists():
            os.replace(data, target.parent / data_name)
            return target.parent / data_name
    stale = target.parent / data_name
    if stale.exists() and program is not None:  # an old data file must not pose as this one's
        stale.unlink()
    return None


def _check(target: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(target), full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker raises several types
        raise InspectError(f"{target}: onnx.checker rejected the exported file: {first_line(exc)}",
                           hint="try another --opset, or --legacy", status=1) from exc


def _dtype_name(elem_type: int) -> str:
    import onnx

    return onnx.TensorProto.DataType.Name(elem_type).lower()


def _itemsize(elem_type: int) -> int:
    import onnx

    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):  # types numpy lacks: count by their bit width
        name = onnx.TensorProto.DataType.Name(elem_type).lower()
        bits = int("".join(ch for ch in name if ch.isdigit()) or 8)
        return max(1, bits // 8)


def _io(values: Any) -> list[IOInfo]:
    out = []
    for v in values:
        tt = v.type.tensor_type
        dims: list[int | str] = [d.dim_param if d.HasField("dim_param") else int(d.dim_value)
                                 for d in tt.shape.dim]
        out.append(IOInfo(v.name, _dtype_name(tt.elem_type), dims))
    return out


def _describe(name: str, target: Path, data_path: Path | None, exporter: str, atol: float,
              rtol: float) -> ExportResult:
    import onnx

    m = onnx.load(str(target), load_external_data=False)
    ops: dict[str, int] = {}
    for node in m.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        ops[key] = ops.get(key, 0) + 1
    init_bytes = 0
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        init_bytes += n * _itemsize(t.data_type)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    initializer_names = {t.name for t in m.graph.initializer}
    return ExportResult(
        model=name, path=str(target), bytes=target.stat().st_size,
        data_path=str(data_path) if data_path else None,
        data_bytes=data_path.stat().st_size if data_path else 0, exporter=exporter, opset=opset,
        inputs=_io([i for i in m.graph.input if i.name not in initializer_names]),
        outputs=_io(m.graph.output), ops=dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        initializers=len(m.graph.initializer), initializer_bytes=init_bytes, checked=True,
        verify=None, atol=atol, rtol=rtol, seconds={})


# ------------------------------------------------------------------ verification


def _resized(t: Any, shape: list[int], gen: Any) -> Any:
    """A tensor like ``t`` at ``shape``: new random values within t's range."""
    import torch

    if list(t.shape) == shape:
        return t
    if t.is_floating_point():  # drawn on the CPU generator, then put where t lives
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(t.device, t.dtype)
    if t.dtype == torch.bool:
        return (torch.zeros(shape, dtype=torch.bool) | bool(t.flatten()[:1].any())).to(t.device)
    lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int64).to(t.device, t.dtype)


def _inputs_at(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], batch: int, batch0: int,
               marked: dict[str, list[int]], extra: list[tuple[str, int]]) -> tuple[Any, Any]:
    import torch
    from torch.utils import _pytree as pytree

    if batch == batch0 and not extra:
        return args, kwargs
    gen = torch.Generator().manual_seed(batch)
    bound = _bound(model, args, kwargs) or {}
    by_id = {}
    for pname, value in bound.items():
        for t in _tensor_leaves(value):
            by_id[id(t)] = pname

    def resize(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        pname = by_id.get(id(v))
        dims = marked.get(pname, []) if pname else []
        shape = list(v.shape)
        if 0 in dims and shape and shape[0] == batch0:
            shape[0] = batch
        for name, d in extra:
            if name == pname:
                d %= v.dim()
                if d != 0:
                    shape[d] = shape[d] - 1 if shape[d] > 2 else shape[d] + 1
        return _resized(v, shape, gen)

    return pytree.tree_map(resize, (args, kwargs))


def _verify_run(model: Any, sess: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                batch: int, batch0: int, marked: dict[str, list[int]],
                extra: list[tuple[str, int]], atol: float, rtol: float) -> VerifyRun:
    import numpy as np
    import torch

    a, k = _inputs_at(model, args, kwargs, batch, batch0, marked, extra)
    leaves = _tensor_leaves((a, k))
    shown = ", ".join("(" + ", ".join(str(d) for d in t.shape) + ")" for t in leaves)
    run = VerifyRun(batch, shown)
    try:
        from torch.utils import _pytree as pytree

        # copies: a forward that edits its input in place must not change onnxruntime's feed
        ca, ck = pytree.tree_map_only(torch.Tensor, torch.clone, (tuple(a), dict(k)))
        with torch.no_grad():
            expected = [t.detach().cpu() for t in _tensor_leaves(model(*ca, **ck))]
    except Exception as exc:  # noqa: BLE001 - the model's own forward at the moved sizes
        run.error = (f"PyTorch itself fails at these sizes ({first_line(exc)}): a dimension "
                     "made dynamic is not free in this model; drop it from --dynamic or pass "
                     "--static")
        return run
    try:
        feeds_spec = sess.get_inputs()
        if len(feeds_spec) != len(leaves):
            run.error = (f"the ONNX file takes {len(feeds_spec)} inputs, the model "
                         f"{len(leaves)} tensors")
            return run
        feeds = {i.name: t.detach().cpu().numpy() for i, t in zip(feeds_spec, leaves, strict=True)}
        got = sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        run.error = f"onnxruntime: {first_line(exc)}"
        return run
    if len(got) != len(expected):
        run.error = f"onnxruntime returned {len(got)} outputs, PyTorch {len(expected)}"
        return run
    names = [o.name for o in sess.get_outputs()]
    for name, g, e in zip(names, got, expected, strict=True):
        ref = e.to(torch.float64).numpy() if e.is_floating_point() else e.numpy()
        out = np.asarray(g)
        if out.shape != ref.shape:
            run.error = f"{name}: shape {list(out.shape)} from onnxruntime, {list(ref.shape)} from PyTorch"
            return run
        o64, r64 = out.astype(np.float64), ref.astype(np.float64)
        # NaN where both give NaN, and the same infinity on both, agree (np.isclose's equal_nan)
        same = (np.isnan(o64) & np.isnan(r64)) | (np.isinf(o64) & (o64 == r64))
        diff = np.where(same, 0.0, np.abs(o64 - r64))
        scale = np.where(same, 0.0, np.abs(r64))
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float((diff / np.maximum(scale, atol)).max()) if diff.size else 0.0
        ok = bool(np.all(diff <= atol + rtol * scale)) if diff.size else True
        run.outputs.append(OutputDiff(name, list(ref.shape), max_abs, max_rel, ok))
    return run


def _session(target: Path, ort: Any) -> Any:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
