"""Load a state_dict file into a model (assign on meta; copy otherwise).

Key prefixes are handled as `inspect diff --auto-prefix` handles them: when the keys as they
are do not fill the model, the remap (strip/add a prefix, or remove a wrapper such as
``_orig_mod.`` anywhere in the path) that fills the most model keys is applied, with a note.
"""

from __future__ import annotations

from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError
from torchinspect.io.checkpoint import extract_state_dict, read_checkpoint
from torchinspect.io.compare import FOLDED_SUFFIXES, entry_meta
from torchinspect.io.meta import TensorSet
from torchinspect.io.state_dict import find_prefix_remaps


def load_weights(model: Any, path: str, *, key: str | None, strict: bool, trust_pickle: bool,
                  notes: list[str]) -> tuple[Any, str | None]:
    """Load a state_dict file into ``model`` (assign on meta; copy otherwise)."""
    ckpt = read_checkpoint(path, trust_pickle=trust_pickle)
    state, used_key = extract_state_dict(ckpt.obj, key=key, source=path)
    if used_key:
        notes.append(f"weights taken from checkpoint key {used_key!r}")
    from torch.nn.parameter import is_lazy

    # a lazy module's tensors have no shape yet: load_state_dict sizes them from the file
    shapes = {k: None if is_lazy(v) else tuple(v.shape) for k, v in model.state_dict().items()}
    model_keys = set(shapes)
    state = _remap_keys(state, shapes, notes)
    on_meta = devices.has_meta_tensors(model)
    ties = _tied_parameters(model) if on_meta else []
    try:
        result = model.load_state_dict(state, strict=strict, assign=on_meta)
    except RuntimeError as exc:
        missing = sorted(model_keys - set(state))
        unexpected = sorted(set(state) - model_keys)
        detail = []
        if missing:
            detail.append(f"{len(missing)} missing (e.g. {missing[0]})")
        if unexpected:
            detail.append(f"{len(unexpected)} unexpected (e.g. {unexpected[0]})")
        if not detail:
            first = str(exc).strip().splitlines()
            detail.append(next((ln.strip() for ln in first if "size mismatch" in ln), "shape mismatch"))
        loadable = len(model_keys & set(state))
        hint = f"run `inspect diff {path} --arch ...` to see every difference"
        if loadable and not missing_shape_only(exc):
            hint += f", or pass --no-strict (it would load {loadable} of {len(model_keys)} tensors)"
        elif not loadable:
            hint += "; no checkpoint key names a tensor of this model: is --arch the right model?"
        raise InspectError(f"{path} does not load into this model: {'; '.join(detail)}",
                           hint=hint) from None
    _retie(model, ties)
    if not strict and (result.missing_keys or result.unexpected_keys):
        notes.append(f"loaded with strict=False: {len(result.missing_keys)} missing, "
                     f"{len(result.unexpected_keys)} unexpected keys")
    notes.append(f"weights loaded from {path}: {checkpoint_counts(state, model_keys)}")
    return model, used_key


def checkpoint_counts(state: dict[str, Any], model_keys: set[str]) -> str:
    """The counts ``inspect diff`` and ``inspect convert`` give for the same file: entries,
    tied tensors, bytes with each tie once, and the model's ``num_batches_tracked`` counters
    the file lacks (BatchNorm fills them)."""
    from dataclasses import replace

    side = TensorSet()
    side.tensors = {}
    for k, v in state.items():
        m = entry_meta(k, v, device="cpu")
        if m is None:
            continue
        if m.kind == "tensor" and not v.is_meta and not v.is_quantized:  # the tie key convert uses
            m = replace(m, storage=f"{v.untyped_storage().data_ptr()}:{v.storage_offset()}:"
                        f"{tuple(v.shape)}:{tuple(v.stride())}:{v.dtype}")
        side.tensors[k] = m
    tied = sum(len(g) - 1 for g in side.tied)
    folded = sum(1 for k in model_keys if k.endswith(FOLDED_SUFFIXES) and k not in state)
    text = f"{len(side.tensors)} tensors, {side.total_bytes:,} bytes"
    if tied:
        text += f" ({tied} tied, counted once)"
    if folded:
        text += f"; {folded} num_batches_tracked absent (folded: BatchNorm fills them)"
    return text




def _tied_parameters(model: Any) -> list[list[str]]:
    """Names of parameters that are one object (a tied embedding and LM head)."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [g for g in by_id.values() if len(g) > 1]


def _retie(model: Any, ties: list[list[str]]) -> None:
    """``load_state_dict(assign=True)`` gives each tied name its own Parameter; tie them again.

    PyTorch's copying load writes every name of a tie into the one shared Parameter, so the
    value loaded last (module order) is the one the model ends with: that Parameter is kept.
    Without this, a model on meta loaded from a checkpoint counted its tied weights twice.
    """
    for group in ties:
        keep = model.get_parameter(group[-1])
        for name in group[:-1]:
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, keep)


def missing_shape_only(exc: BaseException) -> bool:
    """A size mismatch: --no-strict would not help (load_state_dict refuses it either way)."""
    return "size mismatch" in str(exc)


def _remap_keys(state: dict[str, Any], shapes: dict[str, tuple[int, ...] | None],
                notes: list[str]) -> dict[str, Any]:
    """The best key remap, applied only when every tensor it matches has the model's shape."""
    if set(shapes) <= set(state):
        return state
    best = next((r for r in find_prefix_remaps(shapes, state) if _shapes_agree(r, state, shapes)),
                None)
    if best is None:
        return state
    notes.append(f"checkpoint keys remapped: {best.describe()} ({best.matched} of {best.total} "
                 "model tensors match)")
    return {best.apply(k): v for k, v in state.items()}


def _shapes_agree(remap: Any, state: dict[str, Any], shapes: dict[str, tuple[int, ...] | None]) -> bool:
    for k, v in state.items():
        new = remap.apply(k)
        if shapes.get(new) is not None and hasattr(v, "shape") and tuple(v.shape) != shapes[new]:
            return False
    return True
