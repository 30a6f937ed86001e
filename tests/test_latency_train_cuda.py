"""Predicted against measured training steps on the GPU that is here (issue 40 item 3).

Three development models (resnet18 at batch 32, zoo:gpt-tiny at 8, mobilenet_v2 at 1): the
step is measured as ``benchmarks/latency_measure.py`` measures it (fp32 weights, forward and loss under autocast
bf16, AdamW foreach, ``cudnn.benchmark``, CUDA events at the phase boundaries, median after
warm-up) and predicted with ``predict_train`` for the GPU (its catalogue name), with this
machine's own host probe. The bound is the development set's spread (90th percentile about
50% on the H100; see benchmarks/RESULTS-latency.md), so the test catches a broken predictor
or a GPU far from its table, not a few percent.

    .venv/bin/pytest tests/test_latency_train_cuda.py -m cuda -q   # about a minute on an H100
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
MODELS = [("resnet18", 32), ("zoo:gpt-tiny", 8), ("mobilenet_v2", 1)]
BOUND = 0.5  # |predicted / measured - 1| at most this


@pytest.mark.cuda
@pytest.mark.parametrize(("model", "batch"), MODELS)
def test_cuda_predicted_training_step_against_the_measured_one(model, batch, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on a GPU machine)")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import latency_measure  # noqa: PLC0415 - the campaign's own step timing

    from torchinspect.gpus import detect_gpu
    from torchinspect.latency import predict_train
    from torchinspect.sources.case import make_case

    monkeypatch.chdir(ROOT)
    gpu = detect_gpu()
    if gpu is None:
        pytest.skip("this GPU is not in the catalogue")
    torch.backends.cudnn.benchmark = True
    case = make_case(model, device="meta")
    measured = latency_measure.train_step_times(case, "cuda", batch)
    predicted = predict_train(case, gpu.name, batches=[batch], amp="bf16").results[0]
    error = predicted.step_ms / measured["step_ms"] - 1
    assert abs(error) <= BOUND, (
        f"{model} batch {batch} on {gpu.name}: predicted {predicted.step_ms:.2f} ms (forward "
        f"{predicted.forward_ms:.2f}, backward {predicted.backward_ms:.2f}, optimizer "
        f"{predicted.optimizer_ms:.2f}) against measured {measured['step_ms']:.2f} ms "
        f"({measured['forward_ms']:.2f}, {measured['backward_ms']:.2f}, "
        f"{measured['optimizer_ms']:.2f})")
