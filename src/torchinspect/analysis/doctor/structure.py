"""Checks that read the module tree only (no forward): TI001, TI002, TI006, TI007, TI008,
TI017, TI020, TI021.

They work on a model on meta as well as on a real one, and only read attributes (and, for
TI017, the source of the statement that built a container).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from torchinspect.analysis.doctor.context import Context, Skip
from torchinspect.analysis.doctor.rules import Finding, Severity, doctor_check
from torchinspect.analysis.doctor.sharing import stateful
from torchinspect.analysis.doctor.source import appended_line, statement_at
from torchinspect.device import fmt_size

# A layer above this share of all parameters (and above OVERSIZED_MIN parameters) is TI007.
OVERSIZED_SHARE = 0.25
OVERSIZED_MIN = 1_000_000
ALIGN = 8  # Tensor Core multiple for fp16/bf16
ALIGN_MIN = 64  # sizes below this are left alone (padding a small layer gains nothing)
VOCAB_ALIGN = 64  # a tied embedding's vocabulary: the LM head's N
SHOWN = 5  # names listed in one finding's text


def _internals() -> frozenset[str]:
    return frozenset(vars(nn.Module()))


def _walk(value: Any, depth: int = 0) -> Iterator[Any]:
    """Items of (nested) plain lists/tuples/dicts/sets, two levels deep."""
    if depth > 2:
        return
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, (list, tuple, dict, set)) and not isinstance(item, nn.Module):
            yield from _walk(item, depth + 1)
        else:
            yield item


def _where(name: str, attr: str) -> str:
    return f"{name}.{attr}" if name else attr


def show_names(names: list[str]) -> str:
    shown = ", ".join(n or "(model)" for n in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _unique_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return list(model.named_parameters())  # deduplicated by identity (tied weights once)


@doctor_check(
    "TI001", "unregistered-submodule", "error", "static",
    title="modules or parameters kept in a plain list/tuple/dict",
    trigger="self.layers = [nn.Linear(...), ...] (a list, tuple or dict of modules or "
    "parameters) in __init__",
    why="parameters(), state_dict(), .to() and the optimizer never see them: they are not "
    "trained, not saved and not moved to the GPU",
    fix="use nn.ModuleList / nn.ModuleDict (modules) or nn.ParameterList / nn.ParameterDict "
    "(parameters)")
def unregistered_check(ctx: Context) -> list[Finding]:
    return unregistered(ctx.model)


def unregistered(model: nn.Module) -> list[Finding]:
    """TI001: plain containers of modules/parameters that the model does not register
    (``inspect params`` uses it too)."""
    internals = _internals()
    mods = {id(m) for m in model.modules()}
    params = {id(p) for p in model.parameters()}
    out: list[Finding] = []
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr in internals or not isinstance(value, (list, tuple, dict, set)):
                continue
            items = list(_walk(value))
            lost_mods = [m for m in items if isinstance(m, nn.Module) and id(m) not in mods]
            lost_params = [p for p in items if isinstance(p, nn.Parameter) and id(p) not in params]
            if not lost_mods and not lost_params:
                continue
            seen: set[int] = set()
            count = 0
            for t in [*lost_params, *(p for m in lost_mods for p in m.parameters())]:
                if id(t) not in seen and id(t) not in params:
                    seen.add(id(t))
                    count += t.numel()
            kind = type(value).__name__
            if lost_mods:
                fix_type = "nn.ModuleDict" if isinstance(value, dict) else "nn.ModuleList"
                types = sorted({type(m).__name__ for m in lost_mods})
                what = (f"{len(lost_mods)} module(s) ({', '.join(types)}) with {count:,} "
                        f"parameters kept in a plain {kind}")
            else:
                fix_type = "nn.ParameterDict" if isinstance(value, dict) else "nn.ParameterList"
                what = f"{len(lost_params)} parameter(s) ({count:,} values) kept in a plain {kind}"
            out.append(Finding(
                "TI001", Severity.error, _where(name, attr), what,
                fix=f"self.{attr} = {fix_type}(...) instead of a {kind}",
                data={"attribute": attr, "container": kind, "modules": len(lost_mods),
                      "parameters": count}))
    return out


def _hook_managed(module: nn.Module) -> set[str]:
    """Attributes recomputed before every forward by torch's own hooks: the legacy
    ``torch.nn.utils.weight_norm``/``spectral_norm`` set ``module.weight`` as a plain tensor
    from their parameters (registering it as a buffer would break them)."""
    names = set()
    for hook in module._forward_pre_hooks.values():
        name = getattr(hook, "name", None)
        if type(hook).__module__.startswith("torch.nn.utils") and isinstance(name, str):
            names.add(name)
    return names


@doctor_check(
    "TI002", "tensor-attribute", "warning", "static",
    title="a tensor kept as a plain attribute instead of a buffer",
    trigger="self.scale = torch.tensor(...) (a tensor that is neither a parameter nor a "
    "registered buffer) in __init__",
    why="it is not in state_dict() (not saved or loaded) and .to()/.cuda() leave it behind, "
    "so the forward fails or mixes devices after moving the model",
    fix="self.register_buffer(name, tensor) (persistent=False if it must not be saved)")
def tensor_attributes(ctx: Context) -> list[Finding]:
    """TI002: tensors held as plain attributes (or in plain containers), not buffers."""
    model = ctx.model
    internals = _internals()
    registered = {id(t) for t in [*model.parameters(), *model.buffers()]}
    out: list[Finding] = []
    for name, module in model.named_modules():
        managed = _hook_managed(module)
        for attr, value in vars(module).items():
            if attr in internals or attr in managed:
                continue
            if isinstance(value, torch.Tensor):
                tensors = [value]
            elif isinstance(value, (list, tuple, dict)):
                tensors = [t for t in _walk(value) if isinstance(t, torch.Tensor)]
            else:
                continue
            tensors = [t for t in tensors if id(t) not in registered]
            if not tensors:
                continue
            first = tensors[0]
            shape = "x".join(str(d) for d in first.shape) or "scalar"
            what = (f"tensor attribute {attr!r} ({shape}, {str(first.dtype).removeprefix('torch.')})"
                    if len(tensors) == 1 and value is first else
                    f"{len(tensors)} tensor(s) in the plain {type(value).__name__} {attr!r}")
            out.append(Finding(
                "TI002", Severity.warning, _where(name, attr), what,
                fix=f'self.register_buffer("{attr}", tensor) instead of self.{attr} = tensor'
                if value is first else "one register_buffer per tensor (or a BufferList-like "
                "module holding them as buffers)",
                data={"attribute": attr, "tensors": len(tensors),
                      "shape": list(first.shape), "dtype": str(first.dtype).removeprefix("torch.")}))
    return out


def _round_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def _heads(model: nn.Module) -> set[int]:
    """The classifier: the last Linear of the model (its out_features is the number of
    classes, not a size to tune), unless its weight is tied to an embedding (an LM head,
    whose vocabulary TI006 checks on the embedding)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {id(linears[-1])} if linears and id(linears[-1].weight) not in tied else set()


def _dims(module: nn.Module, heads: set[int], tied: set[int]) -> list[tuple[str, int, int]]:
    """(what, size, multiple) of the dimensions that are a GEMM's K or N on the GPU."""
    if isinstance(module, nn.Linear):
        dims = [("in_features", module.in_features, ALIGN)]
        if id(module) not in heads and id(module.weight) not in tied:
            dims.append(("out_features", module.out_features, ALIGN))
        return dims
    if isinstance(module, nn.modules.conv._ConvNd) and module.groups == 1:
        return [("in_channels", module.in_channels, ALIGN),
                ("out_channels", module.out_channels, ALIGN)]
    if isinstance(module, nn.Embedding) and id(module.weight) in tied:  # the LM head's N
        return [("num_embeddings", module.num_embeddings, VOCAB_ALIGN)]
    return []  # a plain embedding is a lookup: no matrix multiply, no Tensor Cores


@doctor_check(
    "TI006", "tensor-core-alignment", "info", "static",
    title="layer sizes that are not multiples of 8 (Tensor Cores)",
    trigger="a Linear's in/out features or a conv's (groups=1) channels of 64 or more that "
    "are not a multiple of 8; a vocabulary tied to the LM head not a multiple of 64. The "
    "classifier's number of outputs is never flagged",
    why="on a GPU in fp16/bf16, cuBLAS and cuDNN run a layer on Tensor Cores at full rate "
    "when its matrix dimensions (K and N of the GEMM) are multiples of 8 (16 bytes); other "
    "sizes are padded or run on slower kernels. No effect in fp32 on the CPU",
    fix="round the dimension up to a multiple of 8 (64 for a vocabulary)")
def tensor_core_alignment(ctx: Context) -> list[Finding]:
    """TI006: dimensions of 64 or more that are a GEMM's K or N and not multiples of 8.

    Sizes below 64 are left out (padding them gains nothing measurable), as are the
    classifier's outputs (the number of classes is not a tuning knob) and plain embeddings
    (a lookup, no matrix multiply). Layers with the same change are one finding.
    """
    model = ctx.model
    heads = _heads(model)
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    tied = {id(m.weight) for m in model.modules()
            if isinstance(m, nn.Linear) and id(m.weight) in embedded}
    groups: dict[str, list[str]] = {}
    dims_of: dict[str, list[tuple[str, int, int]]] = {}
    for name, module in model.named_modules():
        bad = [(what, n, to) for what, n, to in _dims(module, heads, tied)
               if n >= ALIGN_MIN and n % to]
        if not bad:
            continue
        change = ", ".join(f"{what} {n} -> {_round_up(n, to)}" for what, n, to in bad)
        key = f"{type(module).__name__} {change}"
        groups.setdefault(key, []).append(name)
        dims_of.setdefault(key, bad)
    out = []
    for key, names in groups.items():
        layer_type, _, change = key.partition(" ")
        bad = dims_of[key]
        out.append(Finding(
            "TI006", Severity.info, names[0],
            f"{layer_type} {change}" + (f" ({len(names)} layers: {show_names(names)})"
                                         if len(names) > 1 else ""),
            fix="only if it runs in fp16/bf16 on a GPU with Tensor Cores: use "
            + ", ".join(f"{w} {_round_up(n, to)}" for w, n, to in bad)
            + f" (multiples of {bad[0][2]}); no effect on fp32 or CPU runs",
            data={"type": layer_type, "layers": names,
                  "suggested": {w: _round_up(n, to) for w, n, to in bad}}))
    return out


@doctor_check(
    "TI007", "oversized-layer", "info", "static",
    title="a layer that holds a large share of all parameters",
    trigger="one module's own parameters are at least 25% (and 1M) of the model's",
    why="one layer dominates memory and checkpoint size, and often overfits",
    fix="pool before the classifier (global average pooling), factorize the layer, or "
    "shrink its input")
def oversized(ctx: Context) -> list[Finding]:
    return oversized_layers(ctx.model)


def oversized_layers(model: nn.Module) -> list[Finding]:
    """TI007: modules whose own parameters hold >= 25% (and >= 1M) of all parameters."""
    seen: set[int] = set()
    own: list[tuple[str, nn.Module, int, int]] = []
    for name, module in model.named_modules():
        n = b = 0
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            n += p.numel()
            b += p.numel() * p.element_size()
        if n:
            own.append((name, module, n, b))
    total = sum(n for _, _, n, _ in own)
    out = []
    for name, module, n, b in own:
        share = n / total if total else 0.0
        if share >= OVERSIZED_SHARE and n >= OVERSIZED_MIN:
            out.append(Finding(
                "TI007", Severity.info, name,
                f"{type(module).__name__} holds {share:.1%} of all parameters ({n:,}, {fmt_size(b)})",
                data={"type": type(module).__name__, "params": n, "bytes": b, "share": round(share, 6),
                      "total_params": total}))
    return out


@doctor_check(
    "TI008", "frozen-and-batchnorm", "info", "trace",
    title="frozen parameters; BatchNorm that sees one value per channel",
    trigger="parameters with requires_grad=False (a summary, info); a BatchNorm whose input "
    "at the example has one value per channel (info at a batch of 1, where any real batch "
    "works; warning at a larger batch)",
    why="frozen parameters are not trained (fine if intended); a BatchNorm with one value "
    "per channel raises 'Expected more than 1 value per channel when training'",
    fix="check the frozen list is what you meant; train with a larger batch or use "
    "LayerNorm/GroupNorm")
def frozen_and_batchnorm(ctx: Context) -> list[Finding]:
    from torchinspect.analysis.doctor.shapes import batchnorm_single_value

    out = frozen_parameters(ctx.model)
    try:
        trace = ctx.trace()
    except Skip:
        return out
    return out + batchnorm_single_value(ctx.model, trace)


def frozen_parameters(model: nn.Module) -> list[Finding]:
    """TI008 (a): a summary of parameters with requires_grad=False, by largest frozen module."""
    params = _unique_params(model)
    frozen = [(n, p) for n, p in params if not p.requires_grad]
    if not frozen:
        return []
    total = sum(p.numel() for _, p in params)
    count = sum(p.numel() for _, p in frozen)
    # the top-most modules whose parameters are all frozen (their parameter names' prefixes)
    all_frozen: dict[str, bool] = {}
    for name, module in model.named_modules():
        ps = list(module.parameters())
        all_frozen[name] = bool(ps) and not any(p.requires_grad for p in ps)
    tops: list[str] = []
    for name, flag in all_frozen.items():
        if flag and not any(name.startswith(t + ".") or t == "" for t in tops):
            tops.append(name)
    names = tops or [n for n, _ in frozen]
    return [Finding(
        "TI008", Severity.info, "" if "" in tops else names[0],
        f"{count:,} of {total:,} parameters ({count / total:.1%}) are frozen "
        f"(requires_grad=False): {show_names(names)}",
        why="frozen parameters are not trained: fine for a frozen backbone or fine-tuning, "
        "a bug if forgotten after one",
        fix="unfreeze with requires_grad_(True) if they should train",
        data={"frozen": count, "total": total, "modules": names})]


# ------------------------------------------------------------------ TI017 repeated module


def _replicates(statement: Any) -> bool:
    """The statement builds a list by repeating one object: ``[m] * n``, ``(m,) * n``, or
    ``[m for _ in range(n)]`` whose element is not a call (the same object n times)."""
    import ast

    for node in ast.walk(statement):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and (
                isinstance(node.left, (ast.List, ast.Tuple))
                or isinstance(node.right, (ast.List, ast.Tuple))):
            return True
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and isinstance(
                node.elt, (ast.Name, ast.Attribute)):
            return True
    return False


@doctor_check(
    "TI017", "repeated-module", "error", "static",
    title="one module instance repeated in a container by accident",
    trigger="nn.ModuleList([layer] * 4), nn.Sequential(*[block] * n), [block for _ in "
    "range(n)] or layers.append(block) in a loop: the same object n times, built by "
    "repetition (deliberate sharing written out, e.g. self.a = self.b = m, is not flagged)",
    why="n references to one module: one set of weights applied n times, not n layers; "
    "the model has a fraction of the parameters you meant",
    fix="build a new module each time: nn.ModuleList([Layer() for _ in range(n)]) or "
    "copy.deepcopy(layer) per copy")
def repeated_module(ctx: Context) -> list[Finding]:
    out = []
    for name, module in ctx.model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
            continue
        counts: dict[int, list[str]] = {}
        for key, child in module._modules.items():
            if child is not None:
                counts.setdefault(id(child), []).append(key)
        # a BatchNorm repeated is TI023's, which says what that does to its statistics
        repeated = [keys for keys in counts.values()
                    if len(keys) > 1 and not stateful(module._modules[keys[0]])]
        site = ctx.sites.get(name)
        statement = statement_at(site) if site and repeated else None
        if statement is None:
            continue
        keys = repeated[0]
        child = module._modules[keys[0]]
        if not _replicates(statement):  # or the list it is built from, appended in a loop
            site = appended_line(site, type(child).__name__) if site else None
            if site is None:
                continue
        out.append(Finding(
            "TI017", Severity.error, name,
            f"{type(module).__name__} holds one {type(child).__name__} {len(keys)} times "
            f"(entries {', '.join(keys[:SHOWN])}{' ...' if len(keys) > SHOWN else ''}): "
            f"one set of {sum(p.numel() for p in child.parameters()):,} parameters, "
            f"not {len(keys)}",
            location=site,
            data={"entries": keys, "type": type(child).__name__}))
    return out


# ------------------------------------------------------------------ TI020, TI021 dtypes/kinds


@doctor_check(
    "TI020", "float64-parameters", "warning", "static", title="float64 parameters",
    trigger="parameters in torch.float64 (or complex128): .double(), dtype=torch.float64, "
    "or torch.set_default_dtype(torch.float64) before building",
    why="float64 runs 2x (CPU) to 32-64x (most GPUs) slower than float32, uses twice the "
    "memory, and mixes badly with float32 inputs",
    fix="keep parameters in float32 (model.float()); use float64 only for the few "
    "operations that need it")
def float64_parameters(ctx: Context) -> list[Finding]:
    wide = [(n, p) for n, p in ctx.model.named_parameters()
            if p.dtype in (torch.float64, torch.complex128)]
    if not wide:
        return []
    owners = list(dict.fromkeys(n.rpartition(".")[0] for n, _ in wide))
    count = sum(p.numel() for _, p in wide)
    return [Finding("TI020", Severity.warning, owners[0],
                    f"{len(wide)} parameter tensor(s) ({count:,} values) are "
                    f"{str(wide[0][1].dtype).removeprefix('torch.')}: {show_names(owners)}",
                    data={"parameters": [n for n, _ in wide], "count": count})]


@doctor_check(
    "TI021", "buffer-or-parameter", "warning", "static",
    title="a buffer that should be a parameter, or the reverse",
    trigger="a buffer with requires_grad=True (meant to be trained); an integer or bool "
    "nn.Parameter (it can never be trained)",
    why="a buffer is not in parameters(): the optimizer never updates it although "
    "gradients are computed; an integer parameter is handed to the optimizer and weight "
    "decay for nothing, and breaks optimizers that expect floats",
    fix="register_parameter/nn.Parameter for what trains; register_buffer for state that "
    "does not (ids, masks, running statistics)")
def buffer_or_parameter(ctx: Context) -> list[Finding]:
    out = []
    for name, buf in ctx.model.named_buffers():
        if buf.requires_grad:
            out.append(Finding("TI021", Severity.warning, name,
                               f"buffer {name!r} has requires_grad=True but the optimizer "
                               "never sees buffers: it is not trained",
                               fix=f"register it as a parameter: nn.Parameter(...) instead "
                               f"of register_buffer({name.rpartition('.')[2]!r}, ...)",
                               data={"kind": "buffer", "dtype": str(buf.dtype)}))
    for name, p in ctx.model.named_parameters():
        if not (p.is_floating_point() or p.is_complex()):
            out.append(Finding("TI021", Severity.warning, name,
                               f"parameter {name!r} is {str(p.dtype).removeprefix('torch.')}: "
                               "it can never get a gradient",
                               fix=f"self.register_buffer({name.rpartition('.')[2]!r}, tensor)",
                               data={"kind": "parameter", "dtype": str(p.dtype)}))
    return out
