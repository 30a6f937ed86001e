"""``--fsdp N``: the per-GPU peak of FSDP2 (``fully_shard``) training over N GPUs.

FSDP2 itself runs, on fake tensors, as rank 0 of a *fake* process group of N ranks
(``torch.distributed``'s ``fake`` backend: collectives that move no data). So every buffer it
really allocates is tracked like any other storage: the sharded parameters (1/N of each,
padded on dim 0 to a multiple of N), the all-gather buffer and the unsharded parameters of
each unit while it runs (the next unit's too when it is prefetched), the unsharded gradients,
the reduce-scatter input and output, the sharded gradients and the optimizer state of the
shards. Two things need help beyond `StorageTracker`:

* FSDP2 frees and re-allocates unsharded parameters by resizing their storage
  (``UntypedStorage.resize_``), which is no aten op: `storage_resizes` logs it.
* The optimizer steps on ``DTensor`` parameters: their local tensors are what is allocated
  (`ShardedTracker` looks through the wrapper).

The units are what a training script would wrap: ``fully_shard`` on each module of one type
(``--fsdp-unit``, default `default_unit`: the repeated module type with the most
parameters per instance, e.g. a transformer layer or a ResNet Bottleneck), then on the root;
``reshard_after_forward=True`` and FSDP2's default prefetching. Activations are those of the
batch given (the batch per GPU). Ranks hold equal shards, so rank 0 stands for every rank.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from torchinspect.errors import InspectError
from torchinspect.memory import step as steps
from torchinspect.memory.result import RunMemory
from torchinspect.memory.step import StepConfig
from torchinspect.memory.tracker import Event, Phase, StorageTracker
from torchinspect.privtorch import fake_store, fake_tensor_mode, mod_tracker
from torchinspect.shapes import tensor_leaves
from torchinspect.sources.case import ModelCase

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def _named(m: Any) -> str:
    return f"{type(m).__module__}.{type(m).__qualname__}"


def unit_modules(model: Any, unit: str) -> list[tuple[str, Any]]:
    """The modules of type ``unit`` (class name or qualified name) that no other module of
    that type contains, in ``named_modules`` order; the root is never a unit of its own."""
    found: list[tuple[str, Any]] = []
    for name, m in model.named_modules():
        if m is model or unit not in (type(m).__name__, _named(m)):
            continue
        if not any(name.startswith(outer + ".") for outer, _ in found):
            found.append((name, m))
    return found


def default_unit(model: Any) -> str | None:
    """The unit a training script would pick: among module types with 2+ instances that are
    neither containers (``Sequential``, ``ModuleList``) nor leaves (``Linear``, ``Embedding``),
    the one with the most parameters per instance (a transformer layer, a Bottleneck); None
    when no type repeats (then the root is the only unit)."""
    best: tuple[float, int, str] | None = None
    for kind in sorted({type(m).__name__ for m in model.modules()}):
        units = unit_modules(model, kind)
        if len(units) < 2 or type(units[0][1]) in _CONTAINERS or not any(
                True for _ in units[0][1].children()):
            continue
        size = sum(p.numel() for _, m in units for p in m.parameters()) / len(units)
        if size and (best is None or (size, len(units)) > best[:2]):
            best = (size, len(units), kind)
    return best[2] if best else None


def check_tied(model: Any, units: list[tuple[str, Any]]) -> None:
    """FSDP2 shards a parameter once, in the unit that holds it: one that a module outside the
    unit also uses (tied weights) would be sharded twice, silently untied."""
    owner = {id(p): name for name, u in units for p in u.parameters()}
    for name, m in model.named_modules(remove_duplicate=False):
        for pname, p in m._parameters.items():
            unit = owner.get(id(p))
            if unit is not None and name != unit and not name.startswith(unit + "."):
                raise InspectError(
                    f"--fsdp: {name}.{pname} is the same tensor as a parameter of {unit}, an "
                    "FSDP unit of its own; fully_shard cannot shard one parameter in two units",
                    hint="pass --fsdp-unit a module type that holds every user of the tensor")


def choose_unit(case: ModelCase, cfg: StepConfig) -> str | None:
    """The unit type for ``cfg``: ``--fsdp-unit`` (checked against the model) or the default."""
    if cfg.fsdp_unit is None:
        return default_unit(case.model)
    if not unit_modules(case.model, cfg.fsdp_unit):
        kinds = [k for k in steps.module_types(case.model) if k != type(case.model).__name__]
        raise InspectError(f"--fsdp-unit {cfg.fsdp_unit}: {case.name} has no module of that type "
                           "(below the root)", hint="one of " + ", ".join(kinds[:12])
                           + (", ..." if len(kinds) > 12 else ""))
    return cfg.fsdp_unit


def describe(case: ModelCase, cfg: StepConfig) -> str:
    """The note a prediction carries: what was sharded over how many GPUs."""
    unit = choose_unit(case, cfg)
    n = len(unit_modules(case.model, unit)) if unit else 0
    units = f"fully_shard on {n} {unit} modules and the root" if unit else "fully_shard on the root"
    return (f"FSDP2 over {cfg.fsdp} GPUs, the peak of one GPU: {units}; parameters, gradients "
            f"and optimizer state sharded 1/{cfg.fsdp} (weights at a peak include the units "
            "gathered then); the batch is the batch per GPU; inference runs under no_grad")


def shard(model: Any, mesh: Any, unit: str | None) -> list[str]:
    """``fully_shard`` each ``unit`` module, then the root (FSDP2's defaults:
    reshard_after_forward=True, no mixed-precision policy); returns the units' names."""
    from torch.distributed.fsdp import fully_shard

    units = unit_modules(model, unit) if unit else []
    check_tied(model, units)
    for _, m in reversed(units):  # inner before outer, as a bottom-up wrapping loop does
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return [name for name, _ in units]


@contextlib.contextmanager
def fake_mesh(world_size: int) -> Iterator[Any]:
    """A 1-D device mesh of ``world_size`` ranks over the ``fake`` process group, as rank 0."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_available():
        raise InspectError("--fsdp needs torch.distributed, which this torch build lacks",
                           hint="install a torch build with distributed support")
    if dist.is_initialized():
        raise InspectError("--fsdp predicts with a fake process group of its own, and this "
                           "process already has one", hint="predict outside torchrun")
    try:
        store = fake_store()  # its import registers the "fake" backend
    except ImportError as exc:
        raise InspectError(f"--fsdp needs torch's fake process group, which this torch lacks "
                           f"({exc})", hint="install a torch build with torch.distributed") from exc

    dist.init_process_group("fake", store=store, rank=0, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


class ShardedTracker(StorageTracker):
    """A `StorageTracker` that counts a ``DTensor``'s local tensor (the wrapper holds
    no memory) and logs storage resizes (`storage_resizes`)."""

    def _see(self, t: Any, phase: Phase, module: str, op: str) -> int | None:
        return super()._see(_local(t), phase, module, op)

    def storage_serial(self, tensor: Any) -> int | None:
        return super().storage_serial(_local(tensor))

    def resized(self, storage: Any, nbytes: int) -> None:
        """``storage`` now holds ``nbytes``: the old allocation is released, a new one made
        (counted as weights: FSDP2 resizes only the unsharded parameters it gathers)."""
        key = storage._cdata
        old = self._live.pop(key, None)
        if old is not None:
            self.log.events.append(Event(old, False, "resize_"))
        if nbytes:
            serial = self._new(nbytes, Phase.weights, self.current_module())
            self._live[key] = serial
            self.log.events.append(Event(serial, True, "resize_"))
            weakref.finalize(storage, self._release, key, serial)


def _local(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


@contextlib.contextmanager
def storage_resizes(tracker: ShardedTracker) -> Iterator[None]:
    """Log every ``UntypedStorage.resize_`` (FSDP2's free and re-allocation of unsharded
    parameters) for the duration of the block."""
    cls = torch.UntypedStorage
    own = cls.__dict__.get("resize_")
    original = cls.resize_

    def resize_(storage: Any, size: int) -> Any:
        out = original(storage, size)
        tracker.resized(storage, int(size))
        return out

    cls.resize_ = resize_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        if own is None:
            del cls.resize_
        else:
            cls.resize_ = own  # type: ignore[method-assign]


class NoOptimizer:
    """``--optimizer none`` under FSDP: gradients are cleared between steps, nothing stepped."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.state: dict[Any, Any] = {}
        self.param_groups: list[dict[str, Any]] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        return None


def inference(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], autocast: Any) -> None:
    """An eval forward under ``no_grad`` (FSDP2 refuses ``inference_mode``: its unsharded
    parameters are written in place)."""
    with torch.no_grad(), autocast():
        model(*args, **kwargs)


def make_optimizer(name: str, model: Any, foreach: bool | None) -> Any:
    """The optimizer over the (sharded) parameters, or `NoOptimizer`."""
    params = [p for p in model.parameters() if p.requires_grad]
    return steps.make_optimizer(name, params, foreach) or NoOptimizer(model)


def empty_copy(model: Any, device: str, dtype: str | None) -> Any:
    """A copy of the model whose parameters and buffers are new, uninitialized tensors on
    ``device`` (fake ones under ``FakeTensorMode``), cast to ``dtype``; tied weights stay
    tied (``to_empty`` would untie them) and the user's model is not changed."""
    cast = steps.DTYPES[dtype] if dtype else None
    memo: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        dt = cast if cast is not None and t.is_floating_point() else t.dtype
        new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=dt, device=device)
        if isinstance(t, torch.nn.Parameter):
            new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
        memo[id(t)] = new
    return copy.deepcopy(model, memo)


def sharded_copy(model: Any, mesh: Any, unit: str | None, device: str,
                 dtype: str | None) -> tuple[Any, list[str]]:
    """`empty_copy` on ``device``, sharded by `shard` (how the benchmark builds the
    model it measures, on the GPU)."""
    work = empty_copy(model, device, dtype)
    return work, shard(work, mesh, unit)


def track_sharded(case: ModelCase, example: Any, cfg: StepConfig, target: Any, mode: str,
                  top: int) -> tuple[RunMemory, dict[str, int]]:
    """`predict.track` for ``cfg.fsdp`` ranks: FSDP2 on fake tensors, rank 0's log."""
    from torchinspect.memory.faking import fake_inputs, run_error
    from torchinspect.memory.timeline import replay
    from torchinspect.trace.engine import forward_mode

    unit = choose_unit(case, cfg)
    if cfg.fsdp is None:
        raise InspectError("a sharded prediction needs --fsdp N", hint="e.g. --fsdp 2")
    fake = fake_tensor_mode(allow_non_fake_inputs=True)
    tracker = ShardedTracker(workspace=target.workspace, device_type=target.fake_device,
                             gpu=target.gpu)
    training = mode == "training"
    with fake_mesh(cfg.fsdp) as mesh, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake:
            model = empty_copy(case.model, target.fake_device, cfg.dtype)
        # checkpointing before fully_shard, as a training script applies them
        with steps.checkpointed(model, cfg.checkpointing if training else None):
            with fake:
                shard(model, mesh, unit)
                args, kwargs = fake_inputs(example, target.fake_device, cfg.dtype)
            for t in model.parameters():
                tracker.register(t, "weights")
            for t in model.buffers():
                tracker.register(t, "buffers")
            for t in tensor_leaves((args, kwargs)):
                tracker.register(t, "input")
            sizes = shard_sizes(model, args, kwargs)
            with forward_mode(model, training):
                try:
                    _run(model, args, kwargs, cfg, target, tracker, fake, mode, case.name)
                except InspectError:
                    raise
                except Exception as exc:
                    raise run_error(case.name, mode, exc) from exc
        end = len(tracker.log.events)
    root = type(case.model).__name__
    _rename_root(tracker, type(model).__name__, root)
    return replay(tracker.log, end, mode=mode, device=target.device, root=root, top=top), sizes


def _rename_root(tracker: ShardedTracker, fsdp_root: str, root: str) -> None:
    """Module names under the user's class name (``fully_shard`` renamed the copy's class:
    ``ResNet`` -> ``FSDPResNet``)."""
    for a in tracker.log.allocs.values():
        if a.module == fsdp_root or a.module.startswith(fsdp_root + "."):
            a.module = root + a.module[len(fsdp_root):]


def _run(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], cfg: StepConfig,
         target: Any, tracker: ShardedTracker, fake: Any, mode: str, name: str) -> None:
    from torchinspect.memory.faking import autocast_factory, mark_kind, mark_state
    from torchinspect.memory.kernels import cuda_kernels

    autocast = autocast_factory(cfg.amp, target)
    kernels = cuda_kernels() if target.emulated else contextlib.nullcontext()
    with fake, tracker, storage_resizes(tracker), mod_tracker() as modules, kernels:
        tracker.modules = modules
        if mode == "inference":
            tracker.mark("inference")
            inference(model, args, kwargs, autocast)
            return
        foreach = cfg.foreach if cfg.foreach is not None else (target.device == "cuda")
        optimizer = make_optimizer(cfg.optimizer, model, foreach)
        for n in (1, 2):
            tracker.step = n
            steps.train_step(model, {}, args, kwargs, optimizer=optimizer, loss=cfg.loss,
                             autocast=autocast, name=name, on_phase=tracker.mark)
            for p in model.parameters():  # FSDP2 sets the sharded .grad itself
                mark_kind(tracker, p.grad, "grad")
            mark_state(tracker, optimizer, target)
        tracker.mark("end")


def shard_sizes(model: Any, args: Any, kwargs: Any) -> dict[str, int]:
    """Parameters (all ranks) and the bytes one rank holds: its shards, buffers, input."""
    params = list(model.parameters())
    return {"params": sum(p.numel() for p in params),
            "weights": sum(_local(p).untyped_storage().nbytes() for p in params),
            "buffers": sum(b.numel() * b.element_size() for b in model.buffers()),
            "input": sum(t.numel() * t.element_size()
                         for t in tensor_leaves((args, kwargs)))}
