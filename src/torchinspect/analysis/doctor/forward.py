"""Checks that read the real runs (``.runtime.RunData``): what the forward and the backward
did, and the real weights. Statement-level findings carry the line of the statement."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from torchinspect.analysis.doctor.context import Context, Skip
from torchinspect.analysis.doctor.rules import Finding, Severity, doctor_check
from torchinspect.analysis.doctor.runtime import (
    GradRun,
    Probe,
    RunData,
    all_finite,
    finite_fingerprint,
    same_fingerprint,
)
from torchinspect.analysis.doctor.structure import show_names


def _label(name: str, type_name: str) -> str:
    return f"{name} ({type_name})" if name else f"{type_name}.forward"


def _eval_runs(ctx: Context, code: str) -> RunData:
    run = ctx.run(code)
    if not run.eval_runs:
        raise Skip("the eval-mode forward failed (see TI011)")
    return run


# ------------------------------------------------------------------ TI003 no gradient


@doctor_check(
    "TI003", "no-gradient", "warning", "run", title="parameters that get no gradient",
    trigger="a trainable parameter gets no gradient from a backward of the example's outputs "
    "(a submodule that forward never calls, a branch whose output is dropped)",
    why="they are never trained (weight decay still shrinks them), cost memory, and DDP "
    "needs find_unused_parameters=True",
    fix="call the module in forward, delete it, or freeze it with requires_grad_(False)")
def no_gradient(ctx: Context) -> list[Finding]:
    run = ctx.run("TI003")
    if run.grad is None:
        raise Skip(run.skipped.get("TI003", "the backward failed (see TI010/TI011)"))
    # a parameter cut off by torch.tensor(t), a .numpy() round trip or .data is TI024's or
    # TI018's finding, which names the statement; TI003 is for the rest
    explained = run.grad.explained()
    unused = [n for (n, _), g in zip(run.grad.params, run.grad.grads, strict=True)
              if g is None and n not in explained]
    return _no_gradient(unused, dict(run.grad.params), run.model, run.grad)


def _detached_at(grad: GradRun, names: list[str]) -> str | None:
    """The ``.detach()`` in the model's code above these parameters, if one is."""
    wanted = set(names)
    return next((cut.location for cut, cut_names in grad.cuts
                 if cut.kind == "detach" and wanted & set(cut_names)), None)


def _no_gradient(unused: list[str], sizes: dict[str, Any], model: nn.Module,
                 grad: GradRun | None = None) -> list[Finding]:
    """``sizes``: the trainable parameters the gradient was asked for, by name (those the
    forward saw: a parameter a forward registers is gone from the model afterwards);
    ``grad.ran``: the modules the forward called (a module that ran but gets no gradient
    lost its output, one that never ran was never called)."""
    if not unused:
        return []
    unused_set = set(unused)
    trainable = list(sizes)
    tops: list[str] = []
    for name, _module in model.named_modules():
        if name == "" or any(name.startswith(t + ".") for t in tops):
            continue
        own = [p for p in trainable if p.startswith(name + ".")]
        if own and all(p in unused_set for p in own):
            tops.append(name)
    covered = {p for p in unused for t in tops if p.startswith(t + ".")}
    out = []
    modules = dict(model.named_modules())
    for top in tops:
        names = [p for p in unused if p.startswith(top + ".")]
        count = sum(sizes[p].numel() for p in names)
        kind = type(modules[top]).__name__
        detached = _detached_at(grad, names) if grad is not None else None
        ran = grad is None or any(_encloses(top, c) for c in grad.ran)
        if detached:
            what = (f"{kind} gets no gradient: the graph is cut by a .detach() at {detached} "
                    f"({count:,} parameters in {len(names)} tensor(s))")
        elif ran:
            what = (f"{kind} runs but gets no gradient: its output never reaches the model's "
                    f"output ({count:,} parameters in {len(names)} tensor(s))")
        else:
            what = (f"{kind} is never called in forward: {count:,} parameters in "
                    f"{len(names)} tensor(s) get no gradient")
        out.append(Finding("TI003", Severity.warning, top, what, location=detached,
                           data={"parameters": names, "count": count, "ran": ran,
                                 "detached_at": detached}))
    rest = [p for p in unused if p not in covered]
    by_owner: dict[str, list[str]] = {}
    for p in rest:
        by_owner.setdefault(p.rpartition(".")[0], []).append(p)
    for owner, names in by_owner.items():
        count = sum(sizes[p].numel() for p in names)
        owner_text = owner or "the model"
        detached = _detached_at(grad, names) if grad is not None else None
        out.append(Finding("TI003", Severity.warning, owner,
                           f"{show_names([n.rpartition('.')[2] for n in names])} of "
                           f"{owner_text} get no gradient ({count:,} parameters)"
                           + (f": the graph is cut by a .detach() at {detached}" if detached else ""),
                           location=detached,
                           data={"parameters": names, "count": count, "detached_at": detached}))
    return out


def _encloses(outer: str, name: str) -> bool:
    return outer == "" or name == outer or name.startswith(outer + ".")


# ------------------------------------------------------------------ TI004 random in eval


@doctor_check(
    "TI004", "eval-stochastic", "error", "run", title="the model is random in eval mode",
    trigger="two eval-mode forwards of the same input differ, e.g. F.dropout(x, p) without "
    "training=self.training (its default is training=True)",
    why="two eval-mode forwards of the same input differ: predictions and metrics are noisy "
    "and not reproducible",
    fix="use nn.Dropout modules, or pass training=self.training to F.dropout and friends")
def eval_stochastic(ctx: Context) -> list[Finding]:
    run = _eval_runs(ctx, "TI004")
    if len(run.eval_runs) < 2:
        return []
    (p1, o1), (p2, o2) = run.eval_runs
    if same_fingerprint(o1, o2) and _same_calls(p1, p2):
        return []
    calls = run.events_of("dropout-in-eval")
    if not calls and run.events_of("new-parameter"):
        return []  # a new random parameter every call: TI012 names the statement
    finding = _stochastic_finding(p1, p2)
    if calls:  # the statement that draws: F.dropout(..., training=True) in eval mode
        first = calls[0]
        finding.location = first.location
        finding.module = first.module if not finding.module else finding.module
        where = _label(finding.module, finding.data.get("module_type") or "")
        finding.what = (f"{first.op} runs with training=True in eval mode (in {where}): two "
                        "eval-mode forwards of the same input differ")
        finding.fix = (f"{first.op}(..., training=self.training), or an nn.Dropout module "
                       "(model.eval() switches it off)")
        finding.data["statements"] = [e.location for e in calls]
    return [finding]


def _same_calls(p1: Probe, p2: Probe) -> bool:
    return len(p1.calls) == len(p2.calls) and all(
        a.name == b.name and same_fingerprint(a.outputs, b.outputs) for a, b in zip(p1.calls, p2.calls, strict=True))


def _stochastic_finding(p1: Probe, p2: Probe) -> Finding:
    if len(p1.calls) != len(p2.calls) or any(
            a.name != b.name for a, b in zip(p1.calls, p2.calls, strict=True)):
        return Finding("TI004", Severity.error, "",
                       "two eval-mode forwards of the same input call different modules "
                       "(random control flow)", data={"module_type": None})
    culprits = sorted((a for a, b in zip(p1.calls, p2.calls, strict=True)
                       if same_fingerprint(a.inputs, b.inputs) and not same_fingerprint(a.outputs, b.outputs)),
                      key=lambda c: c.done)
    where = culprits[0] if culprits else None
    name = where.name if where else ""
    text = (f"two eval-mode forwards of the same input differ; {_label(name, where.type)} "
            "is the first module whose output differs for identical inputs" if where else
            "two eval-mode forwards of the same input differ")
    return Finding("TI004", Severity.error, name, text,
                   data={"module_type": where.type if where else None})


# ------------------------------------------------------------------ TI005 NaN / Inf


@doctor_check(
    "TI005", "non-finite", "error", "run", title="NaN or Inf values",
    trigger="NaN/Inf in a parameter or buffer, in the eval-mode output, or in a gradient "
    "(named where it first appears)",
    why="one NaN spreads to every output and gradient it touches; training diverges",
    fix="guard the operation (add an eps inside sqrt/log, clamp before exp/division)")
def non_finite(ctx: Context) -> list[Finding]:
    run = ctx.run("TI005")
    out = _nonfinite_weights(run.model)
    if run.eval_runs:
        out += _nonfinite_output(run)
    if run.grad is not None:
        if run.grad.nonfinite:
            finding = _nan_gradient(run.grad.nonfinite, run.grad.probe)
            if run.grad.nan_at is not None:  # anomaly detection named the op and its line
                node, finding.location = run.grad.nan_at
                finding.what += f"; the backward of {re.sub(r'Backward[0-9]*$', '', node)} at " \
                                f"{finding.location} returns NaN"
                finding.data["backward_node"] = node
            out.append(finding)
    return out


def _nonfinite_weights(model: nn.Module) -> list[Finding]:
    bad: list[str] = []
    seen: set[int] = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) in seen or t.is_meta or not (t.is_floating_point() or t.is_complex()):
            continue
        seen.add(id(t))
        if not all_finite(t):
            bad.append(name)
    if not bad:
        return []
    return [Finding("TI005", Severity.error, bad[0].rpartition(".")[0],
                    f"{len(bad)} parameter/buffer tensor(s) hold NaN/Inf: {show_names(bad)}",
                    why="every forward through them gives NaN/Inf",
                    fix="reload the weights, or find the training step that diverged "
                    "(lower the learning rate, clip gradients)",
                    data={"tensors": bad})]


def _nonfinite_output(run: RunData) -> list[Finding]:
    probe, out_fp = run.eval_runs[0]
    if finite_fingerprint(out_fp):
        return []
    first = sorted((c for c in probe.calls if finite_fingerprint(c.inputs) and not finite_fingerprint(c.outputs)),
                   key=lambda c: c.done)
    where = first[0] if first else None
    if not run.inputs_finite:
        run.notes.append("TI005: the example inputs themselves hold NaN/Inf")
    return [Finding(
        "TI005", Severity.error, where.name if where else "",
        "the eval-mode output holds NaN/Inf" + (
            f"; it first appears in the output of {_label(where.name, where.type)} "
            "whose inputs are finite" if where else ""),
        data={"stage": "forward", "module_type": where.type if where else None})]


def _nan_gradient(bad: list[str], probe: Probe) -> Finding:
    # the innermost call whose output gradient is finite and whose input gradient is not
    culprits = [(probe.calls[i].depth, -order, i) for i, order in probe.in_grad_bad.items()
                if not probe.out_grad_bad.get(i, False)]
    where = probe.calls[max(culprits)[2]] if culprits else None
    text = f"{len(bad)} parameter tensor(s) get NaN/Inf gradients ({show_names(bad)})"
    if where is not None:
        text += (f"; they first appear in the backward of {_label(where.name, where.type)}: "
                 "finite gradient in, NaN/Inf out")
    return Finding("TI005", Severity.error, where.name if where else bad[0].rpartition(".")[0], text,
                   data={"stage": "backward", "parameters": bad,
                         "module_type": where.type if where else None})


# ------------------------------------------------------------------ TI010 in-place on saved


@doctor_check(
    "TI010", "inplace-on-saved", "error", "run",
    title="an in-place op on a tensor autograd saved for the backward",
    trigger="the backward fails with 'modified by an inplace operation': e.g. "
    "nn.ReLU(inplace=True) or x += 1 on the output of sigmoid/exp/tanh, which their "
    "backward needs",
    why="training crashes at loss.backward(); autograd needs the value the op saw, and the "
    "in-place op overwrote it",
    fix="use the out-of-place form (x = x + 1, nn.ReLU(), F.relu(x)) on that tensor")
def inplace_on_saved(ctx: Context) -> list[Finding]:
    run = ctx.run()
    fault = run.inplace
    if fault is None:
        return []
    made = f"the output of {fault.made_by}" if fault.made_by else "a tensor"
    saved = f" (computed at {fault.saved_at})" if fault.saved_at else ""
    if fault.modified is not None:
        what = (f"{made}{saved} is needed by its backward but {fault.modified.op} changes it "
                "in place" + (f" at {fault.modified.location}" if fault.modified.location else ""))
        fix = f"make {fault.modified.op} out of place (inplace=False, or x = x + y)"
    else:
        what = f"{made}{saved} is needed by its backward but is changed in place afterwards"
        fix = ""
    return [Finding("TI010", Severity.error, "", what + f" ({fault.text})", fix=fix,
                    location=(fault.modified.location if fault.modified else None) or fault.saved_at,
                    data={"made_by": fault.made_by, "saved_at": fault.saved_at,
                          "inplace_op": fault.modified.op if fault.modified else None,
                          "inplace_at": fault.modified.location if fault.modified else None})]


# ------------------------------------------------------------------ TI011 the model's error


@doctor_check(
    "TI011", "model-error", "error", "run", title="the model's forward or backward raises",
    trigger="the model's own code raises while a check runs it on the example input",
    why="the model cannot run as written on this input; the other checks still report what "
    "they found",
    fix="fix the statement named (or pass the input the model expects with --input)")
def model_error(ctx: Context) -> list[Finding]:
    try:
        errors = ctx.run().errors
    except Skip:
        errors = []
        if ctx.trace_error is None:
            raise
    out = []
    seen: set[Any] = set()
    for e in errors:
        if (e.location, e.text) in seen:
            continue
        seen.add((e.location, e.text))
        at = f" at `{e.statement}`" if e.statement else ""
        out.append(Finding("TI011", Severity.error, "", f"the {e.stage} raises {e.text}{at}",
                           location=e.location, data={"stage": e.stage, "error": e.text}))
    if not out and ctx.trace_error is not None:
        exc = ctx.trace_error.__context__
        from torchinspect.analysis.doctor.runtime import model_error as as_error

        e = as_error("forward on meta", exc) if exc is not None else None
        out.append(Finding("TI011", Severity.error, "", ctx.trace_error.message,
                           location=e.location if e else None, data={"stage": "forward on meta"}))
    return out


# ------------------------------------------------------------------ statement checks


def _statements(ctx: Context, code: str, kind: str, severity: Severity, text: Any,
                fix: Any = None) -> list[Finding]:
    run = ctx.run(code)
    return [Finding(code, severity, e.module, text(e), fix=fix(e) if fix else "",
                    location=e.location, data={"op": e.op, **e.data})
            for e in run.events_of(kind)]


@doctor_check(
    "TI012", "parameter-in-forward", "error", "run",
    title="a parameter or module created inside forward",
    trigger="nn.Parameter(...) or nn.Linear(...) (any module with parameters) built while "
    "forward runs",
    why="a new, randomly initialised parameter every call: the optimizer never sees it, it "
    "is never trained or saved, and the output changes from call to call",
    fix="create it once in __init__ (self.w = nn.Parameter(...), self.fc = nn.Linear(...)) "
    "and use it in forward")
def parameter_in_forward(ctx: Context) -> list[Finding]:
    return _statements(
        ctx, "TI012", "new-parameter", Severity.error,
        lambda e: ("a new " + ("nn.Parameter" if e.data.get("module_type") == "Parameter" else
                               f"{e.data.get('module_type')} ({e.op.rpartition('.')[2]})")
                   + f" of {'x'.join(map(str, e.data.get('shape', []))) or 'one value'} is "
                   "created on every forward call"),
        lambda e: "build it in __init__ and keep it on self"
        + (f" (self.{e.op.rpartition('.')[0].lower()} = nn.{e.data['module_type']}(...))"
           if e.data.get("module_type", "Parameter") != "Parameter" else ""))


@doctor_check(
    "TI013", "log-of-probabilities", "warning", "run",
    title="log of softmax/sigmoid, or probabilities into a logits loss",
    trigger="torch.log(F.softmax(x)) or torch.log(torch.sigmoid(x)); F.cross_entropy / "
    "nn.CrossEntropyLoss / F.nll_loss on a softmax output; "
    "F.binary_cross_entropy_with_logits on a sigmoid output",
    why="softmax/sigmoid underflow to 0 for large logits and log(0) = -inf (NaN gradients); "
    "a loss that applies softmax again squashes the gradients and trains slowly",
    fix="F.log_softmax / F.logsigmoid instead of log(softmax) / log(sigmoid); pass the "
    "logits themselves to cross_entropy and *_with_logits losses")
def log_of_probabilities(ctx: Context) -> list[Finding]:
    out = _statements(
        ctx, "TI013", "log-of-probs", Severity.warning,
        lambda e: f"{e.op} of a {e.data['probs']} output"
        + (f" (from {e.data['probs_at']})" if e.data.get("probs_at") not in (None, e.location)
           else ""),
        lambda e: ("F.log_softmax(x, dim)" if e.data["probs"] == "softmax" else "F.logsigmoid(x)")
        + f" instead of {e.op}({e.data['probs']}(x))")
    out += _statements(
        ctx, "TI013", "probs-into-loss", Severity.warning,
        lambda e: f"{e.op} gets a {e.data['probs']} output"
        + (f" (from {e.data['probs_at']})" if e.data.get("probs_at") not in (None, e.location)
           else "")
        + (" but expects log-probabilities" if e.op.endswith("nll_loss")
           else f" and applies {e.data['probs']} itself"),
        lambda e: ("pass F.log_softmax(x) to nll_loss" if e.op.endswith("nll_loss") else
                   f"pass the logits (drop the {e.data['probs']})"))
    return out


@doctor_check(
    "TI014", "host-tensor-in-forward", "warning", "run",
    title="a tensor created in forward without a device",
    trigger="torch.zeros/ones/full/arange/randn/tensor(...) called in forward without "
    "device= (results with at least one dimension)",
    why="it is made on the CPU whatever the model's device: on a GPU the forward fails "
    "('expected all tensors to be on the same device') or copies it every call",
    fix="pass device=x.device (and dtype=x.dtype), use torch.zeros_like(x), or make it "
    "once as a buffer")
def host_tensor(ctx: Context) -> list[Finding]:
    # the values of a parameter made in forward: TI012 names that statement, whose fix
    # (build it once in __init__) is this one's too
    made = {e.location for e in ctx.run("TI014").events_of("new-parameter")}
    return [f for f in _statements(
        ctx, "TI014", "host-tensor", Severity.warning,
        lambda e: f"{e.op}(...) makes a "
        f"{'x'.join(map(str, e.data.get('shape', [])))} tensor on the CPU in forward",
        lambda e: f"{e.op}(..., device=x.device), or a buffer made once in __init__")
        if f.location not in made]


@doctor_check(
    "TI015", "device-sync-in-forward", "warning", "run",
    title=".item(), .cpu(), .numpy() or bool() of a tensor in forward",
    trigger="the forward reads a tensor's value on the host: x.item(), x.cpu(), "
    "x.numpy(), x.tolist(), if x.sum() > 0:, float(x)",
    why="on a GPU every call waits for the device (a sync that stalls the pipeline), and "
    "data-dependent Python control flow breaks torch.compile / torch.export graphs",
    fix="keep the value a tensor (torch.where, masking, clamp) or move the host logic out "
    "of forward")
def device_sync(ctx: Context) -> list[Finding]:
    return _statements(
        ctx, "TI015", "sync", Severity.warning,
        lambda e: f"{e.op.replace('Tensor.__bool__', 'bool(tensor)').replace('Tensor.__float__', 'float(tensor)').replace('Tensor.__int__', 'int(tensor)')}"  # noqa: E501
        " reads a tensor's value on the host in forward")


@doctor_check(
    "TI016", "bias-before-batchnorm", "info", "run",
    title="a conv/linear with a bias feeding straight into BatchNorm",
    trigger="the output of a Conv/Linear with bias=True goes directly into a BatchNorm",
    why="BatchNorm subtracts the per-channel mean, which cancels the bias: wasted parameters "
    "and memory",
    fix="bias=False on the conv/linear (BatchNorm's own beta is the bias)")
def bias_before_batchnorm(ctx: Context) -> list[Finding]:
    run = ctx.run("TI016")
    modules = dict(run.model.named_modules())
    out = []
    for e in run.events_of("bias-into-norm"):
        layer = modules[e.data["source"]]
        out.append(Finding(
            "TI016", Severity.info, e.data["source"],
            f"{type(layer).__name__} has a bias ({layer.bias.numel():,} values) and feeds "
            f"{e.data['norm']} ({e.op}), which cancels it",
            fix=f"{type(layer).__name__}(..., bias=False)",
            data={"norm": e.data["norm"], "bias": layer.bias.numel()}))
    return out


@doctor_check(
    "TI018", "data-in-forward", "warning", "run", title=".data used in forward",
    trigger="the forward reads x.data (a parameter's or an activation's)",
    why="x.data cuts the tensor out of the autograd graph silently: no gradient flows "
    "through it and in-place changes go unchecked",
    fix="use x (to keep gradients) or x.detach() (to stop them, saying so)")
def data_in_forward(ctx: Context) -> list[Finding]:
    out = _statements(ctx, "TI018", "data", Severity.warning,
                      lambda e: ".data reads a tensor outside autograd in forward")
    grad = ctx.run().grad
    for f in out:  # what it cost, from the forward with gradients: the parameters above it
        names = sorted({n for cut, cut_names in (grad.cuts if grad else [])
                        if cut.kind == "data" and cut.location == f.location for n in cut_names})
        if names:
            f.what += (f"; {len(names)} parameter tensor(s) above it get no gradient "
                       f"({show_names(names)})")
            f.data["no_gradient"] = names
    return out


# ------------------------------------------------------------------ TI019 constant init


@doctor_check(
    "TI019", "constant-init", "warning", "run", title="a layer initialised to a constant",
    trigger="every weight of a Linear/conv with several output units holds the same nonzero "
    "value, or several such layers are all zeros",
    why="all its units compute the same thing and get the same gradient: they never learn "
    "to differ (one unit's worth of capacity)",
    fix="a random init (leave the layer's default, or nn.init.kaiming_uniform_ / "
    "xavier_uniform_); zero-init at most the last layer of a branch")
def constant_init(ctx: Context) -> list[Finding]:
    run = ctx.run("TI019")
    constant: list[tuple[str, nn.Module, int, float]] = []
    for name, module in run.model.named_modules():
        w = getattr(module, "weight", None)
        if not isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) or not isinstance(
                w, torch.Tensor) or w.is_meta or w.numel() < 2 or w.shape[0] < 2:
            continue
        flat = w.detach().reshape(-1)
        first = flat[0]
        if bool((flat[:64] == first).all()) and bool((flat == first).all()):  # cheap test first
            constant.append((name, module, int(w.shape[0]), float(first)))
    zeros = [c for c in constant if c[3] == 0.0]
    out = []
    for name, module, units, value in constant:
        if value == 0.0 and len(zeros) < 2:
            continue  # one zero-initialised layer (a residual branch's last, LoRA's B): deliberate
        out.append(Finding(
            "TI019", Severity.warning, name,
            f"every weight of {type(module).__name__} is {value:g}: its "
            f"{units} output units stay identical",
            location=ctx.inits.get(f"{name}.weight" if name else "weight"),
            data={"value": value, "units": units}))
    return out
