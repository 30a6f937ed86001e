"""Latency and throughput measurement (``inspect bench``; Python: ``benchmark``).

The names below are imported on first use (``bench.modes``, the vocabularies the CLI
declares its choices from, stays cheap to import at start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "BenchOptions": "torchinspect.bench.run", "BenchResult": "torchinspect.bench.run",
    "ConfigResult": "torchinspect.bench.run", "benchmark": "torchinspect.bench.run",
    "run_bench": "torchinspect.bench.run", "Stats": "torchinspect.bench.stats",
    "sample_stats": "torchinspect.bench.stats", "Timing": "torchinspect.bench.timing",
    "TimingConfig": "torchinspect.bench.timing", "measure": "torchinspect.bench.timing",
    "CompileMode": "torchinspect.bench.modes", "OnOom": "torchinspect.bench.modes",
    "Status": "torchinspect.bench.modes",
}
__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from torchinspect.bench.modes import CompileMode as CompileMode
    from torchinspect.bench.modes import OnOom as OnOom
    from torchinspect.bench.modes import Status as Status
    from torchinspect.bench.run import BenchOptions as BenchOptions
    from torchinspect.bench.run import BenchResult as BenchResult
    from torchinspect.bench.run import ConfigResult as ConfigResult
    from torchinspect.bench.run import benchmark as benchmark
    from torchinspect.bench.run import run_bench as run_bench
    from torchinspect.bench.stats import Stats as Stats
    from torchinspect.bench.stats import sample_stats as sample_stats
    from torchinspect.bench.timing import Timing as Timing
    from torchinspect.bench.timing import TimingConfig as TimingConfig
    from torchinspect.bench.timing import measure as measure


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchinspect.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
