"""Which kernel CUDA runs ``scaled_dot_product_attention`` with, from the inputs' shapes,
strides and dtype: one rule for the memory predictor (what the kernel allocates) and the
latency predictor (one fused kernel, or the math path's matmuls and softmax).

PyTorch's choice on a GPU of compute capability 8.0 and up (``sdp_utils.cpp``): flash
attention (fp16/bf16, no mask), then memory-efficient attention (fp16/bf16/fp32, masks), else
the math path, which builds the full ``queries x keys`` score matrix. Both fused kernels need
head dimensions of at most 256 that are multiples of 8, and the last dimension of q, k, v and
the mask with stride 1 (``check_last_dim_stride_equals_1_dense``: a mask permuted from
(queries, keys, heads), as T5's position bias is, takes the math path).
"""

from __future__ import annotations

from typing import Any

import torch

FLASH, EFFICIENT, MATH = "flash", "efficient", "math"


def cuda_sdpa_kernel(q: Any, k: Any, v: Any, mask: Any, gqa: bool, dtype: Any) -> str:
    """flash, efficient or math, as a GPU of compute capability 8.0+ chooses."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.size(-1) > 256:
        return MATH
    if q.size(-1) % 8 or v.size(-1) != q.size(-1):
        return MATH
    if any(t.stride(-1) != 1 and t.size(-1) != 1 for t in (q, k, v)) or (
            mask is not None and mask.dim() > 0 and mask.stride(-1) != 1):
        return MATH
    if dtype in (torch.float16, torch.bfloat16) and mask is None:
        return FLASH
    if gqa and k.size(-3) != q.size(-3):
        return MATH
    return EFFICIENT if dtype in (torch.float16, torch.bfloat16, torch.float32) else MATH
