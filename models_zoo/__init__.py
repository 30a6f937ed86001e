"""Example and test models, addressed on the command line as ``zoo:NAME``.

Each :class:`ZooEntry` names a builder (keyword arguments come from ``--arg k=v``) and the
example input the model expects, so ``inspect summary zoo:convnet`` needs no ``--input``.
This module stays light: torch and the model classes are imported only when a builder or
an example callable runs. Every builder works under ``with torch.device("meta"):``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from torchinspect.inputs import ExampleInputs

__all__ = ["REGISTRY", "ZooEntry", "get", "names"]


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: how to build it and what to feed it."""

    name: str
    build: Callable[..., nn.Module]
    # grammar strings are FULL shapes ("1,1,28,28", "long:1,128"); a callable returns
    # ExampleInputs for nested/dict inputs or integer ranges (TensorSpec(high=vocab)).
    example: str | list[str] | Callable[[], ExampleInputs]
    description: str
    tags: tuple[str, ...] = ()


def _lazy(module: str, factory: str, **preset: Any) -> Callable[..., nn.Module]:
    """A builder that imports ``torchinspect.zoo.<module>`` on call; ``--arg`` kwargs override ``preset``."""

    def build(**kwargs: Any) -> nn.Module:
        fn = getattr(importlib.import_module(f"{__name__}.{module}"), factory)
        return fn(**{**preset, **kwargs})

    build.__name__ = factory
    build.__qualname__ = factory
    build.__doc__ = f"torchinspect.zoo.{module}.{factory}(**{preset or {}} | kwargs)"
    return build


def _example(module: str, factory: str, *args: Any) -> Callable[[], ExampleInputs]:
    """An example callable that lives next to the model class (so shapes stay in one place)."""

    def example() -> ExampleInputs:
        return getattr(importlib.import_module(f"{__name__}.{module}"), factory)(*args)

    example.__name__ = factory
    return example


# inspect doctor's models: (name, class in zoo/doctor.py, its arguments, example, description)
_DOCTOR: list[tuple[str, str, dict[str, Any], list[str], str]] = [
    ("doctor-layer-modulelist", "LayerModuleList", {}, ["1,32"],
     "TI001 clean twin of pitfall-layer-list: layers in an nn.ModuleList"),
    ("doctor-tensor-buffer", "TensorBuffer", {}, ["1,32"],
     "TI002 clean twin of pitfall-tensor-attr: the tensor is a registered buffer"),
    ("doctor-used-branch", "UsedBranch", {}, ["1,32"],
     "TI003 clean twin of pitfall-unused-branch: the aux head's output is returned"),
    ("doctor-mode-dropout", "ModeAwareDropout", {}, ["1,32"],
     "TI004 clean twin of pitfall-functional-dropout: F.dropout(training=self.training)"),
    ("doctor-nan-grad", "DistanceHead", {"eps": 0.0}, ["1,8,32"],
     "TI005 trigger: hand-written pairwise distance, sqrt(0) on the diagonal gives NaN gradients"),
    ("doctor-safe-distance", "DistanceHead", {"eps": 1e-12}, ["1,8,32"],
     "TI005 clean twin: the same distance with sqrt(x + eps)"),
    ("doctor-misaligned", "MisalignedMLP", {"aligned": False}, ["1,100"],
     "TI006 trigger: Linear widths 100/250/10, not multiples of 8 (Tensor Cores)"),
    ("doctor-aligned", "MisalignedMLP", {"aligned": True}, ["1,96"],
     "TI006 clean twin: widths 96/256/248/16"),
    ("doctor-oversized", "FlattenHead", {"pool": "flatten"}, ["1,3,32,32"],
     "TI007 trigger: VGG-style flatten into Linear(4096, 1024), ~97% of the parameters"),
    ("doctor-gap-head", "FlattenHead", {"pool": "avg"}, ["1,3,32,32"],
     "TI007 clean twin: global average pooling before the classifier"),
    ("doctor-frozen-bn", "FrozenBackboneBN", {"freeze": True, "norm": "batch"}, ["1,32"],
     "TI008 trigger: frozen backbone; BatchNorm1d sees one value per channel at batch 1"),
    ("doctor-trainable-ln", "FrozenBackboneBN", {"freeze": False, "norm": "layer"}, ["1,32"],
     "TI008 clean twin: everything trainable, LayerNorm instead of BatchNorm1d"),
    ("doctor-dropped-rows", "UnpaddedConvPool", {"padding": 0}, ["1,1,28,28"],
     "TI009 trigger: unpadded conv, 28 -> 26 -> 13 -> 6: the second max-pool drops a row/column"),
    ("doctor-padded-pool", "UnpaddedConvPool", {"padding": 1}, ["1,1,28,28"],
     "TI009 clean twin: padded conv, 28 -> 28 -> 14 -> 7"),
]

# inspect doctor's classic mistakes (zoo/mistakes.py): (trigger, clean twin, class, example, what).
# Tags of a trigger: "raises" (its forward fails by design), "host-only" (its forward cannot
# run on meta: that is the mistake).
_RAISES = {"pitfall-wrong-width"}
_HOST_ONLY = {"pitfall-host-tensor", "pitfall-item-in-forward"}
_MISTAKES: list[tuple[str, str, str, list[str], str]] = [
    ("pitfall-inplace-sigmoid", "doctor-outofplace-sigmoid", "InplaceAfterSigmoid", ["1,32"],
     "TI010: nn.ReLU(inplace=True) on a sigmoid output its backward needs"),
    ("pitfall-wrong-width", "doctor-right-width", "WrongWidth", ["1,32"],
     "TI011: the head's in_features do not match: the forward raises"),
    ("pitfall-parameter-in-forward", "doctor-parameter-in-init", "ParameterInForward", ["1,32"],
     "TI012: an nn.Parameter created inside forward"),
    ("pitfall-log-softmax", "doctor-log-softmax", "LogOfSoftmax", ["1,32"],
     "TI013: torch.log(F.softmax(x)) instead of F.log_softmax"),
    ("pitfall-host-tensor", "doctor-device-tensor", "HostTensor", ["1,32"],
     "TI014: torch.arange in forward without device="),
    ("pitfall-item-in-forward", "doctor-clamp-in-forward", "SyncInForward", ["1,32"],
     "TI015: .item() in forward picks a branch"),
    ("pitfall-conv-bias-bn", "doctor-conv-no-bias-bn", "ConvBiasBatchNorm", ["1,3,16,16"],
     "TI016: a conv with bias straight into BatchNorm"),
    ("pitfall-repeated-layer", "doctor-distinct-layers", "RepeatedLayer", ["1,32"],
     "TI017: nn.ModuleList([layer] * 4), one layer four times"),
    ("pitfall-data-in-forward", "doctor-no-data", "DataInForward", ["1,32"],
     "TI018: self.scale.data in forward"),
    ("pitfall-constant-init", "doctor-random-init", "ConstantInit", ["1,32"],
     "TI019: a hidden layer initialised to a constant"),
    ("pitfall-float64", "doctor-float32", "Float64Layer", ["1,32"],
     "TI020: a float64 layer"),
    ("pitfall-trainable-buffer", "doctor-temperature-parameter", "TrainableBuffer", ["1,32"],
     "TI021: a buffer with requires_grad=True (never trained)"),
    ("pitfall-double-log-softmax", "doctor-logits-into-loss", "DoubleLogSoftmax", ["1,32"],
     "TI022: F.log_softmax output into F.cross_entropy"),
    ("pitfall-shared-batchnorm", "doctor-batchnorm-per-conv", "SharedBatchNorm", ["1,3,16,16"],
     "TI023: one BatchNorm after two convs"),
    ("pitfall-tensor-of-activation", "doctor-activation-kept", "RewrappedActivation", ["1,32"],
     "TI024: torch.tensor(h) of an activation cuts the graph"),
    ("pitfall-softmax-one-unit", "doctor-sigmoid-one-unit", "SoftmaxOneUnit", ["1,32"],
     "TI025: softmax over a single output unit"),
    ("pitfall-kept-hidden", "doctor-detached-hidden", "KeptHidden", ["1,6,32"],
     "TI026: a GRU state kept on the module with its graph"),
    ("pitfall-view-as-transpose", "doctor-transpose", "ViewAsTranspose", ["1,12,32"],
     "TI027: x.view(b, c, t) of a (b, t, c) tensor"),
]

_ENTRIES = [
    ZooEntry(
        "convnet",
        _lazy("mnist", "ConvNet"),
        ["1,1,28,28"],
        "MNIST ConvNet: two conv+BN+ReLU+MaxPool blocks (16, 32 channels), fc 7*7*32 -> 10",
        ("vision", "mnist"),
    ),
    ZooEntry(
        "mnist-net",
        _lazy("mnist", "Net"),
        ["1,1,28,28"],
        "classic MNIST Net: conv1 1->10 k5, conv2 10->20 k5, Dropout2d, fc 320->50->10, log_softmax",
        ("vision", "mnist"),
    ),
    ZooEntry(
        "gpt-tiny",
        _lazy("gpt", "GPT"),
        _example("gpt", "example"),
        "small GPT decoder: learned positions, causal scaled_dot_product_attention, "
        "LM head tied to the token embedding",
        ("llm", "tied-weights"),
    ),
    ZooEntry(
        "lstm-classifier",
        _lazy("text", "LSTMClassifier"),
        _example("text", "example"),
        "text classifier: embedding -> 2-layer bidirectional LSTM -> linear over the final states",
        ("text", "rnn"),
    ),
    ZooEntry(
        "multi-input",
        _lazy("multi", "MultiInputNet"),
        _example("multi", "example"),
        "several inputs: an image, a dict of features (positional) and a keyword-only mask; "
        "returns a dict",
        ("multi-input",),
    ),
    ZooEntry(
        "llama-tiny",
        _lazy("llama", "llama", preset="llama-tiny"),
        _example("llama", "example", "llama-tiny"),
        "Llama-shaped decoder, tiny preset (runs on CPU): RMSNorm, RoPE, GQA, SwiGLU",
        ("llm", "llama"),
    ),
    ZooEntry(
        "llama-70b",
        _lazy("llama", "llama", preset="llama-70b"),
        _example("llama", "example", "llama-70b"),
        "Llama-3-70B-shaped decoder (70,553,706,496 params): 80 layers, d_model 8192, "
        "64 heads / 8 KV heads, SwiGLU 28672, vocab 128256; meta device only",
        ("llm", "llama", "large"),
    ),
    ZooEntry(
        "pitfall-layer-list",
        _lazy("pitfalls", "LayerList"),
        ["1,32"],
        "pitfall: Linear layers kept in a plain Python list (parameters(), state_dict() "
        "and .to() miss them; use nn.ModuleList)",
        ("pitfall",),
    ),
    ZooEntry(
        "pitfall-tensor-attr",
        _lazy("pitfalls", "TensorAttribute"),
        ["1,32"],
        "pitfall: a tensor stored as a plain attribute, not a buffer (not in state_dict, "
        "not moved by .to(); use register_buffer)",
        ("pitfall",),
    ),
    ZooEntry(
        "pitfall-functional-dropout",
        _lazy("pitfalls", "FunctionalDropout"),
        ["1,32"],
        "pitfall: F.dropout without training=self.training (still drops in eval mode)",
        ("pitfall",),
    ),
    ZooEntry(
        "pitfall-unused-branch",
        _lazy("pitfalls", "UnusedBranch"),
        ["1,32"],
        "pitfall: a submodule (aux head) that forward never calls (dead parameters; "
        "DDP needs find_unused_parameters)",
        ("pitfall",),
    ),
    ZooEntry(
        "shared-act-residual",
        _lazy("shared", "SharedActResidual"),
        ["1,16"],
        "two Linear layers, one nn.ReLU called twice, a residual add: act(fc2(act(fc1(x))) + x)",
        ("shared-module",),
    ),
    ZooEntry(
        "shared-act-unet",
        _lazy("shared", "SharedActUNet"),
        ["1,3,32,32"],
        "small two-level U-Net: one nn.ReLU held by every conv block, skips joined by torch.cat",
        ("vision", "shared-module"),
    ),
    ZooEntry(
        "siamese",
        _lazy("shared", "SiameseNet"),
        ["1,16", "1,16"],
        "two inputs through one encoder (called twice), head on |enc(a) - enc(b)|",
        ("multi-input", "shared-module"),
    ),
    # ---- inspect doctor: a trigger and a clean twin for every check (zoo/doctor.py)
    *[ZooEntry(name, _lazy("doctor", cls, **preset), example, text, ("doctor",))
      for name, cls, preset, example, text in _DOCTOR],
    *[ZooEntry(name, _lazy("mistakes", cls, fixed=fixed), example,
               ("pitfall: " if not fixed else "clean twin of " + trigger + ": ") + text,
               ("pitfall", *(["raises"] if name in _RAISES else []),
                *(["host-only"] if name in _HOST_ONLY else [])) if not fixed else ("doctor",))
      for trigger, twin, cls, example, text in _MISTAKES
      for name, fixed in ((trigger, False), (twin, True))],
    # ---- end of inspect doctor block
]

REGISTRY: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}


def names() -> list[str]:
    """Registry names, sorted."""
    return sorted(REGISTRY)


def get(name: str) -> ZooEntry:
    """The entry called ``name`` (a leading ``zoo:`` is accepted); KeyError when unknown."""
    key = name.removeprefix("zoo:")
    try:
        return REGISTRY[key]
    except KeyError:
        raise KeyError(name) from None
