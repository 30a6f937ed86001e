"""Every aten op of one forward, on meta, with the work a GPU kernel would do for it.

``record_ops`` runs the model once through the trace (meta tensors, no memory) with a
dispatch mode outside the trace's own: each op that reaches the dispatcher becomes an
``OpRecord`` with its efficiency class (matmul, conv, attention, norm, eltwise, reduction,
pool, gather, copy, from the op's kind in the op table ``trace/ops.py``; ``view`` for ops
that launch no kernel; ``other`` for ops with no efficiency data), its FLOPs (2 per MAC of
the trace's own formula registry, ``trace/formulas.py``, where an op has one), the bytes it
must move (inputs read once, outputs written once), and the innermost module that ran it.
``F.scaled_dot_product_attention`` is one fused kernel on a GPU: it is recorded once at the
function level, its meta decomposition is not. Inside ``nn.LSTM``/``GRU``/``RNN`` the pointwise gate math is fused (cuDNN): one
kernel per recurrent matmul.

Eval ``nn.TransformerEncoderLayer`` and self-attention ``nn.MultiheadAttention`` calls
(``need_weights=False``) take PyTorch's fast path on a GPU (``_transformer_encoder_layer_fwd``,
``_native_multi_head_attention``), never on meta: their ops carry ``fastpath``, the call they
belong to, which ``roofline.price_ops`` prices with the fast path's measured factor.

``dtype`` prices the run as if the model's float tensors had that dtype (``--dtype bf16``
casts weights and float inputs), without converting anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchinspect.dtypes import SHORT, SIZES
from torchinspect.privtorch import OpOverload, QuietDispatchMode, tree_leaves
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
    other = "other"  # no efficiency data: the roofline plus one kernel's fixed cost
    view = "view"


# each op kind of the op table (trace/ops.py) -> its class; free ops (views, metadata, bare
# allocations) are OpClass.view, kinds not listed OpClass.other
CLASS_OF: dict[OpKind, OpClass] = {
    OpKind.matmul: OpClass.matmul, OpKind.conv: OpClass.conv,
    OpKind.attention: OpClass.attention, OpKind.norm: OpClass.norm,
    OpKind.reduction: OpClass.reduction, OpKind.pool: OpClass.pool,
    OpKind.gather: OpClass.gather, OpKind.copy: OpClass.copy,
    OpKind.elementwise: OpClass.eltwise, OpKind.compare: OpClass.eltwise,
    OpKind.select: OpClass.eltwise, OpKind.creation: OpClass.eltwise}
RNN_MODULES = ("LSTM", "GRU", "RNN")
_NORM_SUB = {"native_batch_norm": "norm.batch", "_native_batch_norm_legit_no_training": "norm.batch",
             "_native_batch_norm_legit": "norm.batch", "cudnn_batch_norm": "norm.batch",
             "native_layer_norm": "norm.layer", "native_group_norm": "norm.group",
             "_fused_rms_norm": "norm.rms", "rms_norm": "norm.rms"}
# ops of attention written out (F.multi_head_attention_forward on meta): fused on a GPU
_MHA_MATH = frozenset("bmm baddbmm _safe_softmax _softmax mul div masked_fill".split())

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
    fused: bool = False  # pointwise math fused into a neighbouring kernel (RNN gates)
    fastpath: str = ""  # "encoder#N" / "mha#N": the fast-path call it runs in on a GPU

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
    """Bytes of tensors at the priced dtype (floats re-sized, integers as they are)."""

    def __init__(self, dtype: str | None) -> None:
        self.itemsize = SIZES[SHORT[dtype]] if dtype else None

    def nbytes(self, t: torch.Tensor) -> float:
        size = self.itemsize if self.itemsize and _is_float(t) else t.element_size()
        return float(physical_numel(t) * size)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _conv_sub(args: tuple[Any, ...]) -> str:
    weight = args[1]
    stride = args[3] if len(args) > 3 else [1]
    groups = int(args[8]) if len(args) > 8 else 1
    k = tuple(int(d) for d in weight.shape[2:])
    if weight.dim() >= 5:
        return "conv.3d"
    cin = int(weight.shape[1]) * groups
    if groups > 1 and groups == cin:
        return "conv.depthwise"
    if groups > 1:
        return "conv.grouped"
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


class _Stack:
    """The module stack of the running forward (global hooks, removed in ``finally``)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.on_attention: Any = None  # called with (module, args) when an MHA module ends
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
        if isinstance(module, torch.nn.MultiheadAttention) and self.on_attention is not None:
            self.on_attention(module, args)
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

    def in_rnn(self) -> bool:
        return any(t in RNN_MODULES for t, _ in self.stack)


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


class _Recorder:
    def __init__(self, pricer: Pricer, stack: _Stack) -> None:
        self.pricer = pricer
        self.stack = stack
        self.trace = OpTrace()
        self.suppress = 0
        self.rnn_matmuls = 0
        self.mha_fast = ""  # the fast-path MHA call whose attention is recorded at its end
        self.macs = MacTable()  # the trace's own formulas (registry, users', then torch's)

    def add(self, name: str, kind: OpClass, sub: str, flops: float, nbytes: float,
            kernels: int = 1, fused: bool = False) -> None:
        layer, module = self.stack.top
        self.trace.ops.append(OpRecord(name, kind, sub, flops, nbytes, kernels, layer, module,
                                       fused, self.stack.fastpath))

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self.trace.dispatched += 1
        if self.suppress:
            return
        name = op_name(func)
        kind = classify(name)
        if kind is OpClass.view:
            return
        if self.stack.top[0] == "MultiheadAttention" and name in _MHA_MATH:
            return  # the attention written out on meta: one fused kernel on a GPU (below)
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        nbytes = self._bytes(kind, name, ins, outs)
        flops = self._flops(func, kind, args, kwargs, out, ins, outs)
        sub: str = kind
        if kind is OpClass.conv:
            sub = _conv_sub(args)
        elif kind is OpClass.matmul:
            sub = _matmul_sub(out)
        if self.stack.in_rnn() and kind in (OpClass.eltwise, OpClass.other, OpClass.copy):
            self.add(name, OpClass.eltwise, "eltwise", flops, nbytes, kernels=0, fused=True)
            return
        if kind is OpClass.norm:
            sub = _NORM_SUB.get(name, "norm")
        bias = args[2] if kind is OpClass.conv and len(args) > 2 else None
        if isinstance(bias, torch.Tensor) and outs:  # cuDNN convolves, then adds the bias
            out_bytes = self.pricer.nbytes(outs[0])
            self.add(name, kind, sub, flops, nbytes - out_bytes - self.pricer.nbytes(bias))
            self.add("conv_bias_add", OpClass.eltwise, "eltwise", float(outs[0].numel()),
                     2 * out_bytes + self.pricer.nbytes(bias))
            return
        if self.stack.in_rnn() and kind is OpClass.matmul:
            sub = "matmul.rnn"  # cuDNN's recurrent kernels, not cuBLAS calls
        self.add(name, kind, sub, flops, nbytes)
        if self.stack.in_rnn() and kind is OpClass.matmul:
            self.rnn_matmuls += 1
            if self.rnn_matmuls % 2 == 0:  # one fused gate kernel per step (two matmuls)
                self.add("rnn_pointwise", OpClass.eltwise, "eltwise", 0.0, 0.0)

    def attention_module(self, module: Any, args: Any) -> None:
        """``nn.MultiheadAttention``: its QKᵀ·softmax·AV as one fused attention kernel."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)] if isinstance(args, tuple) else []
        if len(tensors) < 1 or tensors[0].dim() < 2:
            return
        q = tensors[0]
        k = tensors[1] if len(tensors) > 1 else q
        seq_dim = 1 if getattr(module, "batch_first", False) else 0
        lq = int(q.shape[seq_dim]) if q.dim() == 3 else int(q.shape[0])
        lk = int(k.shape[seq_dim]) if k.dim() == 3 else int(k.shape[0])
        batch = int(q.numel()) // max(lq * int(q.shape[-1]), 1)
        e = int(module.embed_dim)
        flops = 4.0 * batch * lq * lk * e
        item = self.pricer.itemsize or q.element_size()
        nbytes = float(batch * (2 * lq + 2 * lk) * e * item)
        self.trace.ops.append(OpRecord("scaled_dot_product_attention", OpClass.attention,
                                       "attention",
                                       flops, nbytes, 1, "MultiheadAttention",
                                       self.stack.names.get(id(module), ""),
                                       fastpath=self.stack.fastpath or self.mha_fast))
        self.mha_fast = ""

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
    def __init__(self, rec: _Recorder) -> None:
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
    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        stack = self.rec.stack
        if func is torch.nn.functional.multi_head_attention_forward and not stack.fast \
                and stack.modules and isinstance(stack.modules[-1], torch.nn.MultiheadAttention) \
                and stack.modules[-1].batch_first and mha_fast_path(args, kwargs):
            stack.open_fast(None, "mha")
            self.rec.mha_fast = stack.fastpath
            try:
                return func(*args, **kwargs)
            finally:
                stack.fast.pop()
        if func is torch.nn.functional.scaled_dot_product_attention and not self.rec.suppress:
            names = ("query", "key", "value")
            q, k, v = (list(args) + [kwargs.get(n) for n in names][len(args):])[:3]
            causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
            flops, nbytes = sdpa_work(q, k, v, causal, self.rec.pricer)
            self.rec.add("scaled_dot_product_attention", OpClass.attention, "attention", flops,
                         nbytes)
            self.rec.suppress += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.rec.suppress -= 1
        return func(*args, **kwargs)


def record_ops(model: Any, example: Any, *, dtype: str | None = None) -> OpTrace:
    """One meta forward of ``model`` on ``example`` (the trace's), every op recorded."""
    from torchinspect.trace.policy import trace_model

    names = {id(m): n for n, m in model.named_modules()} if hasattr(model, "named_modules") else {}
    with _Stack(names) as stack:  # the trace's forward keeps TorchDynamo unimported
        rec = _Recorder(Pricer(dtype), stack)
        stack.on_attention = rec.attention_module
        with _Functions(rec), _Dispatch(rec):
            trace_model(model, example, device="meta")
    rec.trace.module_calls = stack.calls
    return rec.trace


def record_call(fn: Any, *, dtype: str | None = None) -> OpTrace:
    """The ops of one call of ``fn()`` (tensors already on meta): the tables' replay."""
    with _Stack({}) as stack:
        rec = _Recorder(Pricer(dtype), stack)
        stack.on_attention = rec.attention_module
        with _Functions(rec), _Dispatch(rec):
            fn()
    rec.trace.module_calls = stack.calls
    return rec.trace
