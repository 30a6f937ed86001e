"""What the tool runs on: versions, CUDA and GPUs, CPU threads, optional components.

:func:`collect_env` returns an :class:`EnvInfo`; every probe tolerates failure (a missing
package, no CUDA, no ``nvidia-smi``) and records it instead of raising.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect import __version__

PROBE_TIMEOUT_S = 5.0

# environment variables that change how torch behaves, reported when set
ENV_VARS = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "TORCHINSPECT_DEBUG")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: str  # compute capability "major.minor", e.g. "9.0"
    total_memory: int  # bytes
    multiprocessors: int


@dataclass(frozen=True)
class Component:
    """An optional part: a Python distribution or an external binary."""

    name: str
    present: bool
    version: str | None = None
    detail: str | None = None  # where it is, or what it enables


@dataclass(frozen=True)
class EnvInfo:
    torchinspect: str
    python: str
    python_executable: str
    platform: str
    machine: str
    torch: str
    torchvision: str | None
    cuda_available: bool
    cuda_version: str | None  # CUDA toolkit torch was built with
    hip_version: str | None
    cudnn_available: bool
    cudnn_version: str | None
    cudnn_enabled: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    deterministic_algorithms: bool
    gpus: tuple[GpuInfo, ...]
    driver_version: str | None  # from nvidia-smi, None without it
    mps_available: bool
    torch_num_threads: int
    torch_num_interop_threads: int
    cpu_count: int | None
    components: tuple[Component, ...]
    env_vars: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # probes that failed, and why

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = [asdict(g) for g in self.gpus]
        d["components"] = [asdict(c) for c in self.components]
        d["notes"] = list(self.notes)
        return d


def format_cudnn_version(v: int | None) -> str | None:
    """cuDNN encodes 8.9.2 as 8902 and 9.1.0 as 90100."""
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def _dist_version(*dists: str) -> tuple[str, str] | None:
    """(distribution, version) of the first installed distribution among ``dists``."""
    for dist in dists:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _run(cmd: list[str]) -> str | None:
    """stdout+stderr of a short command, or None when it is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return (proc.stdout + proc.stderr).strip()


def nvidia_driver_version() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if not out:
        return None
    return out.splitlines()[0].strip() or None


def dot_version() -> str | None:
    """Version of the Graphviz ``dot`` binary (``dot -V`` prints it on stderr)."""
    out = _run(["dot", "-V"])
    if out is None:
        return None
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else out.splitlines()[0]


# (shown name, import name, distributions, what it enables)
_PACKAGES = (
    ("onnx", "onnx", ("onnx",), "export onnx"),
    ("onnxruntime", "onnxruntime", ("onnxruntime", "onnxruntime-gpu"), "ONNX verification"),
    ("onnxscript", "onnxscript", ("onnxscript",), "torch.onnx dynamo exporter"),
    ("thop", "thop", ("thop", "ultralytics-thop"), "flops --cross-check"),
    ("torchinfo", "torchinfo", ("torchinfo",), "flops --cross-check"),
    ("fvcore", "fvcore", ("fvcore",), "flops --cross-check"),
    ("safetensors", "safetensors", ("safetensors",), ".safetensors checkpoints"),
    ("graphviz", "graphviz", ("graphviz",), "graph rendering (Python package)"),
    ("numpy", "numpy", ("numpy",), None),
)


def optional_components() -> list[Component]:
    out: list[Component] = []
    for name, module, dists, what in _PACKAGES:
        found = _dist_version(*dists)
        present = found is not None and importlib.util.find_spec(module) is not None
        detail = what
        if found and found[0] != dists[0]:
            detail = f"{what}; installed as {found[0]}"
            if found[0] == "ultralytics-thop":
                detail += " (AGPL-3.0)"
        if present and name == "onnxruntime":
            detail = f"{what}; providers: {_onnxruntime_providers()}"
        out.append(Component(name, present, found[1] if found and present else None, detail))
    dot = shutil.which("dot")
    out.append(Component("dot", dot is not None, dot_version() if dot else None,
                         f"Graphviz binary: {dot}" if dot else "Graphviz binary: apt-get install graphviz"))
    return out


def _torchvision_version(notes: list[str]) -> str | None:
    """torchvision.__version__ (with its +cuXXX tag); a failing import is noted, not raised."""
    found = _dist_version("torchvision")
    if found is None:
        return None
    try:
        import torchvision
    except Exception as exc:  # e.g. built for another torch: exactly what env should show
        notes.append(f"torchvision {found[1]} is installed but does not import: "
                     f"{type(exc).__name__}: {exc}")
        return found[1]
    return str(torchvision.__version__)


def _onnxruntime_providers() -> str | None:
    try:
        import onnxruntime
    except Exception:
        return None
    return ", ".join(onnxruntime.get_available_providers())


def _gpus(torch: Any, notes: list[str]) -> list[GpuInfo]:
    gpus: list[GpuInfo] = []
    try:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(GpuInfo(i, p.name, f"{p.major}.{p.minor}", int(p.total_memory),
                                int(p.multi_processor_count)))
    except Exception as exc:  # a broken driver must not break `inspect env`
        notes.append(f"GPU query failed: {type(exc).__name__}: {exc}")
    return gpus


def collect_env() -> EnvInfo:
    """Probe the running interpreter, torch, the GPUs and the optional components."""
    import torch

    notes: list[str] = []
    tv_version = _torchvision_version(notes)
    try:
        cuda_available = torch.cuda.is_available()
    except Exception as exc:
        cuda_available = False
        notes.append(f"torch.cuda.is_available() failed: {type(exc).__name__}: {exc}")
    cudnn = torch.backends.cudnn
    try:
        cudnn_available = bool(cudnn.is_available())
        cudnn_version = format_cudnn_version(cudnn.version()) if cudnn_available else None
    except Exception as exc:
        cudnn_available, cudnn_version = False, None
        notes.append(f"cuDNN query failed: {type(exc).__name__}: {exc}")
    mps = getattr(torch.backends, "mps", None)
    return EnvInfo(
        torchinspect=__version__,
        python=platform.python_version(),
        python_executable=sys.executable,
        platform=platform.platform(),
        machine=platform.machine(),
        torch=torch.__version__,
        torchvision=tv_version,
        cuda_available=cuda_available,
        cuda_version=torch.version.cuda,
        hip_version=getattr(torch.version, "hip", None),
        cudnn_available=cudnn_available,
        cudnn_version=cudnn_version,
        cudnn_enabled=bool(cudnn.enabled),
        cudnn_benchmark=bool(cudnn.benchmark),
        cudnn_deterministic=bool(cudnn.deterministic),
        deterministic_algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        gpus=tuple(_gpus(torch, notes) if cuda_available else ()),
        driver_version=nvidia_driver_version(),
        mps_available=bool(mps is not None and mps.is_available()),
        torch_num_threads=torch.get_num_threads(),
        torch_num_interop_threads=torch.get_num_interop_threads(),
        cpu_count=os.cpu_count(),
        components=tuple(optional_components()),
        env_vars={k: os.environ[k] for k in ENV_VARS if k in os.environ},
        notes=tuple(notes),
    )
