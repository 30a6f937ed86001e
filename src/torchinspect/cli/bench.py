"""``inspect bench MODEL``: synchronized latency and throughput over batch sizes and dtypes."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from torchinspect.arguments import parse_batches
from torchinspect.cli.common import (
    AmpOpt,
    CacheArgOpt,
    CacheOpt,
    GenerateOpt,
    ModelArg,
    OptimizerOpt,
    OutputOptions,
    RecomputeOpt,
    amp_split,
    batches_opt,
    dtype_opt,
    emit,
    error_exit,
    input_files,
    model_command,
    model_file_stem,
    train_opt,
)
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.sources.case import ModelOptions


class CompileMode(StrEnum):
    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


class OnOom(StrEnum):
    skip = "skip"
    try_ = "try"


BatchesOpt = Annotated[str | None, batches_opt(
    "batch sizes to sweep, e.g. 1,8,32 (default: the input's own batch).")]
DtypeOpt = Annotated[str, dtype_opt(
    "weights and float inputs cast to this dtype; a comma list benchmarks each. With --amp: the "
    "autocast dtype.", sweep=True)]
ChannelsLastOpt = Annotated[bool, typer.Option("--channels-last",
                                               help="model and 4-D inputs in channels-last layout.")]
CompileOpt = Annotated[bool, typer.Option("--compile", help="run torch.compile(model); the first "
                                          "call (compilation) is reported on its own.")]
CompileModeOpt = Annotated[CompileMode, typer.Option(
    "--compile-mode", case_sensitive=False, metavar="MODE",
    help="torch.compile mode (implies --compile): " + ", ".join(m.value for m in CompileMode) + ".")]
GraphsOpt = Annotated[bool, typer.Option("--cuda-graphs", help="capture the forward in a CUDA "
                                         "graph after warm-up (side stream) and time its replay.")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", min=1,
                                                help="torch CPU threads (default: torch's own).")]
MinTimeOpt = Annotated[float, typer.Option("--min-time", min=0.0, help="seconds to time at least.")]
MaxTimeOpt = Annotated[float, typer.Option("--max-time", min=0.0,
                                           help="seconds after which timing stops, however many "
                                           "--min-iters were asked for (it wins).")]
MinItersOpt = Annotated[int, typer.Option("--min-iters", min=1, help="iterations to time at least "
                                          "(unless --max-time comes first).")]
WarmupOpt = Annotated[float, typer.Option("--warmup", min=0.0,
                                          help="warm-up seconds (at least 5 calls).")]
TargetOpt = Annotated[float, typer.Option(
    "--target", min=0.0, metavar="PCT",
    help="stop once the median's relative standard error is below PCT percent.")]
CudnnOpt = Annotated[bool, typer.Option("--cudnn-benchmark/--no-cudnn-benchmark",
                                        help="cuDNN autotuning (CUDA).")]
Tf32Opt = Annotated[bool | None, typer.Option(
    "--tf32/--no-tf32", show_default=False,
    help="CUDA fp32 matmuls and convolutions in TF32 (tensor cores) or IEEE fp32 (default: "
    "PyTorch's settings, convolutions TF32 and matmuls IEEE unless changed; shown in the output).")]
OnOomOpt = Annotated[OnOom, typer.Option("--on-oom", case_sensitive=False,
                                         help="after an out-of-memory batch: skip the larger "
                                         "ones, or try them anyway.")]
MaxBatchOpt = Annotated[bool, typer.Option("--max-batch", help="search (doubling, then bisection) "
                                           "the largest batch that fits in GPU memory, and time it.")]
ProfileOpt = Annotated[bool, typer.Option("--profile", help="after timing, profile the last "
                                          "configuration: top operators and a Chrome trace.")]
TraceOpt = Annotated[str | None, typer.Option(
    "--trace", metavar="FILE", help="Chrome trace file for --profile (default: next to --output, "
    "or MODEL-bench-trace.json).")]
SamplesOpt = Annotated[bool, typer.Option("--save-samples",
                                          help="keep raw per-iteration times in the JSON.")]
CompareOpt = Annotated[str | None, typer.Option(
    "--compare", metavar="OLD.json", help="compare with an earlier `--format json` result; "
    "exit 1 if a configuration got slower beyond the noise. With MODEL a saved result "
    "(NEW.json), compares the two files and runs nothing.")]
PredictOpt = Annotated[str | None, typer.Option(
    "--predict", metavar="GPU",
    help="predict the latency on this GPU (h100, a100, l4, rtx4090, ...: the GPU catalogue's "
    "names) from the CPU, no GPU needed: per layer type, graph replay and eager. With --device "
    "cuda the real run is measured too and shown beside the prediction.")]
TrainStepOpt = Annotated[bool, train_opt(
    "with --predict: predict an eager training step (forward and loss, backward, optimizer "
    "step) instead of a forward; --amp --dtype bf16 for mixed precision.")]


class _Progress:
    """Progress on stderr: a live rich status on a terminal; otherwise only the finished
    configurations, one line each (no passing status in a log)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal
        self.status: Any = None

    def __enter__(self) -> _Progress:
        if self.live:
            self.status = self.console.status(self._text("starting"))
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    @staticmethod
    def _text(text: str) -> Any:
        from rich.text import Text

        return Text(text)

    def __call__(self, text: str, final: bool = False) -> None:
        if final:
            self.console.print(text, markup=False, soft_wrap=True)
            return
        if self.status is not None:
            self.status.update(self._text(text))  # a model spec "[/x]" is text, not markup


def _trace_path(trace: str | None, output: str | None, model: str) -> str:
    if trace:
        return trace
    if output:
        return f"{os.path.splitext(output)[0]}.trace.json"
    return f"{model_file_stem(model)}-bench-trace.json"


@model_command(device_default="cpu", batch=False, progress=False,
               device_help="where to run: cpu (the default) or cuda[:N].")
def bench(
    model: ModelArg,
    batch: BatchesOpt = None,
    dtype: DtypeOpt = "fp32",
    amp: AmpOpt = False,
    channels_last: ChannelsLastOpt = False,
    compile: CompileOpt = False,
    compile_mode: CompileModeOpt = CompileMode.default,
    cuda_graphs: GraphsOpt = False,
    threads: ThreadsOpt = None,
    warmup: WarmupOpt = 1.0,
    min_time: MinTimeOpt = 2.0,
    max_time: MaxTimeOpt = 6.0,
    min_iters: MinItersOpt = 10,
    target: TargetOpt = 0.5,
    cudnn_benchmark: CudnnOpt = True,
    tf32: Tf32Opt = None,
    on_oom: OnOomOpt = OnOom.skip,
    max_batch: MaxBatchOpt = False,
    profile: ProfileOpt = False,
    trace: TraceOpt = None,
    save_samples: SamplesOpt = False,
    compare: CompareOpt = None,
    predict: PredictOpt = None,
    train: TrainStepOpt = False,
    optimizer: OptimizerOpt = "adamw",
    generate: GenerateOpt = None,
    cache: CacheOpt = "dynamic",
    cache_arg: CacheArgOpt = None,
    recompute: RecomputeOpt = False,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Latency and throughput: warm-up, synchronized timing until the median is stable.

    `inspect bench NEW.json --compare OLD.json` compares two saved results (`--format json`)
    by the same rule, without running anything.
    """
    from torchinspect.bench.compare import is_saved_result, load_bench_json
    from torchinspect.bench.run import BenchOptions, parse_dtype, run_bench
    from torchinspect.bench.timing import TimingConfig
    from torchinspect.report.bench import bench_report
    from torchinspect.sources.case import make_case

    if generate is not None or cache != "dynamic" or cache_arg is not None or recompute:
        return _generate(dict(locals()), opts, out)  # this command's options, by name
    if is_saved_result(model) and not opts.arch:  # with --arch: a checkpoint's index
        _compare_saved(model, compare, out)
        return
    real = {"compile": compile or compile_mode != CompileMode.default, "amp": amp,
            "max_batch": max_batch, "profile": profile, "compare": bool(compare),
            "channels_last": channels_last, "cuda_graphs": cuda_graphs}
    if _predicted(model, predict, train, optimizer, batch, dtype, tf32, opts, out, real):
        return
    batches = _run_batches(batch, max_batch, opts.device)
    dtypes = tuple(dict.fromkeys(parse_dtype(d) for d in dtype.split(",") if d.strip()))
    old = load_bench_json(compare) if compare else None
    protect = input_files([model, *opts.files(), compare])
    options = BenchOptions(
        device=opts.device, batches=batches, dtypes=dtypes or ("fp32",), amp=amp,
        channels_last=channels_last,
        compile=compile_mode.value if (compile or compile_mode != CompileMode.default) else None,
        cuda_graphs=cuda_graphs, threads=threads, cudnn_benchmark=cudnn_benchmark, tf32=tf32,
        timing=TimingConfig(warmup_s=warmup, min_time=min_time, max_time=max_time,
                            min_iters=min_iters, target_cov=target / 100),
        on_oom=on_oom.value, max_batch=max_batch, profile=profile,
        profile_trace=_trace_path(trace, out.output, model) if profile else None,
        save_samples=save_samples, protect=protect)
    _check_trace(options.profile_trace, protect)
    case = make_case(model, options=opts, device="meta")  # sized on meta; real_model builds it
    with _Progress() as progress:
        result = run_bench(case, options, progress=progress)
    changes, setup = _against(old, result)
    report = _with_prediction(bench_report(result, changes, setup), case, predict, options, tf32, result)
    emit(report, out, inputs=[model, *opts.files(), compare])
    _exit_if_unmeasured(result, model)
    _exit_if_slower(changes)
    sys.stderr.flush()


def _check_trace(path: str | None, protect: Any) -> None:
    """--profile's trace file: refused before any timing, like --output."""
    if path:
        from torchinspect.io.atomic import check_target

        check_target(path, protect=protect)


def _predicted(model: str, predict: str | None, train: bool, optimizer: str, batch: str | None,
               dtype: str, tf32: bool | None, opts: ModelOptions, out: OutputOptions,
               real: dict[str, bool]) -> bool:
    """--predict (and --train): the prediction alone when nothing runs on a device; True when
    it was made."""
    if train or optimizer != "adamw":
        amp = real.pop("amp")
        _predict_train(model, predict, batch, dtype, amp, optimizer, opts, out,
                       real=opts.device.startswith("cuda") or any(real.values()))
        return True
    real.pop("cuda_graphs")
    if predict is not None and _predicts_only(predict, opts.device, **real):
        _predict_only(model, predict, batch, dtype, tf32, opts, out)
        return True
    return False


def _run_batches(batch: str | None, max_batch: bool, device: str) -> tuple[int, ...] | None:
    """The batches of a real run (refused on meta, and beside --max-batch)."""
    if device == "meta":
        raise InspectError("--device meta: a benchmark needs a real device",
                           hint="use --device cpu or --device cuda[:N]")
    batches = parse_batches(batch)
    if batches and max_batch:
        raise InspectError("--batch and --max-batch exclude each other",
                           hint="--max-batch searches the batch size itself")
    return batches


def _generate(v: dict[str, Any], opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect bench MODEL --generate N`: time to first token and per new token (``v``: the
    command's options by name)."""
    from torchinspect.bench.run import parse_dtype
    from torchinspect.cli.generation import bench_generate, check_generation
    from torchinspect.gpus import find_gpu

    if v["generate"] is None:
        raise InspectError("--cache, --cache-arg and --recompute are options of --generate N",
                           hint="e.g. --generate 128 --predict h100")
    check_generation(v["generate"], opts, v["cache"], refused={
        "--batch": v["batch"] is not None, "--amp": v["amp"], "--profile": v["profile"],
        "--channels-last": v["channels_last"], "--cuda-graphs": v["cuda_graphs"],
        "--compile": v["compile"] or v["compile_mode"] != CompileMode.default,
        "--max-batch": v["max_batch"], "--compare": v["compare"] is not None,
        "--train": v["train"] or v["optimizer"] != "adamw"})
    if v["predict"] is not None:
        find_gpu(v["predict"], option="--predict")
    dtypes = tuple(dict.fromkeys(parse_dtype(d) for d in v["dtype"].split(",") if d.strip()))
    bench_generate(v["model"], opts, out, new_tokens=v["generate"], dtypes=dtypes,
                   predict=v["predict"], cache=v["cache"], cache_arg=v["cache_arg"],
                   recompute=v["recompute"], tf32=v["tf32"])


def _predicts_only(gpu: str, device: str, **real_run: bool) -> bool:
    """--predict GPU: a GPU of the catalogue (an unknown name is refused before anything
    runs). Without --device cuda nothing runs: True, and options of a real run are refused."""
    from torchinspect.gpus import find_gpu  # kept out of `inspect --help`

    find_gpu(gpu, option="--predict")
    if device.startswith("cuda"):
        return False
    real = [f"--{name.replace('_', '-')}" for name, on in real_run.items() if on]
    if real:
        raise InspectError(f"--predict runs nothing on a device: {real[0]} has no effect there",
                           hint="leave it out, or add --device cuda to measure beside the "
                           "prediction")
    return True


def _with_prediction(report: Any, case: Any, gpu: str | None, options: Any, tf32: bool | None,
                     result: Any) -> Any:
    """With --predict: the prediction for the configurations just measured, side by side."""
    if gpu is None:
        return report
    from torchinspect.latency import predict_latency
    from torchinspect.report.base import Text
    from torchinspect.report.predict import against_measured, header

    pred = predict_latency(case, gpu, dtypes=options.dtypes, batches=options.batches, tf32=tf32)
    report.data["predicted"] = pred.to_dict()
    report.sections += [Text(header(pred)), against_measured(pred, result.to_dict())]
    return report


def _predict_only(model: str, gpu: str, batch: str | None, dtype: str, tf32: bool | None,
                  opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect bench MODEL --predict GPU`: the prediction alone, no device touched."""
    from torchinspect.bench.run import parse_dtype
    from torchinspect.latency import predict_latency
    from torchinspect.report.predict import prediction_report
    from torchinspect.sources.case import make_case

    dtypes = tuple(dict.fromkeys(parse_dtype(d) for d in dtype.split(",") if d.strip()))
    case = make_case(model, options=opts, device="meta")
    pred = predict_latency(case, gpu, dtypes=dtypes or ("fp32",), batches=parse_batches(batch),
                           tf32=tf32)
    emit(prediction_report(pred), out, inputs=[model, *opts.files()])


def _predict_train(model: str, gpu: str | None, batch: str | None, dtype: str, amp: bool,
                   optimizer: str, opts: ModelOptions, out: OutputOptions, *,
                   real: bool) -> None:
    """`inspect bench MODEL --predict GPU --train`: a training step, predicted, no device."""
    from torchinspect.gpus import find_gpu
    from torchinspect.latency import predict_train
    from torchinspect.report.predict import train_report
    from torchinspect.sources.case import make_case

    if gpu is None:
        raise InspectError("--train and --optimizer predict a training step: they need "
                           "--predict GPU", hint="e.g. inspect bench MODEL --predict h100 --train")
    find_gpu(gpu, option="--predict")
    if real:
        raise InspectError("--train is predicted, not measured: it takes no option of a real "
                           "run (--device cuda, --cuda-graphs, --compile, --profile, ...)",
                           hint="leave those out; `inspect memory MODEL --verify` runs real "
                           "training steps on a GPU")
    dtypes = [d.strip() for d in dtype.split(",") if d.strip()]
    if len(dtypes) != 1:
        raise InspectError(f"--dtype {dtype}: --train predicts one dtype at a time",
                           hint="e.g. --amp --dtype bf16")
    weights, autocast = amp_split(dtypes[0], amp)
    case = make_case(model, options=opts, device="meta")
    with _Progress() as progress:
        progress(f"{case.name}: a training step on fake tensors, priced for {gpu}")
        pred = predict_train(case, gpu, batches=parse_batches(batch), dtype=weights,
                             amp=autocast, optimizer=optimizer)
    emit(train_report(pred), out, inputs=[model, *opts.files()])


def _against(old: dict[str, Any] | None, result: Any) -> tuple[Any, Any]:
    """(per-configuration changes, setup differences) against a saved result; (None, None)."""
    from torchinspect.bench.compare import compare_configs, setup_differences

    if old is None:
        return None, None
    return compare_configs(old, result.to_dict()), setup_differences(old, result.to_dict())


def _exit_if_unmeasured(result: Any, model: str) -> None:
    """No configuration measured: an input error when every forward failed, else exit 1."""
    if result.ok:
        return
    failed = [c for c in result.configs if c.status == "error"]
    if failed and all("CUDA graph" in (c.error or "") or "CUDA-graph" in (c.error or "")
                      for c in failed) and len(failed) == len(result.configs):
        raise InspectError(f"{model}: {failed[0].error}",
                           hint="run it without --cuda-graphs (eager), or --compile "
                           "reduce-overhead")
    if failed and len(failed) == len(result.configs):  # the forward itself: an input error
        raise InspectError(f"{model}: the forward failed in every configuration: "
                           f"{failed[0].error}",
                           hint="check --input (shape, dtype) against what the model takes")
    raise error_exit("no configuration could be measured (see the status column)", None,
                     ExitStatus.CHECK_FAILED)


def _exit_if_slower(changes: list[Any] | None) -> None:
    if changes and any(c.verdict == "slower" for c in changes):
        typer.echo("slower than the earlier run beyond the noise (see the comparison)",
                   err=True)
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))


def _compare_saved(new_path: str, old_path: str | None, out: OutputOptions) -> None:
    """`inspect bench NEW.json --compare OLD.json`: two saved results, no model run."""
    from torchinspect.bench.compare import compare_configs, load_bench_json, setup_differences
    from torchinspect.report.bench import saved_comparison_report

    new = load_bench_json(new_path, option="")
    if not old_path:
        raise InspectError(f"{new_path}: a saved result, not a model; nothing to compare it with",
                           hint=f"inspect bench {new_path} --compare OLD.json (or pass a model "
                           "to benchmark)")
    old = load_bench_json(old_path)
    changes = compare_configs(old, new)
    emit(saved_comparison_report(new_path, new, old_path, old, changes,
                                 setup_differences(old, new)), out, inputs=[new_path, old_path])
    _exit_if_slower(changes)
