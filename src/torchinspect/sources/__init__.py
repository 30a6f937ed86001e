"""Model sources (torchvision, zoo, python spec, checkpoints) and input specs."""

from __future__ import annotations

from torchinspect.inputs import ExampleInputs, TensorSpec, parse_inputs
from torchinspect.sources.base import LoadedModel, SourceKind
from torchinspect.sources.resolve import load_model

__all__ = ["ExampleInputs", "LoadedModel", "SourceKind", "TensorSpec", "load_model", "parse_inputs"]
