"""Roofline arithmetic: one op's time on one GPU from its FLOPs, bytes and a measured curve.

Roofline (Williams, Waterman, Patterson 2009): an op needs at least
``max(flops / peak, bytes / bandwidth)``; which term is larger says whether it is compute-
or memory-bound. What one call really costs inside a CUDA graph is read from the GPU's
measured curve for the op's class and dtype: ``eff`` (roofline time / measured time) against
log10 of the roofline time, linear between measured points. The measured time is the call's
kernels and the gaps after them (``benchmarks/latency_data.py``: ``in_graph_us``), so a
convolution's layout transposes, a batch norm's three kernels and the launch gap are in it.

Small kernels cost what they cost: below the smallest measured size a curve keeps its
*time*, not its efficiency (the launch floor and the tail of a kernel that fills a fraction of
one wave do not shrink with the work; sweep 4 measured them per op kind from one thread block
up to a few waves, ``floors.jsonl``). Above the largest point the efficiency is kept. An op of
a class no curve covers (``other``) costs its roofline plus the smallest measured call of any
kind (the element-wise floor) per kernel, and is flagged as not calibrated.

Two more measured pieces: cuDNN's recurrent step kernels (``rnn.step``) are priced per kernel
(the op's roofline split over its step kernels, read on the ``rnn.step`` curve of sweep 3);
and the ops of one fast-path call (``OpRecord.fastpath``) cost their table prices summed times
the factor measured between PyTorch's fast path and those ops (``fastpath.encoder`` /
``fastpath.mha`` curves, factor against log10 of the summed µs).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from torchinspect.errors import InspectError
from torchinspect.gpus import CATALOGUE
from torchinspect.latency.calibrated import REFERENCE, GpuTable, LatencyGpu, load_table
from torchinspect.latency.ops import OpClass, OpRecord

TENSOR_KINDS = (OpClass.matmul, OpClass.conv, OpClass.attention)
#: a foreach kernel (``multi_tensor_apply``) takes at most this many tensors per launch
#: (``depth_to_max_tensors`` for the 4-list AdamW update: aten/src/ATen/native/cuda/
#: MultiTensorApply.cuh), chunks of this many elements, this many chunks (blocks) per launch
FOREACH_TENSORS, FOREACH_CHUNK, FOREACH_BLOCKS = 36, 65536, 320


def foreach_kernels(op: OpRecord) -> int:
    """Launches of one ``_foreach_*`` op over its tensors (``multi_tensor_apply``)."""
    tensors = max(op.tensors, 1)
    chunks = max(int(op.flops) // FOREACH_CHUNK, tensors)
    return max(math.ceil(tensors / FOREACH_TENSORS), math.ceil(chunks / FOREACH_BLOCKS), 1)


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
    floor_us: float = 0.0  # the part of ``us`` that is the class's small-kernel floor

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
    efficiency curve (roof / eff; below the first point the first point's time: the floor),
    ``1`` for a factor curve (roof x factor)."""
    x = math.log10(max(roof, 1e-4))
    if power == -1 and x < curve[0][0]:
        return floor_of(curve)
    return roof * max(interpolate(curve, x), 1e-6) ** power


def floor_of(curve: list[tuple[float, float]]) -> float:
    """The least time a call on an efficiency curve costs: its smallest measured point's."""
    x0, eff0 = curve[0]
    return 10 ** x0 / max(eff0, 1e-6)


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


def efficiency_table(gpu: LatencyGpu) -> GpuTable:
    """The curves used for ``gpu``: its own, else the reference GPU's (shape, not rates)."""
    table = gpu.table if gpu.table is not None else load_table(REFERENCE)
    if table is None:
        raise InspectError(f"the latency table tables/{REFERENCE}.json is missing from this "
                           "install", hint="reinstall torchinspect")
    return table


def kernel_floor_us(table: GpuTable, dtype: str) -> float:
    """The least a kernel costs in a graph: the smallest measured element-wise call."""
    curve = table.curves.get(f"eltwise/{dtype}") or table.curves.get("eltwise/bf16")
    return floor_of(curve) if curve else table.gap_us


def price(op: OpRecord, gpu: LatencyGpu, dtype: str, tf32: bool | None = None,
          table: GpuTable | None = None, *, scaled: bool = True) -> OpTime:
    """Predicted time of one op (µs) inside a CUDA graph on ``gpu`` in ``dtype`` (``scaled``:
    with the table's in-model correction of its op group, where it has one)."""
    table = table if table is not None else efficiency_table(gpu)
    dtype = op.dtype or dtype
    peak = gpu.spec.peak(math_for(op.kind, dtype, gpu, tf32))
    compute = op.flops / peak * 1e6
    memory = op.bytes / gpu.spec.bandwidth * 1e6
    roof = max(compute, memory)
    if op.kernels == 0:  # fused into a neighbour: its bytes only, no kernel of its own
        return OpTime(compute, memory, roof, True, 0.0)
    key = curve_key(table, op.sub, op.kind, dtype) if op.kind is not OpClass.other else None
    if key is None:
        return OpTime(compute, memory, roof + kernel_floor_us(table, dtype) * op.kernels,
                      False, op.kernels)
    anchor = roofline_on(op, measured_on(table), dtype, tf32)
    if op.kind is OpClass.rnn:  # per step kernel: the op's work split over its kernels
        n = max(op.kernels, 1)
        time = n * curve_time(table.curves[key], roof / n, anchor / n)
        return OpTime(compute, memory, time, True, op.kernels)
    scale = table.scales.get(group(op.kind, op.sub), 1.0) if scaled else 1.0
    kernels = table.kernels.get(key, float(op.kernels))
    time = curve_time(table.curves[key], roof, anchor)
    floor = min(floor_of(table.curves[key]), time)
    if op.sub == "foreach":  # one launch per group of tensors, each at least the floor
        kernels = float(foreach_kernels(op))
        floor = kernels * kernel_floor_us(table, dtype)
        time = max(time, floor)
    # the in-model correction scales the work above the floor: a small kernel costs its floor
    return OpTime(compute, memory, floor + scale * (time - floor), True, kernels, floor)


def roofline_on(op: OpRecord, gpu: LatencyGpu, dtype: str, tf32: bool | None) -> float:
    """The roofline time (µs) of ``op`` on ``gpu``: the larger of compute and memory."""
    dtype = op.dtype or dtype
    peak = gpu.spec.peak(math_for(op.kind, dtype, gpu, tf32))
    return max(op.flops / peak * 1e6, op.bytes / gpu.spec.bandwidth * 1e6)


def measured_on(table: GpuTable) -> LatencyGpu:
    """The GPU a table was measured on (its curves' rooflines are that GPU's)."""
    return LatencyGpu(CATALOGUE[table.gpu], table)


def price_ops(ops: Sequence[OpRecord], gpu: LatencyGpu, dtype: str, tf32: bool | None = None,
              table: GpuTable | None = None) -> list[OpTime]:
    """Every op priced; the ops of each fast-path call together, by the fast path's factor."""
    table = table if table is not None else efficiency_table(gpu)
    times = [price(op, gpu, dtype, tf32, table) for op in ops]
    calls: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if op.fastpath:
            calls.setdefault(op.fastpath, []).append(i)
    for call, idx in calls.items():
        curve = table.curves.get(f"fastpath.{call.split('#')[0]}/{dtype}")
        if not curve:
            continue
        raw = [price(ops[i], gpu, dtype, tf32, table, scaled=False) for i in idx]
        total = sum(t.us for t in raw)
        on_table = measured_on(table)
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
