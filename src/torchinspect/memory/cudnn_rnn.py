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

**Projections** (``nn.LSTM(proj_size=P)``, cuDNN's ``CUDNN_RNN_ALGO_STANDARD`` with a
recurrent projection): the module's flat weights gain ``weight_hr_l{k}`` (``P x hidden``)
after the biases of each layer and direction, and the recurrent weight becomes
``4 hidden x P``; PyTorch keeps them in one flat buffer as without projection. The output
is ``P`` wide per direction, ``h_n`` is ``P`` wide and ``c_n`` stays ``hidden`` wide. The
reserve keeps, per layer, direction and time step, the unprojected hidden state and the
projected one besides what the LSTM without projection keeps: all 60 measured training
cases, 39 of them with projections (``benchmarks/results/cudnn-rnn-proj-h100.jsonl``, same
H100), match

    reserve without projection + layers x directions x (seq x batch x hidden
                                 + round_up(seq x batch x P, 16)) x element size

to the byte (the rounding of the projected part to 16 elements shows in the one shape whose
``seq x batch x P`` is not a multiple of 16). The constants are read from
``memory/constants.py``, with their provenance.

**Weights.** PyTorch keeps an RNN's weights in one flat buffer once the module is on the GPU,
for the dtypes cuDNN flattens (not bf16: ``torch.backends.cudnn.is_acceptable``); weights in
separate storages are copied into a new buffer at every call, kept for the backward in
training. Under autocast the input and states are cast down, and the weights copied into one
new low-precision buffer (autocast's ``copy_weights_to_flat_buf_views``), as autocast's kernel
for ``_cudnn_rnn`` does.

**Workspaces** (freed inside the call) are logged per call as a ``workspace.Problem``:
measured, looked up or estimated like a convolution's. The backward is two cuDNN calls
(backward-data, then backward-weights once the time-major copy of a non-contiguous output
gradient is freed and the weight gradient allocated), each with the training workspace: with
that, the backward peak of all 120 measured training cases (with and without projections,
LSTM, GRU and RNN) implies a backward workspace within 2 MiB of the training forward's.

Handled: dense input (not packed sequences), with or without ``proj_size``; anything else
keeps PyTorch's composite (the unrolled cells).
"""

from __future__ import annotations

from typing import Any

import torch

from torchinspect.memory.constants import value
from torchinspect.privtorch import decomposition

GATES = {kind: value(f"cudnn_rnn.reserve_units.{kind}") for kind in (
    "lstm", "gru", "rnn_tanh", "rnn_relu")}
RESERVE_EXTRA = value("cudnn_rnn.reserve_extra")
PROJ_ROUND = value("cudnn_rnn.proj_round")
DROPOUT_STATE_PER_SM = value("cudnn_rnn.dropout_state_per_sm")
# weights PyTorch keeps in one flat buffer on the GPU (torch.backends.cudnn.is_acceptable)
FLATTENED = (torch.float16, torch.float32, torch.float64)


def reserve_bytes(kind: str, layers: int, seq: int, batch: int, hidden: int, directions: int,
                  element_size: int, proj: int = 0) -> int:
    """cuDNN's RNN reserve space in bytes (kept for backward in training mode); ``proj``: an
    LSTM's ``proj_size`` (0: none)."""
    units = seq * batch * hidden * directions * element_size
    reserve = (GATES[kind] * layers + layers - 1) * units + RESERVE_EXTRA
    if proj:
        projected = -(-seq * batch * proj // PROJ_ROUND) * PROJ_ROUND
        reserve += layers * directions * (seq * batch * hidden + projected) * element_size
    return reserve


class _CudnnRNN(torch.autograd.Function):
    """What ``_cudnn_rnn`` allocates and keeps: output, hy (cy), the reserve in training;
    its backward: the gradients of the input, the initial state and the weights."""

    @staticmethod
    def forward(ctx: Any, kind: str, x: Any, hx: Any, cx: Any, layers: int, dirs: int,
                batch_first: bool, train: bool, flat: bool, *weights: Any) -> Any:
        seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        # an LSTM's cell state is `hidden` wide; h (and the output) `proj_size` wide when it
        # has projections
        hidden = cx.shape[-1] if cx is not None else hx.shape[-1]
        width = hx.shape[-1]
        proj = width if width != hidden else 0
        # cuDNN writes time-major; batch_first gets a transposed view of it (a later
        # reshape copies it, as on the GPU)
        out = x.new_empty((seq, batch, dirs * width))
        if batch_first:
            out = out.transpose(0, 1)
        hy = torch.empty_like(hx)
        cy = torch.empty_like(cx) if cx is not None else None
        reserve = buffer = None
        if train:
            reserve = x.new_empty(reserve_bytes(kind, layers, seq, batch, hidden, dirs,
                                                x.element_size(), proj), dtype=torch.uint8)
            if not flat:  # weights in separate storages: copied into one buffer for the call
                buffer = x.new_empty(sum(w.numel() for w in weights), dtype=x.dtype)
        ctx.save_for_backward(x, hx, cx, out, reserve, buffer, *weights)
        ctx.problem = dict(kind=kind, input_size=x.shape[-1], hidden=hidden, layers=layers,
                           dirs=dirs, seq=seq, batch=batch, dtype=x.dtype, train=train,
                           bias=len(weights) == (5 if proj else 4) * layers * dirs,
                           batch_first=batch_first, proj=proj)
        _workspace(ctx.problem, backward=False)
        return (out, hy, cy) if cy is not None else (out, hy)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        x, hx, cx, _, _, _, *weights = ctx.saved_tensors
        grad = grads[0]
        if ctx.problem["batch_first"] and grad is not None:
            grad = grad.transpose(0, 1)
        # two cuDNN calls, each with the training workspace (aten/src/ATen/native/cudnn/RNN.cpp
        # `_cudnn_rnn_backward`): backward-data, with a gradient that is not time-major
        # contiguous copied for it (the calibration measures with a contiguous one), then
        # backward-weights once that copy is freed, the weight gradient allocated
        copy = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device) \
            if grad is not None and not grad.is_contiguous() else None
        dx = torch.empty_like(x)  # cuDNN's backward-data runs (and allocates) either way
        dhx = torch.empty_like(hx) if ctx.needs_input_grad[2] else None
        dcx = torch.empty_like(cx) if cx is not None and ctx.needs_input_grad[3] else None
        _workspace(ctx.problem, backward=True)
        del copy
        dw = [torch.empty_like(w) if ctx.needs_input_grad[9 + i] else None
              for i, w in enumerate(weights)]
        if any(g is not None for g in dw):
            _workspace(ctx.problem, backward=True)
        return (None, dx if ctx.needs_input_grad[1] else None, dhx, dcx, None, None, None, None,
                None, *dw)


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


def _supported(x: Any, weights: Any, has_biases: bool, layers: int, dirs: int,
               proj: bool) -> bool:
    per_layer = (4 if has_biases else 2) + (1 if proj else 0)  # weight_hr_l{k}: projections
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
    proj = cx is not None and hx.shape[-1] != cx.shape[-1]
    if not _supported(x, params, has_biases, layers, dirs, proj):
        return fallback()
    if train and dropout > 0:
        _dropout_state()
    device, low = _autocast_dtype()
    if low is None:
        # PyTorch flattens an RNN's weights into one buffer when it moves the module to the
        # GPU, for the dtypes cuDNN accepts there (torch.backends.cudnn.is_acceptable: not
        # bf16); other weights are copied into one for each call
        flat = params[0].dtype in FLATTENED
        return _CudnnRNN.apply(kind, x, hx, cx, layers, dirs, batch_first, train, flat, *params)
    # autocast's kernel for _cudnn_rnn (aten/src/ATen/cudnn/AutocastRNN.cpp): input and
    # states cast down, the weights copied into a new low-precision flat buffer (kept for
    # the backward), then cuDNN in that precision with autocast off
    cast = _flat_copy(params, low)
    with torch.autocast(device, enabled=False):
        return _CudnnRNN.apply(kind, _cast(x, low), _cast(hx, low), _cast(cx, low), layers, dirs,
                               batch_first, train, True, *cast)


def _flat_copy(params: Any, dtype: Any) -> list[Any]:
    """The weights copied into views of one new buffer of ``dtype`` (autocast's
    ``copy_weights_to_flat_buf_views``); the copies carry the gradient back to the weights."""
    if dtype in FLATTENED and all(w.dtype == dtype for w in params):
        return list(params)  # already the module's flat buffer
    buffer = params[0].new_empty(sum(w.numel() for w in params), dtype=dtype)
    views, start = [], 0
    for w in params:
        views.append(buffer[start:start + w.numel()].view(w.shape).copy_(w))
        start += w.numel()
    return views


def register(lib: Any) -> None:
    """Register the cuDNN layout for lstm/gru/rnn (dense input, LSTM projections included) on
    ``lib`` (aten, IMPL). What cuDNN does not take here (packed sequences, other dtypes) runs
    PyTorch's own decomposition of the op (``torch._decomp``: the unrolled cells; imported
    only then)."""
    for kind in GATES:
        lib.impl(f"{kind}.input", _kernel(kind), "CompositeImplicitAutograd")


def _decomposed(kind: str, *args: Any) -> Any:
    return decomposition(getattr(torch.ops.aten, kind).input)(*args)


def _kernel(kind: str) -> Any:
    def fn(x: Any, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
           train: bool, bidirectional: bool, batch_first: bool) -> Any:
        args = (x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        h, c = (hx[0], hx[1]) if kind == "lstm" else (hx, None)
        return _run(kind, x, h, c, params, has_biases, num_layers, dropout, train,
                    bidirectional, batch_first, lambda: _decomposed(kind, *args))
    return fn
