"""What the fake run is made of, shared by the single-GPU prediction (memory/predict.py) and
the FSDP2 one (memory/fsdp.py): the target device's semantics, fake copies of the model's
state and inputs, the kinds the tracker marks, autocast, and the error a failed run becomes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchinspect import gpus
from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.memory import step as steps
from torchinspect.memory.autocast import cuda_autocast_on_cpu
from torchinspect.memory.gpu import cublas_workspace
from torchinspect.memory.tracker import StorageTracker
from torchinspect.shapes import map_tensors, tensor_leaves
from torchinspect.sources.case import (
    materialize,
)


@dataclass(frozen=True)
class Target:
    """The device the prediction is for, and the one the fake tensors run on."""

    device: str  # cuda: caching allocator, CUDA autocast lists, cuBLAS workspace; cpu: bytes
    gpu: str | None
    workspace: int
    # the fake tensors' device: cpu (the backward of fake CUDA tensors needs a live CUDA
    # context, and CPU fake tensors give one answer everywhere); cuda for comparisons on a GPU
    fake_device: str
    calibrate: bool = False  # measure cuDNN workspaces on the GPU that is here (calibrate.py)

    @property
    def emulated(self) -> bool:
        return self.device == "cuda" and self.fake_device in ("cpu", "meta")

    @property
    def faked(self) -> bool:
        """Fake tensors (FakeTensorMode) rather than plain meta tensors."""
        return self.fake_device != "meta"


def make_target(device: str = "cuda", gpu: str | None = None, *, fast: bool = False,
                calibrate: bool | None = None) -> Target:
    """``fast``: plain meta tensors instead of fake CPU tensors (no fake-tensor dispatch
    overhead, several times faster; same numbers for inference, see test_memory).
    ``calibrate``: measure cuDNN workspaces on this machine's GPU (None: when the GPU
    predicted for is the one present; True without it is an error)."""
    if device not in ("cuda", "cpu"):
        raise InspectError(f"--device {device!r}: memory predicts for cuda or cpu",
                           hint="--device cuda (the default) or --device cpu")
    if device == "cpu":
        if gpu is not None:
            raise InspectError(f"--gpu {gpu}: --device cpu counts the bytes of tensors, for no GPU",
                               hint="leave out --gpu, or predict for the GPU with --device cuda")
        return Target("cpu", None, 0, "cpu")
    found = gpus.detect_gpu()
    here = found.name if found is not None else None
    name = gpus.target_gpu(gpu).name
    if calibrate and here is None:
        raise InspectError("--calibrate measures cuDNN workspaces on a GPU, and no CUDA device "
                           "is available", hint="leave out --calibrate: the shipped table and "
                           "a range are used")
    if calibrate and here != name:
        raise InspectError(f"--calibrate measures the GPU that is here ({here}), not --gpu {gpu}",
                           hint=f"leave out --gpu, or --no-calibrate to predict for {gpu}")
    auto = here is not None and here == name if calibrate is None else calibrate
    return Target("cuda", name, cublas_workspace(name), "meta" if fast else "cpu", auto)


def mark_kind(tracker: StorageTracker, tensor: Any, kind: str) -> None:
    serial = tracker.storage_serial(tensor)
    if serial is not None:
        tracker.log.allocs[serial].kind = kind


def mark_state(tracker: StorageTracker, optimizer: Any, target: Target) -> None:
    """Optimizer state is state; a step counter the real optimizer keeps on the host is not
    device memory (non-fused, non-capturable Adam/AdamW)."""
    if optimizer is None:
        return
    host_steps = target.emulated and not any(
        g.get("capturable") or g.get("fused") for g in optimizer.param_groups)
    for entry in optimizer.state.values():
        for key, value in entry.items():
            kind = "host" if key == "step" and host_steps else "state"
            mark_kind(tracker, value, kind)


def fake_state(model: Any, device: str, dtype: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Fake parameters and buffers, in the order ``model.to(device)`` allocates them."""
    import torch

    cast = steps.DTYPES[dtype] if dtype else None
    state: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for name, t, kind in _apply_order(model):
        dt = cast if cast is not None and t.is_floating_point() else t.dtype
        fake = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=dt, device=device)
        if kind == "weights" and t.requires_grad and fake.is_floating_point():
            fake.requires_grad_(True)
        state[name] = fake
        kinds[name] = kind
    return state, kinds


def _apply_order(model: Any) -> list[tuple[str, Any, str]]:
    """``Module._apply``'s order: each module's children first, then its parameters, then its
    buffers; a tensor shared by several names comes once (``functional_call`` ties the rest)."""
    seen: set[int] = set()
    out: list[tuple[str, Any, str]] = []
    visited: set[int] = set()

    def walk(m: Any, prefix: str) -> None:
        if id(m) in visited:
            return
        visited.add(id(m))
        for child_name, child in m._modules.items():
            if child is not None:
                walk(child, f"{prefix}{child_name}.")
        for kind, table in (("weights", m._parameters), ("buffers", m._buffers)):
            for name, t in table.items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    out.append((prefix + name, t, kind))

    walk(model, "")
    return out


def fake_inputs(example: Any, device: str, dtype: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    import torch

    cast = steps.DTYPES[dtype] if dtype else None
    args, kwargs = materialize(example, "meta")

    def fake(t: Any) -> Any:
        dt = cast if cast is not None and t.is_floating_point() else t.dtype
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=dt, device=device)

    return map_tensors(args, fake), map_tensors(kwargs, fake)


def autocast_factory(amp: str | None, target: Target) -> Callable[[], Any]:
    """A context factory: autocast to ``amp`` with the target device's op lists."""
    import torch

    if amp is None:
        return contextlib.nullcontext
    dt = steps.DTYPES[amp]
    if target.emulated:
        return lambda: cuda_autocast_on_cpu(dt)
    return lambda: torch.autocast(target.fake_device, dtype=dt)


def model_sizes(state: dict[str, Any], kinds: dict[str, str], args: Any, kwargs: Any) -> dict[str, int]:
    nbytes = {k: sum(t.numel() * t.element_size() for n, t in state.items() if kinds[n] == k)
              for k in ("weights", "buffers")}
    return {"params": sum(t.numel() for n, t in state.items() if kinds[n] == "weights"),
            "weights": nbytes["weights"], "buffers": nbytes["buffers"],
            "input": sum(t.numel() * t.element_size() for t in tensor_leaves((args, kwargs)))}


class TrainingNeedsBatch(InspectError):
    """BatchNorm refuses to train on one value per channel (a batch of 1 at the end)."""


def run_error(name: str, mode: str, exc: Exception) -> InspectError:
    text = first_line(exc)
    if mode == "training" and "more than 1 value per channel" in text:
        return TrainingNeedsBatch(f"{name}: BatchNorm cannot train on this batch ({text})",
                                  hint="pass --batch 2 or more")
    if "data-dependent" in text.lower() or type(exc).__name__ in (
            "DynamicOutputShapeException", "DataDependentOutputException"):
        return InspectError(f"{name}: the {mode} forward depends on tensor values "
                            f"({type(exc).__name__}), which a prediction without data cannot follow",
                            hint="measure it on the GPU instead (inspect bench --max-batch)",
                            status=ExitStatus.INTERNAL)
    return FakeRunFailed(f"{name}: the {mode} run on fake tensors failed: {type(exc).__name__}: "
                         f"{text}", exc, mode)


class FakeRunFailed(InspectError):
    """The fake run failed for a reason not yet told apart: :func:`blame` decides whose it is
    (the user's input, the model's code, or ours) once the fake run's state is undone."""

    def __init__(self, message: str, original: Exception, mode: str) -> None:
        super().__init__(message, hint="its plain forward runs, so this is torchinspect's: "
                         "rerun with --debug and report the traceback", status=ExitStatus.INTERNAL)
        self.original = original
        self.mode = mode


def blame(case: Any, example: Any, failed: FakeRunFailed) -> InspectError:
    """Whose a fake-run failure is, as summary tells it: Python's recursion limit or an
    exception from the model's file is the model's code (exit 70); a tensor too large to
    exist is the input's (exit 2); else the model's plain forward (meta, the trace summary
    runs) is run on the same input: its error, when it fails, is the answer (a wrong dtype or
    shape is the user's input, exit 2); when it runs, the fake run is ours (exit 70)."""
    from torchinspect.guard import raised_by_model
    from torchinspect.trace.policy import trace_model

    exc = failed.original
    text = str(exc).lower()
    if "overflow" in text and ("storage" in text or "size" in text or "numel" in text):
        return InspectError(f"{case.name}: the {failed.mode} run's tensors for this input would "
                            f"be larger than any machine holds ({first_line(exc, limit=160)})",
                            hint="a smaller --input or --batch")
    ours = raised_by_model(exc, case.name)
    if ours is not None:
        return ours
    try:
        trace_model(case.model, example, device="meta", train=failed.mode == "training")
    except InspectError as plain:
        return plain
    except Exception:  # noqa: BLE001 - the plain forward fails its own way: ours to report
        return failed
    return failed


