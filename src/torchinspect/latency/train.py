"""``predict_train``: one eager training step's time on a named GPU, from a CPU.

The step is the memory predictor's own (``memory/step.py``: ``zero_grad(set_to_none)``,
forward and loss under autocast, ``backward``, ``optimizer.step()``), run once on fake CPU
tensors with CUDA's autocast lists and kernel routes (``memory/faking.py``,
``memory/kernels.py``), under the latency recorder (``ops.Recording``): every op of the
forward, of the backward (autograd on fake tensors: ``convolution_backward``, the attention
kernels' backward, ...) and of the optimizer (PyTorch's foreach kernels: one
``_foreach_*`` op per step of the update over all parameters) with its phase. The
optimizer's first call (its state made) is not recorded; a second call is, as on the GPU
after warm-up.

Each op is priced as in inference (``roofline.price``: the measured curve of its class at
its own dtype); the backward of a convolution, attention or normalisation on its forward
class's curve (no op sweep measured backward kernels). The host side is this CPU's probe
(``host.py``) times a host factor per phase fitted on the GPU host's development training
steps (``GpuTable.train``): an eager step is two pipelines, and a step is simulated op by op
(``timeline``: the host enqueues, the GPU runs when both have reached an op), so each phase's
time is what CUDA events recorded at the phase boundaries measure.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.latency.calibrated import LatencyGpu, latency_gpu
from torchinspect.latency.eager import HostModel, host_model
from torchinspect.latency.host import HostCost
from torchinspect.latency.ops import OpRecord, Recording
from torchinspect.latency.predict import FUNCTIONAL, LayerRow
from torchinspect.latency.roofline import OpTime, efficiency_table, price_ops

PHASES = ("forward", "backward", "optimizer")


@dataclass
class StepTrace:
    """The ops of one training step and its host-side counts, per phase."""

    ops: list[OpRecord] = field(default_factory=list)
    dispatched: dict[str, int] = field(default_factory=dict)
    module_calls: int = 0
    params: int = 0  # parameter tensors the optimizer updates
    nodes: int = 0  # autograd nodes the backward ran


@dataclass
class TrainBatch:
    """One batch's predicted step: per phase what CUDA events would measure, the GPU's own
    time and the host's, and where the time goes per layer type (forward + backward)."""

    batch: int
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    gpu_ms: dict[str, float]
    host_ms: dict[str, float]
    kernels: int
    layers: list[LayerRow] = field(default_factory=list)
    uncalibrated_ops: dict[str, int] = field(default_factory=dict)

    @property
    def step_ms(self) -> float:
        return self.forward_ms + self.backward_ms + self.optimizer_ms

    @property
    def binds(self) -> str:
        """Which pipeline sets the step: the host's enqueueing or the GPU."""
        return "host" if sum(self.host_ms.values()) > sum(self.gpu_ms.values()) else "gpu"

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "train_step_ms": self.step_ms,
                "forward_ms": self.forward_ms, "backward_ms": self.backward_ms,
                "optimizer_ms": self.optimizer_ms, "gpu_ms": dict(self.gpu_ms),
                "host_ms": dict(self.host_ms), "binds": self.binds, "kernels": self.kernels,
                "not_calibrated": dict(self.uncalibrated_ops),
                "layers": [r.to_dict() for r in self.layers]}


@dataclass
class TrainPrediction:
    """``inspect bench --predict GPU --train``: a training step, predicted, never measured."""

    model: str
    inputs: str
    gpu: str
    gpu_label: str
    calibrated: bool
    source: str
    optimizer: str
    weights: str  # the parameters' dtype
    autocast: str | None  # the forward's autocast dtype (None: no autocast)
    host: HostCost
    host_factors: dict[str, float]
    validation: dict[str, Any]
    results: list[TrainBatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"predicted": True, "mode": "train", "model": self.model, "inputs": self.inputs,
                "gpu": self.gpu, "gpu_label": self.gpu_label, "calibrated": self.calibrated,
                "table": self.source, "optimizer": self.optimizer, "weights": self.weights,
                "autocast": self.autocast, "host": self.host.to_dict(),
                "host_factors": dict(self.host_factors), "validation": dict(self.validation),
                "results": [r.to_dict() for r in self.results], "notes": list(self.notes)}


# ---- recording ------------------------------------------------------------------------------

class _Nodes:
    """Backward ops to the layer that made their autograd node: the forward maps each
    node to the innermost module running; the backward asks which node runs now."""

    def __init__(self, rec: Any) -> None:
        from torchinspect.privtorch import current_autograd_node

        self.rec = rec
        self.layers: dict[int, tuple[str, str]] = {}
        self.current = current_autograd_node()
        self.seen: set[int] = set()
        self.last: tuple[str, str] = ("", "")

    def forward_output(self, value: Any) -> None:
        import torch

        from torchinspect.privtorch import tree_leaves

        for t in tree_leaves(value):
            node = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
            if node is not None and id(node) not in self.layers:
                self.layers[id(node)] = self.rec.stack.top

    def backward_layer(self) -> tuple[str, str]:
        node = self.current() if self.current is not None else None
        if node is not None:
            self.seen.add(id(node))
            self.last = self.layers.get(id(node), self.last)
        return self.last


def record_step(case: Any, example: Any, *, gpu: str, weights: str | None, amp: str | None,
                optimizer: str = "adamw", loss: str = "sum") -> StepTrace:
    """One training step of ``case`` on fake CPU tensors with CUDA's routes, recorded."""
    from torchinspect.memory import step as steps
    from torchinspect.memory.faking import (
        Target,
        autocast_factory,
        fake_inputs,
        fake_state,
        run_error,
    )
    from torchinspect.memory.kernels import cuda_kernels
    from torchinspect.privtorch import fake_tensor_mode
    from torchinspect.trace.engine import forward_mode, model_kept

    cfg = steps.StepConfig(optimizer=optimizer, dtype=weights, amp=amp, loss=loss)
    target = Target("cuda", gpu, 0, "cpu")
    model = case.model
    fake = fake_tensor_mode(allow_non_fake_inputs=True)
    recording = Recording(model, None)
    rec = recording.rec
    nodes = _Nodes(rec)
    out = StepTrace()
    with model_kept(model, buffers=False), forward_mode(model, True), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake:
            state, _ = fake_state(model, "cpu", cfg.dtype)
            args, kwargs = fake_inputs(example, "cpu", cfg.dtype)
        params = [t for t in state.values() if t.requires_grad]
        opt = steps.make_optimizer(cfg.optimizer, params, True)

        def on_phase(name: str) -> None:
            rec.phase = name
            rec.recording = name != "optimizer"  # the first call makes the state: not timed
            rec.on_forward_output = nodes.forward_output if name == "forward" else None
            rec.layer_of = nodes.backward_layer if name == "backward" else None

        try:
            with fake, cuda_kernels(), recording:
                steps.train_step(model, state, args, kwargs, optimizer=opt, loss=cfg.loss,
                                 autocast=autocast_factory(cfg.amp, target), name=case.name,
                                 on_phase=on_phase)
                if opt is not None:
                    rec.host_tensors = _host_state(opt)
                    rec.recording, rec.layer_of = True, None
                    rec.stack.stack.clear()
                    with _layer("(optimizer)", rec):
                        opt.step()
        except InspectError:
            raise
        except Exception as exc:
            raise run_error(case.name, "training", exc) from exc
    out.ops = rec.trace.ops
    out.dispatched = dict(rec.dispatched_by_phase)
    out.module_calls = recording.stack.calls
    out.params = len(params)
    out.nodes = len(nodes.seen)
    return out


def _host_state(optimizer: Any) -> set[int]:
    """The optimizer state PyTorch keeps on the host (the step counters of a non-fused,
    non-capturable Adam/AdamW): ops on it launch no kernel."""
    out: set[int] = set()
    if any(g.get("capturable") or g.get("fused") for g in optimizer.param_groups):
        return out
    for entry in optimizer.state.values():
        step = entry.get("step")
        if step is not None:
            out.add(id(step))
    return out


@contextlib.contextmanager
def _layer(name: str, rec: Any) -> Any:
    rec.stack.stack.append((name, name))
    try:
        yield
    finally:
        rec.stack.stack.pop()


# ---- pricing --------------------------------------------------------------------------------

def price_step(trace: StepTrace, gpu: LatencyGpu, host: HostModel, batch: int,
               factors: dict[str, float]) -> TrainBatch:
    """Price every op, put host and GPU on one timeline, sum per phase and per layer."""
    table = efficiency_table(gpu)
    times = price_ops(trace.ops, gpu, "", None, table)
    backward = table.train.get("gpu_scale_backward", 1.0)
    times = [OpTime(t.compute_us, t.memory_us, t.us * backward, t.calibrated, t.kernels,
                    t.floor_us) if op.phase == "backward" else t
             for op, t in zip(trace.ops, times, strict=True)]
    per_host = _host_per_op(trace, times, host, factors)
    gpu_ms = dict.fromkeys(PHASES, 0.0)
    host_ms = {p: per_host[p] * sum(1 for o in trace.ops if o.phase == p) / 1e3 for p in PHASES}
    layers: dict[str, LayerRow] = {}
    uncal: dict[str, int] = {}
    kernels = 0.0
    for op, t in zip(trace.ops, times, strict=True):
        gpu_ms[op.phase] = gpu_ms.get(op.phase, 0.0) + t.us / 1e3
        kernels += t.kernels
        if not t.calibrated:
            uncal[op.name] = uncal.get(op.name, 0) + 1
        if op.phase == "optimizer":
            continue
        layers.setdefault(op.layer or FUNCTIONAL, LayerRow(op.layer or FUNCTIONAL)).add(op, t)
    phase_ms = timeline(trace.ops, times, per_host)
    return TrainBatch(batch=batch, forward_ms=phase_ms["forward"],
                      backward_ms=phase_ms["backward"], optimizer_ms=phase_ms["optimizer"],
                      gpu_ms=gpu_ms, host_ms=host_ms, kernels=round(kernels),
                      layers=sorted(layers.values(), key=lambda r: -r.us),
                      uncalibrated_ops=uncal)


def host_base(trace: StepTrace, times: Sequence[OpTime], host: HostModel,
              phase: str) -> float:
    """µs of a phase's host work before its factor: dispatched ops x op_us (and module calls
    x module_us in the forward, one op_us per parameter tensor in the optimizer), plus the
    kernels it launches at the launch factor (x op_us)."""
    cost = host.cost
    base = trace.dispatched.get(phase, 0) * cost.op_us
    if phase == "forward":
        base += trace.module_calls * cost.module_us
    if phase == "optimizer":
        base += trace.params * cost.op_us
    launches = sum(t.kernels for o, t in zip(trace.ops, times, strict=True) if o.phase == phase)
    return base + host.launch * launches * cost.op_us


def _host_per_op(trace: StepTrace, times: Sequence[OpTime], host: HostModel,
                 factors: dict[str, float]) -> dict[str, float]:
    """µs of host time per priced op of each phase: the phase's host work (``host_base``) x
    its factor, spread over the ops that launch kernels."""
    out = {}
    for phase in PHASES:
        n = sum(1 for o in trace.ops if o.phase == phase) or 1
        out[phase] = factors.get(phase, host.factor) * host_base(trace, times, host, phase) / n
    return out


def timeline(ops: Sequence[OpRecord], times: Sequence[OpTime],
             per_host: dict[str, float]) -> dict[str, float]:
    """ms per phase as CUDA events at the phase boundaries measure it: the host enqueues op
    after op (``per_host`` µs each), the GPU runs each once it is enqueued and the one before
    is done; an event fires when the host has recorded it and the GPU has finished what
    came before it."""
    host = gpu = 0.0
    marks: dict[str, float] = {}
    phase = ""
    for op, t in zip(ops, times, strict=True):
        if op.phase != phase:
            marks[op.phase] = max(host, gpu)
            phase = op.phase
        host += per_host.get(op.phase, 0.0)
        gpu = max(gpu, host) + t.us
    end = max(host, gpu)
    order = [p for p in PHASES if p in marks]
    out = dict.fromkeys(PHASES, 0.0)
    for i, p in enumerate(order):
        stop = marks[order[i + 1]] if i + 1 < len(order) else end
        out[p] = (stop - marks[p]) / 1e3
    return out


def predict_train(case: Any, gpu: str, *, batches: Sequence[int] | None = None,
                  dtype: str | None = None, amp: str | None = None, optimizer: str = "adamw",
                  loss: str = "sum", host: HostCost | None = None) -> TrainPrediction:
    """Predict one eager training step of ``case`` on GPU ``gpu``: weights in ``dtype``
    (None: as built, fp32 for a model built in fp32), the forward under autocast to ``amp``
    (bf16/fp16, fp32 master weights) or not, ``optimizer`` (adamw, adam, sgd,
    sgd-momentum, none: PyTorch's defaults on CUDA, foreach), at each of ``batches``."""
    from torchinspect.inputs import ExampleInputs, rebatch
    from torchinspect.sources.case import make_case

    target = latency_gpu(gpu)
    case = make_case(case, device="meta")
    example = case.require_example()
    if batches and not isinstance(example, ExampleInputs):
        raise InspectError(f"{case.name}: --batch needs inputs given as shapes",
                           hint="pass --input specs (e.g. --input 3,224,224), or leave out --batch")
    model = host_model(host)
    table = efficiency_table(target)
    factors = {p: table.train.get(f"host_factor_{p}", model.factor) for p in PHASES}
    from torchinspect.latency.predict import model_dtype

    weights = dtype or model_dtype(case.model)
    pred = TrainPrediction(
        model=case.name, inputs=case.describe_inputs(), gpu=target.spec.name,
        gpu_label=target.spec.label, calibrated=target.calibrated, source=target.source,
        optimizer=optimizer, weights=weights if amp is None else "fp32", autocast=amp,
        host=model.cost, host_factors=factors,
        validation=dict(table.validation.get("train", {})) if target.table else {})
    for b in (list(batches) if batches else [None]):
        ex = rebatch(example, b) if b is not None else example
        trace = record_step(case, ex, gpu=target.spec.name, weights=dtype, amp=amp,
                            optimizer=optimizer, loss=loss)
        batch = b if b is not None else _batch_of(ex)
        pred.results.append(price_step(trace, target, model, batch, factors))
    if model.cost.note:  # the user's cache refused or not saved (torchinspect.cache)
        pred.notes.append(model.cost.note)
    return pred


def _batch_of(example: Any) -> int:
    specs = example.specs() if hasattr(example, "specs") else []
    return int(specs[0].shape[0]) if specs and specs[0].shape else 1
