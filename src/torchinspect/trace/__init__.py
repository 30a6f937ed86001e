"""One instrumented forward -> Trace records (policy.py decides where; engine.py runs it)."""

from torchinspect.trace.policy import trace_case, trace_model
from torchinspect.trace.records import CallRecord, ModuleInfo, ParamStats, Trace

__all__ = ["CallRecord", "ModuleInfo", "ParamStats", "Trace", "trace_case", "trace_model"]
