"""What one instrumented forward produces: plain dataclasses, JSON-ready, no torch inside.

A ``Trace`` holds static facts about every module (parameters, buffers, layer
settings) in ``modules`` and one ``CallRecord`` per module call in ``calls``, in
call order. MACs are attributed to the innermost module that was running (``own``);
``total_macs(call)`` adds the calls nested inside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.shapes import (
    ShapeTree,
    shape_tree_to_json,
)


@dataclass
class ModuleInfo:
    """Static facts about one module (parameters are deduplicated by tensor identity).

    ``params``/``buffers`` count the tensors this module owns directly (a tied tensor is
    owned by the first module that registers it); ``total_*`` cover its whole subtree.
    """

    name: str
    type: str
    depth: int
    params: int = 0
    trainable: int = 0
    buffers: int = 0
    total_params: int = 0
    total_trainable: int = 0
    total_buffers: int = 0
    param_bytes: int = 0
    total_param_bytes: int = 0
    layer: dict[str, Any] = field(default_factory=dict)  # kernel_size, stride, padding, groups
    calls: int = 0
    scripted: bool = False  # TorchScript: the modules inside it take no hooks (they run in it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CallRecord:
    """One call of one module during the traced forward."""

    index: int
    name: str  # qualified name, "" for the root
    type: str
    depth: int
    parent: int | None  # index of the enclosing call
    call_number: int  # 0 for the first call of this module, 1 for the second, ...
    inputs: ShapeTree = None
    outputs: ShapeTree = None
    macs: dict[str, int] = field(default_factory=dict)  # own MACs by aten op
    output_bytes: int = 0
    children: list[int] = field(default_factory=list)
    total_macs: int = 0  # own + every call nested inside (set when the trace ends)

    @property
    def own_macs(self) -> int:
        return sum(self.macs.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["inputs"] = shape_tree_to_json(self.inputs)
        d["outputs"] = shape_tree_to_json(self.outputs)
        return d


@dataclass
class DtypeStat:
    count: int = 0
    bytes: int = 0


@dataclass
class ParamStats:
    """Model-wide parameter and buffer totals (each tensor counted once)."""

    total: int = 0
    trainable: int = 0
    buffers: int = 0
    param_bytes: int = 0
    buffer_bytes: int = 0
    by_dtype: dict[str, DtypeStat] = field(default_factory=dict)
    buffer_by_dtype: dict[str, DtypeStat] = field(default_factory=dict)
    frozen_names: list[str] = field(default_factory=list)
    tied: list[tuple[str, str]] = field(default_factory=list)  # (alias, first owner)
    quantized: int = 0  # weights held in quantized packed params (counted in total, frozen)
    lazy: list[str] = field(default_factory=list)  # uninitialized lazy tensors (not counted)

    @property
    def frozen(self) -> int:
        return self.total - self.trainable

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frozen"] = self.frozen
        d["tied"] = [{"name": a, "tied_to": b} for a, b in self.tied]
        return d


@dataclass
class Trace:
    """Everything one instrumented forward saw. Views in ``analysis`` read it."""

    model_type: str
    device: str  # where the forward actually ran: meta, cpu, cuda:0
    train: bool
    inputs: ShapeTree
    input_bytes: int
    outputs: ShapeTree
    modules: dict[str, ModuleInfo]
    calls: list[CallRecord]
    params: ParamStats
    uncounted: dict[str, int] = field(default_factory=dict)  # op -> calls (work without a formula)
    op_calls: dict[str, int] = field(default_factory=dict)  # counted op -> calls
    notes: list[str] = field(default_factory=list)
    fallback_reason: str | None = None
    # parameter/buffer name -> index of the call during which an op first read it
    param_reads: dict[str, int] = field(default_factory=dict)

    @property
    def macs_by_op(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            for op, n in c.macs.items():
                out[op] = out.get(op, 0) + n
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def total_macs(self) -> int:
        return sum(c.own_macs for c in self.calls)

    def macs_by_op_of(self, index: int) -> dict[str, int]:
        """MACs by op of one call including the calls nested inside it."""
        out = dict(self.calls[index].macs)
        stack = list(self.calls[index].children)
        while stack:
            c = self.calls[stack.pop()]
            for op, n in c.macs.items():
                out[op] = out.get(op, 0) + n
            stack.extend(c.children)
        return out

    @property
    def activation_bytes(self) -> int:
        """Bytes of outputs produced by leaf-module calls (a forward activation estimate)."""
        return sum(c.output_bytes for c in self.calls if not c.children)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "device": self.device,
            "train": self.train,
            "fallback_reason": self.fallback_reason,
            "inputs": shape_tree_to_json(self.inputs),
            "outputs": shape_tree_to_json(self.outputs),
            "input_bytes": self.input_bytes,
            "params": self.params.to_dict(),
            "macs": self.total_macs,
            "macs_by_op": self.macs_by_op,
            "op_calls": dict(self.op_calls),
            "not_counted": dict(self.uncounted),
            "notes": list(self.notes),
            "modules": [m.to_dict() for m in self.modules.values()],
            "calls": [c.to_dict() for c in self.calls],
        }
