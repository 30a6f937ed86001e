"""Roofline arithmetic: one op's time on one GPU from its FLOPs, bytes and an efficiency.

Roofline (Williams, Waterman, Patterson 2009): an op needs at least
``max(flops / peak, bytes / bandwidth)``; which term is larger says whether it is compute-
or memory-bound. Real kernels reach a fraction of that bound that depends on the kind of op
and its size (small kernels are dominated by launch and tail effects; tile and wave
quantisation cost matmuls and convolutions). That fraction is read from the GPU's measured
efficiency curve for the op's class and dtype (``eff`` against log10 of the roofline time,
linear between measured points, flat beyond them). An op with no curve is priced at the
roofline plus one kernel's fixed cost and flagged as not calibrated.

Two measurements sit on top (table format 1 files without them price as before): an op
launches the kernels measured for its class at batch 1 (``kernels``: a bf16 convolution on
NCHW tensors is 3 to 5, layout transposes included; counted, not priced: a floor of that many
tiny kernels was tried on the development set and made it worse, see
``benchmarks/RESULTS-latency.md``); and the ops of one fast-path call (``OpRecord.fastpath``) cost their table prices summed times the factor measured
between PyTorch's fast path and those ops (``fastpath.encoder`` / ``fastpath.mha`` curves,
factor against log10 of the summed µs), in place of the in-model scales.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from torchinspect.gpus import CATALOGUE
from torchinspect.latency.calibrated import REFERENCE, GpuTable, LatencyGpu, load_table
from torchinspect.latency.ops import OpClass, OpRecord

DEFAULT_KERNEL_US = 2.5  # fixed cost of one kernel when no table measured it
TENSOR_KINDS = (OpClass.matmul, OpClass.conv, OpClass.attention)


def math_for(kind: str, dtype: str, gpu: LatencyGpu, tf32: bool | None) -> str:
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
    kernels: float = 1.0

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


LN10 = math.log(10)


def _at(curve: list[tuple[float, float]], roof: float, power: int) -> float:
    """µs of roofline time ``roof`` on a curve: ``roof * value**power``, ``power=-1`` for an
    efficiency curve (roof / eff), ``1`` for a factor curve (roof x factor)."""
    return roof * max(interpolate(curve, math.log10(max(roof, 1e-4))), 1e-6) ** power


def _turns(curve: list[tuple[float, float]], lo: float, hi: float, power: int) -> list[float]:
    """Where the curve's time turns inside (lo, hi): its knots, and the point of a segment where
    d/dx log(10**x * value**power) = ln 10 + power * slope / value is zero."""
    out = [x for x, _ in curve if lo < x < hi]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if x1 <= x0:
            continue
        slope = (y1 - y0) / (x1 - x0)
        value = -power * slope / LN10  # the value where the derivative is zero
        if slope and value > 0:
            x = x0 + (value - y0) / slope
            if max(x0, lo) < x < min(x1, hi):
                out.append(x)
    return out


def curve_time(curve: list[tuple[float, float]], roof: float, anchor: float,
               power: int = -1) -> float:
    """µs of an op of roofline time ``roof`` (µs) on the GPU predicted, read from a curve
    measured on the table's GPU, where the same op's roofline time is ``anchor``.

    At the anchor it is the curve's own time (``roof / eff``: the table's GPU is predicted
    as measured). Elsewhere the curve is read monotonically: a GPU with a smaller roofline
    time gets the least time the curve gives between the two rooflines, a slower one the
    largest, so a faster GPU is never predicted slower (the straight lines between measured
    points need not be monotone: where efficiency rises steeply, ``roof / eff`` falls as the
    op grows)."""
    if roof == anchor:
        return _at(curve, roof, power)
    x, xa = math.log10(max(roof, 1e-4)), math.log10(max(anchor, 1e-4))
    turns = _turns(curve, min(x, xa), max(x, xa), power)
    times = [_at(curve, r, power) for r in (roof, anchor, *(10 ** t for t in turns))]
    return max(times) if roof > anchor else min(times)


def curve_key(table: GpuTable | None, sub: str, kind: str, dtype: str) -> str | None:
    """The table's curve for an op: its class's, else its kind's (fp16 falls back to bf16)."""
    if table is None:
        return None
    dtypes = (dtype, "bf16") if dtype == "fp16" else (dtype,)
    for d in dtypes:
        for key in (f"{sub}/{d}", f"{kind}/{d}"):
            if table.curves.get(key):
                return key
    return None


def curve_for(table: GpuTable | None, sub: str, kind: str,
              dtype: str) -> list[tuple[float, float]] | None:
    key = curve_key(table, sub, kind, dtype)
    return table.curves[key] if table is not None and key is not None else None


def efficiency_table(gpu: LatencyGpu) -> GpuTable | None:
    """The curves used for ``gpu``: its own, else the reference GPU's (shape, not rates)."""
    return gpu.table if gpu.table is not None else load_table(REFERENCE)


def price(op: OpRecord, gpu: LatencyGpu, dtype: str, tf32: bool | None = None,
          table: GpuTable | None = None, *, scaled: bool = True) -> OpTime:
    """Predicted time of one op (µs) on ``gpu`` in ``dtype`` (``scaled``: with the table's
    in-model correction of its op group; the time is never under the class's floor)."""
    peak = gpu.spec.peak(math_for(op.kind, dtype, gpu, tf32))
    compute = op.flops / peak * 1e6
    memory = op.bytes / gpu.spec.bandwidth * 1e6
    roof = max(compute, memory)
    if op.kernels == 0:  # fused into a neighbour: its bytes only, no kernel of its own
        return OpTime(compute, memory, roof, True, 0.0)
    if op.sub == "matmul.rnn":  # cuDNN's persistent recurrent kernels: roofline + launch gap
        fixed = table.kernel_us if table is not None else DEFAULT_KERNEL_US
        return OpTime(compute, memory, 2 * roof + fixed, table is not None, op.kernels)
    key = curve_key(table, op.sub, op.kind, dtype) if op.kind is not OpClass.other else None
    if key is None or table is None:
        fixed = table.kernel_us if table is not None else DEFAULT_KERNEL_US
        return OpTime(compute, memory, roof + fixed * op.kernels, False, op.kernels)
    scale = table.scales.get(group(op.kind, op.sub), 1.0) if scaled else 1.0
    kernels = table.kernels.get(key, float(op.kernels))
    time = curve_time(table.curves[key], roof, roofline_on(op, measured_on(table), dtype, tf32))
    return OpTime(compute, memory, scale * time, True, kernels)


def roofline_on(op: OpRecord, gpu: LatencyGpu, dtype: str, tf32: bool | None) -> float:
    """The roofline time (µs) of ``op`` on ``gpu``: the larger of compute and memory."""
    peak = gpu.spec.peak(math_for(op.kind, dtype, gpu, tf32))
    return max(op.flops / peak * 1e6, op.bytes / gpu.spec.bandwidth * 1e6)


def measured_on(table: GpuTable) -> LatencyGpu:
    """The GPU a table was measured on (its curves' rooflines are that GPU's)."""
    return LatencyGpu(CATALOGUE[table.gpu], table)


def price_ops(ops: Sequence[OpRecord], gpu: LatencyGpu, dtype: str, tf32: bool | None = None,
              table: GpuTable | None = None) -> list[OpTime]:
    """Every op priced; the ops of each fast-path call together, by the fast path's factor."""
    times = [price(op, gpu, dtype, tf32, table) for op in ops]
    calls: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if op.fastpath:
            calls.setdefault(op.fastpath, []).append(i)
    for call, idx in calls.items():
        curve = table.curves.get(f"fastpath.{call.split('#')[0]}/{dtype}") if table else None
        if not curve:
            continue
        raw = [price(ops[i], gpu, dtype, tf32, table, scaled=False) for i in idx]
        total = sum(t.us for t in raw)
        on_table = measured_on(table) if table is not None else gpu
        anchor = sum(price(ops[i], on_table, dtype, tf32, table, scaled=False).us for i in idx)
        factor = curve_time(curve, total, anchor, power=1) / max(total, 1e-9)
        for i, t in zip(idx, raw, strict=True):
            times[i] = OpTime(t.compute_us, t.memory_us, t.us * factor, t.calibrated, t.kernels)
    return times


GROUPS = ("conv", "conv3d", "matmul", "attention", "norm", "memory")


def group(kind: str, sub: str = "") -> str:
    """The op group an in-model correction applies to (memory: eltwise, copies, ...; 3D
    convolutions apart from 2D ones: other kernels, other layouts)."""
    if sub == "conv.3d":
        return "conv3d"
    return kind if kind in GROUPS else "memory"
