"""Summary's memory line from the trace's own forward, not a second one.

`inspect summary` shows the predicted inference peak (``inspect memory``'s engine, the CUDA
caching allocator). `InferenceWatch` is a ``trace.engine.ForwardWatch``: the trace's meta
forward runs on its stand-ins (``fake_state``'s weights and buffers, ``fake_inputs``' inputs,
in the order ``predict.track`` makes them) with the storage tracker and CUDA's kernel choices
(``kernels.cuda_kernels``) inside the counting modes, so one forward gives the layer table,
the MACs and the allocation log; the log is replayed as ``predict.track`` replays its own.
The figures are the ones a separate prediction gives (tests compare them on several models).

Two of CUDA's kernels are ones both readers see: ``scaled_dot_product_attention`` and
``rms_norm``. The counter must see the route a trace of its own takes on meta (the math
attention's ``bmm``s, softmax and masks; the RMSNorm composite's ops, listed as not counted),
the tracker the route CUDA takes (``kernels.attention``, ``kernels.rms_norm``). Each call runs
both: the trace's route with the tracker paused, then CUDA's with its ops hidden from the
counter (the tracker runs them below every other mode). Attention is taken as an aten kernel
(so ``nn.MultiheadAttention``'s inner call is too), rms_norm at the function level
(``F.rms_norm``, ``torch.rms_norm``: it has no separate composite op to call).

Where the memory run takes a different route from the counted one, the forward is not shared
(`applies`) and the summary predicts in a second pass, as before: modules the prediction runs
as one fused CUDA kernel (``nn.LSTM``/``GRU``/``RNN`` through cuDNN, and the eval fast paths of
``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``, ``fused.py``). A functional
RNN call found in the log (``_VF.lstm`` outside an ``nn.RNNBase``) marks the shared forward
`diverged`: the summary traces again without the watch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from torchinspect.memory.faking import Target, fake_inputs, fake_state, model_sizes
from torchinspect.memory.kernels import (
    attention,
    cuda_kernels,
    in_prediction,
    math_attention,
    rms_norm,
)
from torchinspect.memory.modules import ForwardModules
from torchinspect.memory.predict import make_workspaces, memory_result, replay_ranged, step_notes
from torchinspect.memory.result import MemoryResult
from torchinspect.memory.step import StepConfig
from torchinspect.memory.tracker import StorageTracker
from torchinspect.privtorch import aten_overrides, without_dispatch_modes
from torchinspect.shapes import tensor_leaves
from torchinspect.sources.case import ModelCase
from torchinspect.trace.attention import MATH, cuda_sdpa_kernel

# modules whose prediction is a fused kernel that the counted forward must not take
SEPARATE = (nn.RNNBase, nn.TransformerEncoderLayer, nn.MultiheadAttention)
SHARED_KERNELS = frozenset({"scaled_dot_product_attention", "rms_norm"})


class _Tracker(StorageTracker):
    """The storage tracker with two switches: while ``paused`` it passes ops on unseen (the
    counter's route), while ``hidden`` it logs ops and runs them below every other mode
    (CUDA's route, which the counter must not see)."""

    paused = 0
    hidden = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.paused:
            return func(*args, **(kwargs or {}))
        if self.hidden:
            with without_dispatch_modes():
                return super().__torch_dispatch__(func, types, args, kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)

    @contextlib.contextmanager
    def switched(self, name: str) -> Iterator[None]:
        setattr(self, name, getattr(self, name) + 1)
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) - 1)


def _both_routes(tracker: _Tracker, traced: Any, predicted: Any) -> Any:
    """``traced()`` for the counter, then ``predicted()`` for the tracker (its result)."""
    with tracker.switched("paused"):
        traced()
    with tracker.switched("hidden"):
        return predicted()


class _RMSNormCalls(TorchFunctionMode):
    """``F.rms_norm``/``torch.rms_norm``: the composite for the counter, CUDA's fused kernel
    for the tracker."""

    def __init__(self, tracker: _Tracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.functions = (torch.nn.functional.rms_norm, torch.rms_norm)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func not in self.functions:
            return func(*args, **kwargs)
        return _both_routes(self.tracker, lambda: func(*args, **kwargs),
                            lambda: _fused(*args, **kwargs))


def _fused(input: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None) -> Any:  # noqa: A002 - F.rms_norm's names
    return rms_norm(input, normalized_shape, weight, eps)


def _attention_kernel(tracker: _Tracker) -> Any:
    """``scaled_dot_product_attention`` for the shared forward: the math route a meta trace
    takes (meta tensors always choose it), then the kernel CUDA picks; once where CUDA
    takes the math route too (``kernels.attention`` calls the same op)."""

    def kernel(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
               is_causal: bool = False, *, scale: float | None = None,
               enable_gqa: bool = False) -> Any:
        if cuda_sdpa_kernel(q, k, v, attn_mask, enable_gqa, q.dtype) == MATH:  # CUDA's route too: once
            return torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]
        return _both_routes(
            tracker,
            lambda: torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa),
            lambda: attention(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                              enable_gqa=enable_gqa))
    return kernel


@contextlib.contextmanager
def _shared_kernels(tracker: _Tracker) -> Iterator[None]:
    """``cuda_kernels``, with attention and rms_norm run both ways."""
    with aten_overrides(carried=in_prediction) as overrides:
        overrides.impl("scaled_dot_product_attention", _attention_kernel(tracker),
                       elsewhere=math_attention)
        with cuda_kernels(leave=SHARED_KERNELS), _RMSNormCalls(tracker):
            yield


class InferenceWatch:
    """The inference prediction of ``case`` for ``target``, logged during the trace."""

    def __init__(self, case: ModelCase, target: Target) -> None:
        self.case, self.target = case, target
        self.cfg = StepConfig(train=False)
        self.tracker = _Tracker(workspace=target.workspace, device_type=target.fake_device,
                                cudnn=target.device == "cuda",
                                gpu=target.gpu if target.device == "cuda" else None)
        self.kept: tuple[Any, ...] = ()  # the stand-ins stay alive until the replay
        self.sizes: dict[str, int] = {}
        self.ran = False
        self.broken = False
        self.seconds = 0.0

    # -- trace.engine.ForwardWatch
    def applies(self, model: nn.Module) -> bool:
        return (model is self.case.model and self.target.emulated and not self.target.faked
                and not any(isinstance(m, SEPARATE) for m in model.modules()))

    def prepare(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[
            dict[str, Any], tuple[Any, ...], dict[str, Any]]:
        started = time.perf_counter()
        state, kinds = fake_state(model, self.target.fake_device, self.cfg.dtype)
        fargs, fkwargs = fake_inputs(self.case.require_example(), self.target.fake_device,
                                     self.cfg.dtype)
        for name, t in state.items():
            self.tracker.register(t, kinds[name])
        for t in tensor_leaves((fargs, fkwargs)):
            self.tracker.register(t, "input")
        self.sizes = model_sizes(state, kinds, fargs, fkwargs)
        self.kept = (state, fargs, fkwargs)
        self.seconds += time.perf_counter() - started
        return state, fargs, fkwargs

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        with self.tracker, ForwardModules() as modules, _shared_kernels(self.tracker):
            self.tracker.modules = modules
            self.tracker.mark("inference")
            yield
        self.ran = True

    def failed(self) -> None:
        self.broken = True
        self.kept = ()

    # -- after the trace
    @property
    def diverged(self) -> bool:
        """A fused RNN kernel ran (a functional call): the counted forward took its route."""
        return self.ran and any(a.kind == "cudnn" and a.problem is not None
                                and a.problem.op.startswith("rnn")
                                for a in self.tracker.log.allocs.values())

    @property
    def usable(self) -> bool:
        return self.ran and not self.broken and not self.diverged

    def result(self) -> MemoryResult:
        """The prediction ``predict_case(case, StepConfig(train=False), target, top=0)``
        gives, from the shared forward's log (call when `usable`)."""
        started = time.perf_counter()
        workspaces = make_workspaces(self.target)
        run = replay_ranged(self.tracker.log, len(self.tracker.log.events), "inference",
                            self.target, type(self.case.model).__name__, 0, workspaces)
        self.kept = ()
        example = self.case.require_example()
        result = memory_result(self.case, example, None, self.cfg, self.target,
                               {"inference": (run, self.sizes)}, step_notes(self.cfg, self.target),
                               workspaces)
        result.seconds = self.seconds + time.perf_counter() - started
        return result
