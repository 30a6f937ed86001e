"""Load a state_dict file into a model (assign on meta; copy otherwise).

Key prefixes are handled as `inspect diff --auto-prefix` handles them: when the keys as they
are do not fill the model, the remap (strip/add a prefix, or remove a wrapper such as
``_orig_mod.`` anywhere in the path) that fills the most model keys is applied, with a note.
"""

from __future__ import annotations

from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError


def load_weights(model: Any, path: str, *, key: str | None, strict: bool, trust_pickle: bool,
                  notes: list[str]) -> tuple[Any, str | None]:
    """Load a state_dict file into ``model`` (assign on meta; copy otherwise)."""
    from torchinspect.io.checkpoint import extract_state_dict, read_checkpoint

    ckpt = read_checkpoint(path, trust_pickle=trust_pickle)
    state, used_key = extract_state_dict(ckpt.obj, key=key, source=path)
    if used_key:
        notes.append(f"weights taken from checkpoint key {used_key!r}")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model_keys = set(shapes)
    state = _remap_keys(state, shapes, notes)
    on_meta = devices.has_meta_tensors(model)
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
    if not strict and (result.missing_keys or result.unexpected_keys):
        notes.append(f"loaded with strict=False: {len(result.missing_keys)} missing, "
                     f"{len(result.unexpected_keys)} unexpected keys")
    notes.append(f"weights loaded from {path}")
    return model, used_key




def missing_shape_only(exc: BaseException) -> bool:
    """A size mismatch: --no-strict would not help (load_state_dict refuses it either way)."""
    return "size mismatch" in str(exc)


def _remap_keys(state: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                notes: list[str]) -> dict[str, Any]:
    """The best key remap, applied only when every tensor it matches has the model's shape."""
    from torchinspect.io.state_dict import find_prefix_remaps

    if set(shapes) <= set(state):
        return state
    best = next((r for r in find_prefix_remaps(shapes, state) if _shapes_agree(r, state, shapes)),
                None)
    if best is None:
        return state
    notes.append(f"checkpoint keys remapped: {best.describe()} ({best.matched} of {best.total} "
                 "model tensors match)")
    return {best.apply(k): v for k, v in state.items()}


def _shapes_agree(remap: Any, state: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> bool:
    for k, v in state.items():
        new = remap.apply(k)
        if new in shapes and hasattr(v, "shape") and tuple(v.shape) != shapes[new]:
            return False
    return True
