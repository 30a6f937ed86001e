"""``predict_latency``: a model's forward time on a named GPU, from a CPU.

Per batch size and dtype: the ops of one meta forward (``ops.record_ops``), each priced by
``roofline.price``; their sum is the time of a CUDA-graph replay (each op's measured time
includes the gap to the next kernel; the split shown is kernels x the measured per-kernel
gap). The eager estimate sets that GPU time against the host's (``eager.HostModel``:
dispatched ops and module calls x this CPU's measured cost x the host factor, the same for
every GPU); the larger one binds. Nothing here needs a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.dtypes import RUN, short_name
from torchinspect.errors import InspectError
from torchinspect.latency.calibrated import LatencyGpu, latency_gpu
from torchinspect.latency.eager import HostModel, host_model
from torchinspect.latency.host import HostCost
from torchinspect.latency.ops import OpTrace, record_ops
from torchinspect.latency.roofline import efficiency_table, price_ops

FUNCTIONAL = "(functional)"


@dataclass
class LayerRow:
    """The ops run inside one layer type (innermost module), summed."""

    layer: str
    ops: int = 0
    kernels: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    us: float = 0.0
    compute_us: float = 0.0
    memory_us: float = 0.0

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us >= self.memory_us else "memory"

    def add(self, op: Any, t: Any) -> None:
        """One priced op (``OpRecord`` and its ``OpTime``) into the sums."""
        self.ops += 1
        self.kernels += round(t.kernels)
        self.flops += op.flops
        self.bytes += op.bytes
        self.us += t.us
        self.compute_us += t.compute_us
        self.memory_us += t.memory_us

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bound": self.bound, "intensity": self.intensity}


@dataclass
class RooflinePoint:
    """One module call's leaf ops: arithmetic intensity against the rate it achieves."""

    module: str
    layer: str
    flops: float
    bytes: float
    us: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def rate(self) -> float:
        return self.flops / (self.us * 1e-6) if self.us else 0.0


@dataclass
class BatchPrediction:
    """One (dtype, batch): graph-replay GPU time, eager estimate, and where it goes."""

    dtype: str
    batch: int
    gpu_ms: float  # CUDA-graph replay: kernels + gaps
    gap_ms: float
    kernels: int
    host_ms: float
    eager_ms: float
    binds: str  # "host" | "gpu"
    flops: float
    bytes: float
    layers: list[LayerRow] = field(default_factory=list)
    uncalibrated_ops: dict[str, int] = field(default_factory=dict)
    uncalibrated_ms: float = 0.0
    points: list[RooflinePoint] = field(default_factory=list)
    dispatched: int = 0
    module_calls: int = 0
    module_us: dict[str, float] = field(default_factory=dict)  # own µs per module name

    @property
    def kernel_ms(self) -> float:
        return self.gpu_ms - self.gap_ms

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "batch": self.batch, "gpu_ms": self.gpu_ms,
                "kernel_ms": self.kernel_ms, "gap_ms": self.gap_ms, "kernels": self.kernels,
                "host_ms": self.host_ms, "eager_ms": self.eager_ms, "binds": self.binds,
                "flops": self.flops, "bytes": self.bytes,
                "dispatched_ops": self.dispatched, "module_calls": self.module_calls,
                "not_calibrated": {"ops": dict(self.uncalibrated_ops),
                                   "ms": self.uncalibrated_ms},
                "layers": [r.to_dict() for r in self.layers]}


@dataclass
class Prediction:
    """``inspect bench --predict``: predicted, never measured; says from what."""

    model: str
    inputs: str
    gpu: str
    gpu_label: str
    calibrated: bool
    source: str
    validation: dict[str, Any]
    host: HostCost
    host_factor: float
    tf32: bool | None
    results: list[BatchPrediction] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def find(self, dtype: str, batch: int | None) -> BatchPrediction | None:
        return next((r for r in self.results if r.dtype == dtype
                     and (batch is None or r.batch == batch)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"predicted": True, "model": self.model, "inputs": self.inputs, "gpu": self.gpu,
                "gpu_label": self.gpu_label, "calibrated": self.calibrated,
                "table": self.source, "validation": dict(self.validation),
                "host": self.host.to_dict(), "host_factor": self.host_factor,
                "tf32": self.tf32, "results": [r.to_dict() for r in self.results],
                "notes": list(self.notes)}


def price_trace(trace: OpTrace, gpu: LatencyGpu, dtype: str, batch: int, host: HostModel,
                tf32: bool | None = None) -> BatchPrediction:
    """Sum one forward's ops into a BatchPrediction (layers, totals, eager estimate)."""
    table = efficiency_table(gpu)
    layers: dict[str, LayerRow] = {}
    points: dict[str, RooflinePoint] = {}
    uncal: dict[str, int] = {}
    own: dict[str, float] = {}
    uncal_us = total_us = flops = nbytes = kernel_sum = 0.0
    for op, t in zip(trace.ops, price_ops(trace.ops, gpu, dtype, tf32, table), strict=True):
        total_us += t.us
        kernel_sum += t.kernels
        flops += op.flops
        nbytes += op.bytes
        layers.setdefault(op.layer or FUNCTIONAL, LayerRow(op.layer or FUNCTIONAL)).add(op, t)
        point = points.setdefault(op.module, RooflinePoint(op.module, op.layer or FUNCTIONAL,
                                                           0.0, 0.0, 0.0))
        point.flops += op.flops
        point.bytes += op.bytes
        point.us += t.us
        own[op.module] = own.get(op.module, 0.0) + t.us
        if not t.calibrated:
            uncal[op.name] = uncal.get(op.name, 0) + 1
            uncal_us += t.us
    kernel_gap = table.gap_us
    kernels = round(kernel_sum)  # measured kernels per op class where the table has them
    gpu_ms = total_us / 1e3
    host_ms = host.ms(trace.dispatched, trace.module_calls, kernel_sum)
    return BatchPrediction(
        dtype=dtype, batch=batch, gpu_ms=gpu_ms, gap_ms=kernels * kernel_gap / 1e3,
        kernels=kernels, host_ms=host_ms, eager_ms=max(gpu_ms, host_ms),
        binds="host" if host_ms > gpu_ms else "gpu", flops=flops, bytes=nbytes,
        layers=sorted(layers.values(), key=lambda r: -r.us), uncalibrated_ops=uncal,
        uncalibrated_ms=uncal_us / 1e3,
        points=[p for p in points.values() if p.flops > 0 and p.bytes > 0],
        dispatched=trace.dispatched, module_calls=trace.module_calls, module_us=own)


def predict_latency(case: Any, gpu: str, *, dtypes: Sequence[str] = ("fp32",),
                    batches: Sequence[int] | None = None, tf32: bool | None = None,
                    host: HostCost | None = None) -> Prediction:
    """Predict ``case`` (a ModelCase, or a spec/module for ``make_case``) on GPU ``gpu``
    (a name of the GPU catalogue) in each of ``dtypes`` (fp32, fp16, bf16) at each batch."""
    from torchinspect.inputs import ExampleInputs, rebatch
    from torchinspect.sources.case import make_case

    target = latency_gpu(gpu)
    for dtype in dtypes:
        if dtype not in RUN:
            raise InspectError(f"--dtype {dtype!r}: the latency is predicted in "
                               f"{', '.join(RUN)}", hint="e.g. --dtype bf16")
    case = make_case(case, device="meta")
    example = case.require_example()
    if batches and not isinstance(example, ExampleInputs):
        raise InspectError(f"{case.name}: --batch needs inputs given as shapes",
                           hint="pass --input specs (e.g. --input 3,224,224), or leave out --batch")
    model = host_model(host)
    pred = Prediction(model=case.name, inputs=case.describe_inputs(), gpu=target.spec.name,
                      gpu_label=target.spec.label, calibrated=target.calibrated,
                      source=target.source,
                      validation=dict(target.table.validation) if target.table else {},
                      host=model.cost, host_factor=model.factor, tf32=tf32)
    sizes: Sequence[int | None] = list(batches) if batches else [None]
    for b in sizes:
        ex = rebatch(example, b) if b is not None else example
        batch = b if b is not None else _batch_of(ex)
        for dtype in dtypes:
            trace = record_ops(case.model, ex, dtype=dtype)
            pred.results.append(price_trace(trace, target, dtype, batch, model, tf32))
    if model.cost.note:  # the user's cache refused or not saved (torchinspect.cache)
        pred.notes.append(model.cost.note)
    return pred


def _batch_of(example: Any) -> int:
    """The leading dimension of the example's first tensor (its batch), else 1."""
    specs = example.specs() if hasattr(example, "specs") else []
    return int(specs[0].shape[0]) if specs and specs[0].shape else 1


def module_times(case: Any, gpu: str, *, dtype: str | None = None,
                 tf32: bool | None = None) -> tuple[dict[str, float], Prediction]:
    """Predicted ms per module name (inclusive: its ops and those of the modules inside,
    summed over its calls; "" is the whole model) at the case's own input, for the
    summary's ``time`` column, from one prediction. ``dtype``: the model's own float dtype
    (`model_dtype`) unless given."""
    from torchinspect.sources.case import make_case

    case = make_case(case, device="meta")
    pred = predict_latency(case, gpu, dtypes=(dtype or model_dtype(case.model),), tf32=tf32)
    own = pred.results[0].module_us
    out: dict[str, float] = {"": sum(own.values()) / 1e3}
    for name, us in own.items():
        parts = name.split(".") if name else []
        for i in range(1, len(parts) + 1):
            key = ".".join(parts[:i])
            out[key] = out.get(key, 0.0) + us / 1e3
    return out, pred


def model_dtype(model: Any) -> str:
    """The dtype a model's latency is predicted in: its first floating parameter's (fp32,
    fp16, bf16); fp32 for a model without one, or in a dtype the tables do not price."""
    for p in model.parameters():
        if p.is_floating_point():
            short = short_name(str(p.dtype).removeprefix("torch."))
            return short if short in RUN else "fp32"
    return "fp32"
