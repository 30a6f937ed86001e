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
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# ops that take a cuBLAS handle (its workspace comes from the caching allocator on first use)
_CUBLAS_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "addmv", "mv",
    "_scaled_mm", "_int_mm",
})


@dataclass
class Alloc:
    """One allocation: its size, the phase and module it was made in."""

    serial: int
    nbytes: int
    phase: str  # weights, buffers, input, forward, backward, optimizer, workspace
    module: str
    step: int = 0  # training iteration (1, 2) or 0 for inference / before the run
    kind: str = ""  # set after the run: grad, state, host (not on the device); cudnn
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


class StorageTracker(TorchDispatchMode):
    """Logs storage allocations/releases of everything that runs under it.

    ``workspace`` bytes are logged once per cuBLAS handle (forward thread, autograd thread)
    at the first matmul-class op of that thread; ``phase`` and ``step`` are set by the runner.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # nothing is compiled inside this mode: the default (True) wraps __torch_dispatch__ in
        # torch._disable_dynamo, whose first call imports torch._dynamo (over a second of
        # start-up for `inspect memory` and summary's memory line), as trace/counting.py says
        return False

    def __init__(self, *, workspace: int = 0, device_type: str | None = None,
                 cudnn: bool = False) -> None:
        super().__init__()
        self.cudnn = cudnn  # log a workspace around each convolution (cuDNN's, on CUDA)
        self.device_type = device_type  # tensors elsewhere (a CPU step counter) are not counted
        self.log = Log()
        self.phase = "forward"
        self.step = 0
        self.workspace = workspace
        self._handles: set[str] = set()
        self._live: dict[int, int] = {}  # StorageImpl address -> serial
        self._next = 0
        self.modules: Any = None  # a ModTracker while the run is tracked

    def mark(self, phase: str, step: int | None = None) -> None:
        """Start a phase (forward, backward, optimizer, inference) of training step ``step``."""
        self.phase = phase
        if step is not None:
            self.step = step
        self.log.events.append(Event(0, True, f"{phase}:{self.step}"))

    # -- registering what exists before the run
    def register(self, tensor: Any, phase: str, module: str = "") -> int | None:
        """Log ``tensor``'s storage as allocated now (weights, buffers, inputs)."""
        return self._see(tensor, phase, module, "")

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
        if func in _EXPLICIT:  # a composite the GPU runs too: its temporaries are real
            with self:
                return func._op_dk(_CEA, *args, **kwargs)
        if _composite(func):
            # under inference_mode/no_grad a composite op (linear, layer_norm, the math
            # attention) reaches the mode whole: decompose it here so that its temporaries
            # pass through the tracker as they pass through the caching allocator
            # (the C++ kernel, as on the GPU: not a Python decomposition registered for tracing)
            with self:
                return func._op_dk(_CIA, *args, **kwargs)
        out = func(*args, **kwargs)
        self.log.ops += 1
        name = func.overloadpacket.__name__
        if self.workspace and name in _CUBLAS_OPS:
            self._cublas_workspace()
        module = self.current_module()
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t, self.phase, module, name)
        if self.workspace and name in _MATRIX_ARGS:
            self._cublas_copies(name, args, module)
        if self.cudnn and name in _CONV_OPS:
            from torchinspect.memory.workspace import conv_problem

            self.cudnn_workspace(conv_problem(name, args), module)
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

    def _cublas_workspace(self) -> None:
        """cuBLAS keeps one workspace per (handle, stream); autograd runs on its own thread."""
        thread = "backward" if self.phase == "backward" else "main"
        if thread not in self._handles:
            self._handles.add(thread)
            serial = self._new(self.workspace, "workspace", f"cuBLAS ({thread} thread)")
            self.log.events.append(Event(serial, True, "cublas"))

    def _see(self, t: Any, phase: str, module: str, op: str) -> int | None:
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

    def _new(self, nbytes: int, phase: str, module: str) -> int:
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


def active_tracker() -> StorageTracker | None:
    """The tracker of the run in progress, if any (for kernels that log a workspace)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in reversed(_get_current_dispatch_mode_stack()):
        if isinstance(mode, StorageTracker):
            return mode
    return None


def _cublas_ready(t: Any) -> bool:
    """A matrix (or a batch of them) cuBLAS can read in place: row- or column-major with a
    leading dimension at least as large as the rows it spans."""
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride(-2), t.stride(-1)
    return (s_cols == 1 and s_rows >= max(1, cols)) or (s_rows == 1 and s_cols >= max(1, rows))


_CIA = torch._C.DispatchKey.CompositeImplicitAutograd
_CEA = torch._C.DispatchKey.CompositeExplicitAutograd
# ops with no CUDA kernel of their own whose composite allocates temporaries on the GPU too
# (the math attention's softmax builds a full-size bool mask of -inf positions)
_EXPLICIT = frozenset({torch.ops.aten._safe_softmax.default})
_COMPOSITE: dict[Any, bool] = {}


def _composite(func: Any) -> bool:
    known = _COMPOSITE.get(func)
    if known is None:
        known = _COMPOSITE[func] = func.namespace == "aten" and \
            torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _CIA)
    return known


def _address(t: Any) -> int:
    return int(t.untyped_storage()._cdata)
