"""``--verify``: run the predicted steps for real on the GPU and compare, phase by phase.

The model is built on the CPU and moved with ``.to("cuda")`` (the order the prediction
allocates weights in), inputs likewise; cuBLAS workspaces and the cache are released first,
so the measurement starts as a fresh process would. Each phase's peak is
``torch.cuda.max_memory_allocated`` since the phase began (``reset_peak_memory_stats`` at
every phase mark).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.memory import step as steps
from torchinspect.memory.result import MemoryResult
from torchinspect.memory.step import StepConfig
from torchinspect.shapes import map_tensors
from torchinspect.sources.case import ModelCase, materialize


@dataclass
class Check:
    """One predicted number against its measurement."""

    mode: str
    phase: str  # peak, or forward:1, backward:2, ...
    predicted: int
    measured: int
    tolerance: float

    @property
    def error(self) -> float:
        """Relative error of the prediction (+: predicted too much)."""
        return (self.predicted - self.measured) / self.measured if self.measured else 0.0

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance


@dataclass
class Verification:
    device: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks if c.phase == "peak")

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "ok": self.ok, "checks": [
            {"mode": c.mode, "phase": c.phase, "predicted": c.predicted, "measured": c.measured,
             "error": round(c.error, 6), "ok": c.ok} for c in self.checks]}


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise InspectError("--verify runs the model on the GPU, and no CUDA device is available",
                           hint="leave out --verify for the prediction alone")


def measure(case: ModelCase, example: Any, cfg: StepConfig, mode: str,
            on_mark: Any = None) -> dict[str, int]:
    """Peak allocated bytes per phase (``forward:1``...; ``inference:0``) and ``peak``.
    ``on_mark(phase)`` is called at each phase mark (a memory-history tool's bookmark)."""
    import torch

    from torchinspect.privtorch import clear_cublas_workspaces

    model = case.real_model("cpu")
    if model is case.model:
        model = copy.deepcopy(model)
    dt = steps.DTYPES[cfg.dtype] if cfg.dtype else None
    model.to(device="cuda", dtype=dt) if dt else model.to("cuda")
    args, kwargs = cuda_inputs(example, dt)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    model.train(mode == "training")
    peaks: dict[str, int] = {}
    current = ["setup:0"]

    def on_phase(phase: str, n: int | None = None) -> None:
        torch.cuda.synchronize()
        peaks[current[0]] = max(peaks.get(current[0], 0), torch.cuda.max_memory_allocated())
        current[0] = f"{phase}:{n if n is not None else current[0].split(':')[1]}"
        torch.cuda.reset_peak_memory_stats()
        if on_mark is not None:
            on_mark(current[0])

    torch.cuda.synchronize()
    clear_cublas_workspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    autocast = (lambda: torch.autocast("cuda", dtype=steps.DTYPES[cfg.amp])) if cfg.amp else _null
    with steps.checkpointed(model, cfg.checkpointing if mode == "training" else None):
        if mode == "inference":
            on_phase("inference", 0)
            steps.inference(model, state, args, kwargs, autocast)
        else:
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = steps.make_optimizer(cfg.optimizer, params, cfg.foreach)
            for n in (1, 2):
                on_phase("forward", n)
                steps.train_step(model, state, args, kwargs, optimizer=optimizer, loss=cfg.loss,
                                 autocast=autocast, name=case.name,
                                 on_phase=partial(on_phase, n=n))
        on_phase("end", 0)
    peaks.pop("setup:0", None)
    peaks.pop("end:0", None)
    peaks["peak"] = max(peaks.values())
    del model, state, args, kwargs
    clear_cublas_workspaces()
    torch.cuda.empty_cache()
    return peaks


def verify(result: MemoryResult, case: ModelCase, example: Any, cfg: StepConfig,
           tolerance: float) -> Verification:
    """Measure each mode the result predicted; a check per phase and one for the peak."""
    import torch

    require_cuda()
    out = Verification(torch.cuda.get_device_name())
    for run in (result.inference, result.training):
        if run is None:
            continue
        measured = measure(case, example, cfg, run.mode)
        for p in run.phases:
            key = f"{p.phase}:{p.step}"
            if key in measured:
                out.checks.append(Check(run.mode, key, p.peak, measured[key], tolerance))
        out.checks.append(Check(run.mode, "peak", run.peak, measured["peak"], tolerance))
    return out


def cuda_inputs(example: Any, dt: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args, kwargs = materialize(example, "cpu")

    def move(t: Any) -> Any:
        return t.to("cuda", dtype=dt) if dt is not None and t.is_floating_point() else t.to("cuda")

    return map_tensors(args, move), map_tensors(kwargs, move)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
