"""A failed CUDA-graph capture is that configuration's error, and the process stays usable.

On the GPU (issue 40's campaign), one model whose forward cannot be captured left the CUDA
random generator in capture mode, and every later model of the process failed with "Offset
increment outside graph capture encountered unexpectedly". The CPU tests drive
``bench/graphs.py`` with a stand-in for ``torch.cuda`` that fails the way CUDA does; the
CUDA test captures a forward that syncs with the host, then benchmarks a model that draws
random numbers, in one process.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from torchinspect.bench.graphs import DeviceUnusable, GraphCaptureFailed, capture


class _Generator:
    def __init__(self, capturing: bool = False) -> None:
        self.capturing = capturing

    def clone_state(self) -> _Generator:
        return _Generator(False)  # CUDAGeneratorState::clone: a state out of capture mode

    def graphsafe_set_state(self, other: _Generator) -> None:
        self.capturing = other.capturing


class _FakeCuda:
    """What a capture does to the generators, as CUDAGraph/torch.cuda.graph do it: the
    generator enters capture mode at the start and leaves it only when the capture ends
    cleanly; a forward that fails inside makes the graph's exit fail too."""

    def __init__(self, *, broken_after_failure: bool = False) -> None:
        self.default_generators = [_Generator()]
        self.broken_after_failure = broken_after_failure
        self.broken = False
        self.resets = 0

    def Stream(self, device: str) -> Any:  # noqa: N802 - torch.cuda's spelling
        return SimpleNamespace(wait_stream=lambda other: None)

    def current_stream(self, device: str) -> Any:
        return SimpleNamespace(wait_stream=lambda other: None)

    def stream(self, s: Any) -> Any:
        return contextlib.nullcontext()

    def synchronize(self, device: str | None = None) -> None:
        if self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def empty_cache(self) -> None:
        pass

    def CUDAGraph(self) -> Any:  # noqa: N802
        cuda = self

        class Graph:
            def reset(self) -> None:
                cuda.resets += 1

            def replay(self) -> None:
                pass
        return Graph()

    @contextlib.contextmanager
    def graph(self, g: Any) -> Any:
        for gen in self.default_generators:
            gen.capturing = True
        try:
            yield
        except Exception:
            self.broken = self.broken_after_failure
            raise RuntimeError("CUDA error: operation failed due to a previous error during "
                               "capture") from None
        for gen in self.default_generators:
            gen.capturing = False


class _FakeTorch:
    def __init__(self, cuda: _FakeCuda) -> None:
        self.cuda = cuda

    def empty(self, n: int, device: str) -> Any:
        cuda = self.cuda

        def normal_() -> None:
            if any(g.capturing for g in cuda.default_generators):
                raise RuntimeError("Offset increment outside graph capture encountered "
                                   "unexpectedly.")
        return SimpleNamespace(normal_=normal_)


def _host_sync() -> Any:
    raise RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture")


def test_a_failed_capture_names_the_forwards_own_error_and_leaves_the_generator_usable():
    cuda = _FakeCuda()
    fake = _FakeTorch(cuda)
    calls = {"n": 0}

    def step() -> Any:
        calls["n"] += 1
        if calls["n"] > 3:  # the warm-up runs eagerly; the captured call syncs with the host
            _host_sync()
        return "out"

    with pytest.raises(GraphCaptureFailed) as info:
        capture(fake, step, "cuda:0")
    text = str(info.value)
    assert "Cannot copy between CPU and CUDA tensors" in text  # the cause, not the exit's error
    assert "previous error during capture" not in text
    assert "without --cuda-graphs" in text
    assert not any(g.capturing for g in cuda.default_generators)
    assert cuda.resets == 1
    replay = capture(fake, lambda: "next", "cuda:0")  # the next model captures and replays
    assert replay() == "next"


def test_without_the_recovery_the_next_random_op_fails_as_on_the_gpu():
    """The stand-in reproduces the GPU's failure when nothing is undone (so the test above
    tests the recovery, not a lenient fake)."""
    cuda = _FakeCuda()
    fake = _FakeTorch(cuda)
    with pytest.raises(RuntimeError, match="previous error during capture"), \
            cuda.graph(cuda.CUDAGraph()):
        _host_sync()
    with pytest.raises(RuntimeError, match="Offset increment outside graph capture"):
        fake.empty(16, "cuda:0").normal_()


def test_a_device_that_stays_broken_is_said_and_later_configurations_are_not_run():
    from torchinspect.bench.run import _Runner

    cuda = _FakeCuda(broken_after_failure=True)
    fake = _FakeTorch(cuda)
    calls = {"n": 0}

    def step() -> Any:
        calls["n"] += 1
        if calls["n"] > 3:
            _host_sync()
        return None

    with pytest.raises(DeviceUnusable, match="unusable after a failed CUDA-graph capture"):
        capture(fake, step, "cuda:0")
    calls["n"] = 0
    runner = _Runner.__new__(_Runner)  # the runner's state, without a model or a device
    broken = _FakeTorch(_FakeCuda(broken_after_failure=True))
    runner.torch, runner.device, runner.unusable = broken, "cuda:0", None
    with pytest.raises(DeviceUnusable):
        runner.capture_graph(step)
    assert runner.unusable and "process of its own" in runner.unusable
    runner.case = SimpleNamespace(example=None)
    row, prof = runner.run_config(None, None, "bf16", 4)
    assert row.status == "error" and row.error.startswith("not run: the CUDA device is unusable")
    assert prof is None


class _HostSync(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 1e30:  # a host sync: cannot be captured
            return x
        return x * 2


class _Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)  # the CUDA generator, in the graph and outside it


@pytest.mark.cuda
def test_cuda_a_failed_capture_is_one_rows_error_and_the_next_model_runs():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on a GPU machine)")
    from torchinspect.bench.run import BenchOptions, run_bench
    from torchinspect.bench.timing import TimingConfig
    from torchinspect.sources.case import make_case

    timing = TimingConfig(warmup_s=0.01, warmup_iters=2, min_time=0.01, max_time=0.2,
                          min_iters=3)
    opts = BenchOptions(device="cuda", batches=(2,), dtypes=("fp32",), cuda_graphs=True,
                        timing=timing)
    bad = run_bench(make_case(_HostSync(), "8"), opts)
    assert [c.status for c in bad.configs] == ["error"]
    assert "cannot be captured in a CUDA graph" in bad.configs[0].error
    good = run_bench(make_case(_Noisy(), "8"), opts)  # same process: the generator works
    assert [c.status for c in good.configs] == ["ok"]
    torch.randn(4, device="cuda").sum().item()
