"""Every aten op of one forward, on meta, with the work a GPU kernel would do for it.

``record_ops`` runs the model once through the trace (meta tensors, no memory) with a
dispatch mode outside the trace's own: each op that reaches the dispatcher becomes an
``OpRecord`` with its efficiency class (matmul, conv, attention, norm, eltwise, reduction,
pool, gather, copy, rnn, from the op's kind in the op table ``trace/ops.py``; ``view`` for
ops that launch no kernel; ``other`` for ops with no efficiency data), its FLOPs (2 per MAC
of the trace's own formula registry, ``trace/formulas.py``, where an op has one), the bytes it
must move (inputs read once, outputs written once), and the innermost module that ran it.

What a GPU runs differently from the meta decomposition is recorded as the GPU runs it:

* ``F.scaled_dot_product_attention`` is one fused kernel: recorded once at the function
  level, its meta decomposition (the math path: masks built with ``ones``/``tril``, casts,
  ``bmm``/``softmax``) is not. Inside ``nn.MultiheadAttention`` the function-level view is
  kept (the mode is re-entered), so a masked or cross attention records what the GPU runs:
  the projections, the mask conversion, one attention kernel. Where CUDA would take the
  math path instead of flash or memory-efficient attention (``trace/attention.py``: head
  size, strides, dtype, a grouped query without its flag), its matmuls, mask and softmax
  are recorded op by op.
* ``nn.LSTM``/``GRU``/``RNN`` (``torch._VF.lstm``...) run as cuDNN runs them: per layer and
  direction one input GEMM over the whole sequence, then per time step the recurrent GEMM,
  one fused cell kernel and, with ``proj_size``, the projection GEMM (``rnn_work``; the
  meta decomposition, a Python loop of small ops, is not recorded).
* Eval ``nn.TransformerEncoderLayer`` and self-attention ``nn.MultiheadAttention`` calls
  (``need_weights=False``) take PyTorch's fast path on a GPU (``_transformer_encoder_layer_fwd``,
  ``_native_multi_head_attention``), never on meta: their ops carry ``fastpath``, the call
  they belong to, which ``roofline.price_ops`` prices with the fast path's measured factor.

``dtype`` prices the run as if the model's float tensors had that dtype (``--dtype bf16``
casts weights and float inputs), without converting anything. ``Recorder`` is the mode pair
itself: ``latency/train.py`` records a training step (forward, backward, optimizer) with it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchinspect.dtypes import SHORT, SIZES
from torchinspect.privtorch import (
    OpOverload,
    QuietDispatchMode,
    aten_overrides,
    current_autograd_node,
    tree_leaves,
    vf_function,
)
from torchinspect.trace.attention import MATH, cuda_sdpa_kernel
from torchinspect.trace.formulas import MacTable
from torchinspect.trace.ops import OpKind, op_info, op_name


class OpClass(StrEnum):
    """The efficiency class an op is priced with: the curve names of the measured tables
    (``matmul/bf16``, ``eltwise/fp32``); ``view`` launches no kernel."""

    matmul = "matmul"
    conv = "conv"
    attention = "attention"
    norm = "norm"
    eltwise = "eltwise"
    reduction = "reduction"
    pool = "pool"
    gather = "gather"
    copy = "copy"
    rnn = "rnn"  # cuDNN's recurrent step kernels (GEMM, cell, projection per time step)
    other = "other"  # no efficiency data: the roofline plus the small-kernel floor
    view = "view"


# each op kind of the op table (trace/ops.py) -> its class; free ops (views, metadata, bare
# allocations) are OpClass.view, kinds not listed OpClass.other
CLASS_OF: dict[OpKind, OpClass] = {
    OpKind.matmul: OpClass.matmul, OpKind.conv: OpClass.conv,
    OpKind.attention: OpClass.attention, OpKind.norm: OpClass.norm,
    OpKind.reduction: OpClass.reduction, OpKind.pool: OpClass.pool,
    OpKind.gather: OpClass.gather, OpKind.copy: OpClass.copy,
    OpKind.elementwise: OpClass.eltwise, OpKind.compare: OpClass.eltwise,
    OpKind.select: OpClass.eltwise, OpKind.creation: OpClass.eltwise,
    OpKind.rnn: OpClass.rnn}
_NORM_SUB = {"native_batch_norm": "norm.batch", "_native_batch_norm_legit_no_training": "norm.batch",
             "_native_batch_norm_legit": "norm.batch", "cudnn_batch_norm": "norm.batch",
             "native_layer_norm": "norm.layer", "native_group_norm": "norm.group",
             "_fused_rms_norm": "norm.rms", "rms_norm": "norm.rms"}
#: torch._VF's recurrent functions (cuDNN's one-call RNNs on a GPU)
RNN_FUNCTIONS = frozenset(("lstm", "gru", "rnn_tanh", "rnn_relu"))

KINDS = tuple(c for c in OpClass if c is not OpClass.view)  # the classes a kernel is priced in


@dataclass
class OpRecord:
    """One op as a GPU would run it: kind, work, and where in the model it ran."""

    name: str
    kind: OpClass
    sub: str  # finer class for the efficiency table (conv.1x1, matmul.skinny, ...)
    flops: float
    bytes: float
    kernels: int
    layer: str  # type of the innermost module running ("" outside any)
    module: str  # qualified name of that module
    fused: bool = False  # pointwise math fused into a neighbouring kernel
    fastpath: str = ""  # "encoder#N" / "mha#N": the fast-path call it runs in on a GPU
    phase: str = ""  # training: forward, backward or optimizer ("" for inference)
    dtype: str = ""  # the op's own compute dtype where the run is priced as it is (training)
    tensors: int = 0  # a multi-tensor (foreach) op: how many tensors it updates

    def __post_init__(self) -> None:
        self.kind = OpClass(self.kind)  # a class name given as text ("matmul") is the class


@dataclass
class OpTrace:
    """The ops of one forward and the host-side counts an eager run pays for."""

    ops: list[OpRecord] = field(default_factory=list)
    dispatched: int = 0  # every aten op the dispatcher saw (views included)
    module_calls: int = 0

    @property
    def kernels(self) -> int:
        return sum(o.kernels for o in self.ops)


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def physical_numel(t: torch.Tensor) -> int:
    """Elements a kernel reads: broadcast (stride-0) dimensions count once."""
    try:
        return math.prod(int(s) for s, st in zip(t.shape, t.stride(), strict=True) if st != 0)
    except (RuntimeError, NotImplementedError):  # sparse, nested: no strides
        return int(t.numel())


class Pricer:
    """Bytes of tensors at the priced dtype (floats re-sized, integers as they are); without
    one (a training step under autocast) every tensor at its own dtype."""

    def __init__(self, dtype: str | None) -> None:
        self.itemsize = SIZES[SHORT[dtype]] if dtype else None
        self.dtype = getattr(torch, SHORT[dtype]) if dtype else None

    def nbytes(self, t: torch.Tensor) -> float:
        size = self.itemsize if self.itemsize and _is_float(t) else t.element_size()
        return float(physical_numel(t) * size)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _conv_sub(args: tuple[Any, ...]) -> str:
    """The convolution's curve: 3-D, transposed, depthwise, grouped, 1-D, 1x1, patch, kxk."""
    weight = args[1]
    stride = args[3] if len(args) > 3 else [1]
    transposed = bool(args[6]) if len(args) > 6 else False
    groups = int(args[8]) if len(args) > 8 else 1
    k = tuple(int(d) for d in weight.shape[2:])
    if weight.dim() >= 5:
        return "conv.3d"
    if transposed:
        return "conv.transposed"
    cin = int(weight.shape[1]) * groups
    if groups > 1 and groups == cin:
        return "conv.depthwise"
    if groups > 1:
        return "conv.grouped"
    if weight.dim() == 3 and max(k) > 1:
        return "conv.1d"
    if all(d == 1 for d in k):
        return "conv.1x1"
    if max(k) >= 4 and all(int(s) == d for s, d in zip(stride, k, strict=False)):
        return "conv.patch"  # a patchify stem: stride equals the kernel
    return "conv.kxk"


def _matmul_sub(out: Any) -> str:
    if isinstance(out, torch.Tensor) and out.dim() >= 2:
        rows = math.prod(int(d) for d in out.shape[:-1]) if out.dim() == 2 else int(out.shape[-2])
        if min(rows, int(out.shape[-1])) <= 16:
            return "matmul.skinny"
    return "matmul"


def _compute_dtype(tensors: list[torch.Tensor]) -> str:
    """The short dtype an op computes in: its first floating tensor's (fp32 if none)."""
    for t in tensors:
        if t.is_floating_point():
            return SHORT_OF.get(t.dtype, "fp32")
    return "fp32"


SHORT_OF = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
            torch.float64: "fp32"}


def classify(op: Any) -> OpClass:
    """An op's efficiency class: `OpClass.view` for one that launches no kernel."""
    info = op_info(op)
    return OpClass.view if info.free else CLASS_OF.get(info.kind, OpClass.other)


def sdpa_work(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              pricer: Pricer) -> tuple[float, float]:
    """FLOPs (QKᵀ and AV; a causal flash kernel skips half) and bytes (q, k, v, out once)."""
    lead = math.prod(int(d) for d in q.shape[:-1])
    flops = 2.0 * lead * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))
    if causal:
        flops /= 2
    out_bytes = pricer.nbytes(q) / max(int(q.shape[-1]), 1) * int(v.shape[-1])
    return flops, pricer.nbytes(q) + pricer.nbytes(k) + pricer.nbytes(v) + out_bytes


@dataclass(frozen=True)
class RnnWork:
    """One cuDNN RNN call as its kernels: the input GEMMs (one per layer and direction, over
    the whole sequence) and the step kernels (per time step, layer and direction: the
    recurrent GEMM, the fused cell, the projection GEMM with ``proj_size``)."""

    input_gemms: list[tuple[int, int, int]]  # (M, K, N) of each input GEMM
    step_kernels: int
    step_flops: float
    step_bytes: float
    #: (M, K, N) of the backward's weight-gradient GEMMs of the recurrent (and projection)
    #: weights: one per layer and direction over the whole sequence
    weight_gemms: list[tuple[int, int, int]] = field(default_factory=list)


def rnn_work(name: str, args: tuple[Any, ...], itemsize: float) -> RnnWork | None:
    """The work of ``torch._VF.<name>(input, hx, params, has_biases, num_layers, dropout,
    train, bidirectional, batch_first)`` (None for the packed-sequence form)."""
    if len(args) < 9 or not isinstance(args[0], torch.Tensor) or not isinstance(args[8], bool):
        return None
    x, params = args[0], [p for p in args[2] if isinstance(p, torch.Tensor)]
    biases, layers, bidir, batch_first = bool(args[3]), int(args[4]), bool(args[7]), args[8]
    dirs = 2 if bidir else 1
    per = len(params) // max(layers * dirs, 1)  # w_ih, w_hh, (b_ih, b_hh), (w_hr)
    if per != 2 + 2 * int(biases) + int(per in (3, 5)):
        return None
    if x.dim() == 2:
        steps, batch = int(x.shape[0]), 1
    else:
        steps, batch = (int(x.shape[1]), int(x.shape[0])) if batch_first else \
            (int(x.shape[0]), int(x.shape[1]))
    gemms: list[tuple[int, int, int]] = []
    recurrent: list[tuple[int, int, int]] = []
    kernels, flops, nbytes = 0, 0.0, 0.0
    for i in range(layers * dirs):
        w_ih, w_hh = params[i * per], params[i * per + 1]
        w_hr = params[i * per + per - 1] if per in (3, 5) else None
        hidden = int(w_hh.shape[1]) if w_hr is None else int(w_hr.shape[1])
        gemms.append((steps * batch, int(w_ih.shape[1]), int(w_ih.shape[0])))
        g_h = int(w_hh.shape[0])  # gates x hidden
        k_in = int(w_hh.shape[1])  # hidden, or proj_size
        step_f = 2.0 * batch * k_in * g_h + 10.0 * batch * g_h
        recurrent.append((g_h, steps * batch, k_in))
        step_b = (g_h * k_in + 4 * batch * g_h) * itemsize
        kernels += steps * 2
        if w_hr is not None:
            step_f += 2.0 * batch * hidden * int(w_hr.shape[0])
            step_b += (hidden * int(w_hr.shape[0]) + batch * (hidden + int(w_hr.shape[0]))) * itemsize
            kernels += steps
            recurrent.append((int(w_hr.shape[0]), steps * batch, hidden))
        flops += steps * step_f
        nbytes += steps * step_b
    return RnnWork(gemms, kernels, flops, nbytes, recurrent)


class _Stack:
    """The module stack of the running forward (global hooks, removed in ``finally``)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.stack: list[tuple[str, str]] = []
        self.modules: list[Any] = []  # the module objects of ``stack``
        self.calls = 0
        self.handles: list[Any] = []
        self.fast: list[tuple[Any, str]] = []  # (module, "encoder#N") of open fast-path calls
        self.fast_calls = 0

    def __enter__(self) -> _Stack:
        from torch.nn.modules import module as mod

        self.handles = [mod.register_module_forward_pre_hook(self._pre),
                        mod.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()

    def _pre(self, module: Any, args: Any) -> None:
        self.calls += 1
        self.stack.append((type(module).__name__, self.names.get(id(module), "")))
        self.modules.append(module)
        if not self.fast and encoder_fast_path(module, args):
            self.open_fast(module, "encoder")

    def _post(self, module: Any, args: Any, out: Any) -> None:
        if self.fast and self.fast[-1][0] is module:
            self.fast.pop()
        if self.stack:
            self.stack.pop()
            self.modules.pop()

    def open_fast(self, module: Any, kind: str) -> None:
        self.fast_calls += 1
        self.fast.append((module, f"{kind}#{self.fast_calls}"))

    @property
    def fastpath(self) -> str:
        return self.fast[0][1] if self.fast else ""

    @property
    def top(self) -> tuple[str, str]:
        return self.stack[-1] if self.stack else ("", "")


def encoder_fast_path(module: Any, args: Any) -> bool:
    """Would this ``nn.TransformerEncoderLayer`` call take the fast path on a GPU?

    PyTorch's conditions that the module itself decides (``TransformerEncoderLayer.forward``):
    eval, batch-first self-attention with one packed in-projection, ReLU or GELU, equal norm
    epsilons, a 3-D input. Masks are not visible to a global hook: an inference call without
    one is assumed, and so is PyTorch's default of the fast path switched on (the trace
    switches it off for itself, to count MHA through its matmuls).
    """
    if not isinstance(module, torch.nn.TransformerEncoderLayer) or module.training:
        return False
    if not torch.is_inference_mode_enabled() and torch.is_grad_enabled() \
            and any(p.requires_grad for p in module.parameters()):
        return False  # autograd recording: PyTorch takes the slow path
    attn = module.self_attn
    src = args[0] if isinstance(args, tuple) and args else None
    return (bool(getattr(attn, "batch_first", False)) and bool(attn._qkv_same_embed_dim)
            and bool(getattr(module, "activation_relu_or_gelu", False))
            and module.norm1.eps == module.norm2.eps
            and isinstance(src, torch.Tensor) and src.dim() == 3)


def mha_fast_path(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Would this ``F.multi_head_attention_forward`` call (from a batch-first
    ``nn.MultiheadAttention``) be the fast path on a GPU: eval self-attention, no weights
    returned, no attention mask?"""
    names = ("query", "key", "value")
    q, k, v = (list(args) + [kwargs.get(n) for n in names][len(args):])[:3]
    return (q is k and k is v and kwargs.get("need_weights") is False
            and not kwargs.get("training", True) and kwargs.get("attn_mask") is None
            and kwargs.get("use_separate_proj_weight") is not True)


class Recorder:
    """What one run dispatches, as ``OpRecord``s (the dispatch side of the mode pair)."""

    def __init__(self, pricer: Pricer, stack: _Stack) -> None:
        self.pricer = pricer
        self.stack = stack
        self.trace = OpTrace()
        self.suppress = 0
        self.phase = ""
        self.recording = True  # False: count nothing (a training step's warm-up parts)
        self.device: str | None = None  # only ops on this device type launch kernels
        self.macs = MacTable()  # the trace's own formulas (registry, users', then torch's)
        self.hidden = 0  # inside a fused kernel's stand-in: no dispatch the GPU host pays
        self.dispatched_by_phase: dict[str, int] = {}
        self.host_tensors: set[int] = set()  # tensors kept on the host (optimizer steps)
        self.on_forward_output: Any = None  # called with each torch function's output
        self.layer_of: Any = None  # () -> (layer, module) where the stack cannot say (backward)
        # autograd nodes of a cuDNN RNN call recorded as its kernels -> (node kept alive, the
        # call's backward: [work, dtype, priced yet]); its backward is priced as cuDNN's
        self.rnn_nodes: dict[int, tuple[Any, list[Any]]] = {}
        self._node_now: Any = current_autograd_node()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Ops run here are neither priced nor counted as host dispatches (the stand-in
        decomposition of one fused GPU kernel)."""
        self.suppress += 1
        self.hidden += 1
        try:
            yield
        finally:
            self.suppress -= 1
            self.hidden -= 1

    def add(self, name: str, kind: OpClass, sub: str, flops: float, nbytes: float,
            kernels: int = 1, fused: bool = False, dtype: str = "", tensors: int = 0) -> None:
        if not self.recording:
            return
        layer, module = self.layer_of() if self.layer_of is not None else self.stack.top
        self.trace.ops.append(OpRecord(name, kind, sub, flops, nbytes, kernels, layer, module,
                                       fused, self.stack.fastpath, self.phase, dtype, tensors))

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if not self.recording or self.hidden:
            return
        if self.rnn_nodes and self._rnn_backward():
            return  # the backward of a cuDNN RNN: priced as cuDNN's kernels, once
        self.trace.dispatched += 1
        self.dispatched_by_phase[self.phase] = self.dispatched_by_phase.get(self.phase, 0) + 1
        if self.suppress:
            return
        name = op_name(func)
        kind = classify(name)
        if kind is OpClass.view or name.startswith("profiler."):
            return
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        if self.host_tensors and all(id(t) in self.host_tensors or t.dim() == 0 for t in ins):
            return  # a host-side op (an optimizer's step counter and its scalars): no kernel
        dtype = "" if self.pricer.itemsize else _compute_dtype(ins + outs)
        if name.startswith(("_foreach_", "_fused_adam", "_fused_sgd")):
            flops = sum(float(t.numel()) for t in outs or ins)
            self.add(name, OpClass.eltwise, "foreach", flops, self._bytes(kind, name, ins, outs),
                     dtype=dtype, tensors=len(args[0]) if args and isinstance(args[0], list)
                     else len(ins))
            return
        nbytes = self._bytes(kind, name, ins, outs)
        flops = self._flops(func, kind, args, kwargs, out, ins, outs)
        sub: str = kind
        if kind is OpClass.conv:
            sub = _conv_sub(args) if name in ("convolution", "_convolution") else "conv.backward"
        elif kind is OpClass.matmul:
            sub = _matmul_sub(out)
        elif kind is OpClass.norm:
            sub = _NORM_SUB.get(name, "norm")
        bias = args[2] if kind is OpClass.conv and name in ("convolution", "_convolution") \
            and len(args) > 2 else None
        if isinstance(bias, torch.Tensor) and outs:  # cuDNN convolves, then adds the bias
            out_bytes = self.pricer.nbytes(outs[0])
            self.add(name, kind, sub, flops, nbytes - out_bytes - self.pricer.nbytes(bias),
                     dtype=dtype)
            self.add("conv_bias_add", OpClass.eltwise, "eltwise", float(outs[0].numel()),
                     2 * out_bytes + self.pricer.nbytes(bias), dtype=dtype)
            return
        self.add(name, kind, sub, flops, nbytes, dtype=dtype)

    def rnn_graph(self, name: str, args: tuple[Any, ...], out: Any) -> None:
        """Remember the autograd nodes one recorded RNN call made (from its outputs back to
        its inputs and weights): the ops their backward runs here (PyTorch's unrolled cells,
        or a stand-in's allocations) are cuDNN's RNN backward on the GPU."""
        ref = args[0] if args and isinstance(args[0], torch.Tensor) else None
        item = self.pricer.itemsize or (ref.element_size() if ref is not None else 4)
        work = rnn_work(name, args, item)
        if work is None:
            return
        # the inputs' own nodes (kept alive while walking: a node's Python object, and so
        # its id, is the same only while one is held) end the walk
        before = [t.grad_fn for t in tree_leaves(args)
                  if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        stop = {id(n) for n in before}
        call: list[Any] = [name, work, item, False]
        todo = [t.grad_fn for t in tree_leaves(out)
                if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or id(node) in stop or id(node) in self.rnn_nodes \
                    or type(node).__name__ == "AccumulateGrad":
                continue
            self.rnn_nodes[id(node)] = (node, call)
            todo.extend(fn for fn, _ in node.next_functions if fn is not None)
        del before

    def _rnn_backward(self) -> bool:
        """True when the running autograd node belongs to a recorded RNN call; its backward
        is added the first time: cuDNN's backward-data (the recurrence again, step by step in
        reverse, and the input GEMMs' data gradients), then backward-weights (the input,
        recurrent and projection weights' gradients, each one GEMM over the sequence)."""
        node = self._node_now() if self._node_now is not None else None
        entry = self.rnn_nodes.get(id(node)) if node is not None else None
        if entry is None:
            return False
        call = entry[1]
        if call[3]:
            return True
        call[3] = True
        name, work, item = call[0], call[1], call[2]
        self.add(f"{name}_backward_steps", OpClass.rnn, "rnn.step", work.step_flops,
                 work.step_bytes, kernels=work.step_kernels)
        for what, gemms in (("input_grad", work.input_gemms), ("weight_grad", work.input_gemms),
                            ("weight_grad", work.weight_gemms)):
            for m, k, n in gemms:
                self.add(f"{name}_{what}_gemm", OpClass.matmul, "matmul", 2.0 * m * k * n,
                         float((m * k + k * n + m * n) * item))
        return True

    def rnn(self, name: str, args: tuple[Any, ...]) -> bool:
        """A cuDNN RNN call recorded as its kernels (False: a form not modelled)."""
        ref = args[0] if args and isinstance(args[0], torch.Tensor) else None
        item = self.pricer.itemsize or (ref.element_size() if ref is not None else 4)
        work = rnn_work(name, args, item)
        if work is None:
            return False
        for m, k, n in work.input_gemms:
            self.add(f"{name}_input_gemm", OpClass.matmul, "matmul", 2.0 * m * k * n,
                     float((m * k + k * n + m * n) * item))
        self.add(f"{name}_steps", OpClass.rnn, "rnn.step", work.step_flops, work.step_bytes,
                 kernels=work.step_kernels)
        return True

    def _bytes(self, kind: OpClass, name: str, ins: list[torch.Tensor],
               outs: list[torch.Tensor]) -> float:
        nb = self.pricer.nbytes
        out_bytes = sum(nb(t) for t in outs)
        if kind is OpClass.gather:  # reads the gathered rows and the indices, not the whole table
            idx = sum(nb(t) for t in ins if not _is_float(t))
            return 2 * out_bytes + idx
        seen: set[int] = set()
        in_bytes = 0.0
        for t in ins:
            if id(t) not in seen:
                seen.add(id(t))
                in_bytes += nb(t)
        out_only = sum(nb(t) for t in outs if id(t) not in seen)  # in-place: written back once
        aliased = sum(nb(t) for t in outs if id(t) in seen)
        return in_bytes + out_only + aliased

    def _flops(self, func: Any, kind: OpClass, args: tuple[Any, ...], kwargs: dict[str, Any],
               out: Any, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> float:
        macs = self.macs.macs(func, args, kwargs, out)
        if macs is not None:  # a MAC formula (ours, a user's, torch's): 2 FLOPs per MAC
            return 2.0 * macs
        n_out = sum(float(t.numel()) for t in outs)
        n_in = max((float(t.numel()) for t in ins), default=0.0)
        if kind is OpClass.norm:
            return 5.0 * n_in
        if kind in (OpClass.reduction, OpClass.pool):
            return n_in
        return n_out


class _Dispatch(QuietDispatchMode):
    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(func, OpOverload):
            self.rec.record(func, args, kwargs, out)
        return out


class _Functions(TorchFunctionMode):
    """The function-level view: cuDNN RNNs, the MHA fast path."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        rec, stack = self.rec, self.rec.stack
        if func is torch.nn.functional.multi_head_attention_forward and not stack.fast \
                and stack.modules and isinstance(stack.modules[-1], torch.nn.MultiheadAttention) \
                and stack.modules[-1].batch_first and mha_fast_path(args, kwargs) \
                and not _records_grad((args, kwargs)):
            stack.open_fast(None, "mha")
            try:
                return func(*args, **kwargs)
            finally:
                stack.fast.pop()
        name = getattr(func, "__name__", "")
        vf: Any = vf_function(name) if name in RNN_FUNCTIONS else None
        if vf is not None and func is vf and not rec.suppress and rec.rnn(name, args):
            with rec.quiet():
                out = func(*args, **kwargs)
            if _records_grad(args):
                rec.rnn_graph(name, args, out)
        else:
            out = func(*args, **kwargs)
        if rec.on_forward_output is not None:
            rec.on_forward_output(out)
        return out


def _records_grad(value: Any) -> bool:
    """Autograd records this call (PyTorch's fast paths are for inference only)."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves(value))


def _fused_attention(rec: Recorder) -> Any:
    """A kernel for ``aten::scaled_dot_product_attention`` (from every caller: the function,
    ``nn.MultiheadAttention``, C++ composites): one fused attention kernel recorded, with a
    boolean mask's conversion to an additive one (one element-wise kernel, as CUDA does it);
    the output comes from the math path, run quietly (its ops are no kernel of the GPU's)."""

    def sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, *, scale: float | None = None,
             enable_gqa: bool = False) -> Any:
        if not rec.suppress and cuda_sdpa_kernel(q, k, v, attn_mask, enable_gqa,
                                                 rec.pricer.dtype or q.dtype) == MATH:
            # CUDA's math path: the score matrix's matmuls, mask and softmax, op by op
            return torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]
        if not rec.suppress:
            if isinstance(attn_mask, torch.Tensor) and attn_mask.dtype == torch.bool:
                n = float(attn_mask.numel())
                rec.add("attn_mask_to_bias", OpClass.eltwise, "eltwise", n,
                        n * (1 + (rec.pricer.itemsize or q.element_size())))
            flops, nbytes = sdpa_work(q, k, v, is_causal, rec.pricer)
            rec.add("scaled_dot_product_attention", OpClass.attention, "attention", flops, nbytes)
        with rec.quiet():
            out = torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]
            if out.dim() != 4:
                return out
            # the fused kernels write (batch, length, heads, dim) and return it transposed:
            # a later permute(2, 0, 1, 3).contiguous() copies only when it must on a GPU too
            return out.transpose(1, 2).contiguous().transpose(1, 2)
    return sdpa


class Recording:
    """The module hooks and both modes, entered together: ``with Recording(...) as rec``."""

    def __init__(self, model: Any = None, dtype: str | None = None) -> None:
        names = {id(m): n for n, m in model.named_modules()} \
            if hasattr(model, "named_modules") else {}
        self.stack = _Stack(names)
        self.rec = Recorder(Pricer(dtype), self.stack)
        self._modes = (_Functions(self.rec), _Dispatch(self.rec))
        self._held = contextlib.ExitStack()  # the aten override, removed on exit

    def __enter__(self) -> Recorder:
        with contextlib.ExitStack() as held:
            overrides = held.enter_context(aten_overrides())
            overrides.impl("scaled_dot_product_attention", _fused_attention(self.rec))
            self.stack.__enter__()
            held.callback(self.stack.__exit__, None, None, None)
            for mode in self._modes:
                held.enter_context(mode)
            self._held = held.pop_all()
        return self.rec

    def __exit__(self, *exc: Any) -> None:
        try:
            self._held.__exit__(*exc)
        finally:
            self.rec.trace.module_calls = self.stack.calls


def record_ops(model: Any, example: Any, *, dtype: str | None = None) -> OpTrace:
    """One meta forward of ``model`` on ``example`` (the trace's), every op recorded."""
    from torchinspect.trace.policy import trace_model

    recording = Recording(model, dtype)
    with recording:  # the trace's forward keeps TorchDynamo unimported
        trace_model(model, example, device="meta")
    return recording.rec.trace


def record_call(fn: Any, *, dtype: str | None = None) -> OpTrace:
    """The ops of one call of ``fn()`` (tensors already on meta): the tables' replay."""
    recording = Recording(None, dtype)
    with recording, torch.no_grad():  # as the trace's forward (and the GPU's inference)
        fn()
    return recording.rec.trace
