"""Summary statistics of per-iteration times (pure Python, no torch or numpy).

Percentiles use linear interpolation between the closest ranks, the method numpy calls
``"linear"`` (its default; Hyndman & Fan type 7): for ``q`` in [0, 100] over ``n`` sorted
values the position is ``h = (n - 1) * q / 100`` and the result is
``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``.

``std`` is the sample standard deviation (``n - 1``); ``cov`` is ``std / mean``; ``iqr`` is
``p75 - p25``. ``median_cov`` estimates the relative standard error of the median,
``1.2533 * sigma / sqrt(n) / median`` with the robust ``sigma = iqr / 1.349`` (the asymptotic
standard error of a sample median is ``sqrt(pi / 2) * sigma / sqrt(n)`` for normal data);
it drives the adaptive stopping rule in :mod:`torchinspect.bench.timing`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)"
_SQRT_HALF_PI = math.sqrt(math.pi / 2)  # 1.2533...
_IQR_TO_SIGMA = 1.3489795003921634  # IQR of a standard normal


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linear interpolation."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    h = (n - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


@dataclass(frozen=True)
class Stats:
    """Statistics of ``n`` samples, in the samples' unit (seconds in bench results)."""

    n: int
    min: float
    max: float
    mean: float
    median: float
    p25: float
    p75: float
    p90: float
    p95: float
    p99: float
    std: float
    cov: float  # std / mean
    iqr: float  # p75 - p25
    median_cov: float  # relative standard error of the median (robust estimate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_stats(samples: Sequence[float]) -> Stats:
    """Statistics of a non-empty sequence of samples."""
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(var)
    p25, median, p75 = percentile(xs, 25), percentile(xs, 50), percentile(xs, 75)
    iqr = p75 - p25
    median_cov = (_SQRT_HALF_PI * (iqr / _IQR_TO_SIGMA) / math.sqrt(n) / median
                  if median > 0 and n > 1 else math.inf)
    return Stats(n=n, min=xs[0], max=xs[-1], mean=mean, median=median, p25=p25, p75=p75,
                 p90=percentile(xs, 90), p95=percentile(xs, 95), p99=percentile(xs, 99),
                 std=std, cov=std / mean if mean > 0 else 0.0, iqr=iqr, median_cov=median_cov)
