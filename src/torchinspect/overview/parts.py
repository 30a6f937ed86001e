"""The optional parts of a report page, each taken from its own command core.

The module graph (``torchinspect.export.graph``), the doctor (``torchinspect.analysis.doctor``)
and the bench (``torchinspect.bench``) are imported lazily here and only here. A part that is
not in this build raises :class:`PartUnavailable`; :func:`attempt` turns that and any failure
of the part into a one-line reason, so the page still comes out with a note in its place.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from torchinspect.errors import InspectError, ModelCodeError, first_line
from torchinspect.guard import model_code

T = TypeVar("T")
DOT_TIMEOUT_S = 60


class PartUnavailable(Exception):
    """This part cannot be made in this build or on this machine; the message says why."""


def _missing(exc: ModuleNotFoundError, module: str, command: str) -> PartUnavailable | None:
    """A PartUnavailable when ``module`` itself (not one of its imports) is not installed."""
    name = exc.name or ""
    if name and (module == name or module.startswith(name + ".")):
        return PartUnavailable(f"`inspect {command}` is not in this build ({module} is missing)")
    return None


def attempt(fn: Callable[[], T]) -> tuple[T | None, str | None]:
    """``(result, None)``, or ``(None, reason)`` when the part is unavailable or fails."""
    try:
        with model_code():  # what one part's forwards set in torch is not the next part's
            return fn(), None
    except PartUnavailable as exc:
        return None, f"not available ({exc})"
    except ModelCodeError:  # the model's code ended the run (sys.exit): the whole run's error
        raise
    except InspectError as exc:
        return None, f"failed: {exc.message}"
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - one part failing must not lose the whole page
        return None, f"failed: {first_line(exc, typed=True)}"


# ------------------------------------------------------------------ module graph


@dataclass
class GraphPart:
    """The module graph of one model and, when Graphviz ``dot`` is present, its SVG."""

    graph: Any  # torchinspect.export.graph.Graph
    svg: str | None
    note: str | None = None  # why there is no SVG

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": len(self.graph.nodes), "edges": len(self.graph.edges),
                "depth": self.graph.depth, "svg": self.svg is not None, "note": self.note,
                "notes": list(self.graph.notes)}


def graph_part(case: Any, trace: Any, depth: int) -> GraphPart:
    """The module graph cut at ``depth``, built from ``trace`` (no second trace on meta)."""
    try:
        from torchinspect.export.graph import build_graph, module_flow, module_graph, to_dot
    except ModuleNotFoundError as exc:
        raise (_missing(exc, "torchinspect.export.graph", "graph") or exc) from None
    if trace.device == "meta" and case.on_meta:
        try:
            args, kwargs = case.inputs_on("meta")
            flow = module_flow(case.model, args, kwargs)
        except Exception:  # noqa: BLE001 - edges then follow the call order
            flow = None
        graph = module_graph(trace, flow, depth=depth, name=case.name)
    else:  # a model with real weights: the graph core handles it (its own meta stand-in)
        graph = build_graph(case, kind="module", depth=depth)
    svg, note = render_svg(to_dot(graph))
    return GraphPart(graph, svg, note)


def render_svg(dot_source: str) -> tuple[str | None, str | None]:
    """``(svg, None)`` from Graphviz ``dot``, or ``(None, why not)``."""
    dot = shutil.which("dot")
    if dot is None:
        return None, "the Graphviz `dot` program is not on PATH (install graphviz to draw it)"
    try:
        run = subprocess.run([dot, "-Tsvg"], input=dot_source.encode("utf-8"),
                             capture_output=True, timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"Graphviz dot took more than {DOT_TIMEOUT_S} s (try a smaller --graph-depth)"
    if run.returncode != 0:
        err = run.stderr.decode(errors="replace").strip().splitlines()
        return None, f"Graphviz dot failed: {err[-1] if err else run.returncode}"
    text = run.stdout.decode("utf-8", errors="replace")
    start = text.find("<svg")
    if start < 0:
        return None, "Graphviz dot produced no SVG"
    svg = text[start:]
    # dot writes no scripts; drop any that a label could smuggle in, and comments.
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"<\s*script\b.*?<\s*/\s*script\s*>", "", svg, flags=re.S | re.I)
    return svg, None


# ------------------------------------------------------------------ doctor


@dataclass
class DoctorPart:
    """The doctor's result, and the checks left out of this report (code -> why)."""

    result: Any  # torchinspect.analysis.doctor.DoctorResult
    left_out: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "left_out": dict(self.left_out)}


def doctor_part(case: Any, *, run_checks: bool, trace: Any = None) -> DoctorPart:
    """The doctor's checks; those that need a real forward/backward only with ``run_checks``
    (they run where the case asked: ``--device``, auto meaning the CPU)."""
    try:
        from torchinspect.analysis.doctor import RULES, diagnose_case
    except ModuleNotFoundError as exc:
        raise (_missing(exc, "torchinspect.analysis.doctor", "doctor") or exc) from None
    run_codes = [code for code, rule in RULES.items() if rule.needs == "run"]
    ignore = [] if run_checks else run_codes
    left_out = {c: "needs a real forward and backward: pass --doctor-run" for c in ignore}
    result = diagnose_case(case, ignore=ignore or None, trace=trace)
    return DoctorPart(result, left_out)


# ------------------------------------------------------------------ bench


def bench_part(case: Any, *, device: str, batches: Sequence[int] | None,
               seconds: float) -> Any:
    """Latency and throughput per batch size (a quick look: ``seconds`` per configuration)."""
    try:
        from torchinspect.bench import BenchOptions, TimingConfig, run_bench
    except ModuleNotFoundError as exc:
        raise (_missing(exc, "torchinspect.bench.run", "bench") or exc) from None
    except ImportError as exc:  # the package exists but has no bench core yet
        raise PartUnavailable(f"`inspect bench` is not in this build ({exc})") from None
    timing = TimingConfig(warmup_s=min(0.5, seconds), min_time=seconds,
                          max_time=max(3 * seconds, seconds), min_iters=5)
    opts = BenchOptions(device=device, batches=tuple(batches) if batches else None, timing=timing)
    return run_bench(case, opts)


def latency_part(case: Any, gpu: str) -> Any:
    """The latency predicted for ``gpu`` at the case's input and the model's own dtype
    (``inspect bench --predict``'s model): its per-module points draw the roofline chart."""
    from torchinspect.latency import model_dtype, predict_latency

    return predict_latency(case, gpu, dtypes=(model_dtype(case.model),))
