"""The MAC-formula registry: the one table of which ops count multiply-accumulates, and how.

Every formula is registered with `register_mac_formula` (a decorator that owns the
table and refuses a second formula for an op, as ``torch.utils.flop_counter``'s
``register_flop_formula`` does). A user adds a formula for an op of their own at run time the
same way (as fvcore's ``FlopCountAnalysis.set_op_handle``):

    from torchinspect import register_mac_formula

    @register_mac_formula("mylib.fused_linear", family="matmul/linear")
    def fused_linear(args, kwargs, out):
        x, weight = args[0], args[1]
        return out.numel() * weight.shape[1]

A formula takes the op's ``(args, kwargs, out)`` (real, fake or meta tensors) and returns the
MACs of one call (1 multiply-add = 1; FLOPs are twice that).

Precedence is explicit: the formulas of ``torch.utils.flop_counter.flop_registry`` (matmul,
convolution and the fused attention kernels; FLOPs there, halved to MACs) are used for the
ops this table does not name; an op in both tables is an error unless the entry here was
registered with ``replace=True`` (it then wins, and says so in `mac_formulas()`). The
"Counted:" note under every table and the op list in docs/concepts/counting.md are generated
from `mac_formulas()`, so they cannot drift from what is counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchinspect.trace.ops import op_name

MacFormula = Callable[[tuple[Any, ...], dict[str, Any], Any], int]

OURS = "torchinspect"
TORCH = "torch.utils.flop_counter"
USER = "user"

SDPA_OP = "scaled_dot_product_attention"


@dataclass(frozen=True)
class MacFormulaEntry:
    """One row of the registry: ``op`` as tables show it (``mm``, ``_trilinear``,
    ``quantized.conv2d``), the ``family`` the "Counted:" note names, the formula, and where
    it comes from (``torchinspect``, ``torch.utils.flop_counter`` or ``user``)."""

    op: str
    family: str
    formula: MacFormula
    source: str
    replaces_torch: bool = False


_FORMULAS: dict[str, MacFormulaEntry] = {}


def _torch_formulas() -> dict[str, Any]:
    """torch's flop_registry by our op names (its formulas count FLOPs)."""
    from torch.utils.flop_counter import flop_registry

    return {op_name(packet): formula for packet, formula in flop_registry.items()}


def register_mac_formula(op: Any, formula: MacFormula | None = None, *, family: str,
                         replace: bool = False, source: str = USER) -> Any:
    """Register the MAC formula of ``op`` (a name such as ``"aten.foo"``/``"mylib.bar"``, an
    op object, or a list of them); usable as a decorator or called with ``formula``.

    Refuses an op that already has a formula here or in ``torch.utils.flop_counter`` unless
    ``replace=True`` (then this one wins: the precedence is stated, never silent).
    ``family`` is what the "Counted:" note calls this kind of work (``"matmul/linear"``,
    ``"RNN"``, ...). Returns the formula, so the decorated function stays usable.
    """
    names = [op_name(o) for o in (op if isinstance(op, list | tuple) else [op])]

    def add(fn: MacFormula) -> MacFormula:
        from torchinspect.errors import InspectError

        torch_ops = _torch_formulas()
        for name in names:
            where = (_FORMULAS[name].source if name in _FORMULAS
                     else TORCH if name in torch_ops else None)
            if where is not None and not replace:
                raise InspectError(f"register_mac_formula: {name!r} already has a MAC formula "
                                   f"(from {where})",
                                   hint="pass replace=True to use yours instead")
        for name in names:
            _FORMULAS[name] = MacFormulaEntry(name, family, fn, source,
                                              replaces_torch=name in torch_ops)
        return fn

    return add(formula) if formula is not None else add


def unregister_mac_formula(op: Any) -> None:
    """Remove a formula a user registered (the built-in ones are replaced, not removed)."""
    name = op_name(op)
    entry = _FORMULAS.get(name)
    if entry is None or entry.source == OURS:
        from torchinspect.errors import InspectError

        raise InspectError(f"unregister_mac_formula: {name!r} has no user-registered formula",
                           hint="see torchinspect.mac_formulas() for what is registered")
    del _FORMULAS[name]


def _torch_family(name: str) -> str:
    if "conv" in name:
        return "conv"
    if "attention" in name:
        return "attention (SDPA)"
    return "matmul/linear"


def _from_torch(flop_formula: Any) -> MacFormula:
    return lambda args, kwargs, out: int(flop_formula(*args, **kwargs, out_val=out)) // 2


def mac_formulas() -> dict[str, MacFormulaEntry]:
    """Every op that counts MACs, by name, in precedence order: this registry's entries
    (built-in and user), then torch's flop_registry for the ops they do not name."""
    table = dict(_FORMULAS)
    for name, formula in _torch_formulas().items():
        table.setdefault(name, MacFormulaEntry(name, _torch_family(name), _from_torch(formula),
                                               TORCH))
    return table


class MacTable:
    """One snapshot of `mac_formulas()` for a run, looked up by op (cached per op packet):
    the MAC counter's and the latency predictor's, so both read the same formulas with the
    same precedence."""

    def __init__(self) -> None:
        self.entries = mac_formulas()
        self._by_packet: dict[Any, MacFormulaEntry | None] = {}

    def entry(self, func: Any) -> MacFormulaEntry | None:
        """The formula of ``func`` (an OpOverload), or None when no table names it."""
        packet = getattr(func, "_overloadpacket", func)
        try:
            return self._by_packet[packet]
        except KeyError:
            found = self._by_packet[packet] = self.entries.get(op_name(packet))
            return found

    def macs(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             out: Any) -> int | None:
        """MACs of one call of ``func``, or None without a formula (or one that cannot read
        these arguments)."""
        entry = self.entry(func)
        if entry is None:
            return None
        try:
            return int(entry.formula(args, kwargs, out))
        except Exception:  # noqa: BLE001 - a formula (maybe a user's) that cannot read these args
            return None


def counted_families() -> list[str]:
    """The families the "Counted:" note names: torch's first (matmul, conv, attention),
    then the registry's in the order they were registered; backward-only ops left out."""
    entries = sorted(mac_formulas().values(), key=lambda e: e.source != TORCH)
    families: list[str] = []
    for entry in entries:
        if "backward" not in entry.op and entry.family not in families:
            families.append(entry.family)
    return families


# ---- the built-in formulas (torch.utils.flop_counter has none for these ops) ----------------

def _prod(xs: Any) -> int:
    return math.prod(int(x) for x in xs)


def sdpa_macs(q: Any, k: Any, v: Any) -> int:
    """Dense QKᵀ and AV: prod(q.shape[:-1]) x S_k x (E + E_v)."""
    return _prod(q.shape[:-1]) * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))


@register_mac_formula(SDPA_OP, family="attention (SDPA)", source=OURS)
def _sdpa_call_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """``F.scaled_dot_product_attention``, counted once at the function level whatever
    backend runs it (so the count does not depend on the device)."""
    names = ("query", "key", "value")
    q, k, v = (list(args) + [kwargs.get(n) for n in names][len(args):])[:3]
    return sdpa_macs(q, k, v)


@register_mac_formula("_scaled_dot_product_flash_attention_for_cpu", family="attention (SDPA)",
                      source=OURS)
def _cpu_flash_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    return sdpa_macs(args[0], args[1], args[2])


def _tokens(x: Any) -> int:
    """Time steps x batch of an RNN input (packed or padded): every element but the features."""
    return int(x.numel()) // max(int(x.shape[-1]), 1) if x.dim() else 0


@register_mac_formula("mkldnn_rnn_layer", family="RNN", source=OURS)
def _mkldnn_rnn_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """CPU oneDNN kernel, one call per layer and direction: tokens x (W_ih + W_hh)."""
    return _tokens(args[0]) * (int(args[1].numel()) + int(args[2].numel()))


@register_mac_formula(("_cudnn_rnn", "miopen_rnn", "_lstm_mps"), family="RNN", source=OURS)
def _fused_rnn_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """cuDNN / MIOpen / MPS kernels, one call for all layers: tokens x every weight matrix.

    Every layer (and direction) multiplies each token by its W_ih, W_hh (and W_hr with
    proj_size), so the sum over the 2-D weights times the tokens is the MAC count, exactly
    what the meta path's matmuls add up to. Biases (1-D) are not MACs.
    """
    x = args[0]
    lstm_mps = len(args) > 2 and isinstance(args[2], list | tuple)
    weights = args[2] if lstm_mps else args[1]
    return _tokens(x) * sum(int(w.numel()) for w in weights if w.dim() == 2)


@register_mac_formula(("_grouped_mm", "_scaled_grouped_mm"), family="MoE experts", source=OURS)
def _grouped_mm_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """``_grouped_mm`` (MoE experts): every output element contracts over K once.

    2-D x 3-D (tokens routed to experts), 3-D x 3-D (batched) and 3-D x 2-D: out.numel() x K.
    2-D x 2-D (ragged K, one (M, N) block per group): M x N x K_total.
    """
    a, b = args[0], args[1]
    k = int(a.shape[-1])
    if a.dim() == 2 and b.dim() == 2:
        return (int(out.numel()) // max(int(out.shape[0]), 1)) * k
    return int(out.numel()) * k


@register_mac_formula(("_int_mm", "_weight_int8pack_mm"), family="matmul/linear", source=OURS)
def _int8_mm_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """int8 matmuls (``torch._int_mm``: (M, K) x (K, N); ``_weight_int8pack_mm``, the
    weight-only int8 linear: (M, K) x (N, K)ᵀ): every output element is one dot product over
    K, the last dimension of the first argument."""
    return int(out.numel()) * int(args[0].shape[-1])


@register_mac_formula("_trilinear", family="bilinear", source=OURS)
def _trilinear_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """``_trilinear`` (``nn.Bilinear``/``F.bilinear``: y_k = x1ᵀ W_k x2): one MAC per element
    of the broadcast product of the three unsqueezed inputs, so N x out x in1 x in2 for a
    bilinear layer."""
    shapes = []
    for t, expand in zip(args[:3], args[3:6], strict=True):
        shape = [int(d) for d in t.shape]
        for d in sorted(int(e) for e in expand):
            shape.insert(d, 1)
        shapes.append(shape)
    return _prod(max(dims) for dims in zip(*shapes, strict=True))


@register_mac_formula([f"quantized.{name}" for name in (
    "conv1d", "conv2d", "conv3d", "conv1d_relu", "conv2d_relu", "conv3d_relu", "conv2d_add",
    "conv2d_add_relu")], family="quantized conv/linear", source=OURS)
def _quantized_conv_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    weight, _ = args[1].unpack()
    return out.numel() * _prod(weight.shape[1:])


@register_mac_formula([f"quantized.{name}" for name in (
    "linear", "linear_relu", "linear_dynamic", "linear_relu_dynamic")],
    family="quantized conv/linear", source=OURS)
def _quantized_linear_macs(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    import torch

    weight, _ = torch.ops.quantized.linear_unpack(args[1])
    return out.numel() * int(weight.shape[1])

