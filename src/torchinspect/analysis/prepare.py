"""Shared front half of every view: resolve a model (object or spec) and its inputs, trace.

``model_or_spec`` is an ``nn.Module`` or any MODEL text the CLI accepts (``resnet18``,
``zoo:gpt``, ``file.py:Name``, a checkpoint with ``arch=``). ``inputs`` is an
:class:`ExampleInputs`, a list of ``--input`` strings, one string, a tensor, a tuple of
tensors, or ``None`` for the model's declared example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.sources.inputs import ExampleInputs, TensorSpec, parse_inputs

MACS_CONVENTION = (
    "MACs = multiply-accumulates (1 multiply-add = 1); FLOPs = 2 x MACs "
    "(torchvision's published 'GFLOPS' are MACs)."
)
COUNTED_CONVENTION = (
    "Counted: matmul/linear, conv, attention (SDPA), bias excluded; not counted: "
    "elementwise, normalization, pooling, softmax (listed below)."
)


@dataclass
class LoadOptions:
    """How to resolve a model spec (mirrors the CLI's model options)."""

    args: Sequence[str] | dict[str, Any] | None = None
    arch: str | None = None
    weights: str | None = None
    key: str | None = None
    strict: bool = True
    trust_pickle: bool = False
    weights_config: str | None = None
    batch: int | None = None
    no_batch: bool = False


@dataclass
class Prepared:
    model: Any
    name: str
    example: ExampleInputs | Any | None
    rebuild: Callable[[str], Any] | None
    notes: list[str] = field(default_factory=list)


def _load_device(device: str) -> str:
    return "meta" if device in ("auto", "meta") else device


def prepare(model_or_spec: Any, inputs: Any = None, *, device: str = "auto",
            options: LoadOptions | None = None, need_inputs: bool = True) -> Prepared:
    """Resolve the model and its example inputs (no forward yet)."""
    opts = options or LoadOptions()
    if isinstance(model_or_spec, str):
        from torchinspect.sources import load_model

        kw: dict[str, Any] = {}
        if opts.weights_config is not None:
            kw["weights_config"] = opts.weights_config
        loaded = load_model(model_or_spec, arch=opts.arch, args=opts.args, weights=opts.weights,
                            key=opts.key, strict=opts.strict, trust_pickle=opts.trust_pickle,
                            device=_load_device(device), **kw)
        model, name, default = loaded.model, loaded.name, loaded.example
        rebuild, notes = loaded.rebuild, list(loaded.notes)
    else:
        model, name, default, rebuild, notes = model_or_spec, type(model_or_spec).__name__, None, None, []
    example = _resolve_inputs(inputs, default, opts) if need_inputs else default
    if need_inputs and example is None:
        raise InspectError(f"{name}: no example input is known for this model",
                           hint="pass --input, e.g. --input 3,224,224 or --input long:1,128")
    return Prepared(model, name, example, rebuild, notes)


def _resolve_inputs(inputs: Any, default: ExampleInputs | None, opts: LoadOptions) -> Any:
    if inputs is None:
        return parse_inputs(None, batch=opts.batch, no_batch=opts.no_batch, default=default)
    if isinstance(inputs, ExampleInputs):
        return inputs
    if isinstance(inputs, str):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(s, str) for s in inputs):
        return parse_inputs(list(inputs), batch=opts.batch, no_batch=opts.no_batch, default=default)
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(d, int) for d in inputs):
        return ExampleInputs((TensorSpec(tuple(inputs)),))  # a full shape, e.g. (1, 3, 224, 224)
    return inputs  # tensors: traced as given


def describe_inputs(example: Any) -> str:
    if isinstance(example, ExampleInputs):
        return example.describe()
    from torchinspect.trace.engine import shape_tree
    from torchinspect.trace.records import format_shape_tree

    return format_shape_tree(shape_tree(example), limit=200)


def run_trace(prep: Prepared, *, device: str = "auto", train: bool = False) -> Any:
    from torchinspect.trace import trace_model

    return trace_model(prep.model, prep.example, device=device, train=train,
                       rebuild=prep.rebuild, fallback=device != "meta")
