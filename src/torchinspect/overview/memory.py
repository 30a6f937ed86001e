"""The memory part of a report page: ``inspect memory``'s prediction of inference and of an
AdamW training step on CUDA (the numbers ``inspect summary`` shows), with the timeline of
allocated memory through forward, backward and the optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchinspect.errors import InspectError
from torchinspect.memory.result import MemoryResult

TOP_SAVED = 10


@dataclass
class MemoryPart:
    """The prediction; ``note`` says what is missing (e.g. training on a batch of 1)."""

    result: MemoryResult

    def to_dict(self) -> dict[str, Any]:
        return self.result.to_dict()


def memory_part(case: Any, gpu: str | None = None) -> MemoryPart:
    """Inference and a training step (AdamW, PyTorch's defaults) on ``gpu`` (None: the GPU
    here, else the default); a model whose training step cannot be predicted keeps its
    inference prediction with a note."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig

    target = make_target("cuda", gpu, fast=True)
    try:
        result = predict_case(case, StepConfig(), target, top=TOP_SAVED)
    except InspectError as exc:
        if "training" not in exc.message and "loss" not in exc.message:
            raise
        result = predict_case(case, StepConfig(train=False), target, top=TOP_SAVED)
        result.notes.insert(0, f"training step not predicted: {exc.message}")
    return MemoryPart(result)
