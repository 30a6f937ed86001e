"""`inspect memory MODEL`: the peak GPU memory of inference and a training step, predicted."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from torchinspect.arguments import parse_batches
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
    gpu_opt,
    train_opt,
)
from torchinspect.cli.output import OutputOptions, emit, input_files
from torchinspect.cli.progress import current
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.sources.case import ModelOptions

BatchesOpt = Annotated[str | None, batches_opt("batch sizes to predict, e.g. 1,8,32 (default: the input's own batch).")]
TrainStepOpt = Annotated[bool, train_opt("also predict a training step (forward, backward, optimizer).")]
DtypeOpt = Annotated[str | None, dtype_opt("cast weights and float inputs to this dtype.")]
CheckpointOpt = Annotated[str | None, typer.Option(
    "--checkpointing", metavar="MODULE_TYPE",
    help="what-if: activation checkpointing (non-reentrant) on every module of this class, "
    "e.g. Bottleneck, DecoderLayer.", show_default=False)]
LossOpt = Annotated[str, typer.Option(
    "--loss", metavar="sum|mean", help="the loss of the training step: the sum or mean of the "
    "model's first floating-point output.")]
FitOpt = Annotated[str | None, typer.Option(
    "--fit", metavar="GPU|SIZE|cuda", help="find the largest batch whose predicted peak fits a "
    "GPU (h100, a10, 4090, ...: its memory as the driver reports it; also the GPU predicted "
    "for) or a GPU of SIZE (24GB: 24 GiB, as GPU memory is sold; 80GiB), less the CUDA context "
    "and the allocator's reserve, or the free memory of the GPU that is there (cuda); with "
    "--generate: the largest batch at the input's prompt.",
    show_default=False)]
FitContextOpt = Annotated[bool, typer.Option(
    "--fit-context", help="with --generate and --fit: the longest prompt that fits at the "
    "input's batch, instead of the largest batch at its prompt.")]
GpuOpt = Annotated[str | None, gpu_opt(
    "the GPU to predict for (h100, a100, l4, ...): its cuBLAS workspace and the SM count CUDA "
    "reductions stage for (default: the GPU --fit names, else the GPU that is there, else "
    "h100).", metavar="h100|a100|...")]
CalibrateOpt = Annotated[bool | None, typer.Option(
    "--calibrate/--no-calibrate", help="measure each cuDNN convolution/RNN workspace on the GPU "
    "that is here, op by op (cached per GPU; default: when predicting for that GPU).",
    show_default=False)]
TopOpt = Annotated[int, typer.Option("--top", min=0, help="modules listed by activation memory.")]
VerifyOpt = Annotated[bool, typer.Option(
    "--verify", help="run the steps for real on the GPU and compare each phase with the "
    "prediction; exit 1 beyond --tolerance.")]
FsdpOpt = Annotated[int | None, typer.Option(
    "--fsdp", metavar="N", help="predict the per-GPU peak of FSDP2 (fully_shard) training over "
    "N GPUs; --batch is the batch per GPU.", show_default=False)]
FsdpUnitOpt = Annotated[str | None, typer.Option(
    "--fsdp-unit", metavar="MODULE_TYPE", help="with --fsdp: fully_shard each module of this "
    "class, then the root (default: the repeated block with the most parameters).",
    show_default=False)]
ToleranceOpt = Annotated[float, typer.Option(
    "--tolerance", metavar="FRACTION", help="largest relative error --verify accepts (0.05 = 5%).")]

DEVICE_HELP = ("the device the prediction is for: cuda (the CUDA caching allocator, as "
               "torch.cuda.max_memory_allocated counts) or cpu (bytes of tensors).")


@model_command(device_default="cuda", device_help=DEVICE_HELP, batch=False)
def memory(
    model: ModelArg,
    batch: BatchesOpt = None,
    train: TrainStepOpt = True,
    optimizer: OptimizerOpt = "adamw",
    dtype: DtypeOpt = None,
    amp: AmpOpt = False,
    checkpointing: CheckpointOpt = None,
    loss: LossOpt = "sum",
    fit: FitOpt = None,
    gpu: GpuOpt = None,
    calibrate: CalibrateOpt = None,
    top: TopOpt = 10,
    verify: VerifyOpt = False,
    tolerance: ToleranceOpt = 0.05,
    fsdp: FsdpOpt = None,
    fsdp_unit: FsdpUnitOpt = None,
    generate: GenerateOpt = None,
    cache: CacheOpt = "dynamic",
    cache_arg: CacheArgOpt = None,
    recompute: RecomputeOpt = False,
    fit_context: FitContextOpt = False,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Peak GPU memory of inference and of a training step, predicted on fake tensors; with
    --generate N, of a whole generate call (the KV cache, prefill and decode)."""
    if generate is not None:
        return _generate(model, dict(locals()), opts, out)
    _require_generate(cache=cache != "dynamic", cache_arg=cache_arg is not None,
                      recompute=recompute, fit_context=fit_context)
    from torchinspect.cli.options import tolerance as check_tolerance
    from torchinspect.memory.budget import memory_budget, prediction_gpu
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.fit import sweep_with_fit
    from torchinspect.memory.predict import check_checkpointing
    from torchinspect.memory.step import StepConfig
    from torchinspect.report.memory import memory_report, verification_report
    from torchinspect.sources.case import make_case

    batches = parse_batches(batch) or (None,)
    dtype, amp_dtype = amp_split(dtype, amp)
    cfg = StepConfig(train=train, optimizer=optimizer, dtype=dtype, amp=amp_dtype,
                     checkpointing=checkpointing, loss=loss, fsdp=fsdp, fsdp_unit=fsdp_unit)
    budget = memory_budget(fit) if fit is not None else None
    if _semantics(opts.device) == "cuda":  # --fit h100 predicts for the H100 too
        gpu = prediction_gpu([budget] if budget is not None else [], gpu)
    target = make_target(_semantics(opts.device), gpu, calibrate=calibrate)
    check_tolerance(tolerance, "--tolerance")
    if verify:
        _require_single(batches, fit, fsdp)
        from torchinspect.memory.verify import require_cuda

        require_cuda()
    case = make_case(model, options=opts, device="meta")
    check_checkpointing(case, cfg)
    result = sweep_with_fit(case, cfg, target, batches, budget, top=top, progress=current())
    inputs = input_files([model, *opts.files()])
    if len(result.results) == 1 and result.fit is None:
        emit(memory_report(result.results[0]), out, inputs)
    else:
        emit(memory_report(result), out, inputs)
    if verify:
        from torchinspect.memory.predict import example_at
        from torchinspect.memory.verify import verify as run_verify

        checked = run_verify(result.results[0], case, example_at(case, batches[0]), cfg, tolerance)
        emit(verification_report(checked), OutputOptions(out.format, None))
        if not checked.ok:
            raise typer.Exit(int(ExitStatus.CHECK_FAILED))


def _generate(model: str, v: dict[str, Any], opts: ModelOptions, out: OutputOptions) -> None:
    """`inspect memory MODEL --generate N` (``v``: the command's options by name)."""
    from torchinspect.cli.generation import check_generation, memory_generate

    check_generation(v["generate"], opts, v["cache"], refused={
        "--batch": v["batch"] is not None, "--amp": v["amp"],
        "--checkpointing": bool(v["checkpointing"]), "--fsdp": v["fsdp"] is not None,
        "--fsdp-unit": v["fsdp_unit"] is not None, "--calibrate": bool(v["calibrate"])})
    check_tolerance_value(v["tolerance"])
    memory_generate(model, opts, out, new_tokens=v["generate"], dtype=v["dtype"], gpu=v["gpu"],
                    device=_semantics(opts.device), cache=v["cache"], cache_arg=v["cache_arg"],
                    recompute=v["recompute"], fit=v["fit"], fit_context=v["fit_context"],
                    verify=v["verify"], tolerance=v["tolerance"])


def check_tolerance_value(value: float) -> None:
    from torchinspect.cli.options import tolerance as check_tolerance

    check_tolerance(value, "--tolerance")


def _require_generate(**given: bool) -> None:
    """The generation options mean nothing without --generate N."""
    for name, on in given.items():
        if on:
            option = "--" + name.replace("_", "-")
            raise InspectError(f"{option} is an option of --generate N",
                               hint=f"e.g. --generate 128 {option}" + (
                                   " static" if name == "cache" else ""))


def _semantics(device: str) -> str:
    """--device: cuda[:N] (also auto and meta) predicts for the CUDA allocator; cpu for the CPU."""
    return "cpu" if device == "cpu" else "cuda"


def _require_single(batches: tuple[int | None, ...], fit: str | None, fsdp: int | None) -> None:
    if fsdp is not None:
        raise InspectError("--verify measures one process on one GPU, and --fsdp needs one "
                           "process per GPU", hint="measure FSDP under torchrun: "
                           "benchmarks/memory_fsdp.py in the torchinspect repository")
    if len(batches) > 1 or fit is not None:
        raise InspectError("--verify measures one batch: it does not combine with a --batch "
                           "list or --fit", hint="e.g. inspect memory MODEL --batch 8 --verify")


_amp = amp_split  # the one rule, in cli/options.py (bench --train reads it too)
