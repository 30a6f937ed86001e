"""Checks that read the module tree only (no forward): TI001, TI002, TI006, TI007, TI008 (frozen).

They work on a model on meta as well as on a real one, and only read attributes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from torchinspect.analysis.doctor.rules import Finding, Severity
from torchinspect.device import fmt_size

# A layer above this share of all parameters (and above OVERSIZED_MIN parameters) is TI007.
OVERSIZED_SHARE = 0.25
OVERSIZED_MIN = 1_000_000
ALIGN = 8  # Tensor Core multiple for fp16/bf16
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


def unregistered(model: nn.Module) -> list[Finding]:
    """TI001: plain containers of modules/parameters that the model does not register."""
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


def tensor_attributes(model: nn.Module) -> list[Finding]:
    """TI002: tensors held as plain attributes (or in plain containers), not buffers."""
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


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _dims(module: nn.Module) -> list[tuple[str, int]]:
    if isinstance(module, nn.Linear):
        return [("in_features", module.in_features), ("out_features", module.out_features)]
    if isinstance(module, nn.modules.conv._ConvNd) and module.groups == 1:
        return [("in_channels", module.in_channels), ("out_channels", module.out_channels)]
    if isinstance(module, nn.Embedding):
        return [("num_embeddings", module.num_embeddings), ("embedding_dim", module.embedding_dim)]
    return []


def tensor_core_alignment(model: nn.Module) -> list[Finding]:
    """TI006: Linear/conv (groups=1)/Embedding dimensions of 8 or more that are not multiples of 8.

    Dimensions below 8 (an RGB stem's 3 input channels, a 2-class head) are left out:
    they are padded anyway and rarely matter. Layers with the same change are one finding.
    """
    groups: dict[str, list[str]] = {}
    dims_of: dict[str, list[dict[str, Any]]] = {}
    for name, module in model.named_modules():
        bad = [(what, n) for what, n in _dims(module) if n >= ALIGN and n % ALIGN]
        if not bad:
            continue
        change = ", ".join(f"{what} {n} -> {_round_up(n)}" for what, n in bad)
        key = f"{type(module).__name__} {change}"
        groups.setdefault(key, []).append(name)
        dims_of.setdefault(key, []).append({what: n for what, n in bad})
    out = []
    for key, names in groups.items():
        layer_type, _, change = key.partition(" ")
        out.append(Finding(
            "TI006", Severity.info, names[0],
            f"{layer_type} {change}" + (f" ({len(names)} layers: {show_names(names)})"
                                         if len(names) > 1 else ""),
            fix="only if it runs in fp16/bf16 on a GPU with Tensor Cores: use "
            + ", ".join(f"{w} {_round_up(n)}" for w, n in dims_of[key][0].items())
            + f" (multiples of {ALIGN}); no effect on fp32 or CPU runs",
            data={"type": layer_type, "layers": names,
                  "suggested": {w: _round_up(n) for w, n in dims_of[key][0].items()}}))
    return out


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
