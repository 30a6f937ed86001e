"""Build policy: meta first, a real build only when needed and only when it fits; weights
loaded into the built model; a rebuild function for a later real run."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError, first_line
from torchinspect.guard import model_code
from torchinspect.inputs import ExampleInputs
from torchinspect.sources.base import BuilderError, LoadedModel, SourceKind
from torchinspect.sources.weights import load_weights


def _build_on(build: Callable[[str], Any], device: str, name: str, notes: list[str]) -> tuple[Any, str]:
    """Build on ``device``; a meta build that fails falls back to a real CPU build."""
    if not devices.is_real(device):
        from torchinspect.privtorch import deferred_dynamo

        try:
            with deferred_dynamo():  # random init on meta runs Python refs: no TorchDynamo
                return build("meta"), "meta"
        except InspectError as exc:
            if not isinstance(exc, BuilderError):
                raise
            return build("cpu"), "cpu"  # meta's fault or the --arg values': CPU tells which
        except Exception as exc:  # builders that read tensor values at construction
            notes.append(f"{name} cannot be built on the meta device "
                         f"({first_line(exc, typed=True, limit=120)}); built on CPU")
            return build("cpu"), "cpu"
    return build_real(build, device, name), device


def build_real(build: Callable[[str], Any], device: str, name: str) -> Any:
    """Build on a real device, after checking on meta that the weights fit there.

    A 70B model asked for with --device cpu is refused with a clear message instead of
    being allocated until the machine runs out of memory.
    """
    try:
        probe = build("meta")
    except InspectError as exc:
        if not isinstance(exc, BuilderError):
            raise
        return build(device)
    except Exception:  # cannot be built on meta: nothing cheap to check
        return build(device)
    if not devices.has_meta_tensors(probe) and device == "cpu":
        return probe  # the builder ignores the device (quantized models): already real
    devices.ensure_fits(name, devices.weight_bytes(probe), device)
    return build(device)


def _device_of(model: Any, built_on: str) -> str:
    """Where the model's tensors are (a python-spec instance ignores the build device)."""
    return devices.model_device(model, default=built_on)


def contained(build: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """``build`` run as the model's own code (:class:`torchinspect.guard.model_code`): what
    its ``__init__`` changes in torch's switches or the working folder is put back after
    each build, and a ``sys.exit`` in it is the model's error."""
    def run(device: str) -> Any:
        with model_code(name):
            return build(device)

    return run


def finish(build: Callable[[str], Any], name: str, kind: SourceKind, example: ExampleInputs | None,
            device: str, weights: str | None, key: str | None, strict: bool, trust_pickle: bool,
            notes: list[str]) -> LoadedModel:
    build = contained(build, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, built_on = _build_on(build, device, name, notes)
    used_key = None
    if weights is not None:
        model, used_key = load_weights(model, weights, key=key, strict=strict,
                                        trust_pickle=trust_pickle, notes=notes)
        if devices.has_meta_tensors(model):  # e.g. non-persistent buffers: build for real instead
            model = build_real(build, devices.real_device(device), name)
            model, used_key = load_weights(model, weights, key=key, strict=strict,
                                            trust_pickle=trust_pickle, notes=[])

    def rebuild(dev: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fresh = build_real(build, dev, name)
        if weights is not None:
            fresh, _ = load_weights(fresh, weights, key=key, strict=strict,
                                     trust_pickle=trust_pickle, notes=[])
        return fresh

    return LoadedModel(model=model, name=name, kind=kind, example=example,
                       device=devices.model_device(model) if weights else _device_of(model, built_on),
                       notes=notes,
                       rebuild=rebuild, weights_key=used_key)


