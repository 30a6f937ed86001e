"""The written file checked (``onnx.checker`` with ``full_check``) and described: inputs,
outputs, op counts, initializers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.export.onnx.result import ExportResult, IOInfo


def check_onnx_file(target: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(target), full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker raises several types
        raise InspectError(f"{target}: onnx.checker rejected the exported file: {first_line(exc)}",
                           hint="try another --opset, or --legacy",
                           status=ExitStatus.CHECK_FAILED) from exc


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


def describe_export(name: str, target: Path, data_path: Path | None, exporter: str, atol: float,
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

