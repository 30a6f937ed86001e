"""``inspect memory``: peak GPU memory of inference and of a training step, predicted on fake
tensors (no weights allocated) and, with ``--verify``, measured on the GPU."""

from torchinspect.memory.predict import predict_case, predict_memory
from torchinspect.memory.result import FitResult, MemoryResult, MemorySweep, PhasePeak, RunMemory
from torchinspect.memory.step import StepConfig

__all__ = ["FitResult", "MemoryResult", "MemorySweep", "PhasePeak", "RunMemory", "StepConfig",
           "predict_case", "predict_memory"]
