"""The storage tracker: every allocation and release of a run, in order.

`StorageTracker` is a ``TorchDispatchMode`` that sees each aten op's outputs. A storage it
has not seen is an allocation: it gets a serial number, and ``weakref.finalize`` on its
``UntypedStorage`` logs the release when PyTorch really lets it go (views share a storage,
in-place ops return one it knows, saved-for-backward tensors keep theirs alive until the
backward node runs, ``no_grad``/``inference_mode`` outputs die as soon as Python drops them).
The log is replayed afterwards (``allocator.py``) with the caching allocator's rules.

Module context comes from ``torch.distributed._tools.mod_tracker.ModTracker`` (forward and
backward, through module hooks and multi-grad hooks); the phase (forward, backward, optimizer)
is set by the caller.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch

from torchinspect.privtorch import (
    QuietDispatchMode,
    dispatch_mode_stack,
    has_composite_kernel,
    run_composite,
    tree_flatten,
)
from torchinspect.trace.ops import op_info


class Phase(StrEnum):
    """When an allocation was made: what existed before the run, or the phase of a step."""

    weights = "weights"
    buffers = "buffers"
    input = "input"
    workspace = "workspace"  # kept for the process (cuBLAS, cuBLASLt)
    forward = "forward"
    backward = "backward"
    optimizer = "optimizer"
    inference = "inference"
    prefill = "prefill"  # generation: the prompt through the model (memory/generate.py)
    decode = "decode"  # generation: the steps that add one token each
    end = "end"  # the mark after the last step


@dataclass
class Alloc:
    """One allocation: its size, the phase and module it was made in."""

    serial: int
    nbytes: int
    phase: Phase
    module: str
    step: int = 0  # training iteration (1, 2) or 0 for inference / before the run
    kind: str = ""  # set after the run: grad, state, cache (a KV cache), host (not on the
    # device); cudnn
    problem: Any = None  # kind cudnn: the workspace's `workspace.Problem` (bytes set later)


@dataclass
class Event:
    """``+serial`` allocation, ``-serial`` release, at the position of the op that did it."""

    serial: int
    alloc: bool
    op: str = ""


@dataclass
class Log:
    """What the tracker saw, in order."""

    allocs: dict[int, Alloc] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    ops: int = 0


class StorageTracker(QuietDispatchMode):
    """Logs storage allocations/releases of everything that runs under it.

    ``workspace`` bytes are logged once per cuBLAS handle (forward thread, autograd thread)
    at the first matmul-class op of that thread; ``phase`` and ``step`` are set by the runner.
    """

    def __init__(self, *, workspace: int = 0, device_type: str | None = None,
                 cudnn: bool = False, gpu: str | None = None) -> None:
        super().__init__()
        self.cudnn = cudnn  # log a workspace around each convolution (cuDNN's, on CUDA)
        # a CUDA GPU's kernels: reductions' staging buffers, cuBLASLt's workspace
        self.cores: tuple[int, int] | None = None
        if gpu is not None:
            from torchinspect.memory.gpu import multiprocessors

            self.cores = multiprocessors(gpu)
        self.device_type = device_type  # tensors elsewhere (a CPU step counter) are not counted
        self.log = Log()
        self.phase = Phase.forward
        self.step = 0
        self.workspace = workspace
        self._handles: set[tuple[str, str]] = set()
        self._live: dict[int, int] = {}  # StorageImpl address -> serial
        self._next = 0
        self.modules: Any = None  # a ModTracker while the run is tracked

    def mark(self, phase: Phase | str, step: int | None = None) -> None:
        """Start a phase (forward, backward, optimizer, inference) of training step ``step``."""
        self.phase = Phase(phase)
        if step is not None:
            self.step = step
        self.log.events.append(Event(0, True, f"{phase}:{self.step}"))

    # -- registering what exists before the run
    def register(self, tensor: Any, phase: Phase | str, module: str = "") -> int | None:
        """Log ``tensor``'s storage as allocated now (weights, buffers, inputs)."""
        return self._see(tensor, Phase(phase), module, "")

    def storage_serial(self, tensor: Any) -> int | None:
        """The serial of ``tensor``'s storage, if it is live and known."""
        if not isinstance(tensor, torch.Tensor):
            return None
        return self._live.get(_address(tensor))

    def current_module(self) -> str:
        if self.modules is None:
            return ""
        parents = [p for p in self.modules.parents if p != "Global"]
        return max(parents, key=lambda p: (p.count("."), len(p))) if parents else ""

    # -- the dispatch hook
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in EXPLICIT_COMPOSITES:  # a composite the GPU runs too: its temporaries are real
            with self:
                return run_composite(func, args, kwargs, explicit=True)
        if is_composite(func):
            # under inference_mode/no_grad a composite op (linear, layer_norm, the math
            # attention) reaches the mode whole: decompose it here so that its temporaries
            # pass through the tracker as they pass through the caching allocator
            # (the C++ kernel, as on the GPU: not a Python decomposition registered for tracing)
            copies = self._transient(_fold_copy(func, args, kwargs), self.current_module(),
                                     f"{func.overloadpacket.__name__} (folded copy)")
            with self:
                out = run_composite(func, args, kwargs)
            self._release_transient(copies, func.overloadpacket.__name__)
            return out
        out = func(*args, **kwargs)
        self.log.ops += 1
        name = func.overloadpacket.__name__
        if self.workspace and op_info(func).cublas:  # its handle's workspace, on first use
            self._cublas_workspace()
            if self.cores is not None and _uses_cublaslt(name, args, kwargs):
                self._cublas_workspace("cuBLASLt")
        module = self.current_module()
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t, self.phase, module, name)
        if self.workspace and name in _MATRIX_ARGS:
            self._cublas_copies(name, args, module)
        if self.cores is not None:
            self._reduction_staging(func, args, kwargs, module)
            if name in _CONTIGUOUS_ARGS:
                copies = [t.numel() * t.element_size() for i in _CONTIGUOUS_ARGS[name]
                          if i < len(args) and isinstance(t := args[i], torch.Tensor)
                          and not t.is_contiguous()]
                self._release_transient(self._transient(copies, module, f"{name} (copy)"), name)
        if self.cudnn and name in _CONV_OPS:
            from torchinspect.memory.workspace import conv_problem

            copies = self._transient(_conv_copies(name, args), module, f"{name} (contiguous copy)")
            self.cudnn_workspace(conv_problem(name, args), module)
            self._release_transient(copies, name)
        return out

    def cudnn_workspace(self, problem: Any, module: str | None = None) -> None:
        """A cuDNN call's workspace: allocated after its outputs, freed before it returns
        (its bytes are set when the log is replayed: ``workspace.py``)."""
        if problem is None:
            return
        serial = self._new(0, self.phase, self.current_module() if module is None else module)
        self.log.allocs[serial].kind = "cudnn"
        self.log.allocs[serial].problem = problem
        self.log.events.append(Event(serial, True, problem.op))
        self.log.events.append(Event(serial, False, problem.op))

    def _cublas_copies(self, name: str, args: Any, module: str) -> None:
        """cuBLAS takes a matrix with one unit stride; any other (an expanded gradient, a
        strided slice) is copied contiguous for the call and freed after it
        (``prepare_matrix_for_cublas`` in aten/src/ATen/native/cuda/Blas.cpp)."""
        for i in _MATRIX_ARGS[name]:
            t = args[i] if i < len(args) else None
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and not _cublas_ready(t):
                serial = self._new(t.numel() * t.element_size(), self.phase, module)
                self.log.events.append(Event(serial, True, f"{name} (copy for cuBLAS)"))
                self.log.events.append(Event(serial, False, name))

    def _cublas_workspace(self, library: str = "cuBLAS") -> None:
        """cuBLAS keeps one workspace per (handle, stream); autograd runs on its own thread.
        cuBLASLt (a matmul with a fused bias) keeps its own, also per handle."""
        thread = "backward" if self.phase is Phase.backward else "main"
        if (library, thread) not in self._handles:
            self._handles.add((library, thread))
            from torchinspect.memory.gpu import cublaslt_workspace

            size = self.workspace if library == "cuBLAS" else cublaslt_workspace()
            serial = self._new(size, Phase.workspace, f"{library} ({thread} thread)")
            self.log.events.append(Event(serial, True, library.lower()))

    def keep_once(self, what: str, nbytes: int) -> None:
        """A buffer a library allocates on first use and keeps for the process (logged once)."""
        if (what, "") not in self._handles:
            self._handles.add((what, ""))
            serial = self._new(nbytes, Phase.workspace, what)
            self.log.events.append(Event(serial, True, what))

    def _reduction_staging(self, func: Any, args: Any, kwargs: Any, module: str) -> None:
        """A CUDA reduction split across thread blocks stages partial results in buffers of
        the caching allocator for the call (``memory/reduction.py``)."""
        from torchinspect.memory.reduction import reduction, staging_bytes

        name = func.overloadpacket.__name__
        r = reduction(name, func._overloadname, args, kwargs)
        if r is None or self.cores is None:
            return
        staging, semaphores = staging_bytes(r, *self.cores)
        if staging:
            serials = self._transient([staging, semaphores], module, f"{name} (staging)")
            self._release_transient(serials, name)

    def _transient(self, sizes: list[int], module: str, op: str) -> list[int]:
        """Allocations a kernel makes for the time of its call (freed by `_release_transient`)."""
        serials = []
        for nbytes in sizes:
            serials.append(self._new(nbytes, self.phase, module))
            self.log.events.append(Event(serials[-1], True, op))
        return serials

    def _release_transient(self, serials: list[int], op: str) -> None:
        for serial in reversed(serials):
            self.log.events.append(Event(serial, False, op))

    def _see(self, t: Any, phase: Phase, module: str, op: str) -> int | None:
        if self.device_type is not None and t.device.type != self.device_type:
            return None
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested and other storage-less tensors
            return None
        key = st._cdata
        known = self._live.get(key)
        if known is not None:
            alloc = self.log.allocs[known]
            if st.nbytes() != alloc.nbytes:  # resized in place (an out= op)
                self.log.events.append(Event(known, False, op))
                alloc.nbytes = int(st.nbytes())
                self.log.events.append(Event(known, True, op))
            return known
        serial = self._new(int(st.nbytes()), phase, module)
        self._live[key] = serial
        self.log.events.append(Event(serial, True, op))
        weakref.finalize(st, self._release, key, serial)
        return serial

    def _new(self, nbytes: int, phase: Phase, module: str) -> int:
        self._next += 1
        self.log.allocs[self._next] = Alloc(self._next, nbytes, phase, module, self.step)
        return self._next

    def _release(self, key: int, serial: int) -> None:
        if self._live.get(key) == serial:
            del self._live[key]
        self.log.events.append(Event(serial, False))


# the matrix operands of the cuBLAS ops, by position
_MATRIX_ARGS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2),
                "addbmm": (1, 2), "_addmm_activation": (1, 2)}


_CONV_OPS = frozenset({"convolution", "convolution_backward"})
# CUDA kernels that take these operands contiguous (``expect_contiguous``: a copy for the call
# when they are not, e.g. the expanded gradient of a sum)
_CONTIGUOUS_ARGS = {"native_layer_norm": (0,), "native_layer_norm_backward": (0, 1),
                    "native_group_norm": (0,), "native_group_norm_backward": (0, 1)}


def _uses_cublaslt(name: str, args: Any, kwargs: Any) -> bool:
    """``addmm`` with a 1-D bias and beta 1 runs through cuBLASLt with the bias fused
    (``useLtInterface`` in aten/src/ATen/native/cuda/Blas.cpp), as ``_addmm_activation``."""
    if name == "_addmm_activation":
        return True
    if name != "addmm" or not args or not isinstance(args[0], torch.Tensor):
        return False
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    return args[0].dim() == 1 and beta == 1 and args[0].dtype in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _fold_copy(func: Any, args: Any, kwargs: Any) -> list[int]:
    """``matmul`` of an n-D input by a weight that requires grad folds the input to 2-D
    (``should_fold`` in aten/src/ATen/native/LinearAlgebra.cpp), copying it when its leading
    dimensions do not flatten to a view. Under ``inference_mode`` the weight's transpose is a
    view that still requires grad on a real run, but not when the op is decomposed here: the
    decomposition takes the batched route without the copy, so it is logged here."""
    name = func.overloadpacket.__name__
    if name not in ("linear", "matmul") or not torch.is_inference_mode_enabled():
        return []
    inp, other = (args + (None, None))[:2]
    if not isinstance(inp, torch.Tensor) or not isinstance(other, torch.Tensor):
        return []
    if name == "linear" and (args[2] if len(args) > 2 else kwargs.get("bias")) is not None \
            and inp.is_contiguous():
        return []  # _flatten_nd_linear: a view
    if inp.dim() < 3 or other.dim() > 2 or not other.requires_grad:
        return []
    shape, strides = inp.shape, inp.stride()
    if all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(inp.dim() - 2)):
        return []
    return [inp.numel() * inp.element_size()]


def _conv_copies(name: str, args: Any) -> list[int]:
    """Bytes of the contiguous copies a CUDA convolution makes of operands that are not
    dense in its memory format (a sliced or expanded gradient, a strided input), alive for
    the call: the input of the forward; the output gradient, and the input when the weight's
    gradient is asked for, of the backward."""
    if name == "convolution":
        inp, weight = args[0], args[1]
        operands = [inp]
    else:
        grad, inp, weight = args[0], args[1], args[2]
        mask = args[-1] if isinstance(args[-1], (list, tuple)) else (True, True, True)
        operands = [grad] + ([inp] if mask[1] else [])
    if not isinstance(inp, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return []
    fmt = _conv_format(inp, weight)
    return [t.numel() * t.element_size() for t in operands
            if isinstance(t, torch.Tensor) and not t.is_contiguous(memory_format=fmt)]


def _conv_format(inp: Any, weight: Any) -> Any:
    """``cudnn_conv_suggest_memory_format``: channels-last when the input or the weight is."""
    if weight.dim() == 4:
        last = torch.channels_last
    elif weight.dim() == 5:
        last = torch.channels_last_3d
    else:
        return torch.contiguous_format
    if any(t.is_contiguous(memory_format=last) and not t.is_contiguous() for t in (inp, weight)):
        return last
    return torch.contiguous_format


def active_tracker() -> StorageTracker | None:
    """The tracker of the run in progress, if any (for kernels that log a workspace)."""
    for mode in reversed(dispatch_mode_stack()):
        if isinstance(mode, StorageTracker):
            return mode
    return None


def _cublas_ready(t: Any) -> bool:
    """A matrix (or a batch of them) cuBLAS can read in place: row- or column-major with a
    leading dimension at least as large as the rows it spans."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride(-2), t.stride(-1)
    return (s_cols == 1 and s_rows >= max(1, cols)) or (s_rows == 1 and s_cols >= max(1, rows))


# ops with no CUDA kernel of their own whose composite allocates temporaries on the GPU too
# (the math attention's softmax builds a full-size bool mask of -inf positions)
EXPLICIT_COMPOSITES = frozenset({torch.ops.aten._safe_softmax.default})
_COMPOSITE: dict[Any, bool] = {}


def is_composite(func: Any) -> bool:
    known = _COMPOSITE.get(func)
    if known is None:
        known = _COMPOSITE[func] = func.namespace == "aten" and has_composite_kernel(func)
    return known


def _address(t: Any) -> int:
    return int(t.untyped_storage()._cdata)
