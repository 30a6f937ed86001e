"""The staging buffer of a CUDA reduction (``sum``, ``mean``, ``amax``...), as PyTorch sizes it.

A reduction kernel that splits each output's inputs across several thread blocks
("global reduce") takes two buffers from the caching allocator for the call: a staging
buffer for the blocks' partial results and a semaphore per output block
(``gpu_reduce_kernel`` in aten/src/ATen/native/cuda/Reduce.cuh). They are small for a full
reduction, but a reduction over a leading dimension with many rows (the bias gradient of a
linear layer: ``grad.sum(0)`` over every token) stages
``4 bytes x outputs x blocks per output x 32 lanes x 4-wide vectors``: 32 MiB for a 4096 x 1024
gradient on an H100, more than the gradient itself.

`staging_bytes` follows ``setReduceConfig``: the reduction's TensorIterator (dimensions
reordered with the reduced ones first, then coalesced), the block shape, and the blocks per
output, which depend on the GPU's SM count and threads per SM (``memory/gpu.py``).
Measured on an H100 against ``torch.cuda.memory`` history (``benchmarks/memory_optrace.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from torchinspect.memory.constants import value

MAX_THREADS = value("reduction.max_threads")  # mnt_wrapper<T>::MAX_NUM_THREADS
WARP = value("reduction.warp")
INPUT_VEC = value("reduction.input_vec")
MIN_VALUES = value("reduction.min_values_per_thread")
MAX_VALUES = value("reduction.max_values_per_thread")


@dataclass(frozen=True)
class Reduction:
    """One reduction call: the input's shape and strides (elements), the reduced dims."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dims: frozenset[int]
    element: int  # bytes of an input element (scalar_t)
    accumulate: int  # bytes of the accumulator (arg_t)


def _last_pow2(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _iterator(r: Reduction) -> tuple[list[int], list[int], list[int]]:
    """TensorIterator's dimensions (fastest first) after reordering and coalescing:
    shape, input strides, output strides (0 for a reduced dimension)."""
    nd = len(r.shape)
    out_shape = [1 if d in r.dims else s for d, s in enumerate(r.shape)]
    out_contig = [prod(out_shape[d + 1:]) for d in range(nd)]
    out_strides = [0 if d in r.dims else out_contig[d] for d in range(nd)]
    shape, ins = list(r.shape), list(r.strides)

    def should_swap(d0: int, d1: int) -> int:
        for strides, output in ((out_strides, True), (ins, False)):
            s0, s1 = strides[d0], strides[d1]
            if output and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    dims = [[shape[p], ins[p], out_strides[p]] for p in perm]
    merged: list[list[int]] = []
    for d in dims:
        if merged:
            last = merged[-1]
            if d[0] == 1 or last[0] == 1 or (last[0] * last[1] == d[1]
                                              and last[0] * last[2] == d[2]):
                if last[0] == 1:
                    last[1], last[2] = d[1], d[2]
                last[0] *= d[0]
                continue
        merged.append(list(d))
    return [d[0] for d in merged], [d[1] for d in merged], [d[2] for d in merged]


def staging_bytes(r: Reduction, sms: int, threads_per_sm: int) -> tuple[int, int]:
    """(staging buffer, semaphores) bytes the call allocates; (0, 0) when it reduces within
    blocks."""
    numel = prod(r.shape)
    if numel <= 1 or not r.dims:
        return 0, 0
    shape, ins, outs = _iterator(r)
    reduce_dims = sum(1 for s in outs if s == 0)
    outputs = prod(s for s, o in zip(shape, outs, strict=True) if o != 0)
    inputs = numel // outputs
    if reduce_dims == len(shape):
        fastest, dim0, dim1, stride = True, inputs, outputs, ins[0]
    else:
        fastest = ins[0] < ins[reduce_dims]
        dim0, dim1 = (inputs, outputs) if fastest else (outputs, inputs)
        stride = ins[0] if fastest else ins[reduce_dims]
    out_vec = 1
    if stride == 1:
        if fastest and dim0 > 128 and reduce_dims == 1:
            dim0 //= INPUT_VEC
        elif not fastest:
            out_vec = 4
            for n in [shape[reduce_dims]] + [s for i, s in enumerate(ins) if i != reduce_dims]:
                while n % out_vec:
                    out_vec //= 2
            dim0 //= out_vec
    limit = MAX_THREADS // out_vec
    p0 = _last_pow2(dim0) if dim0 < limit else limit
    p1 = _last_pow2(dim1) if dim1 < limit else limit
    width = min(p0, WARP)
    height = min(p1, limit // width)
    width = min(p0, limit // height)
    threads = width * height
    step_in = step_out = 1
    if fastest:
        step_in *= width
    else:
        step_out *= width
    split_warps = _div_up(inputs, step_in) >= height * MIN_VALUES or \
        _div_up(inputs, step_in) >= MAX_VALUES
    if split_warps:
        step_in *= height
    else:
        step_out *= height
    grid = _div_up(outputs // out_vec, step_out)
    target = sms * (threads_per_sm // threads)
    per_thread = _div_up(inputs, step_in)
    if not (split_warps and per_thread >= MAX_VALUES and grid <= target):
        return 0, 0
    ctas = max(min(_div_up(target, grid), _div_up(per_thread, MIN_VALUES)),
               _div_up(per_thread, MAX_VALUES))
    if ctas <= 1:
        return 0, 0
    size = r.accumulate * outputs * ctas
    if not fastest:  # no reduction across the lanes of a block: each lane stages its own
        size *= width * out_vec
    return size, 4 * grid


# -- the aten reductions that take this kernel, and how to read their arguments

def _all(t: Any) -> frozenset[int]:
    return frozenset(range(t.dim()))


def _dims(t: Any, dim: Any) -> frozenset[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return _all(t)
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return frozenset(int(d) % max(1, t.dim()) for d in dims)


def _sum_like(args: Any, kwargs: dict[str, Any], overload: str) -> frozenset[int]:
    t = args[0]
    if overload == "default":
        return _all(t)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return _dims(t, dim)


def _norm(args: Any, kwargs: dict[str, Any], overload: str) -> frozenset[int]:
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    return _dims(args[0], dim)


_DIMS = {"sum": _sum_like, "mean": _sum_like, "prod": _sum_like, "amax": _sum_like,
         "amin": _sum_like, "linalg_vector_norm": _norm}
# accumulator: the input's own type for max/min, float (double for float64) otherwise
_OWN_TYPE = frozenset({"amax", "amin"})


def reduction(name: str, overload: str, args: Any, kwargs: dict[str, Any]) -> Reduction | None:
    """The `Reduction` of one aten call, if it is one of these reductions on a dense tensor."""
    import torch

    how = _DIMS.get(name)
    if how is None or not args or not isinstance(args[0], torch.Tensor):
        return None
    t = args[0]
    if t.layout != torch.strided or t.is_complex() or t.dim() == 0:
        return None
    dims = how(args, kwargs, overload)
    element = t.element_size()
    if name in _OWN_TYPE:
        accumulate = element
    elif t.dtype in (torch.float64, torch.int64) or not t.is_floating_point():
        accumulate = 8
    else:
        accumulate = 4
    return Reduction(tuple(t.shape), tuple(t.stride()), dims, element, accumulate)
