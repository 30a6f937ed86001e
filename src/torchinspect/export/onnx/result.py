"""What ``export_onnx`` returns: the file, its inputs and
outputs, and how the verification went."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    max_rel: float  # |diff| / max(|PyTorch value|, atol): may pass rtol where atol covers it
    ok: bool
    tolerance_used: float = 0.0  # worst |diff| / (atol + rtol x |PyTorch value|); ok <=> <= 1

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
    weights: dict[str, Any] | None = None  # WeightsOrigin.to_dict(): exported and verified

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
