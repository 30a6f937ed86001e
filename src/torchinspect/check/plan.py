"""Which models to check, with which limits, against which baseline: one :class:`CheckPlan`
made before any model is loaded (every usage error of the command surfaces here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torchinspect.check.baseline import Baseline, read_baseline
from torchinspect.check.config import CheckConfig, ModelBudget, load_config
from torchinspect.check.metrics import (
    MemoryLimit,
    Metric,
    Need,
    budget_note,
    parse_budget,
    parse_increases,
)
from torchinspect.errors import InspectError


@dataclass
class CheckPlan:
    models: list[ModelBudget]
    config: str | None = None
    baseline: Baseline | None = None
    increase: dict[Metric, tuple[float, str]] = field(default_factory=dict)  # growth, origin
    every_metric: bool = False  # a baseline is saved or compared: measure every metric
    latency: bool = False  # time every model (--latency, a latency increase)
    gpu: str | None = None  # --gpu: predicted-ms is predicted for this GPU
    notes: list[str] = field(default_factory=list)  # how budgets were read (a GPU's memory)

    def gpu_for(self, mb: ModelBudget) -> str | None:
        """The GPU ``mb``'s numbers are predicted for: ``--gpu``, else the card its memory
        budgets name (``max-train-mb = "h100"``), else None (the GPU here, else the default);
        two different cards are a usage error."""
        from torchinspect.memory.budget import prediction_gpu

        named = [v.budget for v in mb.limits.values() if isinstance(v, MemoryLimit)]
        return prediction_gpu(named, self.gpu)

    def metrics_for(self, mb: ModelBudget) -> set[Metric]:
        wanted = set(mb.limits)
        if self.every_metric:
            wanted |= {m for m in Metric if m.need is not Need.timing
                       and (m.need not in (Need.prediction, Need.step) or self.gpu)}
        if self.latency:
            wanted.add(Metric.latency_ms)
        return wanted


def cli_limits(given: dict[Metric, Any]) -> dict[Metric, float]:
    """``{Metric.params: "25M", ...}`` (None: not given) -> parsed limits."""
    return {m: parse_budget(v, m) for m, v in given.items() if v is not None}


def budget_notes(given: dict[Metric, Any]) -> list[str]:
    """How the budgets given as a GPU or its memory (``--max-train-mb 24GB``) were read: one
    note per value (``--max-infer-mb, --max-train-mb t4: ...``)."""
    options: dict[str, list[Metric]] = {}
    for m, v in given.items():
        if isinstance(v, str):
            options.setdefault(v, []).append(m)
    notes = (budget_note(v, ms[0], ", ".join(m.option for m in ms)) for v, ms in options.items())
    return [n for n in notes if n]


def plan_check(models: list[Any], limits: dict[Metric, float], *, config: str | None = None,
               cwd: str | None = None, baseline: str | None = None,
               max_increase: str | dict[Metric, float] | None = None, save: bool = False,
               latency: bool = False, gpu: str | None = None,
               notes: Sequence[str] = ()) -> CheckPlan:
    """The models to check (command line over config entries over config defaults), their
    limits with where each came from, and the baseline to compare against."""
    found = load_config(config, cwd)
    chosen = _choose(models, limits, found)
    increase = _increases(max_increase, found, baseline)
    plan = CheckPlan(chosen, found.path if found else None,
                     read_baseline(baseline) if baseline else None, increase,
                     every_metric=save or baseline is not None,
                     latency=latency or Metric.latency_ms in increase, gpu=gpu,
                     notes=[*notes, *(found.notes if found else [])])
    if gpu is None and any(Metric.predicted_ms in mb.limits for mb in chosen):
        raise InspectError("--max-predicted-ms: predicted for which GPU?",
                           hint="name one with --gpu (e.g. --gpu h100)")
    for mb in chosen:
        plan.gpu_for(mb)  # its budgets and --gpu name one GPU, or none
        if not mb.limits and not plan.every_metric and not plan.latency:
            raise InspectError(f"{mb.model}: no budget to check",
                               hint="pass e.g. --max-params 25M --max-macs 5G, set them in "
                               "[tool.torchinspect.check], or compare with --baseline FILE")
    if gpu is not None:
        _check_gpu(plan, gpu)
    return plan


# what --gpu applies to: the memory peaks and the latency predicted for it (latency-ms: with no
# CUDA here the CLI judges it as predicted-ms; with CUDA it is measured, --gpu kept for CI
# commands run on both kinds of runner)
GPU_METRICS = frozenset({Metric.infer_mb, Metric.train_mb, Metric.predicted_ms,
                         Metric.latency_ms, Metric.step_ms})


def _check_gpu(plan: CheckPlan, gpu: str) -> None:
    """``--gpu``: a GPU of the catalogue, and one that some checked number is predicted for."""
    from torchinspect.gpus import find_gpu

    find_gpu(gpu)  # an unknown name: did-you-mean, exit 2
    if not any(GPU_METRICS & plan.metrics_for(mb) for mb in plan.models):
        raise InspectError(f"--gpu {gpu}: no number checked here is predicted for a GPU",
                           hint="--gpu applies to --max-infer-mb, --max-train-mb, "
                           "--max-step-ms and --max-latency-ms (predicted without CUDA); leave "
                           "it out")


def _choose(models: list[Any], limits: dict[Metric, float],
            found: CheckConfig | None) -> list[ModelBudget]:
    options = {m: m.option for m in limits}
    if not models:
        if found is None or not found.entries:
            raise InspectError("no MODEL given and no models in a check config",
                               hint="inspect check resnet50 --max-params 30M, or list models under "
                               "[[tool.torchinspect.check.models]] in pyproject.toml (found in "
                               "this folder or above it)")
        return [ModelBudget(e.model, {**e.limits, **limits}, e.options, e.source,
                            {**e.origins, **options}, e.spec, e.above) for e in found.entries]
    by_name = {e.model: e for e in found.entries} if found else {}
    defaults = found.defaults if found else {}
    label = found.label if found else ""
    chosen = []
    for m in models:
        entry = by_name.get(m) if isinstance(m, str) else None
        if entry is not None and found is not None and found.above:
            # a config above this folder: budgets only for a model named here, never its
            # weights, arch or options (someone else's file must not choose what is loaded)
            chosen.append(ModelBudget(m, {**entry.limits, **limits}, {}, entry.source,
                                      {**entry.origins, **options}))
        elif entry is not None:
            chosen.append(ModelBudget(m, {**entry.limits, **limits}, dict(entry.options),
                                      entry.source, {**entry.origins, **options}, entry.spec))
        else:
            origins = {**dict.fromkeys(defaults, label), **options}
            chosen.append(ModelBudget(m, {**defaults, **limits}, {}, origins=origins))
    return chosen


def _increases(given: str | dict[Metric, float] | None, found: CheckConfig | None,
               baseline: str | None) -> dict[Metric, tuple[float, str]]:
    cli = parse_increases(given) if isinstance(given, str) or given is None else dict(given)
    if cli and baseline is None:
        raise InspectError("--max-increase needs --baseline FILE to compare against",
                           hint="save one with `inspect check --save-baseline FILE` on the main "
                           "branch, then pass --baseline FILE")
    if baseline is None:
        return {}
    out = {m: (v, found.label + " [increase]") for m, v in found.increase.items()} if found else {}
    out.update({m: (v, "--max-increase") for m, v in cli.items()})
    return out
