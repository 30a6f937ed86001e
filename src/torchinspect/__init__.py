"""torchinspect: PyTorch model inspection and diagnostics.

The Python API mirrors the CLI (`inspect summary` -> :func:`summarize`). Heavy modules are
imported on first use, so `import torchinspect` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "summarize": "torchinspect.analysis",
    "count_params": "torchinspect.analysis",
    "count_flops": "torchinspect.analysis",
    "trace_model": "torchinspect.trace",
    "load_model": "torchinspect.sources",
    "make_case": "torchinspect.sources.case",
    "ModelOptions": "torchinspect.sources.case",
    "parse_inputs": "torchinspect.inputs",
    "read_checkpoint": "torchinspect.io.checkpoint",
    "diff_state_dicts": "torchinspect.io.diff",
    "convert_checkpoint": "torchinspect.checkpoints",
    "collect_env": "torchinspect.env",
    "build_graph": "torchinspect.export.graph",
    "export_onnx": "torchinspect.export.onnx",
    "diagnose": "torchinspect.analysis.doctor",
    "check_budgets": "torchinspect.analysis.check",
    "benchmark": "torchinspect.bench",
    "extract_features": "torchinspect.features",
    "FeatureFolder": "torchinspect.features",
    "collect_overview": "torchinspect.overview",
    "predict_memory": "torchinspect.memory",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torchinspect' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy API too (tab completion, ``dir(torchinspect)``)."""
    return sorted({*globals(), *_LAZY})
