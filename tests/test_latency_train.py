"""Issue 40, item 3: a training step's time (forward, backward, optimizer), predicted from the
memory predictor's own step on fake tensors, priced op by op, host and GPU on one timeline."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from torchinspect.latency import predict_train
from torchinspect.latency.host import HostCost
from torchinspect.latency.ops import OpRecord
from torchinspect.latency.roofline import OpTime
from torchinspect.latency.train import record_step, timeline
from torchinspect.sources.case import make_case

HOST = HostCost(2.5, 2.0, "test CPU")


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def test_a_step_records_forward_backward_and_one_steady_optimizer_step():
    model = _net()
    case = make_case(model, "3,32,32", device="meta")
    trace = record_step(case, case.example, gpu="h100", weights=None, amp="bf16")
    phases = {o.phase for o in trace.ops}
    assert phases == {"forward", "backward", "optimizer"}
    forward = [o for o in trace.ops if o.phase == "forward"]
    backward = [o for o in trace.ops if o.phase == "backward"]
    optimizer = [o for o in trace.ops if o.phase == "optimizer"]
    assert any(o.name == "_to_copy" for o in forward)  # autocast casts the fp32 weights
    conv = [o for o in forward if o.kind == "conv"]
    assert conv and conv[0].dtype == "bf16"  # priced at its own compute dtype
    assert any(o.name == "convolution_backward" and o.kind == "conv" for o in backward)
    assert {o.layer for o in backward if o.kind == "conv"} == {"Conv2d"}  # its module
    assert optimizer and all(o.sub == "foreach" and o.tensors == 5 for o in optimizer)
    assert not any(o.name.startswith("zeros") for o in optimizer)  # state made in warm-up
    assert trace.params == 5 and trace.dispatched["backward"] > 0
    assert [p.shape for p in model.parameters()][0] == torch.Size([16, 3, 3, 3])  # untouched
    assert next(model.parameters()).device.type == "cpu"


def _ops(*phases: str) -> list[OpRecord]:
    return [OpRecord("op", "eltwise", "eltwise", 1.0, 1.0, 1, "L", "m", phase=p) for p in phases]


def _times(*us: float) -> list[OpTime]:
    return [OpTime(0.0, 0.0, u, True) for u in us]


def test_the_timeline_measures_each_phase_as_events_at_its_boundaries_would():
    ops = _ops("forward", "forward", "backward", "optimizer")
    # the host binds: each phase is its host time
    host_bound = timeline(ops, _times(1, 1, 1, 1), {"forward": 10, "backward": 20,
                                                    "optimizer": 5})
    assert host_bound["forward"] == pytest.approx(0.021)  # its host, then its last kernel
    assert host_bound["backward"] == pytest.approx(0.020)
    assert host_bound["optimizer"] == pytest.approx(0.005)
    # the GPU binds: each phase is its kernels' time
    gpu_bound = timeline(ops, _times(100, 100, 300, 50), {"forward": 1, "backward": 1,
                                                          "optimizer": 1})
    assert gpu_bound["forward"] == pytest.approx(0.201)
    assert gpu_bound["backward"] == pytest.approx(0.300)
    assert gpu_bound["optimizer"] == pytest.approx(0.050)
    assert sum(gpu_bound.values()) == pytest.approx(0.551)


def test_predict_train_prices_a_step_per_batch_and_layer():
    pred = predict_train(make_case(_net(), "3,32,32"), "h100", batches=[2, 64], amp="bf16",
                         host=HOST)
    small, big = pred.results
    assert small.step_ms == pytest.approx(small.forward_ms + small.backward_ms
                                          + small.optimizer_ms)
    assert big.gpu_ms["backward"] > small.gpu_ms["backward"] > 0
    assert small.binds == "host"  # a tiny net: the host binds
    assert small.step_ms >= sum(small.gpu_ms.values()) * 0.99
    assert {r.layer for r in small.layers} >= {"Conv2d", "BatchNorm2d", "Linear"}
    doc = pred.to_dict()
    assert doc["mode"] == "train" and doc["weights"] == "fp32" and doc["autocast"] == "bf16"
    row = doc["results"][0]
    assert set(row) >= {"train_step_ms", "forward_ms", "backward_ms", "optimizer_ms",
                        "gpu_ms", "host_ms", "binds", "layers"}


def test_no_optimizer_means_no_optimizer_kernels():
    pred = predict_train(make_case(_net(), "3,32,32"), "h100", batches=[4], optimizer="none",
                         host=HOST)
    assert pred.results[0].gpu_ms["optimizer"] == 0.0
    assert pred.results[0].optimizer_ms == 0.0


def test_cli_train_json_has_the_step_and_its_phases(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "h100", "--train", "--amp", "--dtype",
                    "bf16", "--batch", "2", "--format", "json")
    assert result.exit_code == 0, result.output
    pred = json.loads(result.output)["predicted"]
    row = pred["results"][0]
    assert row["batch"] == 2 and row["train_step_ms"] > 0
    assert row["train_step_ms"] == pytest.approx(row["forward_ms"] + row["backward_ms"]
                                                 + row["optimizer_ms"])
    assert pred["optimizer"] == "adamw" and pred["autocast"] == "bf16"


def test_cli_train_text_says_predicted_and_the_phases(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "h100", "--train", "--batch", "2")
    assert result.exit_code == 0, result.output
    assert "one eager training step, PREDICTED, not measured" in result.output
    assert "forward" in result.output and "optimizer" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--train"], "need --predict GPU"),
    (["--predict", "h100", "--train", "--device", "cuda"], "predicted, not measured"),
    (["--predict", "h100", "--train", "--dtype", "bf16,fp32"], "one dtype at a time"),
    (["--predict", "h100", "--train", "--optimizer", "lion"], "--optimizer 'lion'"),
    (["--predict", "h10", "--train"], "did you mean h100"),
])
def test_cli_train_bad_usage_is_one_line_and_exit_2(invoke, args, message):
    result = invoke("bench", "zoo:convnet", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_check_max_step_ms_is_judged_on_the_predicted_step(invoke):
    tight = invoke("check", "zoo:convnet", "--max-step-ms", "0.001")
    assert tight.exit_code == 1, tight.output
    assert "step-ms" in tight.output and "PREDICTED eager training step" in tight.output
    loose = invoke("check", "zoo:convnet", "--max-step-ms", "100000", "--gpu", "a100")
    assert loose.exit_code == 0, loose.output
    assert "on a100" in loose.output


class _Speech(nn.Module):
    def __init__(self, proj: int) -> None:
        super().__init__()
        self.front = nn.Conv1d(40, 40, 3, padding=1)
        self.rnn = nn.LSTM(40, 256, num_layers=2, batch_first=True, proj_size=proj)
        self.head = nn.Linear(proj or 256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.front(x.transpose(1, 2)).transpose(1, 2)
        return self.head(self.rnn(x)[0])


@pytest.mark.parametrize("proj", [0, 64], ids=["lstm", "lstm-proj"])
def test_an_rnn_backward_is_cudnns_not_the_unrolled_cells(proj):
    """The backward of an LSTM is cuDNN's (the recurrence again in reverse, then one GEMM
    per weight over the sequence), not PyTorch's unrolled cells (with ``proj_size``: 30
    steps x 2 layers x a dozen ops, each priced at its floor and its host dispatch) and not
    nothing (without: the stand-in's allocations only)."""
    case = make_case(_Speech(proj), "30,40", device="meta")
    trace = record_step(case, case.example, gpu="h100", weights=None, amp="bf16")
    backward = [o for o in trace.ops if o.phase == "backward" and o.layer == "LSTM"]
    steps = [o for o in backward if o.kind == "rnn"]
    forward = [o for o in trace.ops if o.phase == "forward" and o.kind == "rnn"]
    assert len(steps) == 1 and steps[0].name == "lstm_backward_steps"
    assert steps[0].kernels == forward[0].kernels and steps[0].flops == forward[0].flops
    grads = [o for o in backward if o.kind == "matmul"]
    # data and weight gradients of the input GEMMs, the recurrent (and projection) weights'
    assert len(grads) == 2 * 2 + 2 * (2 if proj else 1)
    assert {o.name for o in backward} <= {"lstm_backward_steps", "lstm_input_grad_gemm",
                                          "lstm_weight_grad_gemm"}
    # host dispatches: the head's, the casts', cuDNN's few; not a dozen per step and layer
    assert trace.dispatched["backward"] < 30 * 2 * 3
    # the layers before the RNN keep their own backward
    assert any(o.name == "convolution_backward" for o in trace.ops if o.phase == "backward")
