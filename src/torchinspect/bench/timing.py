"""The measurement loop: first call, warm-up, then synchronized blocks until the median is stable.

Everything that touches a device is injected, so the loop and its stopping rule run against
a fake clock in tests:

* ``step()``   one forward (or one CUDA-graph replay);
* ``clock()``  host seconds (``time.perf_counter``);
* ``sync()``   waits for the device (``torch.cuda.synchronize``; a no-op on CPU);
* ``events()`` a fresh ``(start, end)`` pair of timing events (``torch.cuda.Event``), or None.

Method. The first call is timed on its own (synchronized). Warm-up runs until at least
``warmup_iters`` calls and ``warmup_s`` seconds are done. Timing then runs in blocks of
about ``block_s`` seconds: ``sync``, clock, ``k`` calls, ``sync``, clock; the block's wall
time feeds throughput (``iterations / wall``). Per-iteration times are the host clock around
each call on CPU and, with events, the device time between a start and an end event recorded
around each call (no sync inside a block, so the device queue stays fed). With events, the
host time to *enqueue* the first call of each block (the queue is empty after the sync) is
kept too: when it is close to the device time the run is launch-bound.

Stopping rule, checked after each block: stop when at least ``min_iters`` calls and
``min_time`` seconds are done and the relative standard error of the median
(:attr:`Stats.median_cov`) is at most ``target_cov``; or when ``max_time`` is reached; or at
``max_iters``. ``max_time`` wins over ``min_iters``: it bounds the timing however many calls
were asked for (a block is cut to fit what is left of it; at least one call is timed), so a
huge ``--min-iters`` cannot make a run endless. The warm-up is bounded by ``max_time / 2``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from torchinspect.arguments import MAX_COUNT, MAX_SECONDS, ProgressFn, bounded
from torchinspect.bench.stats import Stats, sample_stats

PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class TimingConfig:
    """Warm-up and stopping settings (seconds). Defaults: one configuration takes ~3-8 s."""

    warmup_s: float = 1.0
    warmup_iters: int = 5
    min_time: float = 2.0
    max_time: float = 6.0
    min_iters: int = 10
    target_cov: float = 0.005  # relative standard error of the median
    block_s: float = 0.1
    max_iters: int = 1_000_000

    def __post_init__(self) -> None:
        """Finite and bounded (arguments.py), as the CLI's options are when parsed: a warm-up
        of ``inf`` seconds would never end."""
        for name in ("warmup_s", "min_time", "max_time", "block_s"):
            bounded(getattr(self, name), name, least=0, most=MAX_SECONDS, unit="seconds",
                    why="a day")
        for name in ("warmup_iters", "min_iters", "max_iters"):
            bounded(getattr(self, name), name, least=0, most=MAX_COUNT, unit="iterations")
        bounded(self.target_cov, "target_cov", least=0, most=1, unit="a relative error")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def warmup_text(self, done: list[int] | None = None) -> str:
        """The warm-up as the loop runs it: its minimums and the cut-off that can end it
        early (slow calls get fewer than ``warmup_iters``), with the call counts ``done``."""
        cap = max(self.warmup_s, self.max_time / 2)
        text = (f"warm-up until {self.warmup_iters} calls and {self.warmup_s:g} s, "
                f"cut off after {cap:g} s")
        if done:
            lo, hi = min(done), max(done)
            text += f" (ran {lo} call{'s' if hi != 1 else ''})" if lo == hi else f" (ran {lo}-{hi} calls)"
        return text


@dataclass
class Timing:
    """What one configuration's measurement produced (seconds)."""

    first_call_s: float
    warmup_iters: int
    warmup_s: float
    samples: list[float]  # per-iteration: device time (events) or host wall time
    wall_s: float  # sum of the synchronized blocks' wall times
    blocks: int
    stop: str  # converged | max_time | max_iters
    stats: Stats
    host_samples: list[float] = field(default_factory=list)  # enqueue time, events only
    host_stats: Stats | None = None

    @property
    def iters(self) -> int:
        return len(self.samples)

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "first_call_s": self.first_call_s, "warmup_iters": self.warmup_iters,
            "warmup_s": self.warmup_s, "iters": self.iters, "wall_s": self.wall_s,
            "blocks": self.blocks, "stop": self.stop, "stats": self.stats.to_dict(),
            "host_enqueue": self.host_stats.to_dict() if self.host_stats else None,
        }
        if samples:
            d["samples_s"] = list(self.samples)
            d["host_samples_s"] = list(self.host_samples)
        return d


def _noop() -> None:
    return None


def measure(step: Callable[[], Any], *, config: TimingConfig | None = None,
            clock: Callable[[], float] = time.perf_counter,
            sync: Callable[[], Any] = _noop,
            events: Callable[[], tuple[Any, Any]] | None = None,
            progress: ProgressFn | None = None, label: str = "") -> Timing:
    """Time ``step`` (see the module docstring for the method and the stopping rule)."""
    cfg = config or TimingConfig()
    say = _Throttled(progress, clock, label)

    # first call, on its own
    sync()
    t0 = clock()
    step()
    sync()
    first = clock() - t0
    say(f"first call {fmt_time(first)}, warming up", force=True)

    # warm-up: a minimum count and a minimum time, bounded by max_time once one call is done
    w0 = clock()
    n = 0
    while n < cfg.warmup_iters or clock() - w0 < cfg.warmup_s:
        step()
        n += 1
        if clock() - w0 >= max(cfg.warmup_s, cfg.max_time / 2):
            break
        say(f"warming up ({n} calls)")
    sync()
    warm = clock() - w0
    estimate = warm / n if n else first

    samples: list[float] = []
    host: list[float] = []
    wall = 0.0
    blocks = 0
    start = clock()
    stop = "max_time"
    stats: Stats | None = None
    while True:
        k = _block_size(estimate, cfg, elapsed=clock() - start, done=len(samples))
        sync()
        b0 = clock()
        if events is None:
            for _ in range(k):
                h0 = clock()
                step()
                samples.append(clock() - h0)
            sync()
            b1 = clock()
        else:
            pairs = []
            for i in range(k):
                ev_start, ev_end = events()
                h0 = clock()
                ev_start.record()
                step()
                ev_end.record()
                if i == 0:
                    host.append(clock() - h0)
                pairs.append((ev_start, ev_end))
            sync()
            b1 = clock()
            samples.extend(s.elapsed_time(e) / 1000.0 for s, e in pairs)  # ms -> s
        blocks += 1
        wall += b1 - b0
        elapsed = b1 - start
        stats = sample_stats(samples)
        estimate = max(stats.median, wall / len(samples) if samples else 0.0)
        say(f"{len(samples)} iters, median {fmt_time(stats.median)}, "
            f"±{stats.median_cov * 100:.2f}% (median error)")
        enough = len(samples) >= cfg.min_iters
        if enough and elapsed >= cfg.min_time and stats.median_cov <= cfg.target_cov:
            stop = "converged"
            break
        if elapsed >= cfg.max_time:  # the bound, before min_iters too
            stop = "max_time"
            break
        if len(samples) >= cfg.max_iters:
            stop = "max_iters"
            break
    assert stats is not None
    return Timing(first_call_s=first, warmup_iters=n, warmup_s=warm, samples=samples,
                  wall_s=wall, blocks=blocks, stop=stop, stats=stats, host_samples=host,
                  host_stats=sample_stats(host) if host else None)


def _block_size(estimate: float, cfg: TimingConfig, *, elapsed: float, done: int) -> int:
    """Calls in the next block: about ``block_s`` of work, never past ``max_time`` nor
    ``max_iters``."""
    per = max(estimate, 1e-9)
    k = max(1, min(round(cfg.block_s / per), 10_000))
    k = min(k, max(1, int((cfg.max_time - elapsed) / per)))
    return max(1, min(k, cfg.max_iters - done))


class _Throttled:
    """Calls ``progress`` at most every PROGRESS_EVERY_S (of the injected clock)."""

    def __init__(self, progress: ProgressFn | None, clock: Callable[[], float], label: str):
        self.progress, self.clock, self.label = progress, clock, label
        self.last = -float("inf")

    def __call__(self, text: str, force: bool = False) -> None:
        if self.progress is None:
            return
        now = self.clock()
        if force or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.progress(f"{self.label}: {text}" if self.label else text)


def fmt_time(seconds: float) -> str:
    """3.21 ms / 45.6 us / 1.20 s."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
