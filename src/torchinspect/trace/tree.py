"""Depth folding over a Trace: which calls are shown, and what each shown row carries.

One convention for every command and format: a row's numbers are **inclusive** (the module
and everything inside it, shown or folded below ``--depth``), and its **self** numbers are
what the module does or holds directly (ops run in its own forward, parameters registered on
it). The root row is the model total.

Containers that are never called themselves (``nn.ModuleList``, ``nn.ModuleDict``, or
any module whose children are called directly by an ancestor) get a row of their own at
their real depth in the module tree: a synthetic :class:`CallRecord` with ``index=-1``
(see :func:`is_called`), no shapes, the calls it encloses as ``children`` and their MACs
as ``total_macs``. Such a row appears once per enclosing call, where its first
descendant ran.

A module that runs more than once (a block reused in a loop) has a row per call; its
parameters are counted on the first and the later rows are marked recursive (as torchinfo
does). Modules holding parameters or buffers that never ran in the forward get a row of
their own (``ran=False``) under their parent, so the totals name every parameter they hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect.trace.records import CallRecord, Trace

UNCALLED = -1  # CallRecord.index of a container row that was never called


@dataclass
class ShownCall:
    call: CallRecord
    children: list[ShownCall] = field(default_factory=list)
    params: int | None = None  # inclusive; None: a later call of a module (recursive)
    self_params: int | None = None
    macs: int = 0  # inclusive: this call and every call inside it
    self_macs: int = 0  # ops run directly in this call's own forward
    fold: int = 1  # identical consecutive siblings folded into this row
    fold_last: str | None = None  # name of the last folded sibling
    ran: bool = True  # False: a module with parameters/buffers that never ran
    runs_as: str | None = None  # never called, but its weights ran in this (tied) module

    @property
    def called(self) -> bool:
        return is_called(self.call)

    @property
    def recursive(self) -> bool:
        """A second or later row of the same module (its parameters are on the first)."""
        return self.params is None


def is_called(call: CallRecord) -> bool:
    """False for the synthetic record of a container whose forward never ran."""
    return call.index != UNCALLED


def call_of(trace: Trace, call: CallRecord) -> str:
    """`` (call 2/3)`` for one call of a module the forward ran several times (a shared
    activation, a block reused in a loop), else nothing: summary's rows and graph's nodes
    say it alike."""
    info = trace.modules.get(call.name)
    if not is_called(call) or info is None or info.calls <= 1:
        return ""
    return f" (call {call.call_number + 1}/{info.calls})"


@dataclass
class _Node:
    call: CallRecord
    children: list[_Node] = field(default_factory=list)


def _ancestors(name: str) -> list[str]:
    """Proper ancestors of a qualified name, outermost first, the root ("") excluded."""
    parts = name.split(".") if name else []
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _encloses(outer: str, name: str) -> bool:
    return outer == "" or name == outer or name.startswith(outer + ".")


def _call_tree(trace: Trace) -> _Node:
    """The call tree with a node for every uncalled container between a call and its parent."""
    calls, modules = trace.calls, trace.modules

    def uncalled_between(parent: CallRecord, child: CallRecord) -> list[str]:
        return [a for a in _ancestors(child.name)
                if not _encloses(a, parent.name) and a in modules and modules[a].calls == 0]

    def build(c: CallRecord) -> _Node:
        node = _Node(c)
        groups: dict[str, _Node] = {}  # uncalled container -> its node under this call
        for i in c.children:
            child = calls[i]
            holder = node
            for name in uncalled_between(c, child):
                group = groups.get(name)
                if group is None:
                    info = modules[name]
                    group = groups[name] = _Node(CallRecord(
                        index=UNCALLED, name=name, type=info.type, depth=info.depth,
                        parent=c.index, call_number=0))
                    holder.children.append(group)
                group.call.children.append(child.index)  # the calls it encloses, any level
                group.call.total_macs += child.total_macs
                holder = group
            holder.children.append(build(child))
        return node

    return build(calls[0])


def _ran(trace: Trace) -> set[str]:
    """Modules that ran, and the modules enclosing them."""
    ran: set[str] = set()
    for c in trace.calls:
        ran.add(c.name)
        ran.update(_ancestors(c.name))
    return ran


def _outermost_unran(trace: Trace, ran: set[str]) -> list[str]:
    """Outermost modules holding parameters or buffers whose forward never ran (nor that of
    anything inside them); modules inside a TorchScript module that ran are not among them
    (they take no hooks: their work is on the scripted module's call)."""
    out = []
    for name, info in trace.modules.items():
        if not name or name in ran or info.total_params + info.total_buffers == 0:
            continue
        ancestors = _ancestors(name)
        if any(trace.modules[a].scripted and a in ran for a in ["", *ancestors]
               if a in trace.modules):
            continue  # inside a TorchScript module that ran (the root too)
        if not any(a not in ran for a in ancestors):  # outermost: its parent ran
            out.append(name)
    return out


def tied_runs(trace: Trace) -> dict[str, str]:
    """Modules that never ran themselves but whose weights were used while another module
    ran: outermost such module -> that module. The weights are read by an op of a module
    that ran (``Trace.param_reads``): its parent's functional call
    (``F.multi_head_attention_forward`` reads ``nn.MultiheadAttention.out_proj``,
    ``F.linear(x, self.proj.weight)``) or a module tied to it (T5's ``shared`` embedding:
    ``encoder.embed_tokens`` uses its weight). Their MACs are on that module's row."""
    called = {c.name for c in trace.calls}
    ran = _ran(trace)
    runs: dict[str, str] = {}
    for alias, owner in trace.params.tied:  # traces made without param_reads
        user, holder = alias.rpartition(".")[0], owner.rpartition(".")[0]
        if user in called:
            runs.setdefault(holder, user)
    reads = sorted(trace.param_reads.items(), key=lambda kv: kv[1])
    out: dict[str, str] = {}
    for name in _outermost_unran(trace, ran):
        reader = next((trace.calls[i].name for tensor, i in reads
                       if _encloses(name, tensor.rpartition(".")[0]) and i < len(trace.calls)),
                      None)
        if reader is None:
            reader = next((user for holder, user in runs.items() if _encloses(name, holder)), None)
        if reader is not None:
            out[name] = reader
    return out


def used_by_parent(name: str, runs_as: str | None) -> bool:
    """The module's weights are used by an enclosing module's own forward (not a tie)."""
    return runs_as is not None and runs_as != name and _encloses(runs_as, name)


def never_ran(trace: Trace) -> list[str]:
    """Outermost modules holding parameters or buffers whose forward never ran (nor that of
    anything inside them), and whose weights no op read: their parameters are in the totals
    but no call used them."""
    tied = tied_runs(trace)
    return [n for n in _outermost_unran(trace, _ran(trace)) if n not in tied]


def never_ran_notes(trace: Trace) -> list[str]:
    """One note naming every module whose parameters are in the totals but never ran; one
    naming the TorchScript modules whose insides ran unseen."""
    notes: list[str] = []
    scripted = [c.name for c in trace.calls
                if (info := trace.modules.get(c.name)) is not None and info.scripted
                and any(_encloses(c.name, m) and m != c.name for m in trace.modules)]
    if scripted:
        shown = ", ".join(dict.fromkeys(n or "(model)" for n in scripted))
        notes.append(f"TorchScript module(s) {shown}: the modules inside take no hooks, so they "
                     "have no rows; their parameters and MACs are on the scripted module's row")
    names = never_ran(trace)
    if not names:
        return notes
    parts = [f"{n} ({trace.modules[n].type}, {trace.modules[n].total_params:,} params)"
             for n in names]
    held = sum(trace.modules[n].total_params for n in names)
    return [*notes, f"{len(names)} module(s) holding {held:,} parameters never ran in this "
            f"forward: {', '.join(parts)}; counted in the totals, no MACs"]


def shown_tree(trace: Trace, depth: int, *, not_run: bool = False) -> ShownCall | None:
    """The call tree (uncalled containers included) cut at ``depth``, with inclusive and self
    numbers; ``not_run`` adds a row for each module that never ran (tables of parameters;
    a graph of the computation leaves them out)."""
    if not trace.calls:
        return None

    def build(n: _Node, level: int) -> ShownCall:
        node = ShownCall(n.call, macs=n.call.total_macs,
                         self_macs=n.call.own_macs if is_called(n.call) else 0)
        # a module shared by several parents (one ReLU held by every block) is as deep as
        # the call it runs in, not as its first name
        node.children = [build(child, d) for child in n.children
                         if (d := max(child.call.depth, level + 1)) <= depth]
        return node

    root = build(_call_tree(trace), 0)
    if not_run:
        _add_never_ran(trace, root, depth)
    seen: set[str] = set()

    def attach(node: ShownCall) -> None:
        info = trace.modules.get(node.call.name)
        if node.call.name not in seen:
            seen.add(node.call.name)
            node.params = info.total_params if info else 0
            node.self_params = info.params if info else 0
        for ch in node.children:
            attach(ch)

    attach(root)
    return root


def _add_never_ran(trace: Trace, root: ShownCall, depth: int) -> None:
    """A row for each never-run module within ``depth`` (and each module whose weights ran
    only through a tie, marked ``runs_as``), under its parent's first row."""
    first: dict[str, ShownCall] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        first.setdefault(node.call.name, node)
        stack.extend(reversed(node.children))
    tied = tied_runs(trace)
    for name in [*never_ran(trace), *tied]:
        info = trace.modules[name]
        if info.depth > depth:
            continue  # folded into its shown ancestor's inclusive numbers
        parent = first.get(name.rpartition(".")[0], root)
        parent.children.append(ShownCall(
            CallRecord(index=UNCALLED, name=name, type=info.type, depth=info.depth,
                       parent=parent.call.index, call_number=0),
            ran=name in tied, runs_as=tied.get(name)))


def macs_by_op(trace: Trace, call: CallRecord) -> dict[str, int]:
    """MACs by op of one call (or uncalled container) and everything nested inside it."""
    if is_called(call):
        return trace.macs_by_op_of(call.index)
    out: dict[str, int] = {}
    for i in call.children:
        for op, n in trace.macs_by_op_of(i).items():
            out[op] = out.get(op, 0) + n
    return out


def signature(trace: Trace, call: CallRecord) -> Any:
    info = trace.modules.get(call.name)
    return (call.type, info.total_params if info else 0, call.total_macs, repr(call.inputs),
            repr(call.outputs), tuple(signature(trace, trace.calls[i]) for i in call.children))


def fold_repeats(trace: Trace, node: ShownCall) -> None:
    """Collapse runs of identical consecutive siblings (same type, params, MACs, shapes)."""
    for ch in node.children:
        fold_repeats(trace, ch)
    out: list[ShownCall] = []
    last_sig: Any = None
    for ch in node.children:
        sig = signature(trace, ch.call)
        if (out and sig == last_sig and out[-1].params is not None and ch.params is not None
                and out[-1].ran and ch.ran):
            head = out[-1]
            head.fold += 1
            head.fold_last = ch.call.name
            head.params = (head.params or 0) + (ch.params or 0)
            head.self_params = (head.self_params or 0) + (ch.self_params or 0)
            head.macs += ch.macs
            head.self_macs += ch.self_macs
            continue
        out.append(ch)
        last_sig = sig
    node.children = out
