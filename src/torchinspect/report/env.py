"""`inspect env` -> Report: versions, CUDA, CPU, GPUs, optional components."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Table, Text, fmt_bytes
from torchinspect.report.render import OutputFormat

if TYPE_CHECKING:
    from torchinspect.env import EnvInfo


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """One key/value row per scalar: gpus.0.name, components.onnx.version, ..."""
    rows: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows += _flat(v, f"{key}.")
        elif isinstance(v, (list, tuple)):
            if not v:
                rows.append((key, ""))
            for i, item in enumerate(v):
                if isinstance(item, dict) and key == "components":
                    rest = {k2: v2 for k2, v2 in item.items() if k2 != "name"}
                    rows += _flat(rest, f"{key}.{item['name']}.")
                elif isinstance(item, dict):
                    rows += _flat(item, f"{key}.{i}.")
                else:
                    rows.append((f"{key}.{i}", item))
        else:
            rows.append((key, v))
    return rows


def env_report(info: EnvInfo, fmt: OutputFormat = OutputFormat.table) -> Report:
    """The Report for `inspect env`; CSV gets one flat key,value table."""
    data = info.to_dict()
    if fmt is OutputFormat.csv:
        rows = [[k, "" if v is None else v] for k, v in _flat(data)]
        return Report("env", data, [Table(None, ["key", "value"], rows, primary=True)])

    def opt(v: Any) -> Any:
        return "-" if v is None else v

    versions = KeyValues("Versions", [
        ("torchinspect", info.torchinspect),
        ("python", f"{info.python} ({info.python_executable})"),
        ("torch", opt(info.torch)),
        ("torchvision", opt(info.torchvision)),
        ("timm", opt(info.timm)),
        ("transformers", opt(info.transformers)),
        ("platform", f"{info.platform} ({info.machine})"),
    ])
    accel = [
        ("CUDA available", opt(info.cuda_available)),
        ("CUDA version (torch build)", opt(info.cuda_version)),
        ("cuDNN version (torch build)", opt(info.cudnn_version)),
        ("NVIDIA driver", opt(info.driver_version)),
        ("GPUs", len(info.gpus)),
    ]
    if info.hip_version:
        accel.insert(2, ("ROCm/HIP version", info.hip_version))
    if info.mps_available:
        accel.append(("MPS available", True))
    accel += [
        ("cudnn.enabled", opt(info.cudnn_enabled)),
        ("cudnn.benchmark", opt(info.cudnn_benchmark)),
        ("cudnn.deterministic", opt(info.cudnn_deterministic)),
        ("deterministic algorithms", opt(info.deterministic_algorithms)),
    ]
    cpu = [
        ("torch threads", opt(info.torch_num_threads)),
        ("torch interop threads", opt(info.torch_num_interop_threads)),
        ("os.cpu_count()", opt(info.cpu_count)),
    ]
    cpu += [(f"${k}", v) for k, v in info.env_vars.items()]
    sections: list[Any] = [versions, KeyValues("CUDA", accel), KeyValues("CPU", cpu)]
    if info.gpus:
        sections.append(Table(
            "GPUs", ["index", "name", "capability", "memory", "SMs"],
            [[g.index, g.name, g.capability, fmt_bytes(g.total_memory), g.multiprocessors]
             for g in info.gpus],
        ))
    sections.append(Table(
        "Optional components", ["component", "present", "version", "detail"],
        [[c.name, c.present, c.version, c.detail] for c in info.components],
        align=["left", "left", "left", "left"],
    ))
    notes = list(info.notes)
    if not info.runtime:
        notes.append("torch was not imported (no NVIDIA driver here): CUDA available, cuDNN, "
                     "GPUs, flags and threads are shown with --runtime")
    if notes:
        sections.append(Text(notes, title="Notes", style="yellow"))
    return Report("env", data, sections)
