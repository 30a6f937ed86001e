"""What CUDA's kernels allocate beyond their outputs, as the prediction models it: reduction
staging buffers, cuBLASLt's workspace, contiguous copies for cuDNN, the multi-head-attention
fast path, cuDNN RNN layouts and dropout states.

The CPU tests hold the prediction to peaks measured on an H100 (committed raw data of
``benchmarks/memory_optrace.py``); the CUDA tests measure the same small models again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchinspect.memory.faking import make_target
from torchinspect.memory.predict import predict_case
from torchinspect.memory.reduction import Reduction, staging_bytes
from torchinspect.memory.step import StepConfig
from torchinspect.memory.tracker import StorageTracker, _conv_copies

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
MEASURED = BENCH / "results" / "memory-optrace-h100"
H100 = (132, 2048)
MiB = 2**20


def optrace():
    sys.path.insert(0, str(BENCH))
    import memory_optrace

    return memory_optrace


# ------------------------------------------------------------ reductions


def test_staging_of_a_bias_gradient_matches_the_h100():
    # grad.sum(0) of a 4096 x 1024 gradient: 32 MiB staged, fp32 or bf16 (float partials)
    for element in (4, 2):
        r = Reduction((4096, 1024), (1024, 1), frozenset({0}), element, 4)
        assert staging_bytes(r, *H100) == (32 * MiB, 32)
    # the expanded gradient of a sum (stride 0): 2 MiB, as measured
    assert staging_bytes(Reduction((4096, 1024), (0, 0), frozenset({0}), 4, 4), *H100)[0] == 2 * MiB


def test_staging_is_small_or_none_where_blocks_reduce_alone():
    full = Reduction((4 * MiB,), (1,), frozenset({0}), 4, 4)
    assert staging_bytes(full, *H100)[0] <= 4096
    bias = Reduction((8, 32, 128, 128), (32 * 128 * 128, 128 * 128, 128, 1),
                     frozenset({0, 2, 3}), 4, 4)  # a convolution's bias gradient
    assert staging_bytes(bias, *H100)[0] == 2048
    assert staging_bytes(Reduction((64, 8), (8, 1), frozenset({0}), 4, 4), *H100) == (0, 0)
    # fewer SMs, fewer blocks per output: less staged
    big = Reduction((4096, 1024), (1024, 1), frozenset({0}), 4, 4)
    assert staging_bytes(big, 40, 1024)[0] < staging_bytes(big, *H100)[0]


def test_the_staging_buffer_follows_the_catalogues_sms():
    from torchinspect.memory.gpu import multiprocessors

    big = Reduction((4096, 1024), (1024, 1), frozenset({0}), 4, 4)
    assert multiprocessors("h100") == (132, 2048) == H100
    assert staging_bytes(big, *multiprocessors("t4")) < staging_bytes(big, *multiprocessors("h100"))


def test_the_tracker_logs_staging_and_cublaslt_once_per_thread():
    x = torch.randn(512, 256)
    w = torch.randn(128, 256)
    b = torch.randn(128)
    tracker = StorageTracker(workspace=32 * MiB, device_type="cpu", gpu="h100")
    with tracker:
        torch.addmm(b, x, w.t())
        torch.addmm(b, x, w.t())
        torch.randn(8192, 1024).sum(0)
    sizes = [tracker.log.allocs[e.serial].nbytes for e in tracker.log.events if e.alloc and e.serial]
    assert sizes.count(32 * MiB) == 1 + 1  # the cuBLAS workspace; the sum's staging buffer
    assert sizes.count(1 * MiB) == 1  # cuBLASLt's workspace, kept once
    events = tracker.log.events
    first = next(i for i, e in enumerate(events) if e.op == "sum (staging)")
    staged = {e.serial for e in events[first:first + 2]}
    # freed within the call, before anything else happens
    assert {e.serial for e in events[first + 2:first + 4] if not e.alloc} == staged


def test_a_cpu_target_logs_no_gpu_kernels():
    tracker = StorageTracker(device_type="cpu")
    with tracker:
        torch.randn(8192, 1024).sum(0)
    assert not any("staging" in e.op for e in tracker.log.events)


# ------------------------------------------------------------ cuDNN operands


def test_a_strided_gradient_is_copied_for_a_convolution_backward():
    x = torch.randn(2, 4, 8, 8)
    w = torch.randn(6, 4, 3, 3)
    grad = torch.ones(1).expand(2, 6, 8, 8)  # the gradient of out.sum()
    args = (grad, x, w, [6], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    assert _conv_copies("convolution_backward", args) == [2 * 6 * 8 * 8 * 4]
    dense = (torch.randn(2, 6, 8, 8), *args[1:])
    assert _conv_copies("convolution_backward", dense) == []
    sliced = torch.randn(2, 12, 8, 8)[:, :6]  # a slice of a concatenation's gradient
    assert _conv_copies("convolution_backward", (sliced, *args[1:])) == [2 * 6 * 8 * 8 * 4]
    last = x.contiguous(memory_format=torch.channels_last)
    grad_last = torch.randn(2, 6, 8, 8).contiguous(memory_format=torch.channels_last)
    assert _conv_copies("convolution_backward", (grad_last, last, *args[2:])) == []


def test_an_inference_matmul_that_folds_logs_its_copy():
    lin = nn.Linear(32, 4)
    x = torch.randn(50, 8, 32).transpose(0, 1)  # batch-first view of a time-major output
    tracker = StorageTracker(device_type="cpu")
    with torch.inference_mode(), tracker:
        lin(x)
        lin(x.contiguous())
    copies = [tracker.log.allocs[e.serial].nbytes for e in tracker.log.events
              if e.alloc and e.op == "linear (folded copy)"]
    assert copies == [50 * 8 * 32 * 4]  # the strided input only


# ------------------------------------------------------------ against the H100


def _measured(case: str, mode: str) -> dict:
    return json.loads((MEASURED / f"{case}.{mode}.json").read_text())["measured"]


# models without a convolution or RNN: their prediction needs no cuDNN workspace
EXACT = [("linear1", "adamw-bf16amp"), ("loop20", "adamw-fp32"), ("mha-weights", "inference"),
         ("mha-noweights", "inference"), ("encoder", "inference"), ("bag-mean", "inference"),
         ("encoder", "adamw-bf16amp")]


@pytest.mark.parametrize(("case", "mode"), EXACT, ids=[f"{c}-{m}" for c, m in EXACT])
def test_prediction_matches_the_h100_without_cudnn(case, mode):
    bench = optrace()
    cfg = bench.config(mode)
    r = predict_case(bench.make(case), cfg, make_target("cuda", "h100", calibrate=False),
                     inference=not cfg.train)
    run = r.training if cfg.train else r.inference
    measured = _measured(case, mode)["peak"]
    assert abs(run.peak - measured) / measured <= 0.005, (run.peak, measured)


def test_mha_fast_path_is_taken_only_where_cuda_takes_it():
    from torchinspect.memory.fused import mha_takes_fast_path

    attn = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert mha_takes_fast_path(attn, x, x, x)
        assert not mha_takes_fast_path(attn, x, x.clone(), x)  # cross-attention
    assert not mha_takes_fast_path(attn, x, x, x)  # grad enabled, weights require grad
    attn.train()
    with torch.no_grad():
        assert not mha_takes_fast_path(attn, x, x, x)


@pytest.mark.slow
def test_rnn_dropout_state_and_batch_first_layout():
    class Net(nn.Module):
        def __init__(self, dropout: float) -> None:
            super().__init__()
            self.rnn = nn.GRU(16, 32, num_layers=2, batch_first=True, dropout=dropout)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    from torchinspect.inputs import ExampleInputs, TensorSpec
    from torchinspect.sources.case import make_case

    peaks = {}
    for dropout in (0.0, 0.2):
        case = make_case(Net(dropout), ExampleInputs((TensorSpec((4, 50, 16)),)))
        r = predict_case(case, StepConfig(optimizer="sgd"), make_target("cuda", "h100"),
                         inference=False)
        peaks[dropout] = r.training.phases[0].peak  # forward of step 1
    # cuDNN's dropout states: 48 KiB per SM, kept from the first training call
    assert peaks[0.2] - peaks[0.0] == 48 * 1024 * 132


# ------------------------------------------------------------ on the GPU


CUDA_CASES = ["mha-weights", "linear1", "tiny-unet", "convt", "interp-bilinear", "gru-bf-drop",
              "lstm-bf-drop", "rnn-tanh-bf", "convbn-cl", "bag-max", "encoder"]


@pytest.mark.cuda
@pytest.mark.parametrize("name", CUDA_CASES)
def test_calibrated_kernel_paths_match_the_gpu(name, tmp_path):
    # each case in a fresh process, as the benchmark measures it: cuDNN's dropout states,
    # once created, stay allocated for the life of a process and would count in the next
    # case's measurement
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    proc = subprocess.run([sys.executable, str(BENCH / "memory_optrace.py"), "gpu", "--case",
                           name, "--out", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(p.read_text()) for p in tmp_path.glob(f"{name}.*.json")]
    assert rows
    for row in rows:
        assert "error" not in row, row["error"]
        measured, predicted = row["measured"]["peak"], row["calibrated"]["peak"]
        assert abs(predicted - measured) / measured <= 0.03, (row["mode"], predicted, measured)
