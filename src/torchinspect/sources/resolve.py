"""One resolver for every subcommand: MODEL text -> LoadedModel.

Order: ``zoo:NAME`` -> python spec (``file.py:Name``, ``pkg.mod:Name``) -> an existing
file (checkpoint, TorchScript, .pt2) -> a torchvision name -> an error naming the three
closest names.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.sources import pyspec, zoo
from torchinspect.sources import torchvision as tvsrc
from torchinspect.sources.base import (
    BuilderError,
    LoadedModel,
    SourceKind,
    available_bytes,
    call_builder,
    check_device,
    has_meta_tensors,
    model_device,
    parse_kwargs,
    weight_bytes,
)
from torchinspect.sources.inputs import ExampleInputs, TensorSpec

_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pt2", ".jit", ".tar", ".zip")


def _real_device(device: str) -> str:
    return "cpu" if device in ("meta", "auto") else device


def _build_on(build: Callable[[str], Any], device: str, name: str, notes: list[str]) -> tuple[Any, str]:
    """Build on ``device``; a meta build that fails falls back to a real CPU build."""
    if device in ("meta", "auto"):
        try:
            return build("meta"), "meta"
        except InspectError as exc:
            if not isinstance(exc, BuilderError):
                raise
            return build("cpu"), "cpu"  # meta's fault or the --arg values': CPU tells which
        except Exception as exc:  # builders that read tensor values at construction
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            notes.append(f"{name} cannot be built on the meta device ({reason[:120]}); built on CPU")
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
    if not has_meta_tensors(probe) and device == "cpu":
        return probe  # the builder ignores the device (quantized models): already real
    need = weight_bytes(probe)
    free = available_bytes(device)
    if free is not None and need > free:
        from torchinspect.report import fmt_bytes

        raise InspectError(
            f"{name} needs {fmt_bytes(need)} for its weights on {device}, but only "
            f"{fmt_bytes(free)} is available",
            hint="leave out --device (meta, the default, allocates nothing) for summary/params/flops",
        )
    return build(device)


# ------------------------------------------------------------------ weights into a model


def _load_weights(model: Any, path: str, *, key: str | None, strict: bool, trust_pickle: bool,
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
    on_meta = has_meta_tensors(model)
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


# ------------------------------------------------------------------ the sources


def _from_torchvision(tv: tvsrc.TorchvisionModel, kwargs: dict[str, Any], device: str,
                      weights_config: str | None, notes: list[str]) -> tuple[Callable[[str], Any], ExampleInputs | None, str]:
    example_override: ExampleInputs | None = None
    if weights_config is not None:
        from torchinspect.sources.published import published_config

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
    check_device(device)
    kwargs = parse_kwargs(args)
    spec = spec.strip()
    if not spec:
        raise InspectError("MODEL is empty", hint="e.g. inspect summary resnet18")

    path = Path(spec)
    if arch is not None:
        if not path.exists():
            raise InspectError(f"{spec}: no such checkpoint file",
                               hint="with --arch, MODEL is the weights file to load into it")
        if weights is not None:
            raise InspectError("give the weights either as MODEL with --arch, or with --weights, not both",
                               hint=f"inspect summary {arch} --weights {spec}")
        loaded = load_model(arch, args=kwargs, weights=spec, key=key, strict=strict,
                            trust_pickle=trust_pickle, device=device, weights_config=weights_config)
        loaded.name = f"{spec} ({loaded.name})"
        return loaded

    # (torchvision is imported only when needed: zoo and python specs start faster without it)
    if weights_config is not None and (path.exists() or tvsrc.lookup(spec) is None):
        raise InspectError(f"--published/--weights-config applies to torchvision models, not {spec}",
                           hint="leave it out, or name a torchvision model (e.g. resnet50 --published)")

    if spec.startswith(zoo.PREFIX):
        name = spec[len(zoo.PREFIX):]
        ent = zoo.entry(name)
        return _finish(lambda dev: _build_with(ent.build, kwargs, dev, spec), spec, SourceKind.zoo,
                       zoo.example_of(ent.example), device, weights, key, strict, trust_pickle, [])

    ps = pyspec.parse(spec)
    if ps is not None and not (path.exists() and path.is_file()):
        module = pyspec.import_target(ps)
        obj = pyspec.resolve_attr(module, ps)
        example = zoo.example_of(pyspec.declared_example(obj, module))
        return _finish(lambda dev: _instantiate(obj, kwargs, dev, spec), spec, SourceKind.python,
                       example, device, weights, key, strict, trust_pickle, [])

    if path.exists() or spec.endswith(_FILE_SUFFIXES):
        if weights is not None:
            raise InspectError(f"--weights given with a file MODEL {spec}",
                               hint=f"load weights into an architecture: inspect summary ARCH --weights {spec}")
        return _from_file(spec, key=key, trust_pickle=trust_pickle, device=device)

    tv = tvsrc.lookup(spec)
    if tv is None:
        raise tvsrc.unknown_model_error(spec, [zoo.PREFIX + n for n in zoo.names()])
    notes: list[str] = []
    build, example_override, device = _from_torchvision(tv, kwargs, device, weights_config, notes)
    loaded = _finish(build, spec, SourceKind.torchvision, None, device, weights, key, strict,
                     trust_pickle, notes)
    loaded.example = example_override or tvsrc.default_example(tv, loaded.model)
    return loaded


def _device_of(model: Any, built_on: str) -> str:
    """Where the model's tensors are (a python-spec instance ignores the build device)."""
    has_tensors = any(True for _ in model.parameters()) or any(True for _ in model.buffers())
    return model_device(model) if has_tensors else built_on


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


def _finish(build: Callable[[str], Any], name: str, kind: SourceKind, example: ExampleInputs | None,
            device: str, weights: str | None, key: str | None, strict: bool, trust_pickle: bool,
            notes: list[str]) -> LoadedModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, built_on = _build_on(build, device, name, notes)
    used_key = None
    if weights is not None:
        model, used_key = _load_weights(model, weights, key=key, strict=strict,
                                        trust_pickle=trust_pickle, notes=notes)
        if has_meta_tensors(model):  # e.g. non-persistent buffers: build for real instead
            model = build_real(build, _real_device(device), name)
            model, used_key = _load_weights(model, weights, key=key, strict=strict,
                                            trust_pickle=trust_pickle, notes=[])

    def rebuild(dev: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fresh = build_real(build, dev, name)
        if weights is not None:
            fresh, _ = _load_weights(fresh, weights, key=key, strict=strict,
                                     trust_pickle=trust_pickle, notes=[])
        return fresh

    return LoadedModel(model=model, name=name, kind=kind, example=example,
                       device=model_device(model) if weights else _device_of(model, built_on),
                       notes=notes,
                       rebuild=rebuild, weights_key=used_key)


def _from_file(spec: str, *, key: str | None, trust_pickle: bool, device: str) -> LoadedModel:
    import torch

    from torchinspect.io.checkpoint import CheckpointFormat, detect_format, read_checkpoint

    fmt = detect_format(spec)
    real = _real_device(device)
    notes: list[str] = []
    if fmt == CheckpointFormat.torchscript:
        def build(dev: str) -> Any:
            try:
                return torch.jit.load(spec, map_location=dev)
            except RuntimeError as exc:
                raise InspectError(f"{spec}: not a loadable TorchScript archive ({str(exc).splitlines()[0]})",
                                   hint="re-export it with torch.jit.save") from None

        model = build(real)
        notes.append("TorchScript archive: traced on a real device (meta is not supported)")
        return LoadedModel(model, spec, SourceKind.torchscript, None, real, notes, build)
    if fmt == CheckpointFormat.export_pt2:
        from torchinspect.sources.pt2 import check_pt2

        check_pt2(spec, trust_pickle)

        def load_ep() -> Any:
            try:
                return torch.export.load(spec)
            except Exception as exc:
                raise InspectError(f"{spec}: not a loadable torch.export program ({type(exc).__name__})",
                                   hint="save it with torch.export.save(torch.export.export(model, args), path)") from None

        def build_ep(dev: str) -> Any:
            module = load_ep().module()
            return module.to(dev) if dev != "cpu" else module

        ep = load_ep()
        model = ep.module()
        example = _example_from_export(ep)
        notes.append("torch.export program: traced on CPU through ExportedProgram.module()")
        return LoadedModel(model, spec, SourceKind.export, example, "cpu", notes, build_ep)

    ckpt = read_checkpoint(spec, trust_pickle=trust_pickle)
    if isinstance(ckpt.obj, torch.nn.Module):
        model = ckpt.obj
        notes.append("full pickled nn.Module loaded with --trust-pickle")
        return LoadedModel(model, spec, SourceKind.pickle, None, model_device(model), notes, None)
    from torchinspect.io.checkpoint import extract_state_dict

    state, _ = extract_state_dict(ckpt.obj, key=key, source=spec)
    raise InspectError(
        f"{spec} holds weights ({len(state)} tensors) but no architecture",
        hint=f"name the architecture: inspect summary {spec} --arch resnet18 (or zoo:NAME, file.py:Name); "
        f"`inspect diff {spec} ARCH` compares it without loading",
    )


def _example_from_export(ep: Any) -> ExampleInputs | None:
    """The example shapes a .pt2 program was exported with (its placeholder metadata)."""
    specs = []
    user_inputs = set(ep.graph_signature.user_inputs)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            val = node.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                return None
            try:
                shape = tuple(int(d) for d in val.shape)
            except TypeError:
                return None
            specs.append(TensorSpec(shape, str(val.dtype).removeprefix("torch.")))
    return ExampleInputs(tuple(specs)) if specs else None
