"""Collect what `inspect report` shows: one trace per model, its summary and flops views,
and the optional graph, doctor and bench parts (see ``torchinspect.overview.parts``)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from torchinspect import __version__
from torchinspect import device as devices
from torchinspect.analysis.conventions import conventions
from torchinspect.analysis.flops import FlopsResult, flops_from_trace
from torchinspect.analysis.params import left_out_notes
from torchinspect.analysis.summary import Summary, summary_from_trace
from torchinspect.arguments import ProgressFn, check_depth
from torchinspect.errors import InspectError
from torchinspect.overview import aggregate, parts
from torchinspect.overview.memory import memory_part
from torchinspect.overview.serving import serving_part
from torchinspect.sources.case import ModelCase, ModelLike, ModelOptions, make_case
from torchinspect.trace import trace_case

TOP_LAYERS = 15


@dataclass
class Block:
    """Totals of one top-level block (or one leaf layer): params and MACs including children."""

    name: str
    type: str
    params: int
    macs: int


@dataclass
class ModelOverview:
    """Everything the page shows for one model; a part that could not be made is None and
    ``missing[part]`` says why."""

    spec: str
    summary: Summary
    flops: FlopsResult
    graph: parts.GraphPart | None = None
    doctor: parts.DoctorPart | None = None
    bench: Any | None = None  # torchinspect.bench.BenchResult
    memory: Any | None = None  # torchinspect.overview.memory.MemoryPart
    latency: Any | None = None  # torchinspect.latency.Prediction (report --gpu)
    serving: Any | None = None  # torchinspect.overview.serving.ServingPart (a decoder)
    missing: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    weights: dict[str, Any] | None = None  # WeightsOrigin.to_dict() of the model

    @property
    def name(self) -> str:
        return self.summary.model

    def blocks(self) -> list[Block]:
        """Params and MACs per top-level block (depth 1), in call order, from the summary and
        flops rows: a block's params are its summary row's (inclusive; modules that never ran
        are rows too, so blocks add up to the model total less the root's own parameters), its
        MACs the flops row's inclusive count (summed over its calls)."""
        out: dict[str, Block] = {}
        for r in self.summary.rows:
            if r.depth == 1 and r.name not in out:  # rows are inclusive: the first is the block
                out[r.name] = Block(r.name, r.type, r.params or 0, 0)
        for f in self.flops.rows:
            if f.depth == 1 and f.name in out:
                out[f.name].macs += f.macs
        return list(out.values())

    def top_layers(self, n: int = TOP_LAYERS) -> list[aggregate.LayerGroup]:
        """The ``n`` groups of identical leaf layers with the most MACs (a group: the same
        type, settings, shapes, params and MACs; resnet50's repeated 3×3 convs are one)."""
        trace = self.summary.trace
        return aggregate.layer_groups(trace, n) if trace is not None else []

    def by_type(self) -> dict[str, aggregate.TypeTotals]:
        """Params and MACs per module type family (Conv2d, Linear, attention, norm, ...)."""
        trace = self.summary.trace
        return aggregate.by_type(trace) if trace is not None else {}

    def hierarchy(self) -> dict[str, tuple[int, int]]:
        """``{name: (params, MACs)}`` two levels down the module tree (for a treemap)."""
        trace = self.summary.trace
        return aggregate.two_levels(trace) if trace is not None else {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec, "model": self.name,
            "summary": self.summary.to_dict(), "flops": self.flops.to_dict(),
            "blocks": [vars(b) for b in self.blocks()],
            "top_layers": [g.to_dict() for g in self.top_layers()],
            "by_type": {k: vars(v) for k, v in self.by_type().items()},
            "hierarchy": {k: {"params": p, "macs": m} for k, (p, m) in self.hierarchy().items()},
            "graph": self.graph.to_dict() if self.graph else None,
            "doctor": self.doctor.to_dict() if self.doctor else None,
            "bench": self.bench.to_dict() if self.bench is not None else None,
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "latency": self.latency.to_dict() if self.latency is not None else None,
            "serving": self.serving.to_dict() if self.serving is not None else None,
            "weights": self.weights, "missing": dict(self.missing),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


@dataclass
class Overview:
    """The result of ``collect_overview`` (``to_dict()`` for JSON)."""

    models: list[ModelOverview]
    versions: dict[str, str | None]
    created: str
    bench_device: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"created": self.created, "versions": dict(self.versions),
                "convention": conventions(), "bench_device": self.bench_device,
                "models": [m.to_dict() for m in self.models]}


def versions() -> dict[str, str | None]:
    import torch

    out: dict[str, str | None] = {"torchinspect": __version__, "torch": torch.__version__,
                                  "torchvision": None, "python": platform.python_version()}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    return out


def collect_overview(models: ModelLike | Sequence[ModelLike], inputs: Any = None, *, depth: int = 3,
                     options: ModelOptions | None = None, graph: bool = True,
                     graph_depth: int = 2, doctor: bool = True, doctor_run: bool = False,
                     bench: bool = False, bench_batches: Sequence[int] | None = None,
                     bench_seconds: float = 1.0, device: str | None = None,
                     progress: ProgressFn | None = None, memory: bool = True,
                     gpu: str | None = None) -> Overview:
    """Collect a report for one model or several (``collect_overview(["resnet18", "vgg11"])``).

    ``device`` (default: ``options.device``, else auto) is where the trace runs (auto: meta,
    no memory) and where the real runs go (``bench``, ``doctor_run``; auto means the CPU).
    ``gpu`` (e.g. "h100") adds the predicted latency and its roofline chart for that GPU, and
    the memory part is predicted for it (default: the GPU here, else h100).
    """
    check_depth(depth)
    if gpu is not None:
        from torchinspect.gpus import find_gpu

        gpu = find_gpu(gpu).name  # an unknown name is refused before any model runs
    if graph_depth < 0:
        raise InspectError(f"graph depth {graph_depth}: must be 0 or more", hint="e.g. 2")
    if bench_seconds <= 0:
        raise InspectError(f"bench seconds {bench_seconds}: must be more than 0", hint="e.g. 1")
    specs: list[ModelLike] = (list(models) if isinstance(models, (list, tuple))
                              else [cast("ModelLike", models)])
    if not specs:
        raise InspectError("no model given", hint="e.g. inspect report resnet18 -o report.html")
    opts = options or ModelOptions()
    dev = devices.parse_device(device if device is not None else opts.device)
    real = devices.real_device(dev)
    if bench:
        devices.check_available(real)
    cases = [make_case(spec, inputs, options=opts, device=dev) for spec in specs]  # fail early
    out = [_one(spec, case, depth=depth, graph=graph, graph_depth=graph_depth, doctor=doctor,
                doctor_run=doctor_run, bench=bench, bench_batches=bench_batches,
                bench_seconds=bench_seconds, real=real, progress=progress, memory=memory,
                gpu=gpu)
           for spec, case in zip(specs, cases, strict=True)]
    created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return Overview(out, versions(), created, real if bench else None)


def _one(spec: Any, case: ModelCase, *, depth: int, graph: bool, graph_depth: int,
         doctor: bool, doctor_run: bool, bench: bool, bench_batches: Sequence[int] | None,
         bench_seconds: float, real: str, progress: ProgressFn | None,
         memory: bool = True, gpu: str | None = None) -> ModelOverview:
    say = progress or (lambda _text: None)
    label = spec if isinstance(spec, str) else type(spec).__name__
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    say(f"{label}: tracing")
    trace = trace_case(case)
    described = case.describe_inputs()
    notes = [*case.notes, *left_out_notes(case.model)]
    t0 = time.perf_counter()
    predicted, memory_why = (parts.attempt(lambda: memory_part(case, gpu)) if memory
                             else (None, None))
    seconds["memory"] = time.perf_counter() - t0
    summary = summary_from_trace(trace, model=case.name, inputs=described, depth=depth,
                                 notes=notes, memory=predicted.result if predicted else None)
    flops = flops_from_trace(trace, model=case.name, inputs=described, depth=depth, notes=notes)
    seconds["trace"] = time.perf_counter() - start
    view = ModelOverview(label, summary, flops, seconds=seconds, memory=predicted,
                         weights=case.weights.to_dict())
    if memory_why:
        view.missing["memory"] = memory_why

    def timed(part: str, fn: Callable[[], Any]) -> Any:
        say(f"{case.name}: {part}")
        t0 = time.perf_counter()
        result, why = parts.attempt(fn)
        seconds[part] = time.perf_counter() - t0
        if why:
            view.missing[part] = why
        return result

    if graph:
        view.graph = timed("graph", lambda: parts.graph_part(case, trace, graph_depth))
    if doctor:
        view.doctor = timed("doctor", lambda: parts.doctor_part(case, run_checks=doctor_run,
                                                                trace=trace))
    if gpu is not None:
        view.latency = timed("latency", lambda: parts.latency_part(case, gpu))
    if memory:  # a decoder: generate's peak by context and its decode time by batch
        view.serving = timed("serving", lambda: serving_part(case, gpu))
    if bench:
        view.bench = timed("bench", lambda: parts.bench_part(case, device=real,
                                                             batches=bench_batches,
                                                             seconds=bench_seconds))
    return view
