"""``--generate N`` on ``inspect memory`` and ``inspect bench``: the options checked before
anything is built, then the cores (memory/generate.py, latency/generate.py,
bench/generate.py) and the reports (report/generate.py). Not a command of its own: the
glue both commands share, so each adds a few lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from torchinspect.cli.output import OutputOptions, emit, input_files
from torchinspect.cli.progress import current
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.sources.case import ModelOptions

# the largest batch and prompt a --generate prediction takes (an absurd value is refused
# before anything is built; a prediction still says when a real one does not fit)
MAX_BATCH = 1 << 20
MAX_PROMPT = 1 << 24
CACHES = ("dynamic", "static", "quantized")


def check_generation(new_tokens: int, opts: ModelOptions, cache: str, *,
                     refused: dict[str, bool]) -> None:
    """Refuse, before the model is built: options that mean nothing for a generate call
    (``refused``: option -> given), an unknown cache, an absurd batch or prompt."""
    from torchinspect.inputs import parse_spec

    given = [name for name, on in refused.items() if on]
    if given:
        raise InspectError(f"--generate predicts one generate call: {given[0]} does not apply",
                           hint=f"leave out {given[0]}")
    if cache not in CACHES:
        raise InspectError(f"--cache {cache!r}: expected one of {', '.join(CACHES)}",
                           hint="e.g. --cache static")
    for text in opts.inputs or ():
        spec = parse_spec(text)
        dims = spec.shape if opts.no_batch or len(spec.shape) != 1 else (1, *spec.shape)
        if len(dims) == 2 and dims[0] > MAX_BATCH:
            raise InspectError(f"--input {text}: a batch of {dims[0]:,} sequences is past "
                               f"{MAX_BATCH:,}", hint="e.g. --input long:8,2048 --no-batch")
        if dims and dims[-1] > MAX_PROMPT:
            raise InspectError(f"--input {text}: a prompt of {dims[-1]:,} tokens is past "
                               f"{MAX_PROMPT:,}", hint="e.g. --input long:8,2048 --no-batch")
    if opts.batch is not None and opts.batch > MAX_BATCH:
        raise InspectError(f"--batch {opts.batch:,}: past {MAX_BATCH:,} sequences",
                           hint="e.g. --batch 8")
    if new_tokens < 1:
        raise InspectError(f"--generate {new_tokens}: expected 1 or more new tokens",
                           hint="e.g. --generate 128")


def _budget(fit: str) -> tuple[int, float, str, str | None]:
    """``--fit`` with --generate, read as ``inspect memory --fit`` reads it
    (`memory.budget.memory_budget`: a GPU of the catalogue, a size, or ``cuda``): its usable
    memory, after the CUDA context and the allocator's reserve. -> (usable bytes, reserve
    still to plan over each peak (none: it is taken out already), how it was read, the GPU
    named or None)."""
    from torchinspect.memory.budget import memory_budget

    b = memory_budget(fit, option="--fit")
    how = (f"{b.gpu.name if b.gpu else b.text} ({b.size or 'free here'}): "
           f"{b.usable / 2**30:.1f} GiB usable after the CUDA context "
           f"({b.context / 2**20:.0f} MiB) and the allocator's reserve ({b.reserve:.0%})")
    return b.usable, 0.0, how, b.gpu.name if b.gpu else None


def memory_generate(model: str, opts: ModelOptions, out: OutputOptions, *, new_tokens: int,
                    dtype: str | None, gpu: str | None, device: str, cache: str,
                    cache_arg: str | None, recompute: bool, fit: str | None, fit_context: bool,
                    verify: bool, tolerance: float) -> None:
    """``inspect memory MODEL --generate N``: the peak of the generate call, or --fit."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.generate import GenerateConfig, fit_generate, predict_case
    from torchinspect.report.generate import generate_memory_report
    from torchinspect.sources.case import make_case

    if fit_context and fit is None:
        raise InspectError("--fit-context searches the longest prompt that fits: it needs --fit",
                           hint="e.g. --fit h100 --fit-context")
    if verify and fit is not None:
        raise InspectError("--verify measures one generate call: it does not combine with --fit",
                           hint="leave out --fit")
    budget = _budget(fit) if fit is not None else None
    target_gpu = gpu or (budget[3] if budget is not None else None)
    target = make_target("cpu" if device == "cpu" else "cuda", target_gpu, fast=True)
    if verify:
        from torchinspect.memory.verify import require_cuda

        require_cuda()
    cfg = GenerateConfig(new_tokens, dtype, cache, cache_arg, recompute)  # type: ignore[arg-type]
    case = make_case(model, options=opts, device="meta")
    progress = current()
    progress("generate: the prefill and the first decode steps")
    result = predict_case(case, cfg, target)
    found = None
    if budget is not None:
        found = fit_generate(case, cfg, target, budget[0], reserve=budget[1],
                             context=fit_context, progress=progress)
        result.budget = budget[0]
    emit(generate_memory_report(result, found, budget[2] if budget else ""), out,
         input_files([model, *opts.files()]))
    if verify:
        _verify_peak(case, result, dtype, tolerance, out)


def _verify_peak(case: Any, result: Any, dtype: str | None, tolerance: float,
                 out: OutputOptions) -> None:
    """Run the generate call on the GPU here; its peak against the prediction (exit 1)."""
    import torch

    from torchinspect.bench.generate import measure_peak
    from torchinspect.memory.step import DTYPES
    from torchinspect.memory.verify import Check, Verification
    from torchinspect.report.memory import verification_report

    model = case.real_model("cpu")
    model = model.to(device="cuda", dtype=DTYPES[dtype]) if dtype else model.to("cuda")
    model.eval()
    measured = measure_peak(model, result.batch, result.prompt, result.new_tokens)
    del model
    torch.cuda.empty_cache()
    checked = Verification(torch.cuda.get_device_name(),
                           [Check("generate", "peak", result.peak, measured, tolerance)])
    emit(verification_report(checked), OutputOptions(out.format, None))
    if not checked.ok:
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))


def bench_generate(model: str, opts: ModelOptions, out: OutputOptions, *, new_tokens: int,
                   dtypes: Sequence[str], predict: str | None, cache: str,
                   cache_arg: str | None, recompute: bool, tf32: bool | None,
                   repeats: int = 5) -> None:
    """``inspect bench MODEL --generate N``: predicted (--predict GPU, no device touched), and
    measured beside it on a CUDA device."""
    from torchinspect.gpus import detect_gpu
    from torchinspect.latency import host_model, latency_gpu
    from torchinspect.latency.generate import LatencyConfig, predict_case
    from torchinspect.report.generate import generate_latency_report
    from torchinspect.sources.case import make_case

    if len(dtypes) > 1:
        raise InspectError(f"--generate measures one dtype: --dtype {','.join(dtypes)} is a list",
                           hint="e.g. --dtype bf16")
    dtype = dtypes[0] if dtypes else "fp32"
    cuda = opts.device.startswith("cuda")
    if not cuda and predict is None:
        raise InspectError("--generate runs on a GPU (--device cuda) or predicts one "
                           "(--predict GPU)", hint="e.g. --predict h100")
    case = make_case(model, options=opts, device="meta")
    here = detect_gpu() if cuda else None
    gpu_name = predict or (here.name if here is not None else None)
    cfg = LatencyConfig(new_tokens, dtype, cache, cache_arg, recompute, tf32=tf32)  # type: ignore[arg-type]
    progress = current()
    pred = None
    if gpu_name is not None:
        progress("generate: pricing the prefill and the decode steps")
        pred = predict_case(case, cfg, latency_gpu(gpu_name), host_model())
    measured = None
    device = None
    if cuda:
        progress("generate: measuring on the GPU")
        measured, device = _measure(case, opts.device, dtype, new_tokens, repeats)
    if pred is None:
        raise InspectError(f"{device}: not a GPU of the catalogue, so there is nothing to "
                           "predict beside the measurement", hint="name one with --predict")
    emit(generate_latency_report(pred, measured, device), out, input_files([model, *opts.files()]))


def _measure(case: Any, device: str, dtype: str, new_tokens: int,
             repeats: int) -> tuple[dict[str, Any], str]:
    import torch

    from torchinspect.bench.generate import measure_generate, release
    from torchinspect.bench.run import DTYPES
    from torchinspect.trace.generation import find_decoder, token_input

    decoder = find_decoder(case)
    if not decoder.hf:
        raise InspectError(f"{case.name}: measuring generate runs transformers' generate; "
                           "a model of your own is predicted only", hint="use --predict GPU")
    batch, prompt, _ = token_input(case.require_example(), case.name)
    model = case.real_model("cpu").to(device=device, dtype=getattr(torch, DTYPES[dtype])).eval()
    try:
        row = measure_generate(model, batch, prompt, new_tokens, repeats=repeats, device=device,
                               logits="generate")
    finally:
        del model
        release(device)
    return row, torch.cuda.get_device_name(torch.device(device))
