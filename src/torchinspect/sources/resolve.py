"""One resolver for every subcommand: MODEL text -> LoadedModel (dispatch only).

Building (meta first, real on demand, size checks) is in build.py, loading weights into a
model in weights.py, model archives (TorchScript, .pt2, full pickles) in archives.py.

Order: ``zoo:NAME`` -> ``timm:NAME`` -> ``hf:ARCH`` -> a Hugging Face model folder
(config.json) -> python spec (``file.py:Name``, ``pkg.mod:Name``) -> an existing
file (checkpoint, TorchScript, .pt2) -> a torchvision name -> an error naming the three
closest names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torchinspect import device as devices
from torchinspect.errors import InspectError
from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.io.formats import suffixes
from torchinspect.sources import hf as hfsrc
from torchinspect.sources import pyspec, zoo
from torchinspect.sources import timm as timmsrc
from torchinspect.sources import torchvision as tvsrc
from torchinspect.sources.archives import load_file
from torchinspect.sources.base import LoadedModel, SourceKind, call_builder, parse_kwargs
from torchinspect.sources.build import finish
from torchinspect.sources.published import published_config

_FILE_SUFFIXES = suffixes(holds=("weights", "model"))  # a MODEL text that names a file


# ------------------------------------------------------------------ the sources


def _source_of(spec: str, path: Path) -> str:
    """Which source a MODEL text names, in the module docstring's order (nothing imported)."""
    if spec.startswith(zoo.PREFIX):
        return "zoo"
    if spec.startswith(timmsrc.PREFIX):
        return "timm"
    if spec.startswith(hfsrc.PREFIX) or hfsrc.is_model_dir(path):
        return "hf"
    if pyspec.parse(spec) is not None and not (path.exists() and path.is_file()):
        return "python"
    if path.exists() or spec.endswith(_FILE_SUFFIXES):
        return "file"
    return "torchvision"


def check_model_text(spec: str) -> None:
    """The error :func:`load_model` would give for an unknown zoo or torchvision name, found
    from the names alone, before torch is imported (a typo is answered in a blink, not after
    seconds of imports). Other MODEL texts pass: their errors need the real thing."""
    spec = spec.strip()
    kind = _source_of(spec, Path(spec))
    if kind == "zoo":
        zoo.entry(spec[len(zoo.PREFIX):])
    elif kind == "torchvision" and spec and spec not in tvsrc.registered_names():
        raise tvsrc.unknown_model_error(spec, [zoo.PREFIX + n for n in zoo.names()])


def _from_torchvision(tv: tvsrc.TorchvisionModel, kwargs: dict[str, Any], device: str,
                      weights_config: str | None, notes: list[str]) -> tuple[Callable[[str], Any], ExampleInputs | None, str]:
    example_override: ExampleInputs | None = None
    if weights_config is not None:
        cfg = published_config(tv.name, None if weights_config in ("", "default") else weights_config)
        merged = dict(cfg.builder_kwargs)
        merged.update(kwargs)
        kwargs = merged
        example_override = ExampleInputs((TensorSpec((1, *cfg.input_size)),))
        notes.append(f"published settings of {cfg.weights_name}: "
                     f"{', '.join(f'{k}={v!r}' for k, v in cfg.builder_kwargs.items()) or 'builder defaults'}, "
                     f"input {','.join(map(str, cfg.input_size))}")

    def build(dev: str) -> Any:
        return tvsrc.build(tv, kwargs, dev)

    if tvsrc.needs_real_build(tv, kwargs):
        notes.append("quantized model: built and run on CPU with its quantized kernels")
        device = "cpu"
    return build, example_override, device


def load_model(
    spec: str,
    *,
    arch: str | None = None,
    args: Sequence[str] | dict[str, Any] | None = None,
    weights: str | None = None,
    key: str | None = None,
    strict: bool = True,
    trust_pickle: bool = False,
    device: str = "meta",
    weights_config: str | None = None,
) -> LoadedModel:
    """Resolve ``spec`` into a model (see the module docstring for the order).

    ``device="meta"`` (or "auto") builds without allocating weights when the builder
    allows it; "cpu"/"cuda[:N]" builds a real model there. ``weights`` loads a local
    state_dict into the model; ``spec`` may itself be a weights file when ``arch`` names
    the architecture. ``weights_config`` applies a torchvision weights' published builder
    settings and input size ("default" for the first weights).
    """
    if not isinstance(spec, str):
        raise InspectError(f"load_model takes a MODEL text, got {type(spec).__name__}",
                           hint="e.g. 'resnet18', 'zoo:gpt', 'file.py:Net'; the analysis "
                           "functions (summarize, ...) take a module as it is")
    devices.check_available(device)
    kwargs = parse_kwargs(args)
    spec = spec.strip()
    if not spec:
        raise InspectError("MODEL is empty", hint="e.g. inspect summary resnet18")

    path = Path(spec)
    if arch is not None:
        return _weights_into_arch(spec, arch, kwargs, weights, key=key, strict=strict,
                                  trust_pickle=trust_pickle, device=device,
                                  weights_config=weights_config)

    # (torchvision is imported only when needed: zoo and python specs start faster without it)
    if weights_config is not None and (path.exists() or tvsrc.lookup(spec) is None):
        raise InspectError(f"--published/--weights-config applies to torchvision models, not {spec}",
                           hint="leave it out, or name a torchvision model (e.g. resnet50 --published)")

    kind = _source_of(spec, path)
    if kind == "zoo":
        name = spec[len(zoo.PREFIX):]
        ent = zoo.entry(name)
        return finish(lambda dev: _build_with(ent.build, kwargs, dev, spec), spec, SourceKind.zoo,
                       zoo.example_of(ent.example), device, weights, key, strict, trust_pickle, [])

    if kind == "timm":
        name = timmsrc.check_name(spec[len(timmsrc.PREFIX):])
        loaded = finish(lambda dev: timmsrc.build(name, kwargs, dev), spec, SourceKind.timm, None,
                        device, weights, key, strict, trust_pickle, [])
        loaded.example = timmsrc.default_example(name, kwargs, loaded.model)
        return loaded

    if kind == "hf":
        return _from_hf(spec, path, kwargs, device, weights, key, strict, trust_pickle)

    ps = pyspec.parse(spec)
    if kind == "python" and ps is not None:
        module = pyspec.import_target(ps)
        obj = pyspec.resolve_attr(module, ps)
        example = zoo.example_of(pyspec.declared_example(obj, module))
        return finish(lambda dev: _instantiate(obj, kwargs, dev, spec), spec, SourceKind.python,
                       example, device, weights, key, strict, trust_pickle, [])

    if kind == "file":
        if weights is not None:
            raise InspectError(f"--weights given with a file MODEL {spec}",
                               hint=f"load weights into an architecture: inspect summary ARCH --weights {spec}")
        return load_file(spec, key=key, trust_pickle=trust_pickle, device=device)

    return _torchvision_model(spec, kwargs, device, weights, key, strict, trust_pickle,
                              weights_config)


def _torchvision_model(spec: str, kwargs: dict[str, Any], device: str, weights: str | None,
                       key: str | None, strict: bool, trust_pickle: bool,
                       weights_config: str | None) -> LoadedModel:
    check_model_text(spec)  # an unknown name is answered from the names, before torch
    tv = tvsrc.lookup(spec)
    if tv is None:
        raise tvsrc.unknown_model_error(spec, [zoo.PREFIX + n for n in zoo.names()])
    notes: list[str] = []
    build, example_override, device = _from_torchvision(tv, kwargs, device, weights_config, notes)
    loaded = finish(build, spec, SourceKind.torchvision, None, device, weights, key, strict,
                     trust_pickle, notes)
    loaded.example = example_override or tvsrc.default_example(tv, loaded.model)
    return loaded


def _weights_into_arch(spec: str, arch: str, kwargs: dict[str, Any], weights: str | None, *,
                       key: str | None, strict: bool, trust_pickle: bool, device: str,
                       weights_config: str | None) -> LoadedModel:
    """``MODEL --arch ARCH``: MODEL is a weights file loaded into the architecture ARCH."""
    path = Path(spec)
    if weights is not None:
        raise InspectError("give the weights either as MODEL with --arch, or with --weights, not both",
                           hint=f"inspect summary {spec} --weights {weights}"
                           if not path.exists() else f"inspect summary {arch} --weights {spec}")
    if not path.exists():
        raise InspectError(f"{spec}: no such checkpoint file",
                           hint="with --arch, MODEL is the weights file to load into it")
    loaded = load_model(arch, args=kwargs, weights=spec, key=key, strict=strict,
                        trust_pickle=trust_pickle, device=device, weights_config=weights_config)
    loaded.name = f"{spec} ({loaded.name})"
    return loaded


def _from_hf(spec: str, path: Path, kwargs: dict[str, Any], device: str, weights: str | None,
             key: str | None, strict: bool, trust_pickle: bool) -> LoadedModel:
    notes: list[str] = []
    if spec.startswith(hfsrc.PREFIX):
        config, cls = hfsrc.config_for(spec[len(hfsrc.PREFIX):], kwargs)
        notes.append("built from the default config of transformers (random init)")
    else:
        config = hfsrc.config_from_dir(path, kwargs)
        cls = hfsrc.model_class(config)
    loaded = finish(hfsrc.builder(config, cls, spec), spec, SourceKind.hf, None, device, weights,
                    key, strict, trust_pickle, notes)
    if not spec.startswith(hfsrc.PREFIX):
        loaded.notes[:0] = hfsrc.folder_notes(path, loaded.model, trust_pickle=trust_pickle)
    loaded.example = hfsrc.default_example(loaded.model, config)
    return loaded


def _build_with(builder: Callable[..., Any], kwargs: dict[str, Any], device: str, what: str) -> Any:
    import torch

    with torch.device(device):
        return call_builder(builder, kwargs, what)


def _instantiate(obj: Any, kwargs: dict[str, Any], device: str, spec: str) -> Any:
    import torch

    if isinstance(obj, torch.nn.Module):
        if kwargs:
            raise InspectError(f"{spec} is a module instance; --arg needs a class or factory",
                               hint="point the spec at the class or a function that builds the model")
        return obj
    if not callable(obj):
        raise InspectError(f"{spec} is a {type(obj).__name__}, not an nn.Module, class or factory",
                           hint="name an nn.Module subclass or a function returning one")
    model = _build_with(obj, kwargs, device, spec)
    if not isinstance(model, torch.nn.Module):
        raise InspectError(f"{spec} returned {type(model).__name__}, not an nn.Module",
                           hint="the factory must return a torch.nn.Module")
    return model


