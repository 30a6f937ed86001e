"""What the GPU allocates beyond tensors: the cuBLAS workspace, by GPU architecture.

PyTorch gives each cuBLAS handle (one per thread: the forward runs on the caller's thread, the
backward on autograd's device thread) a workspace from the caching allocator on its first
matmul, kept for the life of the process (``aten/src/ATen/cuda/CublasHandlePool.cpp``,
``getChosenWorkspaceSize``): 32 MiB on Hopper and Blackwell (compute capability 9.x/10.x),
``4096 KiB x 2 + 16 KiB x 8`` elsewhere, or what ``CUBLAS_WORKSPACE_CONFIG`` says
(``:SIZE_KiB:COUNT`` pairs).
"""

from __future__ import annotations

import os
import re

from torchinspect.errors import InspectError

# GPU name -> compute capability major version
GPUS = {
    "h100": 9, "h200": 9, "h800": 9, "gh200": 9, "b200": 10, "gb200": 10, "b100": 10,
    "a100": 8, "a10": 8, "a10g": 8, "a30": 8, "a40": 8, "a6000": 8, "l4": 8, "l40": 8,
    "l40s": 8, "rtx4090": 8, "rtx3090": 8, "v100": 7, "t4": 7,
}
DEFAULT_GPU = "h100"
# GPU name -> (streaming multiprocessors, threads per SM): sizes a reduction's staging buffer
# (memory/reduction.py); the SXM parts where a card has several
MULTIPROCESSORS = {
    "h100": (132, 2048), "h200": (132, 2048), "h800": (132, 2048), "gh200": (132, 2048),
    "b200": (148, 2048), "gb200": (152, 2048), "b100": (132, 2048), "a100": (108, 2048),
    "a10": (72, 1536), "a10g": (80, 1536), "a30": (56, 2048), "a40": (84, 1536),
    "a6000": (84, 1536), "l4": (58, 1536), "l40": (142, 1536), "l40s": (142, 1536),
    "rtx4090": (128, 1536), "rtx3090": (82, 1536), "v100": (80, 2048), "t4": (40, 1024),
}
LT_WORKSPACE = 1 << 20  # cuBLASLt's workspace per handle (CUBLASLT_WORKSPACE_SIZE, KiB)
_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8


def parse_gpu(name: str | None) -> str:
    """A --gpu name (h100, a100, ...), or the GPU that is there, or the default (h100)."""
    if name is None:
        return detect_gpu() or DEFAULT_GPU
    key = name.lower().replace("-", "").replace(" ", "")
    if key not in GPUS:
        raise InspectError(f"--gpu {name!r}: unknown GPU", hint=f"one of {', '.join(GPUS)}")
    return key


def detect_gpu() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    text = torch.cuda.get_device_name().lower().replace(" ", "").replace("-", "")
    for key in sorted(GPUS, key=len, reverse=True):
        if key in text:
            return key
    major = torch.cuda.get_device_capability()[0]
    return "h100" if major == 9 else "b200" if major == 10 else "a100"


def cublas_workspace(gpu: str) -> int:
    """Bytes of one cuBLAS workspace on ``gpu`` (CUBLAS_WORKSPACE_CONFIG wins)."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":(\d+):(\d+)", config)
    if pairs:
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return 32 * 1024 * 1024 if GPUS[gpu] >= 9 else _OTHER


def multiprocessors(gpu: str) -> tuple[int, int]:
    """(SM count, threads per SM) of ``gpu``: the card's own when it is the one here."""
    import torch

    if torch.cuda.is_available() and detect_gpu() == gpu:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(props.multi_processor_count), int(props.max_threads_per_multi_processor)
    return MULTIPROCESSORS[gpu]


def cublaslt_workspace() -> int:
    """Bytes of cuBLASLt's workspace (kept per handle, like cuBLAS's; the first matmul with a
    fused bias allocates it)."""
    size = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return int(size) * 1024 if size.isdigit() else LT_WORKSPACE
