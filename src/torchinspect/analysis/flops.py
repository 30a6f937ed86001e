"""`inspect flops`: MACs per module and per aten op, what was not counted, and how
thop and torchinfo count the same model (``--compare``)."""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.analysis.prepare import (
    COUNTED_CONVENTION,
    MACS_CONVENTION,
    LoadOptions,
    Prepared,
    describe_inputs,
    prepare,
    run_trace,
)
from torchinspect.analysis.tree import macs_by_op, shown_tree
from torchinspect.errors import InspectError
from torchinspect.report import Report, Table, Text, fmt_si, pct, si
from torchinspect.trace.records import Trace


@dataclass
class FlopsRow:
    name: str
    type: str
    depth: int
    macs: int
    pct: float
    by_op: dict[str, int]
    called: bool = True  # False: a container (ModuleList, ...) whose forward never ran


@dataclass
class ToolCount:
    """What another tool reports for the same model and input."""

    tool: str
    macs: int | None
    params: int | None
    note: str


@dataclass
class FlopsResult:
    """The result of :func:`count_flops`."""

    model: str
    input: str
    device: str
    fallback_reason: str | None
    macs: int
    by_op: dict[str, int]
    op_calls: dict[str, int]
    rows: list[FlopsRow]
    not_counted: dict[str, int]
    params: int
    notes: list[str] = field(default_factory=list)
    compare: list[ToolCount] = field(default_factory=list)

    @property
    def flops(self) -> int:
        return 2 * self.macs

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "input": self.input, "device": self.device,
            "fallback_reason": self.fallback_reason,
            "convention": {"macs": MACS_CONVENTION, "counted": COUNTED_CONVENTION},
            "macs": self.macs, "flops": self.flops, "params": self.params,
            "by_op": [{"op": k, "macs": v, "calls": self.op_calls.get(k, 0)} for k, v in self.by_op.items()],
            "modules": [asdict(r) for r in self.rows],
            "not_counted": [{"op": k, "calls": v} for k, v in self.not_counted.items()],
            "compare": [asdict(c) for c in self.compare],
            "notes": list(self.notes),
        }

    def to_report(self) -> Report:
        from torchinspect.analysis.summary import header_lines

        head = header_lines(self.model, self.input, self.device, self.fallback_reason, False)
        head.append(f"Total: {fmt_si(self.macs)} MACs ({self.macs:,}) = {fmt_si(self.flops)} FLOPs")
        sections: list[Any] = [Text(head)]
        total = self.macs or 1
        sections.append(Table(
            "MACs by module", ["Module", "Type", "MACs", "% MACs", "Top op"],
            [["  " * r.depth + (r.name or self.model), r.type, si(r.macs, empty="0"),
              pct(100.0 * r.macs / total),
              max(r.by_op, key=r.by_op.get) if r.by_op else "-"] for r in self.rows],
            align=["left", "left", "right", "right", "left"], primary=True))
        sections.append(Table(
            "MACs by op", ["Op", "Calls", "MACs", "% MACs"],
            [[op, self.op_calls.get(op, 0), si(m), pct(100.0 * m / total)]
             for op, m in self.by_op.items()],
            align=["left", "right", "right", "right"]))
        if self.not_counted:
            sections.append(Table("Not counted (work without a MAC formula)", ["Op", "Calls"],
                                  [[k, v] for k, v in self.not_counted.items()]))
        if self.compare:
            rows = [["torchinspect", si(self.macs), self.macs, pct(0.0, signed=True), self.params,
                     COMPARE_NOTE]]
            for c in self.compare:
                diff = None if c.macs is None or not self.macs else 100.0 * (c.macs - self.macs) / self.macs
                rows.append([c.tool, si(c.macs), c.macs, pct(diff, signed=True), c.params, c.note])
            sections.append(Table("Other tools, same model and input",
                                  ["Tool", "MACs", "MACs (exact)", "vs ours", "Params", "What it counts"],
                                  rows, align=["left", "right", "right", "right", "right", "left"]))
        if self.notes:
            sections.append(Text([f"note: {n}" for n in self.notes], style="yellow"))
        return Report("flops", self.to_json(), sections)


COMPARE_NOTE = "aten matmul/conv/SDPA at the dispatcher, functional ops included"


def flops_from_trace(trace: Trace, *, model: str, inputs: str, depth: int = 3,
                     notes: list[str] | None = None) -> FlopsResult:
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    root = shown_tree(trace, depth)
    rows: list[FlopsRow] = []
    if root is not None:
        stack = [root]
        while stack:
            node = stack.pop()
            # a container with MACs below it stays, so its rows keep their parent
            if node.macs or node is root or (node.children and node.call.total_macs):
                rows.append(FlopsRow(node.call.name, node.call.type, node.call.depth, node.macs,
                                     100.0 * node.macs / (trace.total_macs or 1),
                                     macs_by_op(trace, node.call) if not node.children
                                     else dict(node.call.macs), node.called))
            stack.extend(reversed(node.children))
    return FlopsResult(
        model=model, input=inputs, device=trace.device, fallback_reason=trace.fallback_reason,
        macs=trace.total_macs, by_op=trace.macs_by_op, op_calls=dict(trace.op_calls), rows=rows,
        not_counted=dict(trace.uncounted), params=trace.params.total,
        notes=[*(notes or []), *trace.notes],
    )


def _fresh_copy(prep: Prepared) -> Any:
    """A model the other tools may modify (thop adds buffers): rebuilt, or deep-copied."""
    if prep.rebuild is not None:
        try:
            return prep.rebuild("meta")
        except Exception:  # builders that cannot run on meta
            return prep.rebuild("cpu")
    return copy.deepcopy(prep.model)


def _materialize_like(prep: Prepared, model: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    from torchinspect.sources.inputs import ExampleInputs
    from torchinspect.trace.engine import _inputs_for, _model_device

    dev = _model_device(model)
    if isinstance(prep.example, ExampleInputs):
        return prep.example.materialize(dev)
    return _inputs_for(prep.example, dev)


def _thop_count(prep: Prepared) -> ToolCount:
    note = "module hooks on known layer types (BN, pooling, activations too); functional ops missed"
    try:
        import torch

        with warnings.catch_warnings():  # thop imports distutils (DeprecationWarning)
            warnings.simplefilter("ignore")
            import thop
    except ImportError:
        return ToolCount("thop", None, None, "not installed (pip install thop)")
    try:
        model = _fresh_copy(prep).eval()
        args, kwargs = _materialize_like(prep, model)
        if kwargs:
            return ToolCount("thop", None, None, "keyword inputs are not supported by thop")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            macs, params = thop.profile(model, inputs=args, verbose=False)
        return ToolCount("thop", int(macs), int(params), note)
    except Exception as exc:
        return ToolCount("thop", None, None, f"failed: {type(exc).__name__}: {str(exc)[:80]}")


def _torchinfo_count(prep: Prepared) -> ToolCount:
    note = "module-level formulas per layer type (Linear/Conv/RNN...); functional ops missed"
    try:
        import torch
        import torchinfo
    except ImportError:
        return ToolCount("torchinfo", None, None, "not installed (pip install torchinfo)")
    try:
        model = _fresh_copy(prep)
        args, kwargs = _materialize_like(prep, model)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            stats = torchinfo.summary(model, input_data=list(args) if args else None, verbose=0,
                                      mode="eval", device=next(iter(model.parameters())).device,
                                      **kwargs)
        return ToolCount("torchinfo", int(stats.total_mult_adds), int(stats.total_params), note)
    except Exception as exc:
        return ToolCount("torchinfo", None, None, f"failed: {type(exc).__name__}: {str(exc)[:80]}")


def count_flops(model_or_spec: Any, inputs: Any = None, *, depth: int = 3, compare: bool = False,
                device: str = "auto", train: bool = False,
                options: LoadOptions | None = None) -> FlopsResult:
    """Count MACs: ``count_flops("resnet18", "3,224,224").macs`` (FLOPs = 2 x MACs)."""
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more", hint="e.g. --depth 2")
    prep = prepare(model_or_spec, inputs, device=device, options=options)
    trace = run_trace(prep, device=device, train=train)
    result = flops_from_trace(trace, model=prep.name, inputs=describe_inputs(prep.example),
                              depth=depth, notes=prep.notes)
    if compare:
        result.compare = [_thop_count(prep), _torchinfo_count(prep)]
    return result
