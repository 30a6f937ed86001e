"""Model sources (torchvision, zoo, python spec, checkpoints) and input specs.

The names below are imported on first use (PEP 562), so importing a submodule such as
``sources.case`` (the CLI does, for ``ModelOptions``) does not pull the resolver and, through
it, the Hugging Face source and the io readers: ``inspect --help`` stays fast
(``tests/test_startup.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchinspect.inputs import ExampleInputs as ExampleInputs
    from torchinspect.inputs import TensorSpec as TensorSpec
    from torchinspect.inputs import parse_inputs as parse_inputs
    from torchinspect.sources.base import LoadedModel as LoadedModel
    from torchinspect.sources.base import SourceKind as SourceKind
    from torchinspect.sources.resolve import load_model as load_model

_HOMES = {
    "ExampleInputs": "torchinspect.inputs",
    "TensorSpec": "torchinspect.inputs",
    "parse_inputs": "torchinspect.inputs",
    "LoadedModel": "torchinspect.sources.base",
    "SourceKind": "torchinspect.sources.base",
    "load_model": "torchinspect.sources.resolve",
}

__all__ = ["ExampleInputs", "LoadedModel", "SourceKind", "TensorSpec", "load_model", "parse_inputs"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'torchinspect.sources' has no attribute {name!r}")
