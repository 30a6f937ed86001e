"""Roofline arithmetic: one op's time on one GPU from its FLOPs, bytes and an efficiency.

Roofline (Williams, Waterman, Patterson 2009): an op needs at least
``max(flops / peak, bytes / bandwidth)``; which term is larger says whether it is compute-
or memory-bound. Real kernels reach a fraction of that bound that depends on the kind of op
and its size (small kernels are dominated by launch and tail effects; tile and wave
quantisation cost matmuls and convolutions). That fraction is read from the GPU's measured
efficiency curve for the op's class and dtype (``eff`` against log10 of the roofline time,
linear between measured points, flat beyond them). An op with no curve is priced at the
roofline plus one kernel's fixed cost and flagged as not calibrated.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from torchinspect.bench.predict.gpus import Gpu, GpuTable, load_table
from torchinspect.bench.predict.ops import OpRecord

DEFAULT_KERNEL_US = 2.5  # fixed cost of one kernel when no table measured it
TENSOR_KINDS = ("matmul", "conv", "attention")


def math_for(kind: str, dtype: str, gpu: Gpu, tf32: bool | None) -> str:
    """Which peak an op of ``kind`` runs at: tensor cores, TF32, or CUDA-core fp32.

    PyTorch's defaults: fp32 convolutions use TF32 (``cudnn.allow_tf32``), fp32 matmuls
    do not (``--tf32`` turns them on, ``--no-tf32`` turns convolutions off).
    """
    if kind not in TENSOR_KINDS:
        return "fp32"
    if dtype in ("bf16", "fp16"):
        return "tensor16" if (dtype == "fp16" or gpu.spec.bf16) else "fp32"
    if kind == "conv":
        return "fp32" if tf32 is False else "tf32"
    if kind == "matmul" and tf32:
        return "tf32"
    return "fp32"


@dataclass(frozen=True)
class OpTime:
    """One op priced: its roofline terms (µs), the predicted time, and how."""

    compute_us: float
    memory_us: float
    us: float
    calibrated: bool

    @property
    def roofline_us(self) -> float:
        return max(self.compute_us, self.memory_us)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_us >= self.memory_us else "memory"


def interpolate(curve: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear ``eff`` at ``x`` (points sorted by x; flat beyond both ends)."""
    xs = [p[0] for p in curve]
    i = bisect.bisect_left(xs, x)
    if i <= 0:
        return curve[0][1]
    if i >= len(curve):
        return curve[-1][1]
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1


def curve_for(table: GpuTable | None, sub: str, kind: str,
              dtype: str) -> list[tuple[float, float]] | None:
    if table is None:
        return None
    dtypes = (dtype, "bf16") if dtype == "fp16" else (dtype,)
    for d in dtypes:
        for key in (f"{sub}/{d}", f"{kind}/{d}"):
            curve = table.curves.get(key)
            if curve:
                return curve
    return None


def efficiency_table(gpu: Gpu) -> GpuTable | None:
    """The curves used for ``gpu``: its own, else the H100's (shape, not rates)."""
    return gpu.table if gpu.table is not None else load_table("h100")


def price(op: OpRecord, gpu: Gpu, dtype: str, tf32: bool | None = None,
          table: GpuTable | None = None) -> OpTime:
    """Predicted time of one op (µs) on ``gpu`` in ``dtype``."""
    peak = gpu.spec.peak(math_for(op.kind, dtype, gpu, tf32))
    compute = op.flops / peak * 1e6
    memory = op.bytes / gpu.spec.bandwidth * 1e6
    roof = max(compute, memory)
    if op.kernels == 0:  # fused into a neighbour: its bytes only, no kernel of its own
        return OpTime(compute, memory, roof, True)
    if op.sub == "matmul.rnn":  # cuDNN's persistent recurrent kernels: roofline + launch gap
        fixed = table.kernel_us if table is not None else DEFAULT_KERNEL_US
        return OpTime(compute, memory, 2 * roof + fixed, table is not None)
    curve = curve_for(table, op.sub, op.kind, dtype) if op.kind != "other" else None
    if curve is None:
        fixed = table.kernel_us if table is not None else DEFAULT_KERNEL_US
        return OpTime(compute, memory, roof + fixed * op.kernels, False)
    eff = interpolate(curve, math.log10(max(roof, 1e-4)))
    scale = table.scales.get(group(op.kind), 1.0) if table is not None else 1.0
    return OpTime(compute, memory, scale * roof / max(eff, 1e-6), True)


GROUPS = ("conv", "matmul", "attention", "norm", "memory")


def group(kind: str) -> str:
    """The op group an in-model correction applies to (memory: eltwise, copies, ...)."""
    return kind if kind in GROUPS else "memory"
