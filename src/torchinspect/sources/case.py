"""The model case: what every command that takes MODEL starts from.

``make_case(model, inputs, options=ModelOptions(...))`` resolves a MODEL text (or
takes an ``nn.Module``), resolves the example inputs (``--input``/``--batch`` or the
model's own example) and returns a ``ModelCase`` — no trace, no forward.

``model`` is a ``ModelLike``: an ``nn.Module``, any MODEL text the CLI accepts
(``resnet18``, ``zoo:gpt``, ``file.py:Name``, a checkpoint with ``arch=``), or a
``ModelCase`` made before (used as it is). Every public function that takes a model
has the same shape: ``fn(model: ModelLike, inputs=None, *, ..., options: ModelOptions |
None = None)``. ``inputs`` is an
``ExampleInputs``, a list of ``--input`` strings, one string, a full shape
(``(1, 3, 224, 224)``), a tensor, a tuple of tensors, or ``None`` for the model's declared
example.

``case.weights`` (``WeightsOrigin``) says where the weights
come from; a random init is seeded (the build here and every rebuild), so real runs are
reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from torchinspect import device as devices
from torchinspect.arguments import renamed_keywords
from torchinspect.errors import InspectError
from torchinspect.guard import model_code
from torchinspect.inputs import ExampleInputs, TensorSpec, parse_inputs
from torchinspect.shapes import format_shape_tree, map_tensors, shape_tree
from torchinspect.sources.materialize import has_lazy, lazy_real_copy, real_copy, size_lazy
from torchinspect.sources.origin import (
    FILE_KINDS,
    WeightsOrigin,
    WeightsSource,
    seeded,
    seeded_rebuild,
)

if TYPE_CHECKING:
    from torch import nn


@dataclass
class ModelOptions:
    """How to resolve MODEL and its inputs (the CLI's shared model options, one object)."""

    inputs: Sequence[str] | None = None  # --input specs
    args: Sequence[str] | dict[str, Any] | None = None  # --arg K=V
    arch: str | None = None
    weights: str | None = None
    key: str | None = None
    strict: bool = True
    trust_pickle: bool = False
    device: str = "auto"
    batch: int | None = None
    no_batch: bool = False
    weights_config: str | None = None  # --weights-config NAME, "default" for --published
    python_path: tuple[str, ...] = ()  # --python-path DIR: on sys.path while the model loads

    def __post_init__(self) -> None:
        # one text is one --input / --arg, not a sequence of characters
        if isinstance(self.inputs, str):
            self.inputs = [self.inputs]
        if isinstance(self.args, str):
            self.args = [self.args]

    def files(self) -> tuple[str | None, ...]:
        """Files named by these options (outputs must never overwrite them)."""
        return (self.arch, self.weights)


def weights_origin(spec: str, options: ModelOptions, kind: str) -> WeightsOrigin:
    """Where the weights of ``spec`` built with ``options`` come from (no file is read)."""
    if options.weights:
        return WeightsOrigin(WeightsSource.file, path=os.fspath(options.weights))
    if options.arch or kind in FILE_KINDS:  # MODEL is the weights file / the model file
        return WeightsOrigin(WeightsSource.file, path=spec)
    return WeightsOrigin.random_init()


@dataclass
class ModelCase:
    """A resolved model and its example inputs, ready for a trace, export, bench or doctor.

    ``model`` is on meta when it was built from a spec on the default device (no memory);
    a module passed by the user is kept as is and never mutated. ``rebuild(device)`` returns
    a fresh, equivalent model on a real device (same weights when weights were loaded),
    or is None when the model cannot be rebuilt (a module passed in, a full pickle).
    """

    model: Any
    name: str
    example: ExampleInputs | Any | None
    notes: list[str] = field(default_factory=list)
    rebuild: Callable[[str], Any] | None = None
    kind: str = "module"  # torchvision, zoo, python, pickle, torchscript, export, module
    weights_key: str | None = None
    requested: str = "auto"  # the --device word asked for (auto, meta, cpu, cuda[:N])
    weights: WeightsOrigin = field(default_factory=WeightsOrigin.random_init)

    @property
    def on_meta(self) -> bool:
        return devices.has_meta_tensors(self.model)

    def require_example(self) -> ExampleInputs | Any:
        if self.example is None:
            raise InspectError(f"{self.name}: no example input is known for this model",
                               hint="pass --input, e.g. --input 3,224,224 or --input long:1,128")
        return self.example

    def describe_inputs(self) -> str:
        return describe_inputs(self.example)

    def real_model(self, device: str = "cpu") -> Any:
        """The model with real weights on ``device`` (sized first; refused if it won't fit).

        Returns ``self.model`` when it already lives there (the caller must not mutate it),
        else a rebuild. A model on another real device is never moved: that would mutate it.
        Lazy modules (``nn.LazyLinear``) are sized on a copy (or the rebuild) by one forward
        on the example: the caller's stay lazy.
        """
        device = devices.parse_device(device)
        target = devices.real_device(device)
        devices.check_available(target)
        here = devices.model_device(self.model, default=target)
        if not self.on_meta and devices.same_device(here, target):
            if has_lazy(self.model):  # a forward would size the caller's lazy modules
                return self._sized(lazy_real_copy(self.model), target)
            return self.model
        if self.rebuild is None:
            if self.on_meta:
                raise InspectError(
                    f"{self.name}: the model's weights are on meta and it cannot be rebuilt on "
                    f"{target}", hint="pass a model with real weights, or load it by name/spec")
            raise InspectError(f"{self.name}: the model's weights are on {here}, not {target}",
                               hint=f"use --device {here.split(':')[0]}, or move the model first")
        model = self.rebuild(target)
        return self._sized(model, target) if has_lazy(model) else model

    def _sized(self, model: Any, target: str) -> Any:
        """``model`` (a copy or a rebuild) with its lazy modules sized by one eval-mode forward
        on the example, as its first real forward would (seeded: they are initialized then)."""
        if self.example is None:
            return model
        args, kwargs = self.inputs_on(target)
        with seeded(target):
            return size_lazy(model, args, kwargs, name=self.name, inputs=self.describe_inputs())

    def inputs_on(self, device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The example materialized on ``device`` as ``(args, kwargs)``."""
        return materialize(self.require_example(), device)


# What every public function that takes a model accepts (a string alias: this module stays
# torch-free at import, the CLI imports it at start-up).
ModelLike: TypeAlias = "str | nn.Module | ModelCase"


@renamed_keywords(model_or_spec="model")
def make_case(model: ModelLike, inputs: Any = None, *, options: ModelOptions | None = None,
              device: str | None = None, need_inputs: bool = True) -> ModelCase:
    """Resolve the model and its example inputs (no forward).

    ``device`` overrides ``options.device``. ``inputs`` overrides ``options.inputs``.
    ``need_inputs=False`` keeps the model's own example (maybe None) without requiring one.
    A ``ModelCase`` is returned as it is (it was resolved already).
    """
    if isinstance(model, ModelCase):
        return model
    model_or_spec: Any = model
    opts = options or ModelOptions()
    dev = devices.parse_device(device if device is not None else opts.device)
    if isinstance(model_or_spec, str):
        # the resolvers load with the first MODEL text: the CLI imports this module at
        # start-up (ModelOptions), and `inspect --help` should not pay for them
        from torchinspect.sources.resolve import load_model

        kw: dict[str, Any] = {}
        if opts.weights_config is not None:
            kw["weights_config"] = opts.weights_config
        # a random init is seeded (the build here and each rebuild): real runs are reproducible
        build_on = devices.build_device(dev)
        from torchinspect.io.torch_load import python_path

        with python_path(opts.python_path), model_code(model_or_spec), seeded(build_on):
            loaded = load_model(model_or_spec, arch=opts.arch, args=opts.args, weights=opts.weights,
                                key=opts.key, strict=opts.strict, trust_pickle=opts.trust_pickle,
                                device=build_on, **kw)
        rebuild = seeded_rebuild(loaded.rebuild) if loaded.rebuild is not None else None
        case = ModelCase(loaded.model, loaded.name, loaded.example, list(loaded.notes),
                         rebuild, str(loaded.kind), loaded.weights_key, requested=dev,
                         weights=weights_origin(model_or_spec.strip(), opts, str(loaded.kind)))
    else:
        if not _is_module(model_or_spec):
            raise InspectError(f"expected a model name, spec or torch.nn.Module, got "
                               f"{type(model_or_spec).__name__}",
                               hint="pass e.g. 'resnet18', 'zoo:gpt', 'file.py:Net' or a module")
        name = type(model_or_spec).__name__
        case = ModelCase(model_or_spec, name, None, requested=dev,
                         weights=WeightsOrigin(WeightsSource.module, module=name))
        if devices.has_meta_tensors(model_or_spec):  # real runs use an initialized copy
            module = model_or_spec
            case.rebuild = seeded_rebuild(lambda target: real_copy(module, target))
            case.weights = WeightsOrigin.random_init()
    given = inputs if inputs is not None else (list(opts.inputs) if opts.inputs else None)
    if need_inputs or given is not None or opts.batch is not None:
        case.example = resolve_inputs(given, case.example, batch=opts.batch, no_batch=opts.no_batch)
        if need_inputs:
            case.require_example()
    return case


def _is_module(obj: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, torch.nn.Module)


def resolve_inputs(inputs: Any, default: ExampleInputs | None, *, batch: int | None = None,
                   no_batch: bool = False) -> Any:
    """Any accepted form of inputs -> ExampleInputs (specs) or the tensors as given."""
    if inputs is None:
        return parse_inputs(None, batch=batch, no_batch=no_batch, default=default)
    if isinstance(inputs, ExampleInputs):
        return inputs
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(s, str) for s in inputs):
        return parse_inputs(list(inputs), batch=batch, no_batch=no_batch, default=default)
    if _is_shape(inputs):
        return ExampleInputs((TensorSpec(tuple(inputs)),))  # a full shape, e.g. (1, 3, 224, 224)
    if (isinstance(inputs, (list, tuple)) and not _is_namedtuple(inputs) and inputs
            and all(_is_shape(s) for s in inputs)):  # several full shapes, torchinfo's input_size
        return ExampleInputs(tuple(TensorSpec(tuple(s)) for s in inputs))
    if isinstance(inputs, dict) and not all(isinstance(k, str) for k in inputs):
        raise InspectError("a dict of inputs is passed as keyword arguments: its keys must be "
                           f"strings, got {', '.join(sorted({type(k).__name__ for k in inputs}))}",
                           hint="e.g. inputs={'input_ids': ids, 'attention_mask': mask}")
    return inputs  # tensors: used as given


def _is_shape(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and not _is_namedtuple(value) and bool(value)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in value))


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def materialize(example: Any, device: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` on ``device`` for any accepted input form (as torchinfo's input_data).

    A tensor (or a namedtuple, or any other single object) is the one positional input; a
    tuple or list holds the positional inputs; a dict holds keyword inputs. Nested
    containers keep their types (namedtuples included).
    """
    if isinstance(example, ExampleInputs):
        return example.materialize(device)
    import torch

    if isinstance(example, torch.Tensor) or _is_namedtuple(example):
        example = (example,)
    if isinstance(example, list):
        example = tuple(example)
    if isinstance(example, dict):
        return (), {k: _to(v, device) for k, v in example.items()}
    if not isinstance(example, tuple):
        example = (example,)  # any other object (a dataclass batch, an ImageList): one input
    return _to(example, device), {}


def _to(value: Any, device: Any) -> Any:
    return map_tensors(value, lambda t: t.to(device))


def describe_inputs(example: Any) -> str:
    """``(1, 3, 224, 224) float32``-style text for any accepted input form."""
    if example is None:
        return "-"
    if isinstance(example, ExampleInputs):
        return example.describe()
    return format_shape_tree(shape_tree(example), limit=200)
