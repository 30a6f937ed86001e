"""The eager estimate's host side: a property of the host, not of the GPU.

An eager forward is two pipelines: the host (Python, ``nn.Module.__call__``, the dispatcher,
the kernel launch) enqueues kernels, the GPU runs them; the slower one binds. The host's time
is this CPU's measured cost per dispatched op and per module call (``host.host_cost``, a probe
without a GPU) times a **host factor** (the dispatcher and Python on the GPU host against this
CPU), plus a **launch factor** times the probe's op cost per kernel launched (what the probe
cannot see: CUDA's launch path, the caching allocator; a cuDNN RNN launches every step's
kernels from the host). Both are fitted on the GPU host's development set by
``benchmarks/latency_tables.py`` and shipped in every measured table. They are the host's, so
every GPU is predicted with the same ones (the median over the measured tables): two GPUs
predicted from one CPU differ only by GPU time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from torchinspect.latency.calibrated import measured_tables
from torchinspect.latency.host import HostCost, host_cost

DEFAULT_HOST_FACTOR = 3.0  # only for an install that ships no measured table at all


@dataclass(frozen=True)
class HostModel:
    """This CPU's dispatch cost and the host factor: the host time of a forward."""

    cost: HostCost
    factor: float
    launch: float = 0.0  # x op_us per kernel launched

    def ms(self, dispatched: int, module_calls: int, kernels: float = 0.0) -> float:
        """Host milliseconds of a forward that dispatches ``dispatched`` aten ops (views
        included) through ``module_calls`` module calls and launches ``kernels`` kernels."""
        return (self.factor * (dispatched * self.cost.op_us + module_calls * self.cost.module_us)
                + self.launch * kernels * self.cost.op_us) / 1e3


def host_factor() -> float:
    """The host factor every GPU is predicted with: the median of the measured tables'."""
    factors = [t.host_factor for t in measured_tables()]
    return statistics.median(factors) if factors else DEFAULT_HOST_FACTOR


def launch_factor() -> float:
    """The launch factor every GPU is predicted with: the median of the measured tables'."""
    factors = [t.launch_factor for t in measured_tables()]
    return statistics.median(factors) if factors else 0.0


def host_model(cost: HostCost | None = None) -> HostModel:
    """The host model of this machine (its probed cost, cached per machine, unless given)."""
    return HostModel(cost if cost is not None else host_cost(), host_factor(), launch_factor())
