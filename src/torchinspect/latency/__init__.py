"""Predicted latency on a named GPU, from a CPU (``inspect bench --predict``, summary's time
column, ``check --max-latency-ms --gpu``, ``report --gpu``).

``predict_train(case, "h100", amp="bf16")`` predicts an eager training step (forward,
backward, optimizer; ``train.py``). ``predict_latency(case, "h100", dtypes=("bf16",),
batches=(1, 32))`` returns a
``Prediction``: per dtype and batch, the CUDA-graph replay time (sum of per-op times from
the roofline and measured efficiency curves), the eager estimate (host dispatch against GPU
time, and which binds), per-layer-type rows with their roofline class. Every number is
predicted and names its source (a calibrated table or datasheet rates). A core beside
``memory/``: over the trace (``trace/ops.py``'s op table, ``trace/formulas.py``'s MACs) and
the GPU catalogue (``torchinspect/gpus.py``).
"""

from torchinspect.latency.calibrated import LatencyGpu, latency_gpu, validation_text
from torchinspect.latency.eager import HostModel, host_model
from torchinspect.latency.generate import GenerateLatency, predict_generate_latency
from torchinspect.latency.predict import (
    BatchPrediction,
    LayerRow,
    Prediction,
    model_dtype,
    module_times,
    predict_latency,
)
from torchinspect.latency.train import TrainBatch, TrainPrediction, predict_train

__all__ = ["BatchPrediction", "GenerateLatency", "HostModel", "LatencyGpu", "LayerRow",
           "Prediction", "TrainBatch", "TrainPrediction", "host_model", "latency_gpu",
           "model_dtype", "module_times", "predict_generate_latency", "predict_latency",
           "predict_train", "validation_text"]
