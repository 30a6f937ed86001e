"""``--batch 1,8,32`` and ``--fit h100`` / ``--fit 80GB``: predictions over batch sizes.

The fit search doubles the batch from 1 while the predicted peak fits, then bisects between
the last fit and the first miss (as ``bench --max-batch`` does on the GPU, here on
predictions: no memory is touched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from torchinspect.arguments import ProgressFn
from torchinspect.errors import InspectError
from torchinspect.memory.budget import MemoryBudget
from torchinspect.memory.faking import Target
from torchinspect.memory.predict import predict_case
from torchinspect.memory.result import FitProbe, FitResult, MemoryResult, MemorySweep
from torchinspect.memory.step import StepConfig
from torchinspect.sources.case import ModelCase

BATCH_LIMIT = 1 << 16


def sweep(case: ModelCase, cfg: StepConfig, target: Target, batches: Sequence[int | None], *,
          budget: int | None = None, top: int = 10,
          progress: ProgressFn | None = None) -> list[MemoryResult]:
    results = []
    for batch in batches:
        if progress is not None and batch is not None:
            progress(f"batch {batch}")
        result = predict_case(case, cfg, target, batch=batch, top=top)
        result.budget = budget
        results.append(result)
    return results


def fit(case: ModelCase, cfg: StepConfig, target: Target, budget: int,
        limit: int = BATCH_LIMIT, progress: ProgressFn | None = None) -> FitResult:
    """The largest batch whose predicted peak fits ``budget``, for inference and training.
    Where cuDNN workspaces give a range, its upper end must fit. ``progress`` hears each
    probe as it is made."""
    probes: list[FitProbe] = []
    found: dict[str, int | None] = {}
    capped = False
    for mode in ("inference", "training") if cfg.train else ("inference",):
        mode_cfg = replace(cfg, train=mode == "training")

        def peak(batch: int, mode: str = mode, mode_cfg: StepConfig = mode_cfg) -> int:
            if progress is not None:
                progress(f"--fit: {mode} at batch {batch}")
            r = predict_case(case, mode_cfg, target, batch=batch, inference=mode == "inference")
            run = r.inference if mode == "inference" else r.training
            if run is None:
                return 0
            value = run.peak_high if run.peak_high is not None else run.peak
            probe = FitProbe(mode, batch, value, run.where, value != run.peak)
            probes.append(probe)
            if progress is not None:
                progress(f"--fit: {mode} batch {batch:,} peaks at {value / 1e9:,.2f} GB")
            return value

        found[mode], hit_limit = largest_fitting(peak, budget, limit)
        capped = capped or hit_limit
    return FitResult(budget, found.get("inference"), found.get("training"), probes, capped)


def largest_fitting(peak: Callable[[int], int], budget: int, limit: int) -> tuple[int | None, bool]:
    """Doubling then bisection on ``peak(batch) <= budget``; (largest fit, stopped at limit)."""

    def fits(batch: int) -> bool:
        return peak(batch) <= budget

    lo = 1
    try:
        first = fits(1)
    except InspectError:  # e.g. BatchNorm refuses to train on one sample: start at 2
        lo, first = 2, fits(2)
    if not first:
        return None, False
    while lo * 2 <= limit and fits(lo * 2):
        lo *= 2
    if lo * 2 > limit:
        return lo, True
    hi = lo * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, False


def sweep_with_fit(case: ModelCase, cfg: StepConfig, target: Target,
                   batches: Sequence[int | None], budget: MemoryBudget | None, top: int = 10,
                   progress: ProgressFn | None = None) -> MemorySweep:
    """Predictions at ``batches`` and, with a ``budget``, the fit search within its usable
    memory; ``progress`` hears each batch predicted."""
    usable = budget.usable if budget is not None else None
    results = sweep(case, cfg, target, batches, budget=usable, top=top, progress=progress)
    found = fit(case, cfg, target, usable, progress=progress) if usable is not None else None
    return MemorySweep(results, found, budget)
