"""What a benchmark ran on (GPU, driver, versions, CPU threads, math flags) and whether the
GPU's clocks were throttled. Every probe tolerates failure and records ``None``."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

from torchinspect.bench.precision import matmul_precision, tf32_state
from torchinspect.cache import cpu_model

PROBE_TIMEOUT_S = 5.0

# nvidia-smi clocks_event_reasons (formerly clocks_throttle_reasons) bits that slow a run
# down for reasons outside the program: power cap, hardware slowdown, thermal, power brake.
THROTTLE_BITS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                 0x40: "hardware thermal slowdown", 0x80: "power brake"}


def _smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _cuda_index(device: str) -> int:
    import torch

    return int(device.partition(":")[2] or torch.cuda.current_device())


def capture_environment(device: str) -> dict[str, Any]:
    """Versions, hardware and global math flags for ``device`` (cpu or cuda[:N])."""
    import torch

    env: dict[str, Any] = {
        "device": device, "torch": torch.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "float32_matmul_precision": matmul_precision(),
    }
    if device.startswith("cuda"):
        index = _cuda_index(device)
        props = torch.cuda.get_device_properties(index)
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env.update({
            "gpu": props.name, "gpu_index": index, "capability": f"{props.major}.{props.minor}",
            "gpu_memory": int(props.total_memory), "cuda": torch.version.cuda,
            "cudnn": _cudnn_text(cudnn), "driver": _smi("--query-gpu=driver_version",
                                                        "--format=csv,noheader", f"--id={index}"),
        })
        tf32 = tf32_state()
        env.update(tf32_matmul=tf32["matmul"], tf32_cudnn=tf32["cudnn"])
    return env


def _cudnn_text(v: int | None) -> str | None:
    if not v:
        return None
    major, rest = divmod(int(v), 10000) if v >= 10000 else divmod(int(v), 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def throttle_reasons(device: str) -> list[str] | None:
    """Active clock slowdowns on a CUDA device (empty: none), or None if unknown."""
    if not device.startswith("cuda"):
        return None
    index = _cuda_index(device)
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        out = _smi(f"--query-gpu={field}", "--format=csv,noheader", f"--id={index}")
        if out:
            try:
                mask = int(out.split()[0], 16)
            except ValueError:
                continue
            return [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    return None
