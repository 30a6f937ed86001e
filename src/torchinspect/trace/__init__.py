"""The trace engine: one instrumented forward, meta by default (see engine.py)."""

from torchinspect.trace.engine import trace_model
from torchinspect.trace.records import CallRecord, ModuleInfo, ParamStats, TensorMeta, Trace

__all__ = ["CallRecord", "ModuleInfo", "ParamStats", "TensorMeta", "Trace", "trace_model"]
