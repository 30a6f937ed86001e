"""``inspect memory``: peak GPU memory of inference and of a training step, predicted on fake
tensors (no weights allocated) and, with ``--verify``, measured on the GPU; with
``--generate N`` of a whole text generation (``memory/generate.py``)."""

from torchinspect.memory.generate import GenerateMemory, predict_generate
from torchinspect.memory.predict import predict_case, predict_memory
from torchinspect.memory.result import FitResult, MemoryResult, MemorySweep, PhasePeak, RunMemory
from torchinspect.memory.step import StepConfig

__all__ = ["FitResult", "GenerateMemory", "MemoryResult", "MemorySweep", "PhasePeak", "RunMemory",
           "StepConfig", "predict_case", "predict_generate", "predict_memory"]
