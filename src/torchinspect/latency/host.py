"""Host dispatch cost: what one eager op and one module call cost on the CPU this runs on.

An eager forward on a GPU is two pipelines: the host (Python, ``nn.Module.__call__``, the
dispatcher, the kernel launch) enqueues kernels, the GPU runs them. The host side is timed
here on the CPU the tool runs on, without a GPU: a loop of tiny CPU ops under
``torch.inference_mode`` (the dispatcher path without the launch) and a loop of empty module
calls. ``eager.py`` scales these by a factor fitted on a GPU host (launch cost included), so
a faster CPU predicts a faster host; the figure is the host's, whichever GPU is predicted.

The probe takes about 0.1 s. Its result is kept in the user's cache (``torchinspect.cache``,
read back as a stranger's file; one entry per machine and torch version), with when it was
measured, the machine's load then (``os.getloadavg`` against the cores) and the spread of its
trials. It is measured again when the cache is older than the installed torch, or when it was
taken on a loaded machine and the machine is quiet now. A measurement that looks disturbed
(load above ``LOADED`` per core, or a spread above ``NOISY``) is measured once more, and if
it stays disturbed it is used but said so (``HostCost.disturbed``, a note in the output),
never silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from torchinspect import cache

PROBE_VERSION = 2
LOADED = 1.0  # load average per core above which a probe is taken as disturbed
NOISY = 0.25  # (median - best) / best of the probe's trials above which it is disturbed


@dataclass(frozen=True)
class HostCost:
    """Microseconds per dispatched aten op and per ``nn.Module`` call on this CPU, and the
    circumstances of the measurement."""

    op_us: float
    module_us: float
    cpu: str
    cached: bool = False
    measured_at: float = 0.0  # Unix time of the probe (0: given, not measured here)
    load: float | None = None  # 1-minute load average when it was measured
    cores: int = 0
    spread: float = 0.0  # (median - best) / best over the probe's trials
    torch: str = ""
    note: str | None = None  # a cache entry refused or not saved (one line, for the notes)

    @property
    def disturbed(self) -> bool:
        """Taken on a loaded machine, or with trials that disagree."""
        busy = self.load is not None and self.cores > 0 and self.load / self.cores > LOADED
        return busy or self.spread > NOISY

    def describe(self) -> str:
        """When, where and under what load it was measured, for the output."""
        if not self.measured_at:
            return f"given ({self.op_us:.2f} µs per op, {self.module_us:.2f} µs per module call)"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        load = (f", load {self.load:.1f} on {self.cores} cores" if self.load is not None
                else "")
        text = (f"measured {'earlier' if self.cached else 'now'} on this CPU ({when}{load}): "
                f"{self.op_us:.2f} µs per op, {self.module_us:.2f} µs per module call")
        if self.disturbed:
            text += (" — disturbed (a loaded machine or trials that disagree): the eager "
                     "estimate may be high")
        return text

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("note")
        out["disturbed"] = self.disturbed
        return out


def _trials(fn: object, calls: int, trials: int) -> list[float]:
    """Microseconds per call of each of ``trials`` loops."""
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # no load average on this platform
        return None


def probe_host(calls: int = 2000, trials: int = 5) -> HostCost:
    """Time the dispatcher and module-call paths on this CPU (one thread, ~0.1 s): the best
    of ``trials`` loops (the least disturbed one), with their spread and the load."""
    import torch
    from torch import nn

    threads = torch.get_num_threads()
    a, b = torch.zeros(4), torch.ones(4)
    empty = nn.Identity()
    load = _load()
    try:
        torch.set_num_threads(1)
        with torch.inference_mode():
            ops = _trials(lambda: torch.add(a, b), calls, trials)
            mods = _trials(lambda: empty(a), calls, trials)
    finally:
        torch.set_num_threads(threads)
    spread = max(statistics.median(t) / min(t) - 1 for t in (ops, mods))
    after = _load()
    if load is None or (after is not None and after > load):
        load = after
    return HostCost(op_us=round(min(ops), 4), module_us=round(min(mods), 4), cpu=cpu_name(),
                    measured_at=round(time.time(), 1), load=load, cores=os.cpu_count() or 1,
                    spread=round(spread, 4), torch=torch.__version__)


def cpu_name() -> str:
    """The CPU model (``torchinspect.cache.cpu_model``: /proc/cpuinfo on Linux)."""
    return cache.cpu_model()


def torch_installed_at() -> float:
    """When the installed torch was installed (its package's modification time)."""
    import torch

    try:
        return Path(torch.__file__).stat().st_mtime
    except (OSError, TypeError):
        return 0.0


def _check(data: Any) -> HostCost:
    """The cached measurement, refused (ValueError naming the value) unless every value is
    what a probe gives: positive finite microseconds under 10 ms, a CPU name, a time, a load,
    cores and a spread in their ranges."""
    if not isinstance(data, dict):
        raise ValueError("data is not an object")
    load = data.get("load")
    return HostCost(
        op_us=cache.number(data.get("op_us"), "op_us", low=0.0, high=1e4, low_open=True),
        module_us=cache.number(data.get("module_us"), "module_us", low=0.0, high=1e4,
                               low_open=True),
        cpu=cache.text(data.get("cpu"), "cpu"), cached=True,
        measured_at=cache.number(data.get("measured_at"), "measured_at", low=0.0, high=1e11),
        load=None if load is None else cache.number(load, "load", low=0.0, high=1e5),
        cores=int(cache.number(data.get("cores"), "cores", low=1, high=1 << 20, integer=True)),
        spread=cache.number(data.get("spread"), "spread", low=0.0, high=1e3),
        torch=cache.text(data.get("torch", ""), "torch", most=100))


def cache_entry() -> tuple[str, dict[str, Any]]:
    """The cache entry's name and key: this machine and torch version (one entry each)."""
    import torch

    key = cache.machine_key(torch=torch.__version__)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"host-cost-{digest}", key


def _saved(cost: HostCost) -> dict[str, Any]:
    """What the cache keeps of a measurement (``_check`` reads it back)."""
    return {k: v for k, v in cost.to_dict().items() if k not in ("cached", "disturbed")}


def _stale(cost: HostCost) -> bool:
    """Measured again: older than the installed torch, or taken under load that has passed."""
    if cost.measured_at < torch_installed_at():
        return True
    if cost.disturbed:
        now = _load()
        return now is None or cost.cores <= 0 or now / cost.cores <= LOADED
    return False


def host_cost(*, refresh: bool = False) -> HostCost:
    """This machine's host cost: from the cache when it holds one for this machine and torch
    that is still good (see the module docstring), else measured (again, once, when the
    measurement looks disturbed) and saved."""
    entry, key = cache_entry()
    note = None
    if not refresh:
        found = cache.read(entry, version=PROBE_VERSION, key=key, check=_check,
                           what="host-cost cache", limit=64 << 10)
        if found.data is not None and not _stale(found.data):
            return found.data
        note = found.note
    cost = probe_host()
    if cost.disturbed:
        again = probe_host()
        cost = again if (again.spread, again.load or 0.0) < (cost.spread, cost.load or 0.0) \
            else cost
    saved = cache.write(entry, _saved(cost), version=PROBE_VERSION, key=key,
                        what="host-cost cache")
    notes = [n for n in (note, saved) if n]
    return replace(cost, note="; ".join(notes)) if notes else cost
