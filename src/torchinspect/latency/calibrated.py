"""What was measured on a GPU for the latency prediction, and the GPU a prediction is for.

A *calibrated* GPU has a table in ``tables/NAME.json`` (written by
``benchmarks/latency_tables.py`` from measurements on that GPU): per-op efficiency curves of
what one call costs inside a CUDA graph (its kernels, the gaps between them, its floor at
small sizes), the gap a graph leaves between kernels, the host factor of eager runs, the
training step's constants, every constant's provenance, and the validation error of the
prediction. The GPU's datasheet rates come from the one GPU catalogue
(``torchinspect/gpus.py``, whose ``measured`` field says which GPUs have a table); a GPU
without a table is predicted from its datasheet alone and labelled "uncalibrated".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.gpus import CATALOGUE, Gpu, find_gpu

TABLE_FORMAT = 2
REFERENCE = "h100"  # the table whose efficiency curves stand in for an uncalibrated GPU's


@dataclass
class GpuTable:
    """What was measured on one GPU (see ``benchmarks/latency_tables.py``)."""

    gpu: str
    device_name: str
    source: str  # the raw data it was built from
    torch: str
    gap_us: float  # idle GPU time between two kernels of a CUDA graph
    host_factor: float  # eager host time / (dispatched ops x op_us + module calls x module_us)
    curves: dict[str, list[tuple[float, float]]]  # "matmul/bf16" -> [(log10 roofline us, eff)]
    scales: dict[str, float] = field(default_factory=dict)  # op group -> in-model correction
    kernels: dict[str, float] = field(default_factory=dict)  # curve key -> kernels per op
    train: dict[str, float] = field(default_factory=dict)  # the training step's constants
    provenance: list[dict[str, Any]] = field(default_factory=list)  # every constant's source
    validation: dict[str, Any] = field(default_factory=dict)
    measured: str = ""  # when the GPU was measured (ISO date)
    launch_factor: float = 0.0  # host time per kernel launched, x op_us


@dataclass(frozen=True)
class LatencyGpu:
    """A GPU to predict for: its catalogue entry and, when calibrated, its measured table."""

    spec: Gpu
    table: GpuTable | None

    @property
    def calibrated(self) -> bool:
        return self.table is not None

    @property
    def source(self) -> str:
        """How the numbers were made, for every output that shows a prediction."""
        if self.table is not None:
            return f"calibrated table {self.spec.name}.json (measured on {self.table.device_name})"
        return f"datasheet rates of the {self.spec.label} (uncalibrated)"


def validation_text(validation: dict[str, Any], what: str = "") -> str:
    """The validation error of a table, as its results page states it (``what``: of the
    training steps, else of graph replays)."""
    if not validation or validation.get("median_abs_error") is None:
        return ("validation error: UNKNOWN for this GPU: no table was measured on it (its "
                "datasheet rates with the H100's measured efficiency curves)")
    text = (f"validation error{' of ' + what if what else ''} on {validation.get('models')} "
            f"models never tuned on: median {100 * validation['median_abs_error']:.0f}%, 90th "
            f"percentile {100 * validation['p90_abs_error']:.0f}%")
    if validation.get("binding_right") is not None:
        text += f", eager binding side right {100 * validation['binding_right']:.0f}%"
    return text + f" ({validation.get('page')})"


def latency_gpu(name: str, *, option: str = "--predict") -> LatencyGpu:
    """A catalogue name (or alias; unknown: did-you-mean, exit 2) -> LatencyGpu."""
    gpu = find_gpu(name, option=option)
    return LatencyGpu(gpu, load_table(gpu.name) if "latency" in gpu.measured else None)


def measured_tables() -> list[GpuTable]:
    """The tables of every GPU the catalogue says was measured."""
    return [t for g in CATALOGUE.values() if "latency" in g.measured
            if (t := load_table(g.name)) is not None]


def load_table(name: str) -> GpuTable | None:
    """The packaged table for GPU ``name``, or None when that GPU has none."""
    try:
        text = resources.files("torchinspect.latency").joinpath(
            "tables", f"{name}.json").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return None
    return parse_table(json.loads(text), f"tables/{name}.json")


def parse_table(data: Any, where: str) -> GpuTable:
    """A table from its JSON (checked: format version, fields and their types)."""
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
        raise InspectError(f"{where}: not a latency table of format {TABLE_FORMAT}",
                           hint="regenerate it with benchmarks/latency_tables.py")
    try:
        curves = {str(k): [(float(x), float(e)) for x, e in v]
                  for k, v in data["curves"].items()}
        return GpuTable(gpu=str(data["gpu"]), device_name=str(data["device_name"]),
                        source=str(data["source"]), torch=str(data["torch"]),
                        gap_us=float(data["gap_us"]), host_factor=float(data["host_factor"]),
                        launch_factor=float(data.get("launch_factor", 0.0)),
                        curves=curves,
                        scales={str(k): float(v) for k, v in (data.get("scales") or {}).items()},
                        kernels={str(k): float(v)
                                 for k, v in (data.get("kernels") or {}).items()},
                        train={str(k): float(v) for k, v in (data.get("train") or {}).items()},
                        provenance=[dict(p) for p in data.get("provenance") or []],
                        validation=dict(data.get("validation") or {}),
                        measured=str(data.get("measured", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise InspectError(f"{where}: malformed latency table ({exc})",
                           hint="regenerate it with benchmarks/latency_tables.py") from None
