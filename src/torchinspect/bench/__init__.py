"""Latency and throughput measurement (``inspect bench``; Python: ``benchmark``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchinspect.bench.run import BenchOptions, BenchResult, ConfigResult, parse_dtype, run_bench
from torchinspect.bench.stats import Stats, sample_stats
from torchinspect.bench.timing import ProgressFn, Timing, TimingConfig, measure
from torchinspect.sources.case import ModelLike, ModelOptions, make_case

__all__ = ["BenchOptions", "BenchResult", "ConfigResult", "Stats", "Timing", "TimingConfig",
           "benchmark", "measure", "run_bench", "sample_stats"]


def benchmark(model: ModelLike, inputs: Any = None, *, device: str = "cpu",
              batch: int | Sequence[int] | None = None, dtype: str | Sequence[str] = "fp32",
              options: ModelOptions | None = None, progress: ProgressFn | None = None,
              **bench_options: Any) -> BenchResult:
    """Benchmark a model (``nn.Module`` or a MODEL spec such as ``"resnet18"``).

    ``inputs`` as for ``torchinspect.sources.case.make_case`` (``"3,224,224"``, a shape,
    tensors); ``batch`` one size or a sweep; ``dtype`` ``fp32``/``fp16``/``bf16`` or several;
    ``options`` a ``ModelOptions``; other keywords are
    ``BenchOptions`` fields (``amp``, ``cuda_graphs``, ``timing=TimingConfig(...)``, ...).
    The default device is the CPU, never a GPU.
    """
    batches = (batch,) if isinstance(batch, int) else (tuple(batch) if batch else None)
    dtypes = (dtype,) if isinstance(dtype, str) else tuple(dtype)
    case = make_case(model, inputs, options=options, device="meta")
    opts = BenchOptions(device=device, batches=batches,
                        dtypes=tuple(parse_dtype(d) for d in dtypes), **bench_options)
    return run_bench(case, opts, progress=progress)
