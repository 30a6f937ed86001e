"""What the GPU allocates beyond tensors: the cuBLAS workspace, by GPU architecture.

PyTorch gives each cuBLAS handle (one per thread: the forward runs on the caller's thread, the
backward on autograd's device thread) a workspace from the caching allocator on its first
matmul, kept for the life of the process (``aten/src/ATen/cuda/CublasHandlePool.cpp``,
``getChosenWorkspaceSize``): 32 MiB on Hopper and Blackwell (compute capability 9.x/10.x),
``4096 KiB x 2 + 16 KiB x 8`` elsewhere, or what ``CUBLAS_WORKSPACE_CONFIG`` says
(``:SIZE_KiB:COUNT`` pairs). The GPUs' compute capabilities and SM counts are the catalogue's
(``torchinspect/gpus.py``).
"""

from __future__ import annotations

import os
import re

from torchinspect.gpus import CATALOGUE, detect_gpu
from torchinspect.memory.constants import value

LT_WORKSPACE = value("cublaslt.workspace")  # per handle (CUBLASLT_WORKSPACE_SIZE, KiB)
_HOPPER = value("cublas.workspace_sm90")
_OTHER = value("cublas.workspace_other")


def cublas_workspace(gpu: str) -> int:
    """Bytes of one cuBLAS workspace on ``gpu`` (CUBLAS_WORKSPACE_CONFIG wins)."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":(\d+):(\d+)", config)
    if pairs:
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return _HOPPER if CATALOGUE[gpu].capability[0] >= 9 else _OTHER


def multiprocessors(gpu: str) -> tuple[int, int]:
    """(SM count, threads per SM) of ``gpu``: the card's own when it is the one here."""
    import torch

    here = detect_gpu()
    if here is not None and here.name == gpu:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(props.multi_processor_count), int(props.max_threads_per_multi_processor)
    return CATALOGUE[gpu].sms, CATALOGUE[gpu].threads_per_sm


def cublaslt_workspace() -> int:
    """Bytes of cuBLASLt's workspace (kept per handle, like cuBLAS's; the first matmul with a
    fused bias allocates it)."""
    size = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return int(size) * 1024 if size.isdigit() else LT_WORKSPACE
