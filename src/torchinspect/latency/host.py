"""Host dispatch cost: what one eager op and one module call cost on the CPU this runs on.

An eager forward on a GPU is two pipelines: the host (Python, ``nn.Module.__call__``, the
dispatcher, the kernel launch) enqueues kernels, the GPU runs them. The host side is timed
here on the CPU the tool runs on, without a GPU: a loop of tiny CPU ops under
``torch.inference_mode`` (the dispatcher path without the launch) and a loop of empty module
calls. ``predict`` scales these by a factor fitted on a GPU host (launch cost included), so
a faster CPU predicts a faster host. The probe takes about 0.1 s; its result is cached per
machine and torch version in the user's cache folder.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROBE_VERSION = 1


@dataclass(frozen=True)
class HostCost:
    """Microseconds per dispatched aten op and per ``nn.Module`` call on this CPU."""

    op_us: float
    module_us: float
    cpu: str
    cached: bool = False

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _best_per_call(fn: object, calls: int, trials: int) -> float:
    """Microseconds per call: the fastest of ``trials`` loops (the least disturbed one)."""
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best / calls * 1e6


def probe_host(calls: int = 2000, trials: int = 5) -> HostCost:
    """Time the dispatcher and module-call paths on this CPU (one thread, ~0.1 s)."""
    import torch
    from torch import nn

    threads = torch.get_num_threads()
    a, b = torch.zeros(4), torch.ones(4)
    empty = nn.Identity()
    try:
        torch.set_num_threads(1)
        with torch.inference_mode():
            op_us = _best_per_call(lambda: torch.add(a, b), calls, trials)
            call_us = _best_per_call(lambda: empty(a), calls, trials)
    finally:
        torch.set_num_threads(threads)
    return HostCost(op_us=round(op_us, 4), module_us=round(call_us, 4), cpu=cpu_name())


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo on Linux), else platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchinspect" / "host-cost.json"


def host_cost(*, refresh: bool = False) -> HostCost:
    """This machine's host cost, from the cache when it holds one for this CPU and torch."""
    import torch

    key = f"{PROBE_VERSION}|{platform.node()}|{cpu_name()}|{torch.__version__}"
    path = _cache_file()
    if not refresh:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("key") == key:
                return HostCost(float(data["op_us"]), float(data["module_us"]), str(data["cpu"]),
                                cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    cost = probe_host()
    try:  # a cache that cannot be written only costs the next run 0.1 s
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, **cost.to_dict()}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
    return cost
