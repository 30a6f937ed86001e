"""``inspect bench``: latency and throughput of a model case over batch sizes and dtypes.

``run_bench`` takes a ``ModelCase`` (weights sized on
meta before anything is allocated) and ``BenchOptions``, and returns a
``BenchResult``. For each dtype and batch size it builds the inputs, runs the model in
eval mode under ``torch.inference_mode`` (optionally autocast, channels-last,
``torch.compile`` or a CUDA graph captured on a side stream) and times it with
``torchinspect.bench.timing.measure``. An out-of-memory configuration becomes an ``oom``
row and the sweep goes on (larger batches ``skipped`` or ``tried``, as chosen). The user's
module is never mutated: training flags and global switches (threads, cuDNN benchmark) are
restored in ``finally``; dtype or layout changes happen on a copy unless the model was
built by us. The core never prints: progress goes to an injected callback.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchinspect import device as devices
from torchinspect.arguments import ProgressFn
from torchinspect.bench.environment import capture_environment, throttle_reasons
from torchinspect.bench.modes import OnOom, Status
from torchinspect.bench.precision import tf32_switch
from torchinspect.bench.profile import ProfileResult, layout_hint, profile_step
from torchinspect.bench.stats import PERCENTILE_METHOD
from torchinspect.bench.timing import Timing, TimingConfig, fmt_time, measure
from torchinspect.dtypes import RUN, SHORT, short_name
from torchinspect.errors import InspectError, first_line, is_out_of_memory
from torchinspect.guard import model_code, training_mode
from torchinspect.inputs import ExampleInputs, TensorSpec, rebatch
from torchinspect.sources.case import ModelLike, ModelOptions, make_case

DTYPES = {short: SHORT[short] for short in RUN}  # short name -> torch name (dtypes.py)
NOISY_COV = 0.025  # CoV above which a row is flagged noisy
LAUNCH_BOUND_RATIO = 0.8  # host enqueue time / device time above which a run is launch-bound
MAX_BATCH_CAP = 1 << 16
FAST_INPUT_BYTES = 64 << 20  # larger CUDA inputs are generated on the device


def parse_dtype(text: str) -> str:
    short = short_name(text)
    if short is None or short not in DTYPES:
        raise InspectError(f"--dtype {text!r} is not a dtype", hint="use fp32, fp16 or bf16 "
                           "(a comma list benchmarks each, e.g. fp32,fp16)")
    return short


@dataclass(frozen=True)
class BenchOptions:
    """What to measure and how (the CLI's bench options, one object)."""

    device: str = "cpu"
    batches: tuple[int, ...] | None = None  # None: the example's own batch size
    dtypes: tuple[str, ...] = ("fp32",)
    amp: bool = False  # fp32 weights, forward under autocast(dtype); fp32 -> fp16 (cuda)/bf16 (cpu)
    channels_last: bool = False
    compile: str | None = None  # torch.compile mode ("default", "reduce-overhead", ...)
    cuda_graphs: bool = False
    threads: int | None = None
    cudnn_benchmark: bool = True
    tf32: bool | None = None  # TF32 for fp32 matmuls and convolutions; None: PyTorch's settings
    timing: TimingConfig = field(default_factory=TimingConfig)
    on_oom: OnOom | str = OnOom.skip  # after an OOM batch: skip the larger ones, or try them
    max_batch: bool = False
    profile: bool = False
    profile_trace: str | None = None  # Chrome trace file written by --profile
    profile_rows: int = 15
    save_samples: bool = False
    protect: tuple[str, ...] = ()  # input files the trace file must never replace

    def flags(self) -> dict[str, Any]:
        return {"amp": self.amp, "channels_last": self.channels_last, "compile": self.compile,
                "cuda_graphs": self.cuda_graphs, "cudnn_benchmark": self.cudnn_benchmark,
                "tf32": self.tf32,
                "threads": self.threads, "on_oom": self.on_oom}


@dataclass
class ConfigResult:
    """One configuration (dtype, batch): measured, or why not."""

    dtype: str
    batch: int | None
    status: Status
    timing: Timing | None = None
    samples_per_iter: int = 1
    compile_s: float | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.dtype} batch {self.batch if self.batch is not None else '-'}"

    @property
    def throughput(self) -> float | None:
        """Samples per second over the synchronized timed blocks."""
        t = self.timing
        if t is None or t.wall_s <= 0:
            return None
        return self.samples_per_iter * t.iters / t.wall_s

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        return {"dtype": self.dtype, "batch": self.batch, "status": self.status,
                "samples_per_iter": self.samples_per_iter, "throughput": self.throughput,
                "compile_s": self.compile_s, "peak_allocated": self.peak_allocated,
                "peak_reserved": self.peak_reserved, "error": self.error,
                "warnings": list(self.warnings),
                "timing": self.timing.to_dict(samples) if self.timing else None}


@dataclass
class MaxBatch:
    """``--max-batch``: the largest batch that fits, and the probes that found it."""

    batch: int | None
    probes: list[tuple[int, bool, int | None]]  # (batch, fits, peak allocated bytes)
    capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "capped": self.capped,
                "probes": [{"batch": b, "fits": f, "peak_allocated": p} for b, f, p in self.probes]}


@dataclass
class BenchResult:
    model: str
    inputs: str
    device: str
    options: BenchOptions
    environment: dict[str, Any]
    configs: list[ConfigResult] = field(default_factory=list)
    max_batch: MaxBatch | None = None
    profile: ProfileResult | None = None
    notes: list[str] = field(default_factory=list)
    weights: dict[str, Any] | None = None  # WeightsOrigin.to_dict(): what was timed

    @property
    def ok(self) -> bool:
        return any(c.status == Status.ok for c in self.configs)

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "model": self.model, "inputs": self.inputs, "device": self.device,
            "dtypes": list(o.dtypes), "batches": list(o.batches) if o.batches else None,
            "flags": o.flags(), "timing_config": o.timing.to_dict(),
            "percentile_method": PERCENTILE_METHOD, "environment": self.environment,
            "configs": [c.to_dict(o.save_samples) for c in self.configs],
            "max_batch": self.max_batch.to_dict() if self.max_batch else None,
            "profile": self.profile.to_dict() if self.profile else None,
            "notes": list(self.notes), "weights": self.weights,
        }


# ------------------------------------------------------------------ helpers


def _cast_inputs(value: Any, dtype: Any, channels_last: bool) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        if channels_last and value.dim() == 4:
            value = value.contiguous(memory_format=torch.channels_last)
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_cast_inputs(v, dtype, channels_last) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_inputs(v, dtype, channels_last) for v in value)
    if isinstance(value, dict):
        return {k: _cast_inputs(v, dtype, channels_last) for k, v in value.items()}
    return value


def _on_device(example: ExampleInputs, device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Large inputs made on the GPU itself (randn there; integer inputs as the spec says):
    generating gigabytes on the CPU first would take longer than the benchmark."""
    import torch

    def make(tree: Any) -> Any:
        if isinstance(tree, TensorSpec):
            dtype = getattr(torch, tree.dtype)
            if dtype.is_floating_point:
                return torch.randn(tree.shape, device=device, dtype=dtype)
            return tree.make(device)
        if isinstance(tree, dict):
            return {k: make(v) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(make(v) for v in tree)
        return tree

    return tuple(make(example.args)), dict(make(example.kwargs))


def _batch_of(example: Any) -> int | None:
    if isinstance(example, ExampleInputs):
        specs = example.specs()
        if specs and specs[0].shape:
            return int(specs[0].shape[0])
    return None


@contextlib.contextmanager
def _global_switches(opts: BenchOptions, device: str) -> Iterator[None]:
    """Thread count, cuDNN benchmark and TF32 for the run; restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    cudnn = torch.backends.cudnn.benchmark
    try:
        if opts.threads:
            torch.set_num_threads(opts.threads)
        if device.startswith("cuda"):
            torch.backends.cudnn.benchmark = opts.cudnn_benchmark
        with tf32_switch(opts.tf32 if device.startswith("cuda") else None):
            yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cudnn.benchmark = cudnn


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _check_options(opts: BenchOptions, device: str) -> None:
    cuda = device.startswith("cuda")
    if opts.cuda_graphs and not cuda:
        raise InspectError("--cuda-graphs needs a CUDA device", hint="add --device cuda")
    if opts.cuda_graphs and opts.compile:
        raise InspectError("--cuda-graphs and --compile cannot be combined",
                           hint="use --compile reduce-overhead (CUDA graphs inside torch.compile), "
                           "or --cuda-graphs alone")
    if opts.max_batch and not cuda:
        raise InspectError("--max-batch searches GPU memory and needs a CUDA device",
                           hint="add --device cuda (on CPU it would exhaust the host's RAM)")
    if opts.on_oom not in set(OnOom):
        raise InspectError(f"--on-oom {opts.on_oom!r} is not one of "
                           f"{', '.join(m.value for m in OnOom)}",
                           hint="skip: larger batches are skipped after an OOM; try: tried anyway")
    if opts.amp and any(d == "fp32" for d in opts.dtypes) and len(opts.dtypes) > 1:
        raise InspectError("--amp with several --dtype values is ambiguous",
                           hint="with --amp, --dtype names the autocast dtype: fp16 or bf16")
    t = opts.timing
    if t.max_time < t.min_time:
        raise InspectError(f"--max-time {t.max_time} is below --min-time {t.min_time}",
                           hint="raise --max-time or lower --min-time")


# ------------------------------------------------------------------ one configuration


class _Runner:
    """Runs configurations of one model on one device (state shared across the sweep)."""

    def __init__(self, case: Any, opts: BenchOptions, device: str, progress: ProgressFn | None,
                 clock: Callable[[], float]):
        import torch

        self.torch = torch
        self.case, self.opts, self.device = case, opts, device
        self.cuda = device.startswith("cuda")
        self.progress, self.clock = progress, clock
        self.base_example = case.example
        self.unusable: str | None = None  # the device broke (a failed graph capture): why

    def say(self, text: str, final: bool = False) -> None:
        if self.progress is not None:
            if final:
                self.progress(text, final=True)
            else:
                self.progress(text)

    def model_for(self, base: Any, owned: bool, dtype: str) -> Any:
        """``base`` in ``dtype`` (and channels-last): in place when we built it, else a copy."""
        torch = self.torch
        target = getattr(torch, DTYPES[dtype]) if not self.opts.amp else None
        layout = self.opts.channels_last
        if target is None and not layout:
            return base
        model = base if owned else copy.deepcopy(base)
        if target is not None:
            model = model.to(target)
        if layout:
            model = model.to(memory_format=torch.channels_last)
        return model

    def inputs_for(self, batch: int | None, dtype: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        case = self.case
        if batch is not None and isinstance(self.base_example, ExampleInputs):
            case = dataclasses.replace(case, example=rebatch(self.base_example, batch))
        if (self.cuda and isinstance(case.example, ExampleInputs)
                and case.example.nbytes > FAST_INPUT_BYTES):
            args, kwargs = _on_device(case.example, self.device)
        else:
            args, kwargs = case.inputs_on(self.device)
        cast = None if self.opts.amp else getattr(self.torch, DTYPES[dtype])
        args = _cast_inputs(args, cast, self.opts.channels_last)
        kwargs = _cast_inputs(kwargs, cast, self.opts.channels_last)
        return args, kwargs

    def autocast(self, dtype: str) -> Any:
        if not self.opts.amp:
            return contextlib.nullcontext()
        torch = self.torch
        name = dtype if dtype != "fp32" else ("fp16" if self.cuda else "bf16")
        return torch.autocast(device_type="cuda" if self.cuda else "cpu",
                              dtype=getattr(torch, DTYPES[name]))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def events(self) -> tuple[Any, Any]:
        ev = self.torch.cuda.Event
        return ev(enable_timing=True), ev(enable_timing=True)

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self) -> tuple[int | None, int | None]:
        if not self.cuda:
            return None, None
        c = self.torch.cuda
        return int(c.max_memory_allocated(self.device)), int(c.max_memory_reserved(self.device))

    def make_step(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
        def step() -> Any:
            return fn(*args, **kwargs)

        return step

    def capture_graph(self, step: Callable[[], Any]) -> Callable[[], Any]:
        """Warm up on a side stream, capture one forward in a CUDA graph, return its replay
        (a failed capture is undone: ``bench/graphs.py``)."""
        from torchinspect.bench.graphs import DeviceUnusable, capture

        try:
            return capture(self.torch, step, self.device)
        except DeviceUnusable as exc:
            self.unusable = str(exc)
            raise

    def run_config(self, model: Any, fn: Any, dtype: str, batch: int | None,
                   profile: bool = False) -> tuple[ConfigResult, ProfileResult | None]:
        """Time one configuration; an OOM or a failing forward becomes the row's status."""
        row = ConfigResult(dtype=dtype, batch=batch if batch is not None else _batch_of(self.case.example),
                           status=Status.ok)
        row.samples_per_iter = row.batch or 1
        label = row.label
        prof: ProfileResult | None = None
        error: BaseException | None = None
        if self.unusable is not None:
            row.status, row.error = Status.error, f"not run: {self.unusable}"
            return row, None
        try:
            self.reset_peak()
            args, kwargs = self.inputs_for(batch, dtype)
            with self.torch.inference_mode(), self.autocast(dtype):
                step = self.make_step(fn, args, kwargs)
                first_s = None
                if self.opts.compile:  # the first call compiles: timed on its own
                    self.say(f"{label}: compiling ({self.opts.compile})")
                    self.sync()
                    t0 = self.clock()
                    step()
                    self.sync()
                    row.compile_s = self.clock() - t0
                if self.opts.cuda_graphs:
                    self.sync()
                    t0 = self.clock()
                    step()
                    self.sync()
                    first_s = self.clock() - t0
                    self.say(f"{label}: capturing a CUDA graph")
                    step = self.capture_graph(step)
                timing = measure(step, config=self.opts.timing, clock=self.clock, sync=self.sync,
                                 events=self.events if self.cuda else None,
                                 progress=self.progress, label=label)
                if first_s is not None:
                    timing.first_call_s = first_s
                row.timing = timing
                row.peak_allocated, row.peak_reserved = self.peaks()
                if profile:
                    self.say(f"{label}: profiling")
                    prof = profile_step(step, cuda=self.cuda, sync=self.sync,
                                        rows=self.opts.profile_rows,
                                        trace_file=self.opts.profile_trace, label=label,
                                        protect=self.opts.protect)
        except KeyboardInterrupt:
            raise
        except InspectError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes the row's status
            error = exc
            row.status = Status.oom if is_out_of_memory(exc) else Status.error
            row.error = first_line(exc, typed=True)
            row.timing = None
        if error is not None:
            del error  # drop the traceback (and the tensors its frames hold) before freeing
            _free(self.device)
        else:
            row.warnings = self.warnings(row)
            hint = layout_hint(prof, self.opts.channels_last) if prof is not None else None
            if hint:
                row.warnings.append(hint)
        return row, prof

    def warnings(self, row: ConfigResult) -> list[str]:
        t = row.timing
        out: list[str] = []
        if t is None:
            return out
        s = t.stats
        if s.cov > NOISY_COV:
            out.append(f"noisy: CoV {s.cov * 100:.1f}% > {NOISY_COV * 100:.1f}%; close other "
                       "programs, fix the clocks, or raise --min-time")
        if t.stop == "max_time" and t.iters < self.opts.timing.min_iters:
            out.append(f"--max-time {self.opts.timing.max_time:g} s ended the timing after "
                       f"{t.iters} of --min-iters {self.opts.timing.min_iters} calls (--max-time "
                       "wins); raise --max-time for more")
        if t.stop == "max_time" and s.median_cov > self.opts.timing.target_cov:
            out.append(f"median not converged (±{s.median_cov * 100:.2f}%) at --max-time "
                       f"{self.opts.timing.max_time:g} s; raise --max-time for a tighter median")
        if (self.cuda and t.host_stats is not None and not self.opts.cuda_graphs
                and t.host_stats.median >= LAUNCH_BOUND_RATIO * s.median):
            out.append(f"launch-bound: the host takes {fmt_time(t.host_stats.median)} to enqueue "
                       f"a forward the GPU runs in {fmt_time(s.median)}; try --cuda-graphs or "
                       "--compile reduce-overhead")
        if self.cuda:
            reasons = throttle_reasons(self.device)
            if reasons:
                out.append(f"throttled: GPU clocks slowed by {', '.join(reasons)} (nvidia-smi); "
                           "numbers may be low and unstable")
        return out


# ------------------------------------------------------------------ the sweep


def run_bench(case: Any, options: BenchOptions | None = None, *,
              progress: ProgressFn | None = None,
              clock: Callable[[], float] = time.perf_counter) -> BenchResult:
    """Benchmark ``case`` (a ModelCase) on ``options.device`` for each dtype and batch."""
    import torch

    opts = options or BenchOptions()
    device = devices.real_device(devices.parse_device(opts.device))
    devices.check_available(device)
    _check_options(opts, device)
    if opts.batches and not isinstance(case.example, ExampleInputs):
        raise InspectError(f"{case.name}: --batch needs inputs given as shapes",
                           hint="pass --input specs (e.g. --input 3,224,224), or leave out --batch")
    case.require_example()
    if device.startswith("cuda") and ":" not in device:
        device = f"cuda:{torch.cuda.current_device()}"

    with _global_switches(opts, device):
        env = capture_environment(device)
        result = BenchResult(model=case.name, inputs=case.describe_inputs(), device=device,
                             options=opts, environment=env, notes=list(case.notes),
                             weights=case.weights.to_dict())
        note = case.weights.note("the timings are of untrained weights (the same kernels; "
                                 "only value-dependent speed, e.g. denormals, may differ)")
        result.notes += [note] if note else []
        if opts.tf32 is not None and not device.startswith("cuda"):
            result.notes.append(f"--{'' if opts.tf32 else 'no-'}tf32: TF32 is CUDA math; "
                                "the CPU run is unaffected")
        progress and progress(f"{case.name}: loading weights on {device}")
        base = case.real_model(device)
        owned = base is not case.model
        runner = _Runner(case, opts, device, progress, clock)
        try:
            with training_mode(base), model_code():
                _sweep(runner, base, owned, result)
        finally:
            del base
            _free(device)
    return result


def _sweep(runner: _Runner, base: Any, owned: bool, result: BenchResult) -> None:
    opts = runner.opts
    batches: Sequence[int | None] = opts.batches or (None,)
    for di, dtype in enumerate(opts.dtypes):
        model = runner.model_for(base, owned, dtype)
        fn = model
        if opts.compile:
            import torch

            fn = torch.compile(model, mode=None if opts.compile == "default" else opts.compile)
        with training_mode(model), model_code():
            if opts.max_batch:
                result.max_batch, row = _max_batch(runner, model, fn, dtype)
                if row is not None:
                    result.configs.append(row)
                continue
            oom_seen = False
            for bi, batch in enumerate(batches):
                if oom_seen and opts.on_oom == OnOom.skip:
                    result.configs.append(ConfigResult(dtype, batch, Status.skipped,
                                                       error="skipped after an OOM at a smaller batch"))
                    continue
                last = di == len(opts.dtypes) - 1 and bi == len(batches) - 1
                row, prof = runner.run_config(model, fn, dtype, batch, profile=opts.profile and last)
                result.configs.append(row)
                if prof is not None:
                    result.profile = prof
                oom_seen = oom_seen or row.status == Status.oom
                runner.say(_done_line(row), final=True)
        if opts.profile and result.profile is None and di == len(opts.dtypes) - 1:
            result.notes.append("--profile: the last configuration did not run, nothing profiled")
        del fn, model
        _free(runner.device)


def _done_line(row: ConfigResult) -> str:
    if row.timing is None:
        return f"{row.label}: {row.status.upper()} {row.error or ''}".rstrip()
    s = row.timing.stats
    tp = row.throughput
    return (f"{row.label}: median {fmt_time(s.median)} (p90 {fmt_time(s.p90)}, CoV "
            f"{s.cov * 100:.1f}%), {tp:,.1f} samples/s, {row.timing.iters} iters")


def _max_batch(runner: _Runner, model: Any, fn: Any, dtype: str) -> tuple[MaxBatch, ConfigResult | None]:
    """Doubling from batch 1 until an OOM, then bisection; the largest fit is then timed."""
    torch = runner.torch
    probes: list[tuple[int, bool, int | None]] = []

    def fits(batch: int) -> bool:
        ok, peak, error = True, None, None
        try:
            runner.reset_peak()
            args, kwargs = runner.inputs_for(batch, dtype)
            with torch.inference_mode(), runner.autocast(dtype):
                for _ in range(2):  # cuDNN autotuning may allocate workspaces on the 2nd call
                    fn(*args, **kwargs)
                runner.sync()
            del args, kwargs
            peak = runner.peaks()[0]
        except Exception as exc:  # noqa: BLE001
            if not is_out_of_memory(exc):
                error = first_line(exc, typed=True)
            ok = False
        _free(runner.device)
        if error is not None:
            raise InspectError(f"{runner.case.name}: the forward failed at batch {batch}: {error}",
                               hint="check --input; --max-batch needs a model that runs at batch 1")
        probes.append((batch, ok, peak))
        runner.say(f"{dtype} batch {batch}: {'fits' if ok else 'OOM'}"
                   + (f" (peak {peak / 1e9:.2f} GB)" if peak else ""), final=True)
        return ok

    lo, hi, capped = 0, None, False
    b = 1
    while True:
        if fits(b):
            lo = b
            if b >= MAX_BATCH_CAP:
                capped = True
                break
            b *= 2
        else:
            hi = b
            break
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    found = MaxBatch(batch=lo or None, probes=probes, capped=capped)
    if not lo:
        return found, ConfigResult(dtype, 1, Status.oom, error="batch 1 does not fit")
    row, _ = runner.run_config(model, fn, dtype, lo)
    runner.say(_done_line(row), final=True)
    return found, row


def benchmark(model: ModelLike, inputs: Any = None, *, device: str = "cpu",
              batch: int | Sequence[int] | None = None, dtype: str | Sequence[str] = "fp32",
              options: ModelOptions | None = None, progress: ProgressFn | None = None,
              **bench_options: Any) -> BenchResult:
    """Benchmark a model (``nn.Module`` or a MODEL spec such as ``"resnet18"``).

    ``inputs`` as for ``torchinspect.sources.case.make_case`` (``"3,224,224"``, a shape,
    tensors); ``batch`` one size or a sweep; ``dtype`` ``fp32``/``fp16``/``bf16`` or several;
    ``options`` a ``ModelOptions``; other keywords are
    ``BenchOptions`` fields (``amp``, ``cuda_graphs``, ``timing=TimingConfig(...)``, ...).
    The default device is the CPU, never a GPU.
    """
    batches = (batch,) if isinstance(batch, int) else (tuple(batch) if batch else None)
    dtypes = (dtype,) if isinstance(dtype, str) else tuple(dtype)
    case = make_case(model, inputs, options=options, device="meta")
    opts = BenchOptions(device=device, batches=batches,
                        dtypes=tuple(parse_dtype(d) for d in dtypes), **bench_options)
    return run_bench(case, opts, progress=progress)
