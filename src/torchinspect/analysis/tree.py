"""Depth folding over a Trace: which calls are shown, and what each shown row carries.

A shown row's numbers cover the module itself plus everything folded into it (children
below ``--depth`` and modules never called), so each column adds up to the model total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchinspect.trace.records import CallRecord, Trace


@dataclass
class ShownCall:
    call: CallRecord
    children: list[ShownCall] = field(default_factory=list)
    params: int | None = None  # None: shown on the module's first call only
    macs: int = 0
    fold: int = 1  # identical consecutive siblings folded into this row
    fold_last: str | None = None  # name of the last folded sibling


def shown_tree(trace: Trace, depth: int) -> ShownCall | None:
    """The call tree cut at ``depth`` with folded numbers attached."""
    if not trace.calls:
        return None
    calls = trace.calls

    def visible(c: CallRecord) -> bool:
        return c.depth <= depth

    displayed_modules: set[str] = set()

    def build(c: CallRecord) -> ShownCall:
        node = ShownCall(c)
        displayed_modules.add(c.name)
        hidden = 0
        for i in c.children:
            child = calls[i]
            if visible(child):
                node.children.append(build(child))
            else:
                hidden += child.total_macs
        node.macs = c.own_macs + hidden
        return node

    root = build(calls[0])

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
