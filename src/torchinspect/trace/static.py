"""Facts about a model that need no forward: modules, parameters, buffers, layer settings.

Parameters and buffers are deduplicated by tensor identity: a tied tensor (an LM head
sharing the embedding matrix) belongs to the first module that registers it and is
counted once everywhere. Quantized modules keep their weights in packed params; those
are unpacked and counted as frozen.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from torchinspect.shapes import dtype_name
from torchinspect.trace.records import DtypeStat, ModuleInfo, ParamStats

LAYER_ATTRS = ("kernel_size", "stride", "padding", "dilation", "groups", "output_size")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _layer_settings(module: nn.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in LAYER_ATTRS:
        v = getattr(module, attr, None)
        if v is None or callable(v) or isinstance(v, nn.Module):
            continue
        if isinstance(v, (int, str, tuple, list)):
            out[attr] = list(v) if isinstance(v, (tuple, list)) else v
    return out


def _quantized_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Weight and bias of a quantized Linear/Conv (held in a packed-params object)."""
    if not is_quantized_module(module):
        return []
    out = []
    for attr in ("weight", "bias"):
        fn = getattr(module, attr, None)
        if callable(fn) and not isinstance(fn, nn.Module):
            try:
                t = fn()
            except Exception:  # not a packed module after all
                continue
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def is_quantized_module(module: nn.Module) -> bool:
    """torch.ao.nn.quantized / intrinsic.quantized modules (packed weights, CPU kernels)."""
    path = type(module).__module__
    return path.startswith("torch.ao.nn.") and ".quantized" in path


def hookable_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that take forward hooks: all but TorchScript ones (``torch.jit.script``
    submodules refuse hooks; their work is counted in the module that calls them)."""
    return [m for m in model.modules() if not isinstance(m, torch.jit.ScriptModule)]


def type_name(module: nn.Module) -> str:
    """The class name; for a TorchScript module the scripted class's (``Inner``, not
    ``RecursiveScriptModule``)."""
    if isinstance(module, torch.jit.ScriptModule):
        return str(getattr(module, "original_name", "") or type(module).__name__)
    return type(module).__name__


def module_names(model: nn.Module) -> dict[int, str]:
    """id(module) -> its first qualified name."""
    names: dict[int, str] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        names.setdefault(id(m), name)
    return names


def collect_static(model: nn.Module) -> tuple[dict[str, ModuleInfo], ParamStats]:
    """ModuleInfo for every module (in registration order) and model-wide ParamStats."""
    stats = ParamStats()
    infos: dict[str, ModuleInfo] = {}
    owners: dict[int, str] = {}  # id(tensor) -> first "module.param" name
    owned_by: dict[str, list[torch.Tensor]] = {}
    owned_buffers: dict[str, list[torch.Tensor]] = {}

    for mname, module in model.named_modules():
        depth = 0 if mname == "" else mname.count(".") + 1
        info = ModuleInfo(name=mname, type=type_name(module), depth=depth,
                          layer=_layer_settings(module),
                          scripted=isinstance(module, torch.jit.ScriptModule))
        infos[mname] = info
        own: list[torch.Tensor] = []
        for pname, p in module._parameters.items():
            if p is None:
                continue
            full = f"{mname}.{pname}" if mname else pname
            if is_lazy(p):  # shape unknown until the first forward
                stats.lazy.append(full)
                continue
            if id(p) in owners:
                stats.tied.append((full, owners[id(p)]))
                continue
            owners[id(p)] = full
            own.append(p)
            info.params += p.numel()
            info.param_bytes += _nbytes(p)
            if p.requires_grad:
                info.trainable += p.numel()
            else:
                stats.frozen_names.append(full)
            _add(stats.by_dtype, p)
        for q in _quantized_tensors(module):
            own.append(q)
            info.params += q.numel()
            info.param_bytes += _nbytes(q)
            stats.quantized += q.numel()
            _add(stats.by_dtype, q)
        owned_by[mname] = own
        bufs: list[torch.Tensor] = []
        for _bname, b in module._buffers.items():
            if b is None or id(b) in owners:
                continue
            if is_lazy(b):
                stats.lazy.append(f"{mname}.{_bname}" if mname else _bname)
                continue
            owners[id(b)] = f"{mname}.{_bname}" if mname else _bname
            bufs.append(b)
            info.buffers += b.numel()
            _add(stats.buffer_by_dtype, b)
        owned_buffers[mname] = bufs

    for mname, o in infos.items():
        parts = mname.split(".") if mname else []
        for i in range(len(parts) + 1):
            anc = infos.get(".".join(parts[:i]))
            if anc is None:
                continue
            anc.total_params += o.params
            anc.total_trainable += o.trainable
            anc.total_buffers += o.buffers
            anc.total_param_bytes += o.param_bytes

    root = infos[""]
    stats.total = root.total_params
    stats.trainable = root.total_trainable
    stats.buffers = root.total_buffers
    stats.param_bytes = sum(d.bytes for d in stats.by_dtype.values())
    stats.buffer_bytes = sum(d.bytes for d in stats.buffer_by_dtype.values())
    return infos, stats


def _add(table: dict[str, DtypeStat], t: torch.Tensor) -> None:
    stat = table.setdefault(dtype_name(t.dtype), DtypeStat())
    stat.count += t.numel()
    stat.bytes += _nbytes(t)
