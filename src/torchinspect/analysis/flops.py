"""`inspect flops`: MACs per module and per aten op, what was not counted, and how
thop, torchinfo and fvcore count the same model (``--cross-check``).

A module row's ``macs`` include everything inside it (what fvcore's and DeepSpeed's tables
show); ``self_macs`` are the MACs of ops run directly in its own forward, whatever
``depth`` is: the convention of summary and params too (``trace/tree.py``)."""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect import device as devices
from torchinspect.analysis.conventions import conventions
from torchinspect.analysis.params import left_out_notes
from torchinspect.arguments import check_depth, renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.sources.case import ModelCase, ModelLike, ModelOptions, make_case, materialize
from torchinspect.trace import trace_case
from torchinspect.trace.records import Trace
from torchinspect.trace.tree import macs_by_op, never_ran_notes, shown_tree


@dataclass
class FlopsRow:
    name: str
    type: str
    depth: int
    macs: int  # including every module inside it
    self_macs: int  # ops run directly in its own forward
    pct: float  # of the model's total, by ``macs``
    by_op: dict[str, int]  # ``macs`` by aten op
    called: bool = True  # False: a container (ModuleList, ...) whose forward never ran
    calls: int = 1  # how many times the module ran in the forward
    call_number: int = 0  # 0 for its first call (a module reused in a loop has a row per call)


@dataclass
class ToolCount:
    """What another tool reports for the same model and input."""

    tool: str
    macs: int | None
    params: int | None
    note: str


@dataclass
class FlopsResult:
    """The result of ``count_flops``."""

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "input": self.input, "device": self.device,
            "fallback_reason": self.fallback_reason,
            "convention": conventions(),
            "totals": {"params": self.params, "macs": self.macs, "flops": self.flops},
            "by_op": [{"op": k, "macs": v, "calls": self.op_calls.get(k, 0)} for k, v in self.by_op.items()],
            "modules": [asdict(r) for r in self.rows],
            "not_counted": [{"op": k, "calls": v} for k, v in self.not_counted.items()],
            "compare": [asdict(c) for c in self.compare],
            "notes": list(self.notes),
        }


COMPARE_NOTE = "aten matmul/conv/SDPA at the dispatcher, functional ops included"


def flops_from_trace(trace: Trace, *, model: str, inputs: str, depth: int = 3,
                     notes: list[str] | None = None) -> FlopsResult:
    check_depth(depth)
    root = shown_tree(trace, depth)
    rows: list[FlopsRow] = []
    total = trace.total_macs or 1
    if root is not None:
        stack = [root]
        while stack:
            node = stack.pop()
            if node.macs or node is root:
                info = trace.modules.get(node.call.name)
                rows.append(FlopsRow(node.call.name, node.call.type, node.call.depth, node.macs,
                                     node.self_macs, 100.0 * node.macs / total,
                                     macs_by_op(trace, node.call), node.called,
                                     info.calls if info and node.called else 1,
                                     node.call.call_number))
            stack.extend(reversed(node.children))
    return FlopsResult(
        model=model, input=inputs, device=trace.device, fallback_reason=trace.fallback_reason,
        macs=trace.total_macs, by_op=trace.macs_by_op, op_calls=dict(trace.op_calls), rows=rows,
        not_counted=dict(trace.uncounted), params=trace.params.total,
        notes=[*(notes or []), *trace.notes, *never_ran_notes(trace)],
    )


def _fresh_copy(prep: ModelCase) -> Any:
    """A model the other tools may modify (thop adds buffers): rebuilt, or deep-copied."""
    if prep.rebuild is not None:
        try:
            return prep.rebuild("meta")
        except Exception:  # builders that cannot run on meta
            return prep.rebuild("cpu")
    return copy.deepcopy(prep.model)


def _materialize_like(prep: ModelCase, model: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return materialize(prep.example, devices.model_device(model))


CROSS_CHECK_TOOLS = ("thop", "torchinfo", "fvcore")


def parse_cross_check(tools: Any) -> tuple[str, ...]:
    """``"thop,fvcore"``, ``"all"``, ``True`` (all) or a list -> the tools, in their order."""
    if tools is None or tools is False or (not isinstance(tools, str) and not tools):
        return ()
    if tools is True:
        return CROSS_CHECK_TOOLS
    parts = tools.split(",") if isinstance(tools, str) else list(tools)
    names = [str(p).strip().lower() for p in parts if str(p).strip()]
    if "all" in names:
        return CROSS_CHECK_TOOLS
    unknown = [n for n in names if n not in CROSS_CHECK_TOOLS]
    if unknown or not names:
        raise InspectError(f"--cross-check {tools!r}: {', '.join(unknown) or 'no tool'} is not "
                           "a counter we run", hint="use thop, torchinfo, fvcore (comma-separated) "
                           "or all")
    return tuple(t for t in CROSS_CHECK_TOOLS if t in names)


def _thop_count(prep: ModelCase) -> ToolCount:
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


def _torchinfo_count(prep: ModelCase) -> ToolCount:
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


# fvcore's operator groups that count one "flop" per multiply-add (the rest, e.g. batch_norm,
# adaptive_avg_pool2d, upsample, count per element)
FVCORE_MAC_OPS = ("conv", "linear", "matmul", "addmm", "bmm", "mm", "einsum")


def _fvcore_count(prep: ModelCase) -> ToolCount:
    """fvcore.nn.FlopCountAnalysis: a JIT trace on a real CPU copy (it cannot trace meta)."""
    try:
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fvcore.nn import FlopCountAnalysis, parameter_count
    except ImportError:
        return ToolCount("fvcore", None, None, "not installed (pip install fvcore)")
    try:
        real = prep.real_model("cpu")
        model = (copy.deepcopy(real) if real is prep.model else real).eval()
        args, kwargs = materialize(prep.example, "cpu")
        if kwargs:
            return ToolCount("fvcore", None, None, "keyword inputs are not supported by fvcore")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            analysis = FlopCountAnalysis(model, args)
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            total, by_op = int(analysis.total()), dict(analysis.by_operator())
        params = int(parameter_count(model)[""])
    except Exception as exc:
        return ToolCount("fvcore", None, None, f"failed: {type(exc).__name__}: {str(exc)[:80]}")
    mac_part = sum(v for k, v in by_op.items() if k in FVCORE_MAC_OPS)
    rest = {k: v for k, v in by_op.items() if k not in FVCORE_MAC_OPS and v}
    note = (f"JIT trace on CPU; its 'flops' are MACs (1 per multiply-add): conv/linear/matmul "
            f"{mac_part:,}")
    if rest:
        note += f", plus {sum(rest.values()):,} per element for {', '.join(sorted(rest))}"
    return ToolCount("fvcore", total, params, note)


_COUNTERS = {"thop": _thop_count, "torchinfo": _torchinfo_count, "fvcore": _fvcore_count}


@renamed_keywords(model_or_spec="model")
def count_flops(model: ModelLike, inputs: Any = None, *, depth: int = 3,
                cross_check: Any = None, device: str | None = None, train: bool = False,
                options: ModelOptions | None = None, compare: bool | None = None) -> FlopsResult:
    """Count MACs: ``count_flops("resnet18", "3,224,224").macs`` (FLOPs = 2 x MACs).

    ``cross_check``: other counters to run on the same model and input, ``"thop,fvcore"``,
    ``"all"`` or a list (their numbers in ``result.compare``). ``compare=True`` is the
    deprecated spelling of ``cross_check="thop,torchinfo"``.
    """
    if compare is not None:
        warnings.warn("count_flops(compare=...) is deprecated: use cross_check="
                      "'thop,torchinfo' (or 'all' for fvcore too)", DeprecationWarning,
                      stacklevel=3)  # the caller, past renamed_keywords' wrapper
        if compare and cross_check is None:
            cross_check = "thop,torchinfo"
    tools = parse_cross_check(cross_check)
    check_depth(depth)
    case = make_case(model, inputs, options=options, device=device)
    trace = trace_case(case, train=train)
    result = flops_from_trace(trace, model=case.name, inputs=case.describe_inputs(),
                              depth=depth, notes=[*case.notes, *left_out_notes(case.model)])
    result.compare = [_COUNTERS[t](case) for t in tools]
    return result
