"""``--profile``: one profiled run of an already warmed-up step (torch.profiler).

Returns the top operators by self time (CUDA time on a GPU, CPU time otherwise) and writes a
Chrome trace (atomically) when a file is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

PROFILED_CALLS = 3


@dataclass(frozen=True)
class OpTime:
    name: str
    calls: int  # per profiled forward
    self_cpu_s: float  # per forward
    self_device_s: float  # per forward (0 on CPU)


@dataclass
class ProfileResult:
    config: str
    forwards: int
    sort_by: str  # self_device | self_cpu
    ops: list[OpTime] = field(default_factory=list)
    total_self_cpu_s: float = 0.0
    total_self_device_s: float = 0.0
    trace_file: str | None = None
    # GPU activities (kernels, copies, memsets) per forward and the sum of their durations:
    # a median well above kernel_s is time the GPU spends between kernels (launch latency)
    kernels_per_forward: float | None = None
    kernel_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ops"] = [asdict(o) for o in self.ops]
        return d


def _device_time(evt: Any) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(evt, name, None)
        if v is not None:
            return float(v)
    return 0.0


def _kernels(prof: Any, n: int) -> tuple[float | None, float | None]:
    """(GPU activities per call, their summed duration per call in seconds)."""
    from torch.autograd import DeviceType

    try:
        gpu = [e for e in prof.events() if getattr(e, "device_type", None) == DeviceType.CUDA]
        total_us = sum(e.time_range.elapsed_us() for e in gpu)
    except Exception:  # noqa: BLE001 - profiler internals differ between versions: omit
        return None, None
    if not gpu:
        return None, None
    return len(gpu) / n, total_us / 1e6 / n


def profile_step(step: Callable[[], Any], *, cuda: bool, sync: Callable[[], Any], rows: int = 15,
                 trace_file: str | None = None, label: str = "",
                 protect: tuple[str, ...] = ()) -> ProfileResult:
    """Profile ``PROFILED_CALLS`` calls of ``step``; times are per call, in seconds."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities) as prof:
        for _ in range(PROFILED_CALLS):
            step()
        sync()
    events = prof.key_averages()
    n = PROFILED_CALLS
    ops = [OpTime(e.key, round(e.count / n), e.self_cpu_time_total / 1e6 / n,
                  _device_time(e) / 1e6 / n) for e in events]
    key = "self_device" if cuda else "self_cpu"
    ops.sort(key=lambda o: getattr(o, f"{key}_s"), reverse=True)
    result = ProfileResult(config=label, forwards=n, sort_by=key, ops=ops[:rows],
                           total_self_cpu_s=sum(o.self_cpu_s for o in ops),
                           total_self_device_s=sum(o.self_device_s for o in ops))
    if cuda:
        result.kernels_per_forward, result.kernel_s = _kernels(prof, n)
    if trace_file:
        from torchinspect.io.atomic import atomic_path

        with atomic_path(trace_file, protect=protect) as tmp:
            prof.export_chrome_trace(str(tmp))
        result.trace_file = str(trace_file)
    return result
