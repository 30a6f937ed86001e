"""Aggregates of one trace that make charts say something: identical layers grouped, totals
per module type, and params/MACs by the top two levels of the module hierarchy (a treemap).

Each aggregate adds up to the model totals: parameters are counted on the module that owns
them (``ModuleInfo.params``, tied tensors once) and MACs on the call that ran the op
(``CallRecord.own_macs``), so nothing is counted twice and nothing is left out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.analysis.summary import kernel_text
from torchinspect.shapes import first_tensor, format_shape_tree
from torchinspect.trace.records import CallRecord, Trace

OWN = "(own)"  # a module's own params/MACs next to its children's (names never hold dots)


@dataclass
class LayerGroup:
    """Identical leaf layers (same type, settings, shapes, params and MACs) as one entry."""

    name: str  # "Conv2d 3×3 p1 256→256 @14×14"
    type: str
    count: int
    params: int  # all the layers of the group together
    macs: int
    output: str  # the output shape of each layer
    layers: list[str] = field(default_factory=list)  # their module names, in call order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _describe(trace: Trace, call: CallRecord) -> str:
    """``Conv2d 3×3 p1 256→256 @14×14``, ``Linear 2048→1000``: type, kernel settings, and
    the channels (conv: dim 1, with the output's spatial size) or features (last dim)."""
    parts = [call.type]
    kernel = kernel_text(trace.modules.get(call.name))
    if kernel:
        parts.append(kernel)
    x, y = first_tensor(call.inputs), first_tensor(call.outputs)
    if x is not None and y is not None and x.shape and y.shape:
        if call.type.startswith("Conv") and len(x.shape) >= 3 and len(y.shape) >= 3:
            parts.append(f"{x.shape[1]}→{y.shape[1]} @{'×'.join(map(str, y.shape[2:]))}")
        else:
            parts.append(f"{x.shape[-1]}→{y.shape[-1]}")
    return " ".join(parts)


def layer_groups(trace: Trace, n: int) -> list[LayerGroup]:
    """The ``n`` groups of identical leaf layers with the most MACs (all of a group's
    layers together): resnet50's six identical 3×3 convolutions are one entry ×6."""
    groups: dict[tuple[Any, ...], LayerGroup] = {}
    for c in trace.calls:
        if c.children or c.total_macs <= 0:
            continue
        info = trace.modules.get(c.name)
        params = info.total_params if info and c.call_number == 0 else 0
        key = (c.type, kernel_text(info), format_shape_tree(c.inputs),
               format_shape_tree(c.outputs), c.total_macs, params)
        g = groups.get(key)
        if g is None:
            g = groups[key] = LayerGroup(_describe(trace, c), c.type, 0, 0, 0, key[3])
        g.count += 1
        g.params += params
        g.macs += c.total_macs
        g.layers.append(c.name or "(model)")
    top = sorted(groups.values(), key=lambda g: g.macs, reverse=True)[:n]
    same = Counter(g.name for g in top)
    for g in top:  # one description, other shapes (a Linear on another sequence length)
        if same[g.name] > 1:
            g.name = f"{g.name} → {g.output}"
    return top


def type_family(type_name: str) -> str:
    """The name a module type is compared under across models: every kind of attention is
    "attention", every normalization "norm", every Linear subclass "Linear"; others as is."""
    low = type_name.lower()
    if "attention" in low or low.endswith("attn"):
        return "attention"
    if "norm" in low:
        return "norm"
    if low.endswith("linear") and not low.startswith("conv"):
        return "Linear"
    return type_name


@dataclass
class TypeTotals:
    """Params and MACs of one module type (family): parameters owned, ops run directly."""

    type: str
    params: int = 0
    macs: int = 0
    classes: list[str] = field(default_factory=list)  # the module classes in the family


def by_type(trace: Trace) -> dict[str, TypeTotals]:
    """Per module type family, largest MACs first (then params); adds up to the totals."""
    out: dict[str, TypeTotals] = {}

    def add(type_name: str, params: int, macs: int) -> None:
        fam = type_family(type_name)
        t = out.setdefault(fam, TypeTotals(fam))
        t.params += params
        t.macs += macs
        if type_name not in t.classes:
            t.classes.append(type_name)

    for info in trace.modules.values():
        if info.params:
            add(info.type, info.params, 0)
    for c in trace.calls:
        if c.own_macs:
            add(c.type, 0, c.own_macs)
    return dict(sorted(out.items(), key=lambda kv: (kv[1].macs, kv[1].params), reverse=True))


MAX_DESCENT = 3  # levels a treemap group may go down through one dominant child


def two_levels(trace: Trace) -> dict[str, tuple[int, int]]:
    """``{name: (params, MACs)}`` of the tiles of a treemap: a group per top-level module,
    a tile per module one level down (``layer1.0``), or the top-level module itself when it
    has no children (``fc``); ``NAME.(own)`` / ``(own)`` for what a module or the model holds
    or runs directly. A group with one child holding two thirds of its params or MACs goes down
    through it (vit's ``encoder.layers``: a tile per encoder layer, not one tile). Adds up
    to the totals."""
    own_params: dict[str, int] = {}
    own_macs: dict[str, int] = {}
    for info in trace.modules.values():
        if info.params:
            own_params[info.name] = own_params.get(info.name, 0) + info.params
    for c in trace.calls:
        if c.own_macs:
            own_macs[c.name] = own_macs.get(c.name, 0) + c.own_macs
    names = [n for n in trace.modules if n]
    expanded = _expanded(names, _inclusive(own_params), _inclusive(own_macs))

    def key(name: str) -> str:
        parts = name.split(".") if name else []
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix not in expanded:
                return prefix
        return f"{name}.{OWN}" if name else OWN

    out: dict[str, list[int]] = {}
    for name, v in own_params.items():
        out.setdefault(key(name), [0, 0])[0] += v
    for name, v in own_macs.items():
        out.setdefault(key(name), [0, 0])[1] += v
    order = {k: i for i, k in enumerate(dict.fromkeys(key(n) for n in ["", *names]))}
    return {k: (v[0], v[1]) for k, v in sorted(out.items(), key=lambda kv: order.get(kv[0], 0))}


def _inclusive(own: dict[str, int]) -> dict[str, int]:
    """Each module's own amount added to it and to every module above it."""
    out: dict[str, int] = {}
    for name, v in own.items():
        parts = name.split(".") if name else []
        for k in range(len(parts) + 1):
            prefix = ".".join(parts[:k])
            out[prefix] = out.get(prefix, 0) + v
    return out


def _expanded(names: list[str], params: dict[str, int], macs: dict[str, int]) -> set[str]:
    """The modules a treemap shows the children of: every top-level module with children,
    and below it a chain of children that hold two thirds of their parent's params or MACs."""
    children: dict[str, list[str]] = {}
    for n in names:
        children.setdefault(n.rpartition(".")[0], []).append(n)

    def dominant(node: str) -> str | None:
        for c in children.get(node, []):
            if children.get(c) and any(0 < 2 * amount.get(node, 0) <= 3 * amount.get(c, 0)
                                       for amount in (params, macs)):
                return c
        return None

    out: set[str] = set()
    for top in children.get("", []):
        node: str | None = top
        for _ in range(MAX_DESCENT + 1):
            if node is None or not children.get(node):
                break
            out.add(node)
            node = dominant(node)
    return out
