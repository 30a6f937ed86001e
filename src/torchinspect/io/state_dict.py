"""Find the weights inside a checkpoint container; strip and match key prefixes.

These helpers work on torch tensors and on the data-free :class:`TensorRef` of the metadata
reader alike (the tensor test is injected), so diff can stay torch-free on checkpoints.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torchinspect.errors import InspectError

#: Container keys tried in order when no --key is given (EMA weights only when chosen or alone).
CONTAINER_KEYS: tuple[str, ...] = (
    "state_dict", "model", "model_state_dict", "net", "network", "module", "weights", "params",
    "state_dict_ema", "model_ema", "ema", "ema_state_dict",
)
#: Container entries that are training state, dropped by convert unless --keep-extra.
TRAINING_KEYS: frozenset[str] = frozenset({
    "optimizer", "optimizer_state_dict", "optimizer_states", "optim", "opt", "scheduler",
    "lr_scheduler", "lr_schedulers", "scaler", "amp", "grad_scaler", "loops", "callbacks",
    "rng_state", "rng_states",
})
#: Prefixes that wrappers put in front of every key, and the wrapper that does it.
WRAPPER_PREFIXES: dict[str, str] = {"module.": "DataParallel/DDP", "_orig_mod.": "torch.compile"}
DEFAULT_PREFIXES: tuple[str, ...] = tuple(WRAPPER_PREFIXES)

TensorTest = Callable[[Any], bool]


def _is_torch_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _is_module(x: Any) -> bool:
    torch = sys.modules.get("torch")  # no module can exist before torch is imported
    return torch is not None and isinstance(x, torch.nn.Module)


#: Suffixes of state_dict entries that are not plain tensors but belong to the state_dict:
#: ``get_extra_state`` of a module (TransformerEngine/FP8 layers, anything), and torch.ao's
#: quantized Linear packing (``_packed_params._packed_params`` = (qweight, bias), and its dtype).
EXTRA_STATE_SUFFIX = "_extra_state"
PACKED_SUFFIX = "_packed_params._packed_params"
PACKED_DTYPE_SUFFIX = "_packed_params.dtype"


def state_entry_kind(key: str, value: Any, is_tensor: TensorTest = _is_torch_tensor) -> str | None:
    """``"tensor"``, ``"extra_state"``, ``"packed"``, ``"packed_dtype"``, or None (not a
    state_dict entry). What ``nn.Module.load_state_dict`` consumes for this key."""
    if is_tensor(value):
        return "tensor"
    if key.endswith(EXTRA_STATE_SUFFIX):
        return "extra_state"
    if key.endswith(PACKED_SUFFIX) and isinstance(value, tuple) and value and is_tensor(value[0]):
        return "packed"
    if key.endswith(PACKED_DTYPE_SUFFIX):
        return "packed_dtype"
    return None


def is_tensor_dict(obj: Any, is_tensor: TensorTest = _is_torch_tensor) -> bool:
    """True for a mapping of str -> tensor (``*_extra_state`` and quantized packed-params
    entries may be other objects)."""
    if not isinstance(obj, Mapping) or not obj:
        return False
    has_tensor = False
    for k, v in obj.items():
        if not isinstance(k, str):
            return False
        kind = state_entry_kind(k, v, is_tensor)
        if kind is None:
            return False
        has_tensor = has_tensor or kind in ("tensor", "packed")
    return has_tensor


def _tensors_only(d: Mapping[str, Any], is_tensor: TensorTest) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(k, str) and state_entry_kind(k, v, is_tensor)}


def _describe_keys(obj: Mapping[Any, Any], is_tensor: TensorTest) -> str:
    parts = []
    for k, v in list(obj.items())[:12]:
        if is_tensor_dict(v, is_tensor):
            parts.append(f"{k} ({len(v)} tensors)")
        elif isinstance(v, Mapping):
            parts.append(f"{k} (dict)")
        else:
            parts.append(str(k))
    more = f", ... ({len(obj)} keys)" if len(obj) > 12 else ""
    return ", ".join(parts) + more


def find_state_dict(obj: Any, key: str | None = None, *, is_tensor: TensorTest = _is_torch_tensor,
                    source: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Like :func:`extract_state_dict` with a custom tensor test (used on TensorRefs)."""
    where = f"{source}: " if source else ""
    if key is not None:
        target, used = _navigate(obj, key, where, is_tensor)
        if _is_module(target):
            return dict(target.state_dict()), used
        if is_tensor_dict(target, is_tensor):
            return _tensors_only(target, is_tensor), used
        if isinstance(target, Mapping):
            sd, sub = find_state_dict(target, None, is_tensor=is_tensor, source=source)
            return sd, f"{used}/{sub}" if sub else used
        raise InspectError(f"{where}--key {key!r} holds a {type(target).__name__}, not a state_dict",
                           hint="choose a key holding a dict of tensors")
    found = _search(obj, is_tensor, depth=0)
    if found is not None:
        return found
    if isinstance(obj, Mapping):
        raise InspectError(
            f"{where}no state_dict (dict of tensors) found; top-level keys: "
            f"{_describe_keys(obj, is_tensor) or '(none)'}",
            hint="choose the entry holding the weights with --key KEY",
        )
    raise InspectError(f"{where}holds a {type(obj).__name__}, not a state_dict",
                       hint="pass a checkpoint that stores a dict of tensors")


def _navigate(obj: Any, key: str, where: str, is_tensor: TensorTest) -> tuple[Any, str]:
    if isinstance(obj, Mapping) and key in obj:
        return obj[key], key
    cur = obj
    for part in key.split("/"):
        if not isinstance(cur, Mapping) or part not in cur:
            keys = _describe_keys(obj, is_tensor) if isinstance(obj, Mapping) else type(obj).__name__
            raise InspectError(f"{where}--key {key!r} not found; top-level keys: {keys}",
                               hint="pick one of the keys shown (nested keys as a/b)")
        cur = cur[part]
    return cur, key


def _search(obj: Any, is_tensor: TensorTest, depth: int) -> tuple[dict[str, Any], str | None] | None:
    if _is_module(obj):
        return dict(obj.state_dict()), None
    if not isinstance(obj, Mapping):
        return None
    if is_tensor_dict(obj, is_tensor):
        return _tensors_only(obj, is_tensor), None
    if depth > 3:
        return None
    for k in CONTAINER_KEYS:
        if k in obj:
            inner = _search(obj[k], is_tensor, depth + 1)
            if inner is not None:
                sd, sub = inner
                return sd, f"{k}/{sub}" if sub else k
    # an unknown key: use it when it is the only dict of tensors
    candidates = [k for k, v in obj.items() if isinstance(k, str) and k not in TRAINING_KEYS
                  and is_tensor_dict(v, is_tensor)]
    if len(candidates) == 1:
        return _tensors_only(obj[candidates[0]], is_tensor), candidates[0]
    if not candidates and depth == 0:
        tensors = _tensors_only(obj, is_tensor)
        if any(state_entry_kind(k, v, is_tensor) in ("tensor", "packed") for k, v in tensors.items()):  # a flat state_dict with a few scalars (epoch, step) beside it
            return tensors, None
    return None


def extract_state_dict(obj: Any, key: str | None = None, *,
                       source: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Find the state_dict inside a loaded checkpoint object.

    ``obj`` is what :func:`read_checkpoint` returned: a state_dict, a container dict
    (``{"state_dict": ..., "optimizer": ..., "epoch": ...}``, Lightning, timm EMA, ...), or
    an ``nn.Module`` (only after a trusted full-pickle load). Without ``key`` the keys in
    :data:`CONTAINER_KEYS` are tried in order, recursing into nested containers; ``key``
    (``"model_ema"``, or a nested path ``"model/state_dict"``) chooses explicitly.

    Returns ``(state_dict, key_used)``: only tensor entries, and the container key path that
    held them (None when ``obj`` itself is the state_dict). Raises :class:`InspectError`
    listing the top-level keys when no dict of tensors is found. ``source`` (the file name)
    prefixes error messages.
    """
    return find_state_dict(obj, key, is_tensor=_is_torch_tensor, source=source)


def container_extras(obj: Any, key_used: str | None,
                     state_dict: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Top-level container entries other than the one holding the weights (for a flat
    state_dict with scalars beside it, the non-state entries)."""
    if not isinstance(obj, Mapping):
        return {}
    if key_used is None:
        if state_dict is None or len(state_dict) == len(obj):
            return {}
        return {str(k): v for k, v in obj.items() if k not in state_dict}
    top = key_used.split("/")[0]
    return {str(k): v for k, v in obj.items() if k != top}


def describe_value(v: Any) -> str:
    """A short, data-free description of a container entry (``dict (3 entries)``, ``5``)."""
    if isinstance(v, (bool, int, float)) or v is None:
        return repr(v)
    if hasattr(v, "describe_entry"):
        return str(v.describe_entry())
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    if shape is not None and dtype is not None:  # a tensor, or the zip reader's TensorRef
        dims = tuple(int(d) for d in shape)
        dt = str(dtype).removeprefix("torch.")
        return f"{dt} scalar tensor" if not dims else \
            f"{dt} tensor ({', '.join(map(str, dims))}{',' if len(dims) == 1 else ''})"
    if isinstance(v, str):
        return repr(v[:60])
    if isinstance(v, dict):
        return f"dict ({len(v)} entries)"
    if isinstance(v, (list, tuple)):
        return f"{type(v).__name__} ({len(v)} items)"
    return type(v).__name__


def strip_prefixes(state_dict: Mapping[str, Any],
                   prefixes: Iterable[str] = DEFAULT_PREFIXES) -> tuple[dict[str, Any], list[str]]:
    """Strip prefixes that *every* key carries (``module.`` from DataParallel/DDP,
    ``_orig_mod.`` from torch.compile), repeatedly, so nested wrappers such as
    ``module._orig_mod.`` go too. Returns ``(new_state_dict, prefixes_stripped_in_order)``;
    the input is not modified. A prefix carried by only some keys is left alone.
    """
    prefixes = tuple(prefixes)
    keys = list(state_dict)
    stripped: list[str] = []
    changed = True
    while changed and keys:
        changed = False
        for p in prefixes:
            if p and all(k.startswith(p) for k in keys):
                keys = [k[len(p):] for k in keys]
                stripped.append(p)
                changed = True
    if not stripped:
        return dict(state_dict), []
    return dict(zip(keys, state_dict.values(), strict=True)), stripped


@dataclass(frozen=True)
class PrefixRemap:
    """Rename keys starting with ``strip`` to ``add`` + the rest; others unchanged. With
    ``infix`` (e.g. ``"_orig_mod."``), that path component is removed wherever it occurs
    (per-block ``torch.compile``: ``layer1._orig_mod.0.conv1.weight``)."""

    strip: str
    add: str
    matched: int  # keys of the target matched after the remap
    total: int  # keys of the target
    infix: str = ""

    def apply(self, key: str) -> str:
        if self.infix:
            parts = [p for p in key.split(".") if p != self.infix.rstrip(".")]
            key = ".".join(parts)
        if key.startswith(self.strip):
            return self.add + key[len(self.strip):]
        return key

    def describe(self) -> str:
        if self.infix:
            return f"remove '{self.infix}' wherever it occurs in a key{_origin(self.infix)}"
        if self.strip and self.add:
            return f"replace prefix '{self.strip}' with '{self.add}'"
        if self.strip:
            return f"strip prefix '{self.strip}'{_origin(self.strip)}"
        if self.add:
            return f"add prefix '{self.add}'"
        return "keys as they are"

    def condition(self) -> str:
        """The remap as a condition of a load verdict: ``after stripping 'module.'``."""
        if self.infix:
            return f"after removing '{self.infix}' wherever it occurs in a key"
        if self.strip and self.add:
            return f"after replacing the prefix '{self.strip}' with '{self.add}'"
        if self.strip:
            return f"after stripping '{self.strip}'"
        return f"after adding the prefix '{self.add}'" if self.add else ""

    def python(self, var: str = "k") -> str:
        """A Python expression of ``var`` that computes :meth:`apply` (for a printed load line)."""
        q = py_str
        if self.infix:  # found alone (find_prefix_remaps): never with strip or add
            return f'".".join(p for p in {var}.split(".") if p != {q(self.infix.rstrip("."))})'
        if self.strip and self.add:
            return f"{q(self.add)} + {var}[{len(self.strip)}:] if {var}.startswith({q(self.strip)}) else {var}"
        if self.strip:
            return f"{var}.removeprefix({q(self.strip)})"
        return f"{q(self.add)} + {var}" if self.add else var

    def to_dict(self) -> dict[str, Any]:
        return {"strip": self.strip, "add": self.add, "infix": self.infix,
                "matched": self.matched, "total": self.total, "description": self.describe()}


def py_str(text: str) -> str:
    """``text`` as a double-quoted Python string literal (for printed lines of Python)."""
    import json

    return json.dumps(text)


def _origin(prefix: str) -> str:
    """`` (DataParallel/DDP)`` after a wrapper's prefix, else nothing."""
    return f" ({WRAPPER_PREFIXES[prefix]})" if prefix in WRAPPER_PREFIXES else ""


def _common_prefixes(keys: list[str], limit: int = 8, depth: int = 3) -> list[str]:
    counts: Counter[str] = Counter()
    for k in keys:
        parts = k.split(".")
        for d in range(1, min(depth, len(parts) - 1) + 1):
            counts[".".join(parts[:d]) + "."] += 1
    floor = max(1, -(-len(keys) * 3 // 10))  # a candidate covers at least 30% of the keys
    ranked = sorted((p for p, c in counts.items() if c >= floor), key=lambda p: (-counts[p], len(p)))
    return ranked[:limit]


def find_prefix_remaps(target_keys: Iterable[str], source_keys: Iterable[str],
                       limit: int = 5) -> list[PrefixRemap]:
    """Candidate prefix remaps of ``source_keys`` (a checkpoint) onto ``target_keys`` (a model).

    Tries stripping a common prefix of the source keys (``module.``, ``_orig_mod.``,
    ``model.``, ``module._orig_mod.``, ...), adding a common prefix of the target keys
    (``backbone.``), or both; returns up to ``limit`` remaps that match more keys than the
    keys as they are, best first (ties: the shorter change). Empty when nothing helps.
    """
    target = set(target_keys)
    source = list(dict.fromkeys(source_keys))
    if not target or not source:
        return []
    strips = ["", *_common_prefixes(source)]
    adds = ["", *_common_prefixes(list(target))]
    base = sum(1 for k in source if k in target)
    out: list[PrefixRemap] = []
    for s in strips:
        for a in adds:
            if s == a:
                continue
            remap = PrefixRemap(s, a, 0, len(target))
            mapped = {remap.apply(k) for k in source}
            n = len(mapped & target)
            if n > base:
                out.append(PrefixRemap(s, a, n, len(target)))
    for infix in DEFAULT_PREFIXES:  # wrappers inside the path, not only at its front
        comp = infix.rstrip(".")
        if not any(comp in k.split(".")[1:-1] for k in source):
            continue
        remap = PrefixRemap("", "", 0, len(target), infix)
        n = len({remap.apply(k) for k in source} & target)
        if n > base:
            out.append(PrefixRemap("", "", n, len(target), infix))
    out.sort(key=lambda r: (-r.matched, len(r.strip) + len(r.add)))
    kept: list[PrefixRemap] = []
    for r in out:  # drop refinements of a better remap ("module.x." -> "x." after "module." -> "")
        if not any(not r.infix and not k.infix and r.strip.startswith(k.strip) and r.add.startswith(k.add)
                   and r.strip[len(k.strip):] == r.add[len(k.add):] for k in kept):
            kept.append(r)
    return kept[:limit]
