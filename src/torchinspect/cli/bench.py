"""``inspect bench MODEL``: synchronized latency and throughput over batch sizes and dtypes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from torchinspect.arguments import parse_batches
from torchinspect.bench.modes import CompileMode, OnOom, Status
from torchinspect.cli.boundary import error_exit
from torchinspect.cli.command import model_command
from torchinspect.cli.options import (
    AmpOpt,
    CacheArgOpt,
    CacheOpt,
    GenerateOpt,
    ModelArg,
    OptimizerOpt,
    RecomputeOpt,
    amp_split,
    batches_opt,
    dtype_opt,
    train_opt,
)
from torchinspect.cli.output import OutputOptions, emit, input_files, model_file_stem
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.sources.case import ModelOptions


@dataclass
class BenchArgs:
    """The options of ``inspect bench``, each declared once, next to its field: Typer fills
    this dataclass (``@model_command`` expands it into the command's options, in this order)
    and :meth:`bench_options` turns it into the core's ``BenchOptions``."""

    batch: Annotated[str | None, batches_opt(
        "batch sizes to sweep, e.g. 1,8,32 (default: the input's own batch).")] = None
    dtype: Annotated[str, dtype_opt(
        "weights and float inputs cast to this dtype; a comma list benchmarks each. With --amp: "
        "the autocast dtype.", sweep=True)] = "fp32"
    amp: AmpOpt = False
    channels_last: Annotated[bool, typer.Option(
        "--channels-last", help="model and 4-D inputs in channels-last layout.")] = False
    compile: Annotated[bool, typer.Option(
        "--compile", help="run torch.compile(model); the first call (compilation) is reported "
        "on its own.")] = False
    compile_mode: Annotated[CompileMode, typer.Option(
        "--compile-mode", case_sensitive=False, metavar="MODE",
        help="torch.compile mode (implies --compile): "
        + ", ".join(m.value for m in CompileMode) + ".")] = CompileMode.default
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs", help="capture the forward in a CUDA graph after warm-up (side stream) "
        "and time its replay.")] = False
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="torch CPU threads (default: torch's own).")] = None
    warmup: Annotated[float, typer.Option(
        "--warmup", min=0.0, help="warm-up seconds (at least 5 calls).")] = 1.0
    min_time: Annotated[float, typer.Option(
        "--min-time", min=0.0, help="seconds to time at least.")] = 2.0
    max_time: Annotated[float, typer.Option(
        "--max-time", min=0.0, help="seconds after which timing stops, however many "
        "--min-iters were asked for (it wins).")] = 6.0
    min_iters: Annotated[int, typer.Option(
        "--min-iters", min=1, help="iterations to time at least (unless --max-time comes "
        "first).")] = 10
    target: Annotated[float, typer.Option(
        "--target", min=0.0, metavar="PCT",
        help="stop once the median's relative standard error is below PCT percent.")] = 0.5
    cudnn_benchmark: Annotated[bool, typer.Option(
        "--cudnn-benchmark/--no-cudnn-benchmark", help="cuDNN autotuning (CUDA).")] = True
    tf32: Annotated[bool | None, typer.Option(
        "--tf32/--no-tf32", show_default=False,
        help="CUDA fp32 matmuls and convolutions in TF32 (tensor cores) or IEEE fp32 (default: "
        "PyTorch's settings, convolutions TF32 and matmuls IEEE unless changed; shown in the "
        "output).")] = None
    on_oom: Annotated[OnOom, typer.Option(
        "--on-oom", case_sensitive=False,
        help="after an out-of-memory batch: skip the larger ones, or try them anyway.")
        ] = OnOom.skip
    max_batch: Annotated[bool, typer.Option(
        "--max-batch", help="search (doubling, then bisection) the largest batch that fits in "
        "GPU memory, and time it.")] = False
    profile: Annotated[bool, typer.Option(
        "--profile", help="after timing, profile the last configuration: top operators and a "
        "Chrome trace.")] = False
    trace: Annotated[str | None, typer.Option(
        "--trace", metavar="FILE", help="Chrome trace file for --profile (default: next to "
        "--output, or MODEL-bench-trace.json).")] = None
    save_samples: Annotated[bool, typer.Option(
        "--save-samples", help="keep raw per-iteration times in the JSON.")] = False
    compare: Annotated[str | None, typer.Option(
        "--compare", metavar="OLD.json", help="compare with an earlier `--format json` result; "
        "exit 1 if a configuration got slower beyond the noise. With MODEL a saved result "
        "(NEW.json), compares the two files and runs nothing.")] = None
    predict: Annotated[str | None, typer.Option(
        "--predict", metavar="GPU",
        help="predict the latency on this GPU (h100, a100, l4, rtx4090, ...: the GPU catalogue's "
        "names) from the CPU, no GPU needed: per layer type, graph replay and eager. With "
        "--device cuda the real run is measured too and shown beside the prediction.")] = None
    train: Annotated[bool, train_opt(
        "with --predict: predict an eager training step (forward and loss, backward, optimizer "
        "step) instead of a forward; --amp --dtype bf16 for mixed precision.")] = False
    optimizer: OptimizerOpt = "adamw"
    generate: GenerateOpt = None
    cache: CacheOpt = "dynamic"
    cache_arg: CacheArgOpt = None
    recompute: RecomputeOpt = False

    @property
    def compile_as(self) -> str | None:
        """The torch.compile mode asked for (--compile or --compile-mode), else None."""
        if self.compile or self.compile_mode != CompileMode.default:
            return self.compile_mode.value
        return None

    def dtypes(self) -> tuple[str, ...]:
        from torchinspect.bench.run import parse_dtype

        return tuple(dict.fromkeys(parse_dtype(d) for d in self.dtype.split(",") if d.strip())) \
            or ("fp32",)

    def bench_options(self, opts: ModelOptions, output: str | None, model: str,
                      protect: tuple[str, ...]) -> Any:
        """The core's ``BenchOptions`` (bench/run.py): what to measure and how."""
        from torchinspect.bench.run import BenchOptions
        from torchinspect.bench.timing import TimingConfig

        return BenchOptions(
            device=opts.device, batches=parse_batches(self.batch), dtypes=self.dtypes(),
            amp=self.amp, channels_last=self.channels_last, compile=self.compile_as,
            cuda_graphs=self.cuda_graphs, threads=self.threads,
            cudnn_benchmark=self.cudnn_benchmark, tf32=self.tf32,
            timing=TimingConfig(warmup_s=self.warmup, min_time=self.min_time,
                                max_time=self.max_time, min_iters=self.min_iters,
                                target_cov=self.target / 100),
            on_oom=self.on_oom, max_batch=self.max_batch, profile=self.profile,
            profile_trace=_trace_path(self.trace, output, model) if self.profile else None,
            save_samples=self.save_samples, protect=protect)


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
def bench(model: ModelArg, *, args: BenchArgs, opts: ModelOptions, out: OutputOptions) -> None:
    """Latency and throughput: warm-up, synchronized timing until the median is stable.

    `inspect bench NEW.json --compare OLD.json` compares two saved results (`--format json`)
    by the same rule, without running anything.
    """
    from torchinspect.bench.compare import is_saved_result, load_bench_json
    from torchinspect.bench.run import run_bench
    from torchinspect.report.bench import bench_report
    from torchinspect.sources.case import make_case

    if args.generate is not None or args.cache != "dynamic" or args.cache_arg is not None \
            or args.recompute:
        return _generate(model, args, opts, out)
    if is_saved_result(model) and not opts.arch:  # with --arch: a checkpoint's index
        _compare_saved(model, args.compare, out)
        return
    if args.train or args.optimizer != "adamw":
        return _predict_train(model, args, opts, out)
    if args.predict is not None and _predicts_only(args, opts.device):
        return _predict_only(model, args, opts, out)
    if opts.device == "meta":
        raise InspectError("--device meta: a benchmark needs a real device",
                           hint="use --device cpu or --device cuda[:N]")
    protect = input_files([model, *opts.files(), args.compare])
    options = args.bench_options(opts, out.output, model, protect)
    if options.batches and options.max_batch:
        raise InspectError("--batch and --max-batch exclude each other",
                           hint="--max-batch searches the batch size itself")
    old = load_bench_json(args.compare) if args.compare else None
    if options.profile_trace:  # refused before any timing, like --output
        from torchinspect.io.atomic import check_target

        check_target(options.profile_trace, protect=protect)
    case = make_case(model, options=opts, device="meta")  # sized on meta; real_model builds it
    with _Progress() as progress:
        result = run_bench(case, options, progress=progress)
    changes, setup = _against(old, result)
    report = _with_prediction(bench_report(result, changes, setup), case, args, options, result)
    emit(report, out, inputs=[model, *opts.files(), args.compare])
    _exit_if_unmeasured(result, model)
    _exit_if_slower(changes)
    sys.stderr.flush()


def _predicts_only(args: BenchArgs, device: str) -> bool:
    """--predict GPU: a GPU of the catalogue (an unknown name is refused before anything
    runs). Without --device cuda nothing runs: True, and options of a real run are refused."""
    from torchinspect.gpus import find_gpu  # kept out of `inspect --help`

    find_gpu(args.predict or "", option="--predict")
    if device.startswith("cuda"):
        return False
    real_run = {"compile": args.compile_as is not None, "amp": args.amp,
                "max_batch": args.max_batch, "profile": args.profile,
                "compare": bool(args.compare), "channels_last": args.channels_last}
    real = [f"--{name.replace('_', '-')}" for name, on in real_run.items() if on]
    if real:
        raise InspectError(f"--predict runs nothing on a device: {real[0]} has no effect there",
                           hint="leave it out, or add --device cuda to measure beside the "
                           "prediction")
    return True


def _with_prediction(report: Any, case: Any, args: BenchArgs, options: Any, result: Any) -> Any:
    """With --predict: the prediction for the configurations just measured, side by side."""
    if args.predict is None:
        return report
    from torchinspect.latency import predict_latency
    from torchinspect.report.base import Text
    from torchinspect.report.predict import against_measured, header

    pred = predict_latency(case, args.predict, dtypes=options.dtypes, batches=options.batches,
                           tf32=args.tf32)
    report.data["predicted"] = pred.to_dict()
    report.sections += [Text(header(pred)), against_measured(pred, result.to_dict())]
    return report


def _predict_only(model: str, args: BenchArgs, opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect bench MODEL --predict GPU`: the prediction alone, no device touched."""
    from torchinspect.latency import predict_latency
    from torchinspect.report.predict import prediction_report
    from torchinspect.sources.case import make_case

    case = make_case(model, options=opts, device="meta")
    pred = predict_latency(case, args.predict or "", dtypes=args.dtypes(),
                           batches=parse_batches(args.batch), tf32=args.tf32)
    emit(prediction_report(pred), out, inputs=[model, *opts.files()])


def _generate(model: str, args: BenchArgs, opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect bench MODEL --generate N`: time to first token and per new token."""
    from torchinspect.cli.generation import bench_generate, check_generation
    from torchinspect.gpus import find_gpu

    if args.generate is None:
        raise InspectError("--cache, --cache-arg and --recompute are options of --generate N",
                           hint="e.g. --generate 128 --predict h100")
    check_generation(args.generate, opts, args.cache, refused={
        "--batch": args.batch is not None, "--amp": args.amp, "--profile": args.profile,
        "--channels-last": args.channels_last, "--cuda-graphs": args.cuda_graphs,
        "--compile": args.compile_as is not None, "--max-batch": args.max_batch,
        "--compare": args.compare is not None,
        "--train": args.train or args.optimizer != "adamw"})
    if args.predict is not None:
        find_gpu(args.predict, option="--predict")
    bench_generate(model, opts, out, new_tokens=args.generate, dtypes=args.dtypes(),
                   predict=args.predict, cache=args.cache, cache_arg=args.cache_arg,
                   recompute=args.recompute, tf32=args.tf32)


def _predict_train(model: str, args: BenchArgs, opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect bench MODEL --predict GPU --train`: a training step, predicted, no device."""
    from torchinspect.gpus import find_gpu
    from torchinspect.latency import predict_train
    from torchinspect.report.predict import train_report
    from torchinspect.sources.case import make_case

    gpu = args.predict
    if gpu is None:
        raise InspectError("--train and --optimizer predict a training step: they need "
                           "--predict GPU", hint="e.g. inspect bench MODEL --predict h100 --train")
    find_gpu(gpu, option="--predict")
    real = (opts.device.startswith("cuda") or args.compile_as is not None or args.max_batch
            or args.profile or bool(args.compare) or args.channels_last or args.cuda_graphs)
    if real:
        raise InspectError("--train is predicted, not measured: it takes no option of a real "
                           "run (--device cuda, --cuda-graphs, --compile, --profile, ...)",
                           hint="leave those out; `inspect memory MODEL --verify` runs real "
                           "training steps on a GPU")
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    if len(dtypes) != 1:
        raise InspectError(f"--dtype {args.dtype}: --train predicts one dtype at a time",
                           hint="e.g. --amp --dtype bf16")
    weights, autocast = amp_split(dtypes[0], args.amp)
    case = make_case(model, options=opts, device="meta")
    with _Progress() as progress:
        progress(f"{case.name}: a training step on fake tensors, priced for {gpu}")
        pred = predict_train(case, gpu, batches=parse_batches(args.batch), dtype=weights,
                             amp=autocast, optimizer=args.optimizer)
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
    failed = [c for c in result.configs if c.status == Status.error]
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
