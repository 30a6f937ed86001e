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

import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass, replace

from torchinspect import cache

PROBE_VERSION = 1


@dataclass(frozen=True)
class HostCost:
    """Microseconds per dispatched aten op and per ``nn.Module`` call on this CPU."""

    op_us: float
    module_us: float
    cpu: str
    cached: bool = False
    note: str | None = None  # a cache entry refused or not saved (one line, for the notes)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("note")
        return out


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


def _check(data: object) -> HostCost:
    """The cached measurement, refused unless every value is what a probe gives: positive
    finite microseconds (under 10 ms per op or call) and a CPU name."""
    if not isinstance(data, dict):
        raise ValueError("data is not an object")
    return HostCost(op_us=cache.number(data.get("op_us"), "op_us", low=0.0, high=1e4, low_open=True),
                    module_us=cache.number(data.get("module_us"), "module_us", low=0.0, high=1e4,
                                           low_open=True),
                    cpu=cache.text(data.get("cpu"), "cpu"), cached=True)


def cache_entry() -> tuple[str, dict[str, object]]:
    """The cache entry's name and key: this machine and torch version (one entry each)."""
    import torch

    key = cache.machine_key(torch=torch.__version__)
    return "host-cost-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16], key


def host_cost(*, refresh: bool = False) -> HostCost:
    """This machine's host cost, from the user's cache (torchinspect.cache: validated as any
    untrusted file) when it holds one for this machine and torch; else measured and saved.
    A cache entry that was refused, or could not be saved, is said in ``note``."""
    name, key = cache_entry()
    note = None
    if not refresh:
        found = cache.read(name, version=PROBE_VERSION, key=key, check=_check,
                           what="host-cost cache", limit=64 << 10)
        if found.data is not None:
            return found.data
        note = found.note
    cost = probe_host()
    saved = cache.write(name, {"op_us": cost.op_us, "module_us": cost.module_us, "cpu": cost.cpu},
                        version=PROBE_VERSION, key=key, what="host-cost cache")
    notes = [n for n in (note, saved) if n]
    return replace(cost, note="; ".join(notes) or None) if notes else cost
