"""``predict_memory``: the peak GPU memory of inference and of a training step, without a GPU.

The model runs on fake tensors (``FakeTensorMode``: shapes, dtypes and aliasing, no data)
under `StorageTracker`; its log is replayed through the caching allocator's rules
(``timeline.replay``). Weights are never allocated, so a 70B model is predicted on a laptop.
The user's model is not changed: the forward runs through ``functional_call`` on fake copies
of its parameters and buffers, and train/eval flags and checkpoint wrappers are put back.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

from torchinspect.arguments import renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.gpus import match_device_name
from torchinspect.inputs import ExampleInputs, batch_of, rebatch
from torchinspect.memory import margins
from torchinspect.memory import step as steps
from torchinspect.memory.faking import (
    FakeRunFailed,
    Target,
    TrainingNeedsBatch,
    autocast_factory,
    blame,
    fake_inputs,
    fake_state,
    make_target,
    mark_kind,
    mark_state,
    model_sizes,
    run_error,
)
from torchinspect.memory.kernels import cuda_kernels
from torchinspect.memory.modules import ForwardModules
from torchinspect.memory.result import MemoryResult, RunMemory
from torchinspect.memory.step import StepConfig
from torchinspect.memory.timeline import replay
from torchinspect.memory.tracker import Log, StorageTracker
from torchinspect.memory.workspace import Workspaces, shipped_table
from torchinspect.privtorch import fake_tensor_mode, mod_tracker
from torchinspect.shapes import tensor_leaves
from torchinspect.sources.case import (
    ModelCase,
    ModelLike,
    ModelOptions,
    describe_inputs,
    make_case,
)
from torchinspect.trace.engine import forward_mode, model_kept


@renamed_keywords(model_or_case="model")
def predict_memory(model: ModelLike, inputs: Any = None, *, train: bool = True,
                   inference: bool = True, optimizer: str = "adamw", dtype: str | None = None,
                   amp: str | None = None, checkpointing: str | None = None, loss: str = "sum",
                   batch: int | None = None, device: str = "cuda", gpu: str | None = None,
                   foreach: bool | None = None, options: ModelOptions | None = None,
                   top: int = 10, fsdp: int | None = None,
                   fsdp_unit: str | None = None, calibrate: bool | None = None) -> MemoryResult:
    """Predicted peak memory of inference and of a training step (first and steady state).

    ``model``: a `ModelCase`, an ``nn.Module`` or any MODEL text. ``batch``
    sets the leading dimension of every input. ``device="cuda"`` follows the CUDA caching
    allocator (``torch.cuda.max_memory_allocated``); ``gpu`` names the GPU for the cuBLAS
    workspace (default: the one present, else h100). ``fsdp=N``: the per-GPU peak of FSDP2
    training over N GPUs, ``fully_shard`` on each ``fsdp_unit`` module (memory/fsdp.py).
    ``calibrate``: measure cuDNN workspaces on the GPU that is here (None: when ``gpu`` is
    it); without, the shipped table, and a ``peak_low``-``peak_high`` range where it has no
    entry (memory/workspace.py).
    """
    case = make_case(model, inputs, options=options)
    cfg = StepConfig(train=train, optimizer=optimizer, dtype=dtype, amp=amp,
                     checkpointing=checkpointing, loss=loss, foreach=foreach, fsdp=fsdp,
                     fsdp_unit=fsdp_unit)
    return predict_case(case, cfg, make_target(device, gpu, calibrate=calibrate), batch=batch,
                        inference=inference, top=top)


def predict_case(case: ModelCase, cfg: StepConfig, target: Target, *, batch: int | None = None,
                 inference: bool = True, top: int = 10) -> MemoryResult:
    """The prediction for one case and batch (the engine behind the CLI, sweeps and --fit)."""
    started = time.perf_counter()
    check_checkpointing(case, cfg)
    if cfg.amp and not target.faked:  # CUDA's autocast lists are emulated on fake CPU tensors
        target = replace(target, fake_device="cpu")
    case = _sized_lazy(case)
    example = example_at(case, batch)
    notes = step_notes(cfg, target)
    if cfg.fsdp:
        from torchinspect.memory.fsdp import describe

        notes.insert(0, describe(case, cfg))
    runs: dict[str, tuple[RunMemory, dict[str, int]]] = {}
    workspaces = make_workspaces(target)
    for mode in ("inference", "training"):
        if (mode == "inference" and inference) or (mode == "training" and cfg.train):
            try:
                runs[mode] = track(case, example, cfg, target, mode, top, workspaces)
            except TrainingNeedsBatch as exc:
                if not runs:  # nothing else to report: the error is the answer
                    raise
                notes.insert(0, f"training step not predicted: {exc.message}; {exc.hint}")
    result = memory_result(case, example, batch, cfg, target, runs, notes, workspaces)
    result.seconds = time.perf_counter() - started
    return result


def memory_result(case: ModelCase, example: Any, batch: int | None, cfg: StepConfig,
                  target: Target, runs: dict[str, tuple[RunMemory, dict[str, int]]],
                  notes: list[str], workspaces: Workspaces) -> MemoryResult:
    """The result of the runs made (``mode -> (RunMemory, sizes)``), with the notes."""
    sizes = runs[next(iter(runs))][1]
    notes += workspaces.notes(target.gpu)
    if target.device == "cuda" and not target.calibrate and not cfg.fsdp:
        kinds = [margins.run_kind(mode, cfg.amp) for mode in runs]
        for kind, (run, _) in zip(kinds, runs.values(), strict=True):
            margins.widen(run, kind)
        notes += [n for n in [margins.note(kinds)] if n]
    return MemoryResult(
        case.name, _describe(example), batch if batch is not None else batch_of(example),
        target.device, target.gpu, _config(cfg, target),
        sizes["params"], sizes["weights"], sizes["buffers"], sizes["input"],
        runs["inference"][0] if "inference" in runs else None,
        runs["training"][0] if "training" in runs else None, notes=notes)


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


def make_workspaces(target: Target) -> Workspaces:
    """The shipped table, and this GPU's calibration cache when calibrating."""
    table = shipped_table()
    measured_on = match_device_name(str(table.machine.get("gpu", "")))
    exact = target.gpu is not None and measured_on is not None and measured_on.name == target.gpu
    found = Workspaces(table, exact)
    if target.calibrate:
        from torchinspect.memory.calibrate import load_cache
        from torchinspect.memory.calibrate import machine as this_machine

        cache = load_cache(this_machine())
        found.calibration = cache
        found.calibrated = cache.entries
    return found


def track(case: ModelCase, example: Any, cfg: StepConfig, target: Target, mode: str,
          top: int, workspaces: Workspaces | None = None) -> tuple[RunMemory, dict[str, int]]:
    """Run one mode on fake tensors under the tracker; replay its log. A failure of the fake
    run is classified once its state is undone (faking.blame: the input's, the model's or
    ours)."""
    try:
        return _track(case, example, cfg, target, mode, top, workspaces)
    except FakeRunFailed as failed:
        raise blame(case, example, failed) from failed.original


def _track(case: ModelCase, example: Any, cfg: StepConfig, target: Target, mode: str,
           top: int, workspaces: Workspaces | None = None) -> tuple[RunMemory, dict[str, int]]:
    if cfg.fsdp:
        from torchinspect.memory.fsdp import track_sharded

        return track_sharded(case, example, cfg, target, mode, top)
    model = case.model
    training = mode == "training"
    fake: Any = contextlib.nullcontext()
    if target.faked:  # imported here: the meta path (summary, check) never needs it
        fake = fake_tensor_mode(allow_non_fake_inputs=True)
    tracker = StorageTracker(workspace=target.workspace, device_type=target.fake_device,
                             cudnn=target.device == "cuda",
                             gpu=target.gpu if target.device == "cuda" else None)
    with model_kept(model, buffers=False), forward_mode(model, training), \
            steps.checkpointed(model, cfg.checkpointing if training else None), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake:
            state, kinds = fake_state(model, target.fake_device, cfg.dtype)
            args, kwargs = fake_inputs(example, target.fake_device, cfg.dtype)
        for name, t in state.items():
            tracker.register(t, kinds[name])
        for t in tensor_leaves((args, kwargs)):
            tracker.register(t, "input")
        sizes = model_sizes(state, kinds, args, kwargs)
        try:
            _run(model, state, args, kwargs, cfg, target, tracker, fake, mode, case.name)
        except InspectError:
            raise
        except Exception as exc:
            raise run_error(case.name, mode, exc) from exc
        end = len(tracker.log.events)
    return replay_ranged(tracker.log, end, mode, target, type(model).__name__, top,
                         workspaces), sizes


def replay_ranged(log: Log, end: int, mode: str, target: Target, root: str, top: int,
                  workspaces: Workspaces | None) -> RunMemory:
    """The replay with each cuDNN workspace's point bytes; where some are estimated, two more
    with their low and high bytes give ``peak_low`` and ``peak_high``."""
    problems = {s: a.problem for s, a in log.allocs.items() if a.kind == "cudnn"}
    if workspaces is None:
        workspaces = make_workspaces(target)
    if target.calibrate and problems:
        from torchinspect.memory.calibrate import calibrate

        calibrate(problems.values(), workspaces.calibration)
    estimates = {s: workspaces.estimate(p) for s, p in problems.items()}

    def run(pick: str) -> RunMemory:
        sizes = {s: getattr(e, pick) for s, e in estimates.items()}
        return replay(log, end, mode=mode, device=target.device, root=root, top=top, sizes=sizes)

    result = run("point")
    result.peak_low = result.peak_high = result.peak
    if any(not e.exact for e in estimates.values()):
        high = run("high")
        # the allocator's block placement can differ by a block between replays: the range
        # always holds the point
        result.peak_low = min(run("low").peak, result.peak)
        result.peak_high = max(high.peak, result.peak)
        result.high_at = high.peak_at
    return result


def _run(model: Any, state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         cfg: StepConfig, target: Target, tracker: StorageTracker, fake: Any, mode: str,
         name: str) -> None:
    autocast = autocast_factory(cfg.amp, target)
    kernels = cuda_kernels() if target.emulated else contextlib.nullcontext()
    # a training run collects cycles at its step ends (below); an inference run has no graph
    # to keep alive, and leaves Python's collector as it is
    collected = contextlib.nullcontext() if mode == "inference" else collected_at_step_ends()
    with fake, tracker, module_tracker(mode) as modules, kernels, collected:
        tracker.modules = modules
        if mode == "inference":
            tracker.mark("inference")
            steps.inference(model, state, args, kwargs, autocast)
            return
        params = [t for t in state.values() if t.requires_grad]
        foreach = cfg.foreach if cfg.foreach is not None else (target.device == "cuda")
        optimizer = steps.make_optimizer(cfg.optimizer, params, foreach)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: mark_kind(tracker, p.grad, "grad"))
        for n in (1, 2):
            tracker.step = n
            steps.train_step(model, state, args, kwargs, optimizer=optimizer, loss=cfg.loss,
                             autocast=autocast, name=name, on_phase=tracker.mark)
            gc.collect()  # the step's outputs are gone: what only a cycle kept goes now
            mark_state(tracker, optimizer, target)
        tracker.mark("end")


@contextlib.contextmanager
def collected_at_step_ends() -> Iterator[None]:
    """Python's cyclic garbage collector off for a run, so that tensors kept only by a
    reference cycle (ModTracker's hooks around a graph nobody backpropagates, pytree's
    closures) are released at the end of each step, not whenever a collection happens to
    run: the same model predicts the same bytes whatever the process ran before it."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def module_tracker(mode: str) -> Any:
    """Forward hooks for inference; ModTracker (forward and backward) for training."""
    if mode == "inference":
        return ForwardModules()
    return mod_tracker()  # imports torch.distributed (seconds cold): inference never needs it


def _describe(example: Any) -> str:
    return describe_inputs(example)


def _config(cfg: StepConfig, target: Target) -> dict[str, Any]:
    d = asdict(cfg)
    d["foreach"] = cfg.foreach if cfg.foreach is not None else (target.device == "cuda")
    d["workspace"] = target.workspace
    return d


def step_notes(cfg: StepConfig, target: Target) -> list[str]:
    notes = []
    if target.emulated:
        notes.append("no GPU here: fake CPU tensors with CUDA's autocast lists and the CUDA "
                     "caching allocator's block rules")
    if target.device == "cuda":
        notes.append(f"includes the cuBLAS workspace of {target.gpu} "
                     f"({target.workspace / 2**20:g} MiB per thread that runs a matmul) and "
                     "cuDNN workspaces (convolution, RNN): "
                     + ("measured on this GPU, op by op" if target.calibrate else
                        "from the table measured on an H100, else a range"))
    return notes


def _sized_lazy(case: ModelCase) -> ModelCase:
    """A case whose lazy modules (``nn.LazyLinear``...) are sized on a meta copy, as the
    trace sizes them: the user's model stays lazy, the prediction sees real shapes."""
    from torchinspect.sources.case import materialize
    from torchinspect.sources.materialize import has_lazy, lazy_copy, size_lazy

    if not has_lazy(case.model) or case.example is None:
        return case
    args, kwargs = materialize(case.example, "meta")
    sized = size_lazy(lazy_copy(case.model), args, kwargs, name=case.name,
                      inputs=case.describe_inputs())
    return replace(case, model=sized)
