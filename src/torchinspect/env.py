"""What the tool runs on: versions, CUDA and GPUs, CPU threads, optional components.

``collect_env`` returns an ``EnvInfo``; every probe tolerates failure (a missing
package, no CUDA, no ``nvidia-smi``) and records it instead of raising.

Versions come from package metadata and the packages' ``version.py`` files (read as text,
never run), so nothing heavy is imported: ``inspect env`` takes a fraction of a second.
torch itself is imported only for its runtime facts (CUDA/cuDNN availability, GPUs,
threads, determinism flags): when asked (``runtime=True``), when torch is already imported,
or when an NVIDIA driver is present.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
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
    torch: str | None
    torchvision: str | None
    # the runtime facts below are None when torch was not imported (``runtime`` False)
    cuda_available: bool | None
    cuda_version: str | None  # CUDA toolkit torch was built with
    hip_version: str | None
    cudnn_available: bool | None
    cudnn_version: str | None
    cudnn_enabled: bool | None
    cudnn_benchmark: bool | None
    cudnn_deterministic: bool | None
    deterministic_algorithms: bool | None
    gpus: tuple[GpuInfo, ...]
    driver_version: str | None  # from nvidia-smi, None without it
    mps_available: bool | None
    torch_num_threads: int | None
    torch_num_interop_threads: int | None
    cpu_count: int | None
    components: tuple[Component, ...]
    env_vars: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # probes that failed, and why
    timm: str | None = None
    transformers: str | None = None
    runtime: bool = True  # whether torch was imported for the runtime facts

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


def optional_components(runtime: bool = True) -> list[Component]:
    """Optional packages by their metadata (none is imported; onnxruntime's providers are
    read by importing it only with ``runtime``) and the Graphviz binary."""
    out: list[Component] = []
    for name, module, dists, what in _PACKAGES:
        found = _dist_version(*dists)
        present = found is not None and importlib.util.find_spec(module) is not None
        detail = what
        if found and found[0] != dists[0]:
            detail = f"{what}; installed as {found[0]}"
            if found[0] == "ultralytics-thop":
                detail += " (AGPL-3.0)"
        if present and runtime and name == "onnxruntime":
            detail = f"{what}; providers: {_onnxruntime_providers()}"
        out.append(Component(name, present, found[1] if found and present else None, detail))
    dot = shutil.which("dot")
    out.append(Component("dot", dot is not None, dot_version() if dot else None,
                         f"Graphviz binary: {dot}" if dot else "Graphviz binary: apt-get install graphviz"))
    return out


def _package_dir(name: str) -> str | None:
    """Where package ``name`` would be imported from, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def version_file(name: str) -> dict[str, Any]:
    """The constants of ``name/version.py`` (torch and torchvision write their full version,
    with its +cuXXX tag, and the CUDA build there), read as text: never executed."""
    folder = _package_dir(name)
    out: dict[str, Any] = {}
    if folder is None:
        return out
    try:
        tree = ast.parse(Path(folder, "version.py").read_text())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return out
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            else node.target if isinstance(node, ast.AnnAssign) else None
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            out[target.id] = value.value
    return out


def package_version(name: str) -> str | None:
    """``name``'s version without importing it: its version.py when it has one (with the
    local tag, e.g. 2.14.1+cu130), else its distribution's metadata."""
    found = version_file(name).get("__version__")
    if isinstance(found, str):
        return found
    dist = _dist_version(name)
    return dist[1] if dist else None


def _torch_pin_note(notes: list[str]) -> None:
    """torchvision pins the torch it was built for: say when the installed one differs."""
    tv, torch_version = _dist_version("torchvision"), _dist_version("torch")
    if tv is None or torch_version is None:
        return
    for req in importlib.metadata.requires("torchvision") or []:
        m = re.match(r"torch\s*\(?\s*==\s*([^;,)\s]+)", req)
        if m and m.group(1) != torch_version[1].split("+")[0]:
            notes.append(f"torchvision {tv[1]} was built for torch {m.group(1)}, but torch "
                         f"{torch_version[1]} is installed: it may not import")


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


def nvidia_driver_present() -> bool:
    """An NVIDIA kernel driver is loaded (Linux) or nvidia-smi is on PATH."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def wants_runtime(runtime: bool | None) -> bool:
    """Import torch for its runtime facts? Asked; or free (already imported); or useful (an
    NVIDIA driver is here, or Apple silicon with MPS)."""
    if runtime is not None:
        return runtime
    return ("torch" in sys.modules or nvidia_driver_present()
            or (sys.platform == "darwin" and platform.machine() == "arm64"))


def _torch_runtime(notes: list[str]) -> dict[str, Any]:
    """The facts that need ``import torch``: CUDA/cuDNN availability, GPUs, flags, threads."""
    import torch

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
    return dict(
        torch=torch.__version__, cuda_available=cuda_available, cuda_version=torch.version.cuda,
        hip_version=getattr(torch.version, "hip", None), cudnn_available=cudnn_available,
        cudnn_version=cudnn_version, cudnn_enabled=bool(cudnn.enabled),
        cudnn_benchmark=bool(cudnn.benchmark), cudnn_deterministic=bool(cudnn.deterministic),
        deterministic_algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        gpus=tuple(_gpus(torch, notes) if cuda_available else ()),
        mps_available=bool(mps is not None and mps.is_available()),
        torch_num_threads=torch.get_num_threads(),
        torch_num_interop_threads=torch.get_num_interop_threads())


def _torch_build() -> dict[str, Any]:
    """What torch's version.py says (no import): its version and the CUDA/HIP it was built for;
    the runtime facts stay unknown (None)."""
    build = version_file("torch")
    return dict(
        torch=build.get("__version__") or package_version("torch"),
        cuda_available=None, cuda_version=build.get("cuda"), hip_version=build.get("hip"),
        cudnn_available=None, cudnn_version=None, cudnn_enabled=None, cudnn_benchmark=None,
        cudnn_deterministic=None, deterministic_algorithms=None, gpus=(), mps_available=None,
        torch_num_threads=None, torch_num_interop_threads=None)


def collect_env(runtime: bool | None = None) -> EnvInfo:
    """Probe the interpreter, the installed packages, the GPUs and the optional components.

    ``runtime``: import torch for its runtime facts (True), never (False), or when torch is
    already imported or an NVIDIA driver / Apple GPU is present (None, the default).
    """
    notes: list[str] = []
    live = wants_runtime(runtime)
    facts = _torch_runtime(notes) if live else _torch_build()
    _torch_pin_note(notes)
    return EnvInfo(
        torchinspect=__version__,
        python=platform.python_version(),
        python_executable=sys.executable,
        platform=platform.platform(),
        machine=platform.machine(),
        torchvision=package_version("torchvision"),
        **facts,
        driver_version=nvidia_driver_version(),
        cpu_count=os.cpu_count(),
        components=tuple(optional_components(live)),
        env_vars={k: os.environ[k] for k in ENV_VARS if k in os.environ},
        notes=tuple(notes),
        timm=package_version("timm"),
        transformers=package_version("transformers"),
        runtime=live,
    )
