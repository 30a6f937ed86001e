"""Checks over what the forward does to its values (the real runs' watch, ``.watch``):
TI022 (a second log_softmax), TI024 (a graph tensor copied out of autograd), TI025 (softmax
over a dimension of size 1), TI026 (a graph tensor kept on a module), TI027 (a view that
reorders the values instead of the axes). Each finding carries the statement's line."""

from __future__ import annotations

from typing import Any

from torchinspect.analysis.doctor.context import Context, Skip
from torchinspect.analysis.doctor.rules import Finding, Severity, doctor_check
from torchinspect.analysis.doctor.source import attribute_line
from torchinspect.analysis.doctor.structure import show_names


def _shape(dims: list[int]) -> str:
    return "(" + ", ".join(map(str, dims)) + ")"


# ------------------------------------------------------------------ TI022


@doctor_check(
    "TI022", "double-log-softmax", "info", "run",
    title="log_softmax output fed to cross_entropy, which applies its own",
    trigger="the output of F.log_softmax / nn.LogSoftmax goes into F.cross_entropy or "
    "nn.CrossEntropyLoss in forward",
    why="log_softmax of log-probabilities changes nothing (they already log-sum-exp to 0): "
    "the loss and its gradients are the same as from the logits (to rounding), so it is a "
    "wasted op per step, and a sign that the model's output and the loss disagree on what "
    "they exchange",
    fix="pass the logits to cross_entropy, or keep log_softmax and use F.nll_loss / "
    "nn.NLLLoss")
def double_log_softmax(ctx: Context) -> list[Finding]:
    run = ctx.run("TI022")
    out = []
    for e in run.events_of("double-log-softmax"):
        made = e.data.get("log_softmax_at")
        out.append(Finding(
            "TI022", Severity.info, e.module,
            f"{e.op} gets the output of log_softmax"
            + (f" (at {made})" if made and made != e.location else "")
            + " and applies log_softmax again: the same loss and gradients, one op more",
            location=e.location, data={"op": e.op, "log_softmax_at": made}))
    return out


# ------------------------------------------------------------------ TI024


@doctor_check(
    "TI024", "graph-copied-out", "warning", "run",
    title="a tensor of the autograd graph copied out in forward",
    trigger="torch.tensor(t) of a tensor that requires grad, or its values sent through "
    "t.detach().numpy() / .tolist() and made a tensor again, in forward, so that layers before "
    "it get no gradient (torch.as_tensor(t) and torch.Tensor(t) keep the graph: not flagged)",
    why="the copy has no autograd history: every layer before it gets no gradient and is "
    "never trained, silently (torch.tensor only warns, and the forward gives the same values)",
    fix="use the tensor itself (t); t.detach().clone() when the cut is meant; do the host "
    "computation with torch ops (torch.clamp, torch.where) instead of numpy")
def graph_copied_out(ctx: Context) -> list[Finding]:
    run = ctx.run("TI024")
    if run.grad is None:
        raise Skip(run.skipped.get("TI003", "the forward with gradients failed (see TI011)"))
    sizes = dict(run.grad.params)
    by_line: dict[str, tuple[Any, list[str]]] = {}
    for cut, names in run.grad.cuts:
        if cut.kind in ("copy", "host") and names:
            held = by_line.setdefault(cut.location, (cut, []))
            held[1].extend(n for n in names if n not in held[1])
    out = []
    for at, (cut, names) in by_line.items():
        count = sum(sizes[n].numel() for n in names if n in sizes)
        owners = list(dict.fromkeys(n.rpartition(".")[0] or "(model)" for n in names))
        lost = (f"{count:,} parameters before it ({show_names(owners)}) get no gradient")
        if cut.kind == "copy":
            what = f"{cut.op}(t) copies a tensor of the autograd graph: {lost}"
            fix = ("use the tensor itself; t.detach().clone() if the cut is meant "
                   f"(not {cut.op}(t), which also warns)")
        else:
            what = (f"{cut.op}() of a detached graph tensor"
                    + (f" (detached at {cut.detached_at})" if cut.detached_at
                       and cut.detached_at != at else "")
                    + f" round-trips its values through the host: {lost}")
            fix = "compute it with torch ops on the tensor (torch.clamp, torch.where, ...)"
        out.append(Finding("TI024", Severity.warning, cut.module, what, fix=fix, location=at,
                           data={"op": cut.op, "kind": cut.kind, "parameters": names,
                                 "count": count}))
    return out


# ------------------------------------------------------------------ TI025


@doctor_check(
    "TI025", "softmax-over-one", "warning", "run",
    title="softmax over a dimension of size 1",
    trigger="softmax / log_softmax (F., torch., nn.Softmax) in the model's code over a "
    "dimension that has size 1 at the example: a single output unit, or dim=0 (the batch) "
    "at batch 1",
    why="softmax normalizes along its dimension: along one of size 1 every value becomes 1 "
    "(log_softmax: 0) whatever the input, so the output carries nothing and no gradient "
    "flows back through it",
    fix="softmax over the classes (dim=-1 for (batch, classes)); for one output unit use "
    "torch.sigmoid (BCEWithLogitsLoss for training)")
def softmax_over_one(ctx: Context) -> list[Finding]:
    run = ctx.run("TI025")
    out = []
    for e in run.events_of("softmax-over-one"):
        module = e.data.get("softmax_module")
        if e.location is None and (module is None or ctx.site(module) is None):
            continue  # an nn.Softmax of a library's model: not the user's to fix
        dim, shape = e.data["dim"], e.data["shape"]
        out.append(Finding(
            "TI025", Severity.warning, module or e.module,
            f"{e.op} over dimension {dim} of a {_shape(shape)} tensor: that dimension has size "
            f"1, so the output is always {0 if 'log' in e.op else 1}",
            fix=("torch.sigmoid for one output unit" if dim == len(shape) - 1 else
                 f"softmax over the classes (dim=-1), not dim={dim}"),
            location=e.location, data={"op": e.op, "dim": dim, "shape": shape}))
    return out


# ------------------------------------------------------------------ TI026


@doctor_check(
    "TI026", "graph-kept-on-module", "warning", "run",
    title="forward keeps a tensor of the autograd graph on the module",
    trigger="after a training-mode forward, an attribute holds a tensor (or a tuple/list of "
    "them) that is part of the autograd graph: self.hidden = h, self.cache = x",
    why="the next call builds on this call's graph: its loss.backward() runs into the freed "
    "graph ('Trying to backward through the graph a second time'), or, with "
    "retain_graph=True, every step's graph stays in memory",
    fix="keep h.detach() (and reset the state between sequences), or return the state "
    "instead of keeping it")
def graph_kept(ctx: Context) -> list[Finding]:
    run = ctx.run("TI026")
    if not run.grad_forward:
        raise Skip("the forward with gradients failed (see TI011)")
    modules = dict(run.model.named_modules())
    out = []
    for k in run.kept_graph:
        module = modules.get(k.module)
        at = attribute_line(type(module), k.attribute, start="forward", graph=True) \
            if module is not None else None
        where = f"self.{k.attribute}" if not k.module else f"{k.module}.{k.attribute}"
        out.append(Finding(
            "TI026", Severity.warning, k.module,
            f"forward leaves {k.what} of the autograd graph in {where}: the next call's "
            "backward reaches into this call's graph",
            fix=f"self.{k.attribute} = {k.attribute}.detach() (or return it instead)",
            location=at, data={"attribute": k.attribute, "type": k.type}))
    return out


# ------------------------------------------------------------------ TI027


def _permutation(before: list[int], after: list[int]) -> list[int]:
    """The axes of ``before`` that give ``after`` (sizes matched left to right)."""
    free = list(range(len(before)))
    out = []
    for size in after:
        i = next(i for i in free if before[i] == size)
        free.remove(i)
        out.append(i)
    return out


@doctor_check(
    "TI027", "reshape-as-transpose", "warning", "run",
    title="view/reshape that reorders sizes (meant as a transpose)",
    trigger="x.view(...) / x.reshape(...) in the model's code whose new shape is the old "
    "one's sizes reordered: (B, T, C) -> (B, C, T), an HWC image -> (N, C, H, W)",
    why="view and reshape keep the values in memory order and cut them into the new "
    "shape: the axes are not swapped, the values are scrambled (time steps mixed with "
    "channels); the model runs and trains on it without an error",
    fix="x.permute(...) or x.transpose(i, j) (then .contiguous() if a view needs it)")
def reshape_as_transpose(ctx: Context) -> list[Finding]:
    run = ctx.run("TI027")
    out = []
    for e in run.events_of("reshape-as-transpose"):
        before, after = e.data["before"], e.data["after"]
        perm = _permutation(before, after)
        out.append(Finding(
            "TI027", Severity.warning, e.module,
            f"{e.op} turns a {_shape(before)} tensor into {_shape(after)}: the same sizes in "
            "another order, which reorders the values, not the axes",
            fix=f"x.permute({', '.join(map(str, perm))}) to swap the axes",
            location=e.location, data={"op": e.op, "before": before, "after": after,
                                       "permute": perm}))
    return out
