"""`inspect check [MODEL...] --max-params 25M --max-macs 5G`: size budgets for CI (exit 1 on
failure), baselines (`--save-baseline`, `--baseline --max-increase`), JUnit XML."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from torchinspect.cli.command import model_command
from torchinspect.cli.options import MODEL_FORMS, gpu_opt
from torchinspect.cli.output import OutputOptions, emit, input_files
from torchinspect.cli.progress import current
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.escape import printable
from torchinspect.sources.case import ModelOptions

MaybeModelsArg = Annotated[list[str] | None, typer.Argument(
    metavar="[MODEL]...", show_default=False,
    help=f"models to check ({MODEL_FORMS}); default: the models listed in [tool.torchinspect.check] of the "
    "nearest pyproject.toml (this folder or above), or of --config.")]


def _opt(name: str, units: str) -> object:
    metavar = {"latency-ms": "MS", "step-ms": "MS"}.get(name, units.split()[0])
    return Annotated[str | None, typer.Option(f"--max-{name}", metavar=metavar,
                                              help=f"budget: {units}.")]


ParamsOpt = _opt("params", "N parameters, e.g. 25M, 1.5e9, 30000000")
MacsOpt = _opt("macs", "N multiply-accumulates per forward, e.g. 5G")
SizeOpt = _opt("size-mb", "MB of weights (parameters + buffers, 1 MB = 10^6 bytes), e.g. 100")
ActOpt = _opt("activation-mb", "MB of activations (leaf-module outputs of one forward)")
InferOpt = _opt("infer-mb", "MB peak GPU memory of inference, predicted as `inspect memory` "
               "does (no GPU needed); or a GPU, h100 (also the GPU predicted for), or its "
               "memory, 24GB (GiB), read as --fit reads them: less the CUDA context and the "
               "allocator's reserve")
TrainMbOpt = _opt("train-mb", "MB peak GPU memory of an AdamW training step (forward, "
                  "backward, optimizer step), predicted as `inspect memory` does; or a GPU, "
                  "h100, or its memory, 24GB, as for --max-infer-mb")
StepOpt = _opt("step-ms", "ms per eager training step (AdamW, fp32 weights, forward under "
               "autocast bf16) at the example input, PREDICTED for --gpu (default h100) as "
               "`inspect bench --predict GPU --train --amp --dtype bf16` does (no GPU needed)")
LatencyOpt = _opt("latency-ms", "median ms per forward at the example input, measured like "
                  "`inspect bench` on --device (auto/meta: cpu; cuda for GPU budgets); a breach "
                  "inside the measurement noise is noted, not failed")
ConfigOpt = Annotated[str | None, typer.Option(
    "--config", metavar="FILE", help="TOML file with [tool.torchinspect.check] (default: the "
    "nearest pyproject.toml with that table, from this folder up); model paths in it are "
    "relative to its folder.")]
JunitOpt = Annotated[str | None, typer.Option(
    "--junit", metavar="FILE", help="also write a JUnit XML report (atomic; written even when "
    "a model fails to build or the config is wrong).")]
BaselineOpt = Annotated[str | None, typer.Option(
    "--baseline", metavar="FILE", help="compare with a baseline saved by --save-baseline: "
    "adds Baseline and Change columns; growth over --max-increase fails.")]
IncreaseOpt = Annotated[str | None, typer.Option(
    "--max-increase", metavar="METRIC=PCT,...", help="allowed growth over --baseline, e.g. "
    "params=2%,macs=5% (also [tool.torchinspect.check.increase]); latency within its noise "
    "never fails.")]
SaveOpt = Annotated[str | None, typer.Option(
    "--save-baseline", metavar="FILE", help="write every metric of every model as a baseline "
    "(versioned JSON, atomic) for a later --baseline.")]
GpuOpt = Annotated[str | None, gpu_opt(
    "the GPU (h100, a100, l4, ...) --max-infer-mb, --max-train-mb and --max-step-ms are "
    "predicted for (default: the GPU a memory budget names, else the GPU here, else h100); "
    "with --max-latency-ms on a machine without CUDA: judge "
    "the latency predicted for it (metric predicted-ms) instead of measuring; with CUDA present "
    "the latency is measured as usual.")]
LatencyFlag = Annotated[bool, typer.Option(
    "--latency", help="also time every model (median, IQR, CoV), e.g. for --save-baseline.")]


def _targets(out: OutputOptions, junit: str | None, save: str | None,
             protect: tuple[str, ...]) -> None:
    """Refuse, before any work, outputs that collide or would replace an input."""
    from torchinspect.io.atomic import check_target

    given = [("--junit", junit), ("--save-baseline", save), ("--output", out.output)]
    named = [(opt, path) for opt, path in given if path]
    for i, (opt, path) in enumerate(named):
        for other, path2 in named[i + 1:]:
            if os.path.abspath(path) == os.path.abspath(path2):
                raise InspectError(f"{opt} {path} and {other} name the same file",
                                   hint="give each output its own name")
        if opt != "--output":  # checked with the shared options
            check_target(path, protect=protect)


def _predict_latency(given: dict[Any, Any], gpu: str, opts: ModelOptions) -> None:
    """--gpu NAME without CUDA here: the latency budget is judged on the prediction."""
    from torchinspect.check import Metric
    from torchinspect.gpus import find_gpu

    find_gpu(gpu)  # an unknown name: did-you-mean, exit 2
    if given.get(Metric.latency_ms) is None or opts.device.startswith("cuda"):
        return
    import torch

    if torch.cuda.is_available():
        return
    given[Metric.predicted_ms] = given.pop(Metric.latency_ms)
    typer.echo(f"no GPU here: --max-latency-ms is judged on the latency predicted for {gpu} "
               "(metric predicted-ms)", err=True)


@model_command()
def check(
    models: MaybeModelsArg = None,
    max_params: ParamsOpt = None,  # type: ignore[valid-type]
    max_macs: MacsOpt = None,  # type: ignore[valid-type]
    max_size_mb: SizeOpt = None,  # type: ignore[valid-type]
    max_activation_mb: ActOpt = None,  # type: ignore[valid-type]
    max_latency_ms: LatencyOpt = None,  # type: ignore[valid-type]
    max_infer_mb: InferOpt = None,  # type: ignore[valid-type]
    max_train_mb: TrainMbOpt = None,  # type: ignore[valid-type]
    max_step_ms: StepOpt = None,  # type: ignore[valid-type]
    config: ConfigOpt = None,
    junit: JunitOpt = None,
    baseline: BaselineOpt = None,
    max_increase: IncreaseOpt = None,
    save_baseline: SaveOpt = None,
    latency: LatencyFlag = False,
    gpu: GpuOpt = None,
    *,
    opts: ModelOptions,
    out: OutputOptions,
) -> None:
    """Enforce size budgets (params, MACs, MB, latency) and baselines on one or more models;
    exit 1 if any fails or cannot be built, 2 on a usage error."""
    from torchinspect import check as core
    from torchinspect.report.check import check_report

    protect = input_files([*(models or []), *opts.files(), config, baseline])
    _targets(out, junit, save_baseline, protect)
    given = {core.Metric.params: max_params, core.Metric.macs: max_macs,
             core.Metric.size_mb: max_size_mb, core.Metric.activation_mb: max_activation_mb,
             core.Metric.latency_ms: max_latency_ms, core.Metric.infer_mb: max_infer_mb,
             core.Metric.train_mb: max_train_mb, core.Metric.step_ms: max_step_ms}
    if gpu is not None:
        _predict_latency(given, gpu, opts)
    try:
        plan = core.plan_check(models or [], core.cli_limits(given), config=config,
                               baseline=baseline, max_increase=max_increase,
                               save=save_baseline is not None, latency=latency, gpu=gpu,
                               notes=core.budget_notes(given))
    except InspectError as exc:  # the CI's test view still gets a file that says why
        if junit:
            core.write_junit(core.junit_error_xml(exc.message, exc.hint), junit, protect=protect)
        raise
    inputs = [*(models or []), *opts.files(), config, baseline, plan.config,
              *(mb.target for mb in plan.models if isinstance(mb.target, str))]
    protect = input_files(inputs)
    _targets(out, junit, save_baseline, protect)  # the config's model files too
    if plan.config and (out.output or out.format in ("json", "csv")):
        typer.echo(f"budgets from {printable(str(plan.config))}", err=True)
    from torchinspect.io.atomic import snapshot

    before = snapshot(save_baseline) if save_baseline else None  # one writer: see write_baseline
    result = core.run_check(plan, opts, progress=current())
    if junit:
        core.write_junit(result, junit, protect=protect)
        typer.echo(f"wrote {printable(str(junit))}", err=True)
    if save_baseline:
        core.write_baseline(result, save_baseline, protect=protect, unchanged=before)
        typer.echo(f"wrote {printable(str(save_baseline))}", err=True)
    emit(check_report(result), out, inputs=inputs)
    if not result.passed:
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
