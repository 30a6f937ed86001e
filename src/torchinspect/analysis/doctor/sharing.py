"""TI023: one module with running statistics used at several places of its parent.

A BatchNorm that one parent calls twice (written twice in an ``nn.Sequential``, appended
twice in a loop, called twice in ``forward``) normalizes two different layers' outputs with
one set of running statistics. Reading the module tree and the meta trace is enough: the
trace says how often each call of a parent calls it. A whole block applied to two inputs (a
Siamese encoder) calls its BatchNorm once per call of the block: not flagged.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torchinspect.analysis.doctor.context import Context, Skip
from torchinspect.analysis.doctor.rules import Finding, Severity, doctor_check
from torchinspect.analysis.doctor.source import appended_line, attribute_line, call_lines

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def stateful(module: nn.Module) -> bool:
    """A module whose training-mode forward updates state it keeps: running statistics."""
    return isinstance(module, nn.modules.batchnorm._NormBase) and bool(module.track_running_stats)


def _names(model: nn.Module) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        if stateful(m):
            out.setdefault(id(m), []).append(name)
    return out


def _calls_per_parent_call(trace: Any) -> dict[str, int]:
    """module name -> the most calls of it within one call of its caller."""
    counts: dict[tuple[str, int | None], int] = {}
    for c in trace.calls:
        key = (c.name, c.parent)
        counts[key] = counts.get(key, 0) + 1
    out: dict[str, int] = {}
    for (name, _), n in counts.items():
        out[name] = max(out.get(name, 0), n)
    return out


@doctor_check(
    "TI023", "shared-batchnorm", "warning", "trace",
    title="one BatchNorm (running statistics) used at several places",
    trigger="one module instance with running statistics (BatchNorm*, InstanceNorm with "
    "track_running_stats) written twice in an nn.Sequential, appended twice to the list a "
    "container is built from, or called twice by the same forward",
    why="its running mean and variance average two different layers' outputs: training "
    "normalizes each call with its own batch statistics, evaluation with the mixed ones, so "
    "the model scores worse in eval mode than in training",
    fix="one BatchNorm per place: build a new one each time (nn.BatchNorm2d(c) inside the "
    "loop, bn1 and bn2 in __init__)")
def shared_batchnorm(ctx: Context) -> list[Finding]:
    model = ctx.model
    names = _names(model)
    if not names:
        return []
    try:
        per_call = _calls_per_parent_call(ctx.trace())
    except Skip:
        per_call = None
    modules = dict(model.named_modules(remove_duplicate=False))
    out = []
    for held in names.values():
        first = held[0]
        uses = per_call.get(first, 0) if per_call is not None else len(held)
        if uses < 2:
            continue
        module = modules[first]
        where, at = _where(ctx, modules, held)
        out.append(Finding(
            "TI023", Severity.warning, first,
            f"one {type(module).__name__} {where}: its running statistics mix the inputs of "
            f"{uses} places",
            location=at, data={"names": held, "uses": uses, "type": type(module).__name__}))
    return out


def _where(ctx: Context, modules: dict[str, nn.Module],
           held: list[str]) -> tuple[str, str | None]:
    """What the finding says about the places, and the line where the second one is made."""
    if len(held) > 1:  # registered twice: the second registration is the mistake
        parent_name, _, key = held[1].rpartition(".")
        parent = modules.get(parent_name)
        shown = ", ".join(held[:4]) + (" ..." if len(held) > 4 else "")
        text = f"is registered as {shown}"
        if isinstance(parent, _CONTAINERS):
            site = ctx.sites.get(parent_name)
            return text, (appended_line(site, type(modules[held[0]]).__name__) or site) \
                if site else None
        return text, attribute_line(type(parent), key) if parent is not None else None
    parent_name, _, key = held[0].rpartition(".")
    parent = modules.get(parent_name)
    lines = call_lines(type(parent), key) if parent is not None else []
    return (f"({held[0]}) is called more than once in one forward of "
            f"{parent_name or 'the model'}", lines[1] if len(lines) > 1 else
            (lines[0] if lines else None))
