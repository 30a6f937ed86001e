"""``predict_memory``: the peak GPU memory of inference and of a training step, without a GPU.

The model runs on fake tensors (``FakeTensorMode``: shapes, dtypes and aliasing, no data)
under :class:`StorageTracker`; its log is replayed through the caching allocator's rules
(``timeline.replay``). Weights are never allocated, so a 70B model is predicted on a laptop.
The user's model is not changed: the forward runs through ``functional_call`` on fake copies
of its parameters and buffers, and train/eval flags and checkpoint wrappers are put back.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from torchinspect.arguments import renamed_keywords
from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.inputs import ExampleInputs, rebatch
from torchinspect.memory import step as steps
from torchinspect.memory.autocast import cuda_autocast_on_cpu
from torchinspect.memory.gpu import cublas_workspace, parse_gpu
from torchinspect.memory.kernels import cuda_kernels
from torchinspect.memory.modules import ForwardModules
from torchinspect.memory.result import MemoryResult, RunMemory
from torchinspect.memory.step import StepConfig
from torchinspect.memory.timeline import replay
from torchinspect.memory.tracker import StorageTracker
from torchinspect.shapes import map_tensors, tensor_leaves
from torchinspect.sources.case import (
    ModelCase,
    ModelLike,
    ModelOptions,
    describe_inputs,
    make_case,
    materialize,
)
from torchinspect.trace.engine import forward_mode, model_kept


@dataclass(frozen=True)
class Target:
    """The device the prediction is for, and the one the fake tensors run on."""

    device: str  # cuda: caching allocator, CUDA autocast lists, cuBLAS workspace; cpu: bytes
    gpu: str | None
    workspace: int
    # the fake tensors' device: cpu (the backward of fake CUDA tensors needs a live CUDA
    # context, and CPU fake tensors give one answer everywhere); cuda for comparisons on a GPU
    fake_device: str

    @property
    def emulated(self) -> bool:
        return self.device == "cuda" and self.fake_device in ("cpu", "meta")

    @property
    def faked(self) -> bool:
        """Fake tensors (FakeTensorMode) rather than plain meta tensors."""
        return self.fake_device != "meta"


def make_target(device: str = "cuda", gpu: str | None = None, *, fast: bool = False) -> Target:
    """``fast``: plain meta tensors instead of fake CPU tensors (no fake-tensor dispatch
    overhead, several times faster; same numbers for inference, see test_memory)."""
    if device not in ("cuda", "cpu"):
        raise InspectError(f"--device {device!r}: memory predicts for cuda or cpu",
                           hint="--device cuda (the default) or --device cpu")
    if device == "cpu":
        return Target("cpu", None, 0, "cpu")
    name = parse_gpu(gpu)
    return Target("cuda", name, cublas_workspace(name), "meta" if fast else "cpu")


@renamed_keywords(model_or_case="model")
def predict_memory(model: ModelLike, inputs: Any = None, *, train: bool = True,
                   inference: bool = True, optimizer: str = "adamw", dtype: str | None = None,
                   amp: str | None = None, checkpointing: str | None = None, loss: str = "sum",
                   batch: int | None = None, device: str = "cuda", gpu: str | None = None,
                   foreach: bool | None = None, options: ModelOptions | None = None,
                   top: int = 10, fsdp: int | None = None,
                   fsdp_unit: str | None = None) -> MemoryResult:
    """Predicted peak memory of inference and of a training step (first and steady state).

    ``model``: a :class:`ModelCase`, an ``nn.Module`` or any MODEL text. ``batch``
    sets the leading dimension of every input. ``device="cuda"`` follows the CUDA caching
    allocator (``torch.cuda.max_memory_allocated``); ``gpu`` names the GPU for the cuBLAS
    workspace (default: the one present, else h100). ``fsdp=N``: the per-GPU peak of FSDP2
    training over N GPUs, ``fully_shard`` on each ``fsdp_unit`` module (memory/fsdp.py).
    """
    case = make_case(model, inputs, options=options)
    cfg = StepConfig(train=train, optimizer=optimizer, dtype=dtype, amp=amp,
                     checkpointing=checkpointing, loss=loss, foreach=foreach, fsdp=fsdp,
                     fsdp_unit=fsdp_unit)
    return predict_case(case, cfg, make_target(device, gpu), batch=batch,
                        inference=inference, top=top)


def predict_case(case: ModelCase, cfg: StepConfig, target: Target, *, batch: int | None = None,
                 inference: bool = True, top: int = 10) -> MemoryResult:
    """The prediction for one case and batch (the engine behind the CLI, sweeps and --fit)."""
    started = time.perf_counter()
    check_checkpointing(case, cfg)
    if cfg.amp and not target.faked:  # CUDA's autocast lists are emulated on fake CPU tensors
        target = replace(target, fake_device="cpu")
    example = example_at(case, batch)
    notes = _notes(cfg, target)
    if cfg.fsdp:
        from torchinspect.memory.fsdp import describe

        notes.insert(0, describe(case, cfg))
    runs = {}
    for mode in ("inference", "training"):
        if (mode == "inference" and inference) or (mode == "training" and cfg.train):
            try:
                runs[mode] = track(case, example, cfg, target, mode, top)
            except TrainingNeedsBatch as exc:
                if not runs:  # nothing else to report: the error is the answer
                    raise
                notes.insert(0, f"training step not predicted: {exc.message}; {exc.hint}")
    sizes = runs[next(iter(runs))][1]
    result = MemoryResult(
        case.name, _describe(example), batch, target.device, target.gpu, _config(cfg, target),
        sizes["params"], sizes["weights"], sizes["buffers"], sizes["input"],
        runs["inference"][0] if "inference" in runs else None,
        runs["training"][0] if "training" in runs else None, notes=notes)
    result.seconds = time.perf_counter() - started
    return result


def check_checkpointing(case: ModelCase, cfg: StepConfig) -> None:
    if cfg.checkpointing and cfg.train and not any(
            type(m).__name__ == cfg.checkpointing for m in case.model.modules()):
        kinds = [k for k in steps.module_types(case.model) if k != type(case.model).__name__]
        raise InspectError(f"--checkpointing {cfg.checkpointing}: {case.name} has no module of "
                           "that type", hint="one of " + ", ".join(kinds[:12])
                           + (", ..." if len(kinds) > 12 else ""))


def example_at(case: ModelCase, batch: int | None) -> Any:
    """The case's example with its batch dimension set to ``batch`` (None: as it is)."""
    example = case.require_example()
    if batch is None:
        return example
    if not isinstance(example, ExampleInputs):
        raise InspectError(f"{case.name}: --batch needs inputs given as shapes",
                           hint="pass --input, e.g. --input 3,224,224")
    return rebatch(example, batch)


def track(case: ModelCase, example: Any, cfg: StepConfig, target: Target, mode: str,
          top: int) -> tuple[RunMemory, dict[str, int]]:
    """Run one mode on fake tensors under the tracker; replay its log."""
    if cfg.fsdp:
        from torchinspect.memory.fsdp import track_sharded

        return track_sharded(case, example, cfg, target, mode, top)
    model = case.model
    training = mode == "training"
    fake: Any = contextlib.nullcontext()
    if target.faked:  # imported here: the meta path (summary, check) never needs it
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)
    tracker = StorageTracker(workspace=target.workspace, device_type=target.fake_device)
    with model_kept(model, buffers=False), forward_mode(model, training), \
            steps.checkpointed(model, cfg.checkpointing if training else None), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake:
            state, kinds = fake_state(model, target.fake_device, cfg.dtype)
            args, kwargs = fake_inputs(example, target.fake_device, cfg.dtype)
        for name, t in state.items():
            tracker.register(t, kinds[name])
        for t in _leaves((args, kwargs)):
            tracker.register(t, "input")
        sizes = _sizes(state, kinds, args, kwargs)
        try:
            _run(model, state, args, kwargs, cfg, target, tracker, fake, mode, case.name)
        except InspectError:
            raise
        except Exception as exc:
            raise _run_error(case.name, mode, exc) from exc
        end = len(tracker.log.events)
    return replay(tracker.log, end, mode=mode, device=target.device, root=type(model).__name__,
                  top=top), sizes


def _run(model: Any, state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         cfg: StepConfig, target: Target, tracker: StorageTracker, fake: Any, mode: str,
         name: str) -> None:
    autocast = autocast_factory(cfg.amp, target)
    kernels = cuda_kernels() if target.emulated else contextlib.nullcontext()
    with fake, tracker, module_tracker(mode) as modules, kernels:
        tracker.modules = modules
        if mode == "inference":
            tracker.mark("inference")
            steps.inference(model, state, args, kwargs, autocast)
            return
        params = [t for t in state.values() if t.requires_grad]
        foreach = cfg.foreach if cfg.foreach is not None else (target.device == "cuda")
        optimizer = steps.make_optimizer(cfg.optimizer, params, foreach)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: _mark(tracker, p.grad, "grad"))
        for n in (1, 2):
            tracker.step = n
            steps.train_step(model, state, args, kwargs, optimizer=optimizer, loss=cfg.loss,
                             autocast=autocast, name=name, on_phase=tracker.mark)
            _mark_state(tracker, optimizer, target)
        tracker.mark("end")


def module_tracker(mode: str) -> Any:
    """Forward hooks for inference; ModTracker (forward and backward) for training."""
    if mode == "inference":
        return ForwardModules()
    # imported here: it imports torch.distributed (seconds cold), which inference never needs
    from torch.distributed._tools.mod_tracker import ModTracker

    return ModTracker()


def _mark(tracker: StorageTracker, tensor: Any, kind: str) -> None:
    serial = tracker.storage_serial(tensor)
    if serial is not None:
        tracker.log.allocs[serial].kind = kind


def _mark_state(tracker: StorageTracker, optimizer: Any, target: Target) -> None:
    """Optimizer state is state; a step counter the real optimizer keeps on the host is not
    device memory (non-fused, non-capturable Adam/AdamW)."""
    if optimizer is None:
        return
    host_steps = target.emulated and not any(
        g.get("capturable") or g.get("fused") for g in optimizer.param_groups)
    for entry in optimizer.state.values():
        for key, value in entry.items():
            kind = "host" if key == "step" and host_steps else "state"
            _mark(tracker, value, kind)


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


def _leaves(value: Any) -> Iterator[Any]:
    yield from tensor_leaves(value)


def _sizes(state: dict[str, Any], kinds: dict[str, str], args: Any, kwargs: Any) -> dict[str, int]:
    nbytes = {k: sum(t.numel() * t.element_size() for n, t in state.items() if kinds[n] == k)
              for k in ("weights", "buffers")}
    return {"params": sum(t.numel() for n, t in state.items() if kinds[n] == "weights"),
            "weights": nbytes["weights"], "buffers": nbytes["buffers"],
            "input": sum(t.numel() * t.element_size() for t in _leaves((args, kwargs)))}


class TrainingNeedsBatch(InspectError):
    """BatchNorm refuses to train on one value per channel (a batch of 1 at the end)."""


def _run_error(name: str, mode: str, exc: Exception) -> InspectError:
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
    return InspectError(f"{name}: the {mode} run on fake tensors failed: {type(exc).__name__}: "
                        f"{text}", hint="rerun with --debug for the traceback",
                        status=ExitStatus.INTERNAL)


def _describe(example: Any) -> str:
    return describe_inputs(example)


def _config(cfg: StepConfig, target: Target) -> dict[str, Any]:
    d = asdict(cfg)
    d["foreach"] = cfg.foreach if cfg.foreach is not None else (target.device == "cuda")
    d["workspace"] = target.workspace
    return d


def _notes(cfg: StepConfig, target: Target) -> list[str]:
    notes = []
    if target.emulated:
        notes.append("no GPU here: fake CPU tensors with CUDA's autocast lists and the CUDA "
                     "caching allocator's block rules")
    if target.device == "cuda":
        notes.append(f"includes the cuBLAS workspace of {target.gpu} "
                     f"({target.workspace / 2**20:g} MiB per thread that runs a matmul); cuDNN "
                     "workspaces (convolution, RNN) are not predicted")
    return notes

