"""torchinspect: PyTorch model inspection and diagnostics.

The Python API mirrors the CLI (`inspect summary` -> :func:`summarize`). Heavy modules are
imported on first use, so `import torchinspect` stays cheap: every public name is in
``PUBLIC_NAMES`` (name -> module) and, for type checkers, in the ``TYPE_CHECKING`` block below (a
test keeps the two and ``__all__`` equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

PUBLIC_NAMES = {
    # errors and exit codes (torch-free)
    "InspectError": "torchinspect.errors",
    "ExitStatus": "torchinspect.errors",
    # models and inputs
    "load_model": "torchinspect.sources",
    "LoadedModel": "torchinspect.sources",
    "make_case": "torchinspect.sources.case",
    "ModelCase": "torchinspect.sources.case",
    "ModelOptions": "torchinspect.sources.case",
    "ModelLike": "torchinspect.sources.case",
    "parse_inputs": "torchinspect.inputs",
    "ExampleInputs": "torchinspect.inputs",
    "TensorSpec": "torchinspect.inputs",
    # views over one trace
    "trace_model": "torchinspect.trace",
    "Trace": "torchinspect.trace",
    "register_mac_formula": "torchinspect.trace.formulas",
    "unregister_mac_formula": "torchinspect.trace.formulas",
    "mac_formulas": "torchinspect.trace.formulas",
    "MacFormulaEntry": "torchinspect.trace.formulas",
    "summarize": "torchinspect.analysis",
    "Summary": "torchinspect.analysis",
    "count_params": "torchinspect.analysis",
    "ParamsResult": "torchinspect.analysis",
    "count_flops": "torchinspect.analysis",
    "FlopsResult": "torchinspect.analysis",
    "diagnose": "torchinspect.analysis.doctor",
    "DoctorResult": "torchinspect.analysis.doctor",
    "check_budgets": "torchinspect.check",
    "CheckResult": "torchinspect.check",
    # checkpoints
    "read_checkpoint": "torchinspect.io.checkpoint",
    "Checkpoint": "torchinspect.io.checkpoint",
    "diff_state_dicts": "torchinspect.checkpoints.diff",
    "DiffResult": "torchinspect.checkpoints.diff",
    "convert_checkpoint": "torchinspect.checkpoints",
    "ConvertResult": "torchinspect.checkpoints",
    # the other command cores
    "collect_env": "torchinspect.env",
    "EnvInfo": "torchinspect.env",
    "build_graph": "torchinspect.export.graph",
    "Graph": "torchinspect.export.graph",
    "export_onnx": "torchinspect.export.onnx",
    "ExportResult": "torchinspect.export.onnx",
    "benchmark": "torchinspect.bench",
    "BenchResult": "torchinspect.bench",
    "predict_latency": "torchinspect.latency",
    "Prediction": "torchinspect.latency",
    "predict_train": "torchinspect.latency",
    "TrainPrediction": "torchinspect.latency",
    "predict_generate_latency": "torchinspect.latency",
    "GenerateLatency": "torchinspect.latency",
    "extract_features": "torchinspect.features",
    "FeatureResult": "torchinspect.features",
    "FeatureFolder": "torchinspect.features",
    "collect_overview": "torchinspect.overview",
    "Overview": "torchinspect.overview",
    "predict_memory": "torchinspect.memory",
    "MemoryResult": "torchinspect.memory",
    "predict_generate": "torchinspect.memory",
    "GenerateMemory": "torchinspect.memory",
}

if TYPE_CHECKING:  # what __getattr__ returns, spelled out for mypy/pyright (same names as PUBLIC_NAMES)
    from torchinspect.analysis import FlopsResult as FlopsResult
    from torchinspect.analysis import ParamsResult as ParamsResult
    from torchinspect.analysis import Summary as Summary
    from torchinspect.analysis import count_flops as count_flops
    from torchinspect.analysis import count_params as count_params
    from torchinspect.analysis import summarize as summarize
    from torchinspect.analysis.doctor import DoctorResult as DoctorResult
    from torchinspect.analysis.doctor import diagnose as diagnose
    from torchinspect.bench import BenchResult as BenchResult
    from torchinspect.bench import benchmark as benchmark
    from torchinspect.check import CheckResult as CheckResult
    from torchinspect.check import check_budgets as check_budgets
    from torchinspect.checkpoints import ConvertResult as ConvertResult
    from torchinspect.checkpoints import convert_checkpoint as convert_checkpoint
    from torchinspect.checkpoints.diff import DiffResult as DiffResult
    from torchinspect.checkpoints.diff import diff_state_dicts as diff_state_dicts
    from torchinspect.env import EnvInfo as EnvInfo
    from torchinspect.env import collect_env as collect_env
    from torchinspect.errors import ExitStatus as ExitStatus
    from torchinspect.errors import InspectError as InspectError
    from torchinspect.export.graph import Graph as Graph
    from torchinspect.export.graph import build_graph as build_graph
    from torchinspect.export.onnx import ExportResult as ExportResult
    from torchinspect.export.onnx import export_onnx as export_onnx
    from torchinspect.features import FeatureFolder as FeatureFolder
    from torchinspect.features import FeatureResult as FeatureResult
    from torchinspect.features import extract_features as extract_features
    from torchinspect.inputs import ExampleInputs as ExampleInputs
    from torchinspect.inputs import TensorSpec as TensorSpec
    from torchinspect.inputs import parse_inputs as parse_inputs
    from torchinspect.io.checkpoint import Checkpoint as Checkpoint
    from torchinspect.io.checkpoint import read_checkpoint as read_checkpoint
    from torchinspect.latency import GenerateLatency as GenerateLatency
    from torchinspect.latency import Prediction as Prediction
    from torchinspect.latency import TrainPrediction as TrainPrediction
    from torchinspect.latency import predict_generate_latency as predict_generate_latency
    from torchinspect.latency import predict_latency as predict_latency
    from torchinspect.latency import predict_train as predict_train
    from torchinspect.memory import GenerateMemory as GenerateMemory
    from torchinspect.memory import MemoryResult as MemoryResult
    from torchinspect.memory import predict_generate as predict_generate
    from torchinspect.memory import predict_memory as predict_memory
    from torchinspect.overview import Overview as Overview
    from torchinspect.overview import collect_overview as collect_overview
    from torchinspect.sources import LoadedModel as LoadedModel
    from torchinspect.sources import load_model as load_model
    from torchinspect.sources.case import ModelCase as ModelCase
    from torchinspect.sources.case import ModelLike as ModelLike
    from torchinspect.sources.case import ModelOptions as ModelOptions
    from torchinspect.sources.case import make_case as make_case
    from torchinspect.trace import Trace as Trace
    from torchinspect.trace import trace_model as trace_model
    from torchinspect.trace.formulas import MacFormulaEntry as MacFormulaEntry
    from torchinspect.trace.formulas import mac_formulas as mac_formulas
    from torchinspect.trace.formulas import register_mac_formula as register_mac_formula
    from torchinspect.trace.formulas import unregister_mac_formula as unregister_mac_formula

__all__ = ["__version__", *PUBLIC_NAMES]


def __getattr__(name: str) -> Any:
    if name in PUBLIC_NAMES:
        import importlib

        return getattr(importlib.import_module(PUBLIC_NAMES[name]), name)
    raise AttributeError(f"module 'torchinspect' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy API too (tab completion, ``dir(torchinspect)``)."""
    return sorted({*globals(), *PUBLIC_NAMES})
