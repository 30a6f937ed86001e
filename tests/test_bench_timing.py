"""bench statistics and the measurement loop, against numpy and a fake clock (no real timing)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from torchinspect.bench.stats import percentile, sample_stats
from torchinspect.bench.timing import TimingConfig, measure


class FakeClock:
    """A clock that only moves when a fake step says so."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeStep:
    """Each call advances the clock by the next duration (cycled)."""

    def __init__(self, clock: FakeClock, durations: list[float]):
        self.clock, self.durations, self.calls = clock, durations, 0

    def __call__(self) -> None:
        self.clock.t += self.durations[self.calls % len(self.durations)]
        self.calls += 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stats_match_numpy(seed):
    rng = random.Random(seed)
    xs = [rng.lognormvariate(0, 0.3) for _ in range(rng.randint(2, 300))]
    s = sample_stats(xs)
    a = np.asarray(xs)
    for q, got in [(25, s.p25), (50, s.median), (75, s.p75), (90, s.p90), (95, s.p95), (99, s.p99)]:
        assert got == pytest.approx(np.percentile(a, q, method="linear"), rel=1e-12)
    assert s.mean == pytest.approx(a.mean(), rel=1e-12)
    assert s.std == pytest.approx(a.std(ddof=1), rel=1e-12)
    assert s.cov == pytest.approx(a.std(ddof=1) / a.mean(), rel=1e-12)
    assert s.iqr == pytest.approx(np.percentile(a, 75) - np.percentile(a, 25), rel=1e-12)
    assert (s.min, s.max, s.n) == (a.min(), a.max(), len(xs))
    # robust standard error of the median: sqrt(pi/2) * (IQR / 1.349) / sqrt(n), relative
    sigma = s.iqr / (2 * 0.6744897501960817)
    assert s.median_cov == pytest.approx(math.sqrt(math.pi / 2) * sigma / math.sqrt(len(xs)) / s.median)


def test_percentile_edges():
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([1.0, 2.0, 4.0], 75) == 3.0  # h = 1.5 -> 2 + 0.5 * (4 - 2)
    with pytest.raises(ValueError):
        percentile([], 50)
    one = sample_stats([0.25])
    assert (one.std, one.cov, one.iqr) == (0.0, 0.0, 0.0)


def test_constant_step_converges_at_min_time():
    clock = FakeClock()
    step = FakeStep(clock, [0.01])
    cfg = TimingConfig(warmup_s=0.5, warmup_iters=5, min_time=1.0, max_time=5.0, min_iters=10,
                       block_s=0.1)
    t = measure(step, config=cfg, clock=clock)
    assert t.first_call_s == pytest.approx(0.01)
    assert t.warmup_iters == 50 and t.warmup_s == pytest.approx(0.5)  # time-based warm-up
    assert t.stop == "converged"
    assert t.stats.median == pytest.approx(0.01) and t.stats.cov == pytest.approx(0, abs=1e-9)
    # stops after the first block that ends at or past min_time: blocks of block_s
    assert t.wall_s == pytest.approx(1.0) and t.iters == 100 and t.blocks == 10
    assert step.calls == 1 + 50 + 100


def test_warmup_minimum_count_for_slow_steps():
    clock = FakeClock()
    t = measure(FakeStep(clock, [0.3]), clock=clock,
                config=TimingConfig(warmup_s=0.1, warmup_iters=3, min_time=0.1, max_time=10,
                                    min_iters=4))
    assert t.warmup_iters == 3  # count wins over a short warm-up time
    assert t.iters >= 4  # min_iters enforced even though min_time is long past


def test_noisy_steps_stop_at_max_time():
    clock = FakeClock()
    rng = random.Random(0)
    durations = [0.001 * rng.choice([1, 5, 20]) for _ in range(997)]
    cfg = TimingConfig(warmup_s=0.1, min_time=0.5, max_time=2.0, min_iters=10, target_cov=1e-4)
    t = measure(FakeStep(clock, durations), config=cfg, clock=clock)
    assert t.stop == "max_time"
    assert 2.0 <= t.wall_s < 2.0 + 0.1 + 0.02  # at most one block past max_time
    assert t.stats.median_cov > cfg.target_cov


def test_max_time_wins_over_min_iters():
    """--max-time bounds the run however many --min-iters were asked for (a huge --min-iters
    once timed calls until it was reached): the timing ends within one call of max_time."""
    clock = FakeClock()
    step = FakeStep(clock, [0.01])
    cfg = TimingConfig(warmup_s=0, warmup_iters=1, min_time=0.1, max_time=0.5, min_iters=10**9)
    t = measure(step, clock=clock, config=cfg)
    assert t.stop == "max_time"
    assert cfg.max_time <= t.wall_s <= cfg.max_time + 0.01 + 1e-9
    assert t.iters == round(t.wall_s / 0.01) < cfg.min_iters
    # slow calls: one timed call, and still no second one past max_time
    clock = FakeClock()
    t = measure(FakeStep(clock, [1.0]), clock=clock,
                config=TimingConfig(warmup_s=0, warmup_iters=1, min_time=0.1, max_time=0.5,
                                    min_iters=7))
    assert t.iters == 1 and t.stop == "max_time"


def test_max_iters():
    clock = FakeClock()
    t = measure(FakeStep(clock, [0.001, 0.002]), clock=clock,
                config=TimingConfig(warmup_s=0, warmup_iters=1, min_time=100, max_time=200,
                                    min_iters=1, max_iters=25))
    assert t.iters == 25 and t.stop == "max_iters"


class FakeEvent:
    """A CUDA-event stand-in: records the fake device's time line."""

    def __init__(self, device: FakeDevice) -> None:
        self.device, self.at = device, None

    def record(self) -> None:
        self.at = self.device.busy_until

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1000.0  # ms, like torch.cuda.Event


class FakeDevice:
    """Host enqueues in ``host_s``; the device runs each call for ``gpu_s`` after the last."""

    def __init__(self, clock: FakeClock, host_s: float, gpu_s: float) -> None:
        self.clock, self.host_s, self.gpu_s = clock, host_s, gpu_s
        self.busy_until = 0.0

    def step(self) -> None:
        self.clock.t += self.host_s
        self.busy_until = max(self.busy_until, self.clock.t) + self.gpu_s

    def sync(self) -> None:
        self.clock.t = max(self.clock.t, self.busy_until)

    def events(self) -> tuple[FakeEvent, FakeEvent]:
        return FakeEvent(self), FakeEvent(self)


def test_events_time_the_device_not_the_host():
    clock = FakeClock()
    dev = FakeDevice(clock, host_s=0.0002, gpu_s=0.004)
    cfg = TimingConfig(warmup_s=0.05, min_time=0.5, max_time=1.0, min_iters=10)
    t = measure(dev.step, config=cfg, clock=clock, sync=dev.sync, events=dev.events)
    assert t.stats.median == pytest.approx(0.004)  # device time per call, not enqueue time
    assert t.host_stats is not None and t.host_stats.median == pytest.approx(0.0002)
    assert len(t.host_samples) == t.blocks
    # wall time of synchronized blocks: the device is the bottleneck
    assert t.wall_s == pytest.approx(t.iters * 0.004 + t.blocks * 0.0002, rel=1e-6)


def test_progress_is_throttled_but_never_silent():
    clock = FakeClock()
    lines: list[tuple[float, str]] = []
    cfg = TimingConfig(warmup_s=1.0, min_time=3.0, max_time=6.0, min_iters=10)
    measure(FakeStep(clock, [0.02]), config=cfg, clock=clock,
            progress=lambda s: lines.append((clock.t, s)), label="fp32 batch 1")
    times = [t for t, _ in lines]
    assert all(s.startswith("fp32 batch 1: ") for _, s in lines)
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 0.6
    assert len(lines) <= (clock.t / 0.5) + 3


def test_warmup_text_says_what_the_loop_did_for_slow_calls():
    # 1.4 s calls: the warm-up asks 5 calls and 1 s but is cut off at max_time / 2 = 3 s
    clock = FakeClock()
    cfg = TimingConfig()
    t = measure(FakeStep(clock, [1.4]), clock=clock, config=cfg)
    assert t.warmup_iters < cfg.warmup_iters
    text = cfg.warmup_text([t.warmup_iters])
    assert f"cut off after {max(cfg.warmup_s, cfg.max_time / 2):g} s" in text
    assert f"(ran {t.warmup_iters} calls)" in text
