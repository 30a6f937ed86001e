"""``--profile``: one profiled run of an already warmed-up step (torch.profiler).

Returns the top operators by self time (CUDA time on a GPU, CPU time otherwise) and writes a
Chrome trace (atomically) when a file is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.io.atomic import atomic_path

PROFILED_CALLS = 3
# cuDNN's layout conversions around a convolution whose kernel wants the other memory format
TRANSPOSE_KERNELS = ("nchwToNhwc", "nhwcToNchw")
# a layout hint is given from this many transposes per forward and this share of the kernels
HINT_MIN_TRANSPOSES, HINT_MIN_SHARE = 4, 0.1


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
    # cuDNN NCHW<->NHWC conversion kernels per forward, and their summed time
    layout_transposes: float | None = None
    layout_transpose_s: float | None = None

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


def _kernels(prof: Any, n: int) -> dict[str, float] | None:
    """Per call: GPU activities, their summed duration (s), and the layout transposes among
    them (count, duration)."""
    from torch.autograd import DeviceType

    try:
        gpu = [e for e in prof.events() if getattr(e, "device_type", None) == DeviceType.CUDA]
        total_us = sum(e.time_range.elapsed_us() for e in gpu)
        layout = [e for e in gpu if any(k in e.name for k in TRANSPOSE_KERNELS)]
        layout_us = sum(e.time_range.elapsed_us() for e in layout)
    except Exception:  # noqa: BLE001 - profiler internals differ between versions: omit
        return None
    if not gpu:
        return None
    return {"kernels_per_forward": len(gpu) / n, "kernel_s": total_us / 1e6 / n,
            "layout_transposes": len(layout) / n, "layout_transpose_s": layout_us / 1e6 / n}


def layout_hint(prof: ProfileResult, channels_last: bool) -> str | None:
    """Advice when cuDNN spends a real share of the forward converting layouts: the model runs
    in the other memory format than the one its convolution kernels use."""
    n, total = prof.layout_transposes, prof.kernels_per_forward
    if not n or not total or n < HINT_MIN_TRANSPOSES or n / total < HINT_MIN_SHARE:
        return None
    what = (f"layout: {n:g} of {total:g} GPU kernels per forward are cuDNN NCHW<->NHWC "
            f"conversions ({_us(prof.layout_transpose_s)} of {_us(prof.kernel_s)} kernel time); ")
    if channels_last:
        return what + ("cuDNN picked NCHW kernels for this dtype and math: "
                       "try without --channels-last")
    return what + "cuDNN's kernels here are NHWC: try --channels-last"


def _us(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e6:.0f} us"


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
        for key, value in (_kernels(prof, n) or {}).items():
            setattr(result, key, value)
    if trace_file:
        with atomic_path(trace_file, protect=protect) as tmp:
            prof.export_chrome_trace(str(tmp))
        result.trace_file = str(trace_file)
    return result
