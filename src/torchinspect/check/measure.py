"""Measuring one model: build it (on meta), then run only the measurements its metrics need
(``COLLECTORS``, cheapest first). A model that cannot be built or run is a
:class:`ModelCheck` with an error, never an exception: the other models are still checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from torchinspect import device as devices
from torchinspect.bench import BenchOptions, run_bench
from torchinspect.check.config import ModelBudget
from torchinspect.check.metrics import Metric, Need, Noise, Reading
from torchinspect.check.records import ModelCheck
from torchinspect.errors import InspectError, first_line
from torchinspect.sources.case import ModelOptions, make_case
from torchinspect.sources.materialize import has_lazy
from torchinspect.trace import trace_case
from torchinspect.trace.static import collect_static


@dataclass
class Sample:
    """What one measurement yields: readings, and where they were taken (timings)."""

    readings: dict[Metric, Reading] = field(default_factory=dict)
    environment: dict[str, Any] | None = None


def _static(case: Any) -> Sample:
    _, stats = collect_static(case.model)
    return Sample(_param_readings(stats))


def _param_readings(stats: Any) -> dict[Metric, Reading]:
    return {Metric.params: Reading(float(stats.total)),
            Metric.trainable: Reading(float(stats.trainable)),
            Metric.size_mb: Reading((stats.param_bytes + stats.buffer_bytes) / 1e6)}


def _traced(case: Any) -> Sample:
    """One forward on meta (as `inspect summary`): MACs, activations and the static numbers."""
    trace = trace_case(case)
    return Sample({**_param_readings(trace.params),
                   Metric.macs: Reading(float(trace.total_macs)),
                   Metric.activation_mb: Reading(trace.activation_bytes / 1e6)})


def predict_memory_peaks(case: Any, gpu: str | None = None) -> Sample:
    """`inspect memory`'s predicted peaks on CUDA (the numbers `inspect summary` shows) for
    ``gpu`` (None: the GPU here, else the default): inference, and an AdamW training step when
    the model can train (a model whose training step cannot be predicted, e.g. no floating
    output, gets no train-mb reading)."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig

    target = make_target("cuda", gpu, fast=True)
    inference = predict_case(case, StepConfig(train=False), target, top=0).inference
    readings = {Metric.infer_mb: Reading(inference.peak / 1e6, note=_workspace_note(
        Metric.infer_mb, inference))} if inference else {}
    try:
        training = predict_case(case, StepConfig(), target, inference=False, top=0).training
    except InspectError:
        training = None
    if training is not None:
        readings[Metric.train_mb] = Reading(training.peak / 1e6,
                                            note=_workspace_note(Metric.train_mb, training))
    return Sample(readings)


def _workspace_note(metric: Metric, run: Any) -> str:
    """Where cuBLAS workspaces are most of a predicted peak (a small model), a budget or
    an allowed increase on it hardly sees the model: say so."""
    workspace = run.breakdown.get("workspace", 0)
    if not run.peak or workspace < run.peak / 2:
        return ""
    threads = ("one for the forward's thread and one for autograd's backward thread"
               if run.mode == "training" else "one for the thread that runs the forward")
    return (f"{metric.value} is {workspace / run.peak:.0%} cuBLAS workspace "
            f"({workspace / 2**20:g} MiB of {run.peak / 1e6:.2f} MB: {threads}), so a change in "
            "the model moves it little; activation-mb and size-mb follow the model itself")


def predict_forward(case: Any, gpu: str) -> Sample:
    """`inspect bench --predict GPU`'s eager latency at the example's batch (no GPU)."""
    from torchinspect.latency import predict_latency, validation_text

    pred = predict_latency(case, gpu)
    r = pred.results[0]
    note = (f"predicted-ms: PREDICTED eager latency on {pred.gpu} ({r.binds} binds; graph "
            f"replay {r.gpu_ms:.3f} ms), not measured; {pred.source}; "
            f"{validation_text(pred.validation)}")
    return Sample({Metric.predicted_ms: Reading(r.eager_ms, note=note)},
                  {"predicted": pred.gpu, "table": pred.source, "binds": r.binds,
                   "gpu_ms": r.gpu_ms})


def predict_step(case: Any, gpu: str | None) -> Sample:
    """`inspect bench --predict GPU --train --amp --dtype bf16`'s training step at the
    example's batch (no GPU): fp32 weights, forward and loss under autocast bf16, AdamW."""
    from torchinspect.gpus import target_gpu
    from torchinspect.latency import predict_train, validation_text

    pred = predict_train(case, target_gpu(gpu).name, amp="bf16")
    r = pred.results[0]
    note = (f"step-ms: PREDICTED eager training step on {pred.gpu} (forward {r.forward_ms:.2f}, "
            f"backward {r.backward_ms:.2f}, optimizer {r.optimizer_ms:.2f} ms; {r.binds} binds), "
            f"not measured; {pred.source}; {validation_text(pred.validation, 'training steps')}")
    return Sample({Metric.step_ms: Reading(r.step_ms, note=note)},
                  {"predicted": pred.gpu, "table": pred.source, "binds": r.binds})


def time_forward(case: Any, timing: Any = None) -> Sample:
    """Median forward latency (ms) at the example's batch with its noise, measured by
    `inspect bench`'s method (its warm-up and stopping rule unless ``timing`` is given) on
    the requested real device (auto/meta: cpu)."""
    extra = {"timing": timing} if timing is not None else {}
    result = run_bench(case, BenchOptions(device=devices.real_device(case.requested), **extra))
    row = result.configs[0]
    if row.status != "ok" or row.timing is None:
        raise InspectError(f"the latency could not be measured ({row.status}: {row.error or '-'})",
                           hint="run `inspect bench` on it to see why")
    s = row.timing.stats
    noise = Noise(iqr=s.iqr * 1e3, cov=s.cov, median_cov=s.median_cov, n=s.n)
    return Sample({Metric.latency_ms: Reading(s.median * 1e3, noise)}, result.environment)


# one collector per kind of measurement, given the case and --gpu (the GPU predictions are
# for; None: the GPU here, else the default); a trace also yields what the static pass does
COLLECTORS: dict[Need, Callable[[Any, str | None], Sample]] = {
    Need.static: lambda case, gpu: _static(case),
    Need.trace: lambda case, gpu: _traced(case),
    Need.memory: predict_memory_peaks,
    Need.step: predict_step,
    Need.timing: lambda case, gpu: time_forward(case),
}


def _collect(case: Any, metrics: set[Metric], gpu: str | None = None) -> Sample:
    needs = {m.need for m in metrics}
    if Need.static in needs and has_lazy(case.model):  # sizes come from a forward (on a copy)
        needs.add(Need.trace)
    if Need.trace in needs:
        needs.discard(Need.static)
    out = Sample()
    for need in Need:  # cheapest first: a model that cannot run fails before it is timed
        if need is Need.prediction and need in needs and gpu is not None:
            got = predict_forward(case, gpu)
            out.readings.update(got.readings)
            out.environment = out.environment or got.environment
        elif need in needs and need in COLLECTORS:
            got = COLLECTORS[need](case, gpu)
            out.readings.update(got.readings)
            out.environment = got.environment or out.environment
    return out


def options_for(mb: ModelBudget, base: Any) -> Any:
    """ModelOptions for one model: the command line's, overridden by its config entry;
    ``trust-pickle`` from a config counts only with --trust-pickle on the command line (a
    config may turn it off, never on). A config's ``python-path`` is only its own folder, for
    the models it lists itself; a model named on the command line gets no options from a
    config found above the current folder (analysis/check/plan.py)."""
    o = mb.options
    if not o:
        return base
    inputs = o.get("input")
    args = o.get("arg")
    return replace(
        base,
        inputs=[inputs] if isinstance(inputs, str) else (inputs if inputs is not None else base.inputs),
        args=args if args is not None else base.args,
        arch=o.get("arch", base.arch), weights=o.get("weights", base.weights),
        key=o.get("key", base.key), strict=o.get("strict", base.strict),
        # trust comes from the command line only: a config may turn these off, never on
        trust_pickle=base.trust_pickle and o.get("trust-pickle", True) is not False,
        batch=o.get("batch", base.batch), no_batch=o.get("no-batch", base.no_batch),
        weights_config=o.get("weights-config", base.weights_config),
        python_path=(*base.python_path, *o.get("python-path", ())))


def measure_model(mb: ModelBudget, metrics: set[Metric], options: Any = None,
                  gpu: str | None = None) -> ModelCheck:
    """The readings of ``metrics`` for one model, or the error that stopped it."""
    start = time.perf_counter()
    base = options or ModelOptions()
    shown = mb.model if isinstance(mb.model, str) else type(mb.model).__name__  # a module
    check = ModelCheck(shown, shown, "-", source=mb.source)
    case = None
    try:
        opts = options_for(mb, base)
        case = make_case(mb.target, options=opts,
                         need_inputs=any(m.need is not Need.static for m in metrics))
        check.name = case.name
        check.inputs = case.describe_inputs() if case.example is not None else "-"
        sample = _collect(case, metrics, gpu)
        check.readings, check.environment = sample.readings, sample.environment
    except KeyboardInterrupt:
        raise
    except InspectError as exc:
        check.error, check.hint = explain(exc, mb, base, case)
    except (Exception, SystemExit) as exc:  # the model's own code (or a bug of ours)
        check.error = f"{type(exc).__name__}: {first_line(exc)}"
        check.hint = f"run `inspect summary {shown} --debug` for the traceback"
    check.seconds = time.perf_counter() - start
    return check


_FORWARD = "the model's forward failed for input "


def explain(exc: InspectError, mb: ModelBudget, base: Any, case: Any) -> tuple[str, str | None]:
    """The message and hint for a model that failed, saying where its input came from:
    ``--input``, its config entry's ``input``, or the model's own ``example_input`` (the
    full shape: no batch dimension is added to it, unlike ``--input``)."""
    if not exc.message.startswith(_FORWARD) or case is None:
        return exc.message, exc.hint
    if "input" in mb.options:
        return exc.message, ("check input = ... in its [[tool.torchinspect.check.models]] entry "
                             "(shape, dtype, how many inputs) against the model's forward")
    if base.inputs:
        return exc.message, exc.hint
    shown = case.describe_inputs()
    reason = exc.message[len(_FORWARD) + len(shown):].removeprefix(": ")
    in_config = mb.source != "command line"
    if case.kind != "python":  # the source's own default input
        where = "its [[tool.torchinspect.check.models]] entry" if in_config else "the model"
        return (f"the model's forward failed for its default input {shown}: {reason}",
                f"give {where} an input that its forward accepts" if in_config else
                "this model's default input does not suit its forward; check the model")
    fix = f'declare example_input with its batch dimension ("1,{shown}")'
    if in_config:
        fix += (f', or set input = "1,{shown}" and no-batch = true in its '
                "[[tool.torchinspect.check.models]] entry")
    return (f"the model's forward failed for its example_input {shown}: {reason} (example_input "
            "is the full input shape: unlike --input, no batch dimension is added to it)", fix)
