"""cuDNN's RNN (``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` on CUDA), as the caching allocator sees it.

On CUDA, PyTorch runs these modules through ``_cudnn_rnn``: one kernel call for all layers
and time steps, which allocates the output, the final hidden (and cell) state and, when the
module is in training mode, a **reserve space** that it keeps for the backward. On a CPU the
same module runs unrolled cells whose saved tensors are different, so a prediction for CUDA
takes cuDNN's layout instead (`reserve_bytes`).

The reserve size was measured on an H100 (cuDNN 9.19, torch 2.11) over 60 shapes of LSTM,
GRU and RNN, 1-3 layers, uni- and bidirectional, fp32 and bf16 (``benchmarks/cudnn_rnn_memory.py``,
``benchmarks/RESULTS-memory.md``); every one matched, to the byte,

    (gates x layers + layers - 1) x seq x batch x hidden x directions x element size + 256

with ``gates`` 5 for LSTM (4 gates and the cell state), 6 for GRU and 1 for a plain RNN: per
layer and time step what the backward needs, and the output of every layer but the last.

Under autocast the input, states and weights are cast down first, as autocast's kernel for
``_cudnn_rnn`` does. The workspace (freed inside the call) is logged per call as a
``workspace.Problem``: measured, looked up or bounded like a convolution's.

Handled: dense input (not packed sequences), no ``proj_size``; anything else keeps PyTorch's
composite (the unrolled cells).
"""

from __future__ import annotations

from typing import Any

import torch

from torchinspect.privtorch import decomposition

GATES = {"lstm": 5, "gru": 6, "rnn_tanh": 1, "rnn_relu": 1}
RESERVE_EXTRA = 256
# cudnnDropoutGetStatesSize: 48 KiB per streaming multiprocessor (6,488,064 bytes on an H100's
# 132, measured: benchmarks/memory_optrace.py)
DROPOUT_STATE_PER_SM = 48 * 1024


def reserve_bytes(kind: str, layers: int, seq: int, batch: int, hidden: int, directions: int,
                  element_size: int) -> int:
    """cuDNN's RNN reserve space in bytes (kept for backward in training mode)."""
    units = seq * batch * hidden * directions * element_size
    return (GATES[kind] * layers + layers - 1) * units + RESERVE_EXTRA


class _CudnnRNN(torch.autograd.Function):
    """What ``_cudnn_rnn`` allocates and keeps: output, hy (cy), the reserve in training;
    its backward: the gradients of the input, the initial state and the weights."""

    @staticmethod
    def forward(ctx: Any, kind: str, x: Any, hx: Any, cx: Any, layers: int, dirs: int,
                batch_first: bool, train: bool, *weights: Any) -> Any:
        seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        hidden = hx.shape[-1]
        # cuDNN writes time-major; batch_first gets a transposed view of it (a later
        # reshape copies it, as on the GPU)
        out = x.new_empty((seq, batch, dirs * hidden))
        if batch_first:
            out = out.transpose(0, 1)
        hy = torch.empty_like(hx)
        cy = torch.empty_like(cx) if cx is not None else None
        reserve = None
        if train:
            reserve = x.new_empty(reserve_bytes(kind, layers, seq, batch, hidden, dirs,
                                                x.element_size()), dtype=torch.uint8)
        ctx.save_for_backward(x, hx, cx, out, reserve, *weights)
        ctx.problem = dict(kind=kind, input_size=x.shape[-1], hidden=hidden, layers=layers,
                           dirs=dirs, seq=seq, batch=batch, dtype=x.dtype, train=train,
                           bias=len(weights) == 4 * layers * dirs, batch_first=batch_first)
        _workspace(ctx.problem, backward=False)
        return (out, hy, cy) if cy is not None else (out, hy)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        x, hx, cx, _, _, *weights = ctx.saved_tensors
        grad = grads[0]
        if ctx.problem["batch_first"] and grad is not None:
            grad = grad.transpose(0, 1)
        # a gradient that is not time-major contiguous is copied for the call (the calibration
        # measures the workspace with a contiguous one)
        copy = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device) \
            if grad is not None and not grad.is_contiguous() else None
        dx = torch.empty_like(x)  # cuDNN's backward-data runs (and allocates) either way
        dhx = torch.empty_like(hx) if ctx.needs_input_grad[2] else None
        dcx = torch.empty_like(cx) if cx is not None and ctx.needs_input_grad[3] else None
        dw = [torch.empty_like(w) if ctx.needs_input_grad[8 + i] else None
              for i, w in enumerate(weights)]
        _workspace(ctx.problem, backward=True)
        del copy
        return (None, dx if ctx.needs_input_grad[1] else None, dhx, dcx, None, None, None, None, *dw)


def _workspace(problem: dict[str, Any], backward: bool) -> None:
    """Log cuDNN's RNN workspace for this call on the tracker of the run, if one runs."""
    from torchinspect.memory.tracker import active_tracker
    from torchinspect.memory.workspace import rnn_problem

    tracker = active_tracker()
    if tracker is not None and tracker.cudnn:
        tracker.cudnn_workspace(rnn_problem(backward=backward, **problem))


def _dropout_state() -> None:
    """cuDNN's dropout states: created by the first training call with dropout and kept by
    PyTorch for the life of the process (``get_dropout_state`` in aten/src/ATen/native/cudnn/RNN.cpp)."""
    from torchinspect.memory.tracker import active_tracker

    tracker = active_tracker()
    if tracker is not None and tracker.cores is not None:
        tracker.keep_once("cuDNN dropout state", DROPOUT_STATE_PER_SM * tracker.cores[0])


def _supported(x: Any, weights: Any, has_biases: bool, layers: int, dirs: int) -> bool:
    per_layer = 4 if has_biases else 2
    return (x.dim() == 3 and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and len(weights) == per_layer * layers * dirs)


def _autocast_dtype() -> tuple[str, Any]:
    """The device and dtype of the autocast in effect (CUDA's, or the CPU emulation of it);
    ("", None) outside autocast."""
    for device in ("cuda", "cpu"):
        if _autocast(device):
            return device, torch.get_autocast_dtype(device)
    return "", None


def _cast(t: Any, dtype: Any) -> Any:
    return t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != dtype else t


def _autocast(device: str) -> bool:
    try:
        return torch.is_autocast_enabled(device)
    except RuntimeError:  # a build without that device's autocast
        return False


def _run(kind: str, x: Any, hx: Any, cx: Any, params: Any, has_biases: bool, layers: int,
         dropout: float, train: bool, bidirectional: bool, batch_first: bool,
         fallback: Any) -> Any:
    dirs = 2 if bidirectional else 1
    if not _supported(x, params, has_biases, layers, dirs):
        return fallback()
    if train and dropout > 0:
        _dropout_state()
    device, low = _autocast_dtype()
    if low is None:
        return _CudnnRNN.apply(kind, x, hx, cx, layers, dirs, batch_first, train, *params)
    # autocast's kernel for _cudnn_rnn (aten/src/ATen/cudnn/AutocastRNN.cpp): input and
    # states cast down, the weights copied into a new low-precision flat buffer (kept for
    # the backward), then cuDNN in that precision with autocast off
    cast = [_cast(w, low) for w in params]
    with torch.autocast(device, enabled=False):
        return _CudnnRNN.apply(kind, _cast(x, low), _cast(hx, low), _cast(cx, low), layers, dirs,
                               batch_first, train, *cast)


def register(lib: Any) -> None:
    """Register the cuDNN layout for lstm/gru/rnn (dense input) on ``lib`` (aten, IMPL).
    What cuDNN does not take here (proj_size, autocast) runs PyTorch's own decomposition
    of the op (``torch._decomp``: the unrolled cells; imported only then)."""
    for kind in GATES:
        lib.impl(f"{kind}.input", _kernel(kind), "CompositeImplicitAutograd")


def _decomposed(kind: str, *args: Any) -> Any:
    return decomposition(getattr(torch.ops.aten, kind).input)(*args)


def _kernel(kind: str) -> Any:
    def fn(x: Any, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
           train: bool, bidirectional: bool, batch_first: bool) -> Any:
        args = (x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        h, c = (hx[0], hx[1]) if kind == "lstm" else (hx, None)
        if c is not None and h.shape[-1] != c.shape[-1]:  # proj_size
            return _decomposed(kind, *args)
        return _run(kind, x, h, c, params, has_biases, num_layers, dropout, train,
                    bidirectional, batch_first, lambda: _decomposed(kind, *args))
    return fn
