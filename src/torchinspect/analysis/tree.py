"""Depth folding over a Trace: which calls are shown, and what each shown row carries.

A shown row's numbers cover the module itself plus everything folded into it (children
below ``--depth`` and modules never called), so each column adds up to the model total.

Containers that are never called themselves (``nn.ModuleList``, ``nn.ModuleDict``, or
any module whose children are called directly by an ancestor) get a row of their own at
their real depth in the module tree: a synthetic :class:`CallRecord` with ``index=-1``
(see :func:`is_called`), no shapes, the calls it encloses as ``children`` and their MACs
as ``total_macs``. Such a row appears once per enclosing call, where its first
descendant ran.
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
    params: int | None = None  # None: shown on the module's first call only
    macs: int = 0
    fold: int = 1  # identical consecutive siblings folded into this row
    fold_last: str | None = None  # name of the last folded sibling

    @property
    def called(self) -> bool:
        return is_called(self.call)


def is_called(call: CallRecord) -> bool:
    """False for the synthetic record of a container whose forward never ran."""
    return call.index != UNCALLED


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


def shown_tree(trace: Trace, depth: int) -> ShownCall | None:
    """The call tree (uncalled containers included) cut at ``depth``, with folded numbers."""
    if not trace.calls:
        return None

    displayed_modules: set[str] = set()

    def build(n: _Node) -> ShownCall:
        node = ShownCall(n.call)
        displayed_modules.add(n.call.name)
        hidden = 0
        for child in n.children:
            if child.call.depth <= depth:
                node.children.append(build(child))
            else:
                hidden += child.call.total_macs
        node.macs = n.call.own_macs + hidden
        return node

    root = build(_call_tree(trace))

    kids: dict[str, list[str]] = {}
    for name in trace.modules:
        if name:
            kids.setdefault(name.rpartition(".")[0], []).append(name)

    def hidden_params(name: str) -> int:
        """Params of a module not shown itself, less its descendants that are shown."""
        info = trace.modules[name]
        return info.params + sum(hidden_params(k) for k in kids.get(name, [])
                                 if k not in displayed_modules)

    def shown_params(name: str) -> int:
        info = trace.modules.get(name)
        if info is None:
            return 0
        return info.params + sum(hidden_params(k) for k in kids.get(name, [])
                                 if k not in displayed_modules)

    seen: set[str] = set()

    def attach(node: ShownCall) -> None:
        if node.call.name not in seen:
            seen.add(node.call.name)
            node.params = shown_params(node.call.name)
        for ch in node.children:
            attach(ch)

    attach(root)
    return root


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
        if out and sig == last_sig and out[-1].params is not None and ch.params is not None:
            head = out[-1]
            head.fold += 1
            head.fold_last = ch.call.name
            head.params = (head.params or 0) + (ch.params or 0)
            head.macs += ch.macs
            continue
        out.append(ch)
        last_sig = sig
    node.children = out
