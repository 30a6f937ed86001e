"""Predicted latency on a named GPU, from a CPU (``inspect bench --predict``).

``predict_latency(case, "h100", dtypes=("bf16",), batches=(1, 32))`` returns a
``Prediction``: per dtype and batch, the CUDA-graph replay time (sum of per-op times from
the roofline and measured efficiency curves), the eager estimate (host dispatch against GPU
time, and which binds), per-layer-type rows with their roofline class. Every number is
predicted and names its source (a calibrated table or datasheet rates).
"""

from torchinspect.bench.predict.gpus import Gpu, GpuSpec, known_gpus, resolve_gpu
from torchinspect.bench.predict.predict import (
    BatchPrediction,
    LayerRow,
    Prediction,
    module_times,
    predict_latency,
)

__all__ = ["BatchPrediction", "Gpu", "GpuSpec", "LayerRow", "Prediction", "known_gpus", "module_times",
           "predict_latency", "resolve_gpu"]
