"""GPUs the latency prediction knows: datasheet peak rates, and measured tables where we have them.

A ``GpuSpec`` holds a GPU's datasheet numbers (dense, no sparsity): tensor-core rates for
bf16/fp16 and TF32, the CUDA-core fp32 rate, and the memory bandwidth. A *calibrated* GPU
also has a table in ``tables/NAME.json`` (written by ``benchmarks/latency_tables.py`` from
measurements on that GPU): per-op efficiency curves, the per-kernel time under CUDA-graph
replay, the host factor of eager runs, and the validation error of the prediction. A GPU
without a table is predicted from the datasheet alone and labelled "uncalibrated".
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from torchinspect.errors import ExitStatus, InspectError

TABLE_FORMAT = 1


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet peaks in FLOP/s and bytes/s (dense)."""

    name: str  # the short name users type: h100
    label: str  # NVIDIA H100 SXM5 80GB
    tensor_16: float  # bf16 / fp16 tensor cores
    tf32: float  # TF32 tensor cores
    fp32: float  # CUDA cores, fp32 FMA
    bandwidth: float  # DRAM bytes/s
    bf16: bool = True  # native bf16 (T4: no; it runs bf16 at the fp32 rate)
    aliases: tuple[str, ...] = ()

    def peak(self, math: str) -> float:
        return {"tensor16": self.tensor_16, "tf32": self.tf32, "fp32": self.fp32}[math]


T = 1e12
DATASHEET: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("h100", "NVIDIA H100 SXM5 80GB", 989.4 * T, 494.7 * T, 66.9 * T, 3.35 * T,
            aliases=("h100-sxm", "h100 80gb hbm3", "nvidia h100 80gb hbm3")),
    GpuSpec("h200", "NVIDIA H200 SXM 141GB", 989.4 * T, 494.7 * T, 66.9 * T, 4.8 * T,
            aliases=("nvidia h200",)),
    GpuSpec("a100", "NVIDIA A100 SXM4 80GB", 312 * T, 156 * T, 19.5 * T, 2.039 * T,
            aliases=("a100-sxm", "nvidia a100-sxm4-80gb")),
    GpuSpec("l40s", "NVIDIA L40S", 362.05 * T, 183 * T, 91.6 * T, 0.864 * T,
            aliases=("nvidia l40s",)),
    GpuSpec("l4", "NVIDIA L4", 121 * T, 60 * T, 30.3 * T, 0.3 * T, aliases=("nvidia l4",)),
    GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090", 165.2 * T, 82.6 * T, 82.6 * T, 1.008 * T,
            aliases=("4090", "rtx-4090", "nvidia geforce rtx 4090")),
    GpuSpec("t4", "NVIDIA T4", 65 * T, 8.1 * T, 8.1 * T, 0.32 * T, bf16=False,
            aliases=("tesla t4", "nvidia t4")),
)}


@dataclass
class GpuTable:
    """What was measured on one GPU (see ``benchmarks/latency_tables.py``)."""

    gpu: str
    device_name: str
    source: str  # the raw data it was built from
    torch: str
    kernel_us: float  # one tiny kernel under CUDA-graph replay (launch gap included)
    host_factor: float  # eager host time / (dispatched ops x op_us + module calls x module_us)
    curves: dict[str, list[tuple[float, float]]]  # "matmul/bf16" -> [(log10 roofline us, eff)]
    scales: dict[str, float] = field(default_factory=dict)  # op group -> in-model correction
    kernels: dict[str, float] = field(default_factory=dict)  # curve key -> kernels per op
    validation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gpu:
    """A GPU to predict for: its datasheet and, when calibrated, its measured table."""

    spec: GpuSpec
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


def validation_text(validation: dict[str, Any]) -> str:
    """The validation error of a table, as its results page states it."""
    if not validation or validation.get("median_abs_error") is None:
        return "validation error: not measured for this GPU"
    return (f"validation error on {validation.get('models')} models never tuned on: median "
            f"{100 * validation['median_abs_error']:.0f}%, 90th percentile "
            f"{100 * validation['p90_abs_error']:.0f}%, eager binding side right "
            f"{100 * validation['binding_right']:.0f}% ({validation.get('page')})")


def known_gpus() -> list[str]:
    return list(DATASHEET)


def _normalise(text: str) -> str:
    return " ".join(text.strip().lower().replace("_", "-").split())


def resolve_gpu(name: str, *, option: str = "--predict") -> Gpu:
    """``h100`` (or an alias, or a CUDA device name) -> Gpu; unknown: did-you-mean, exit 2."""
    key = _normalise(name)
    for spec in DATASHEET.values():
        if key == spec.name or key in spec.aliases:
            return Gpu(spec, load_table(spec.name))
    close = difflib.get_close_matches(key, [*DATASHEET, *(a for s in DATASHEET.values()
                                                          for a in s.aliases)], n=1)
    guess = ""
    if close:
        match = next(s.name for s in DATASHEET.values() if close[0] in (s.name, *s.aliases))
        guess = f"did you mean {match}? "
    raise InspectError(f"{option} {name!r}: not a GPU this tool knows",
                       hint=f"{guess}known: {', '.join(DATASHEET)}", status=ExitStatus.USAGE)


def match_device_name(device_name: str) -> str | None:
    """The short name of a CUDA device name (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    key = _normalise(device_name)
    for spec in DATASHEET.values():
        if key in spec.aliases or key == spec.name:
            return spec.name
    for spec in DATASHEET.values():  # a family word in the name: "nvidia a100-pcie-40gb"
        if spec.name in key.replace(" ", "").replace("geforce", ""):
            return spec.name
    return None


def load_table(name: str) -> GpuTable | None:
    """The packaged table for GPU ``name``, or None when that GPU has none."""
    try:
        text = resources.files("torchinspect.bench.predict").joinpath(
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
                        kernel_us=float(data["kernel_us"]), host_factor=float(data["host_factor"]),
                        curves=curves,
                        scales={str(k): float(v) for k, v in (data.get("scales") or {}).items()},
                        kernels={str(k): float(v)
                                 for k, v in (data.get("kernels") or {}).items()},
                        validation=dict(data.get("validation") or {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise InspectError(f"{where}: malformed latency table ({exc})",
                           hint="regenerate it with benchmarks/latency_tables.py") from None
