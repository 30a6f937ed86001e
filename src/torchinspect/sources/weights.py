"""Load a state_dict file into a model (assign on meta; copy otherwise), prefixes stripped."""

from __future__ import annotations

from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError


def load_weights(model: Any, path: str, *, key: str | None, strict: bool, trust_pickle: bool,
                  notes: list[str]) -> tuple[Any, str | None]:
    """Load a state_dict file into ``model`` (assign on meta; copy otherwise)."""
    from torchinspect.io.checkpoint import extract_state_dict, read_checkpoint, strip_prefixes

    ckpt = read_checkpoint(path, trust_pickle=trust_pickle)
    state, used_key = extract_state_dict(ckpt.obj, key=key, source=path)
    if used_key:
        notes.append(f"weights taken from checkpoint key {used_key!r}")
    model_keys = set(model.state_dict().keys())
    if not (set(state) & model_keys):
        stripped, prefixes = strip_prefixes(state)
        if prefixes and set(stripped) & model_keys:
            state = stripped
            notes.append(f"stripped prefix {' + '.join(repr(p) for p in prefixes)} from checkpoint keys")
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
        raise InspectError(
            f"{path} does not load into this model: {'; '.join(detail)}",
            hint=f"run `inspect diff {path} --arch ...` to see every difference, or pass --no-strict",
        ) from None
    if not strict and (result.missing_keys or result.unexpected_keys):
        notes.append(f"loaded with strict=False: {len(result.missing_keys)} missing, "
                     f"{len(result.unexpected_keys)} unexpected keys")
    notes.append(f"weights loaded from {path}")
    return model, used_key


