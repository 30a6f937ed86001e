"""Issue 40, items 1 and 2: small kernels cost their measured floor, and the op kinds the
first sweeps never saw are recorded as the GPU runs them (hand-made traces and calls)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchinspect.gpus import CATALOGUE
from torchinspect.latency.calibrated import LatencyGpu, parse_table
from torchinspect.latency.ops import OpRecord, record_call, rnn_work
from torchinspect.latency.roofline import (
    curve_time,
    floor_of,
    foreach_kernels,
    price,
)


def _gpu(curves: dict, **extra: object) -> LatencyGpu:
    data = {"format": 2, "gpu": "h100", "device_name": "x", "source": "test", "torch": "2",
            "gap_us": 0.3, "host_factor": 1.0, "curves": curves, **extra}
    return LatencyGpu(CATALOGUE["h100"], parse_table(data, "test"))


def _op(kind: str, sub: str, flops: float, nbytes: float, kernels: int = 1, **kw) -> OpRecord:
    return OpRecord("op", kind, sub, flops, nbytes, kernels, "Layer", "m", **kw)


# an element-wise curve as sweep 4 measures it: a flat 1.4 µs floor up to about 1 µs of roofline
ELTWISE = [[-2.0, 0.01 / 1.4], [-1.0, 0.1 / 1.4], [0.0, 1.0 / 1.6], [1.0, 0.8]]


def test_a_kernel_below_the_smallest_measured_call_costs_that_calls_time():
    """Below the curve's first point the *time* is kept (the launch floor and the tail of a
    kernel that fills a fraction of one wave), not the efficiency: a 64-element add costs
    what the smallest measured add cost, not 1000 times less."""
    gpu = _gpu({"eltwise/bf16": ELTWISE})
    tiny = price(_op("eltwise", "eltwise", 64, 256), gpu, "bf16")  # roofline ~ 1e-4 µs
    small = price(_op("eltwise", "eltwise", 1e4, 3.35e4), gpu, "bf16")  # 0.01 µs
    assert tiny.us == pytest.approx(floor_of([tuple(p) for p in ELTWISE])) == pytest.approx(1.4)
    assert small.us == pytest.approx(1.4)
    assert tiny.floor_us == pytest.approx(1.4)
    big = price(_op("eltwise", "eltwise", 1e9, 3.35e8), gpu, "bf16")  # 100 µs of roofline
    assert big.us == pytest.approx(100 / 0.8)  # large: the measured efficiency


def test_the_in_model_correction_scales_only_the_time_above_the_floor():
    gpu = _gpu({"eltwise/bf16": ELTWISE}, scales={"memory": 0.5})
    tiny = price(_op("eltwise", "eltwise", 64, 256), gpu, "bf16")
    assert tiny.us == pytest.approx(1.4)  # batch-1 kernels keep their floor
    big = price(_op("eltwise", "eltwise", 1e9, 3.35e8), gpu, "bf16")
    assert big.us == pytest.approx(1.4 + 0.5 * (100 / 0.8 - 1.4))


def test_a_faster_gpu_is_never_predicted_slower_on_the_floor():
    curve = [tuple(p) for p in ELTWISE]
    for anchor in (1e-4, 0.05, 0.5, 5.0):
        times = [curve_time(curve, anchor * f, anchor) for f in (0.25, 0.5, 1.0, 2.0, 4.0)]
        assert times == sorted(times)


def test_recurrent_step_kernels_are_priced_per_kernel_on_their_curve():
    gpu = _gpu({"rnn.step/bf16": [[-1.0, 0.1 / 2.8], [0.5, 0.5]]})
    op = _op("rnn", "rnn.step", 2e9 * 0.0, 3.35e5 * 100, kernels=100)  # 0.1 µs per kernel
    t = price(op, gpu, "bf16")
    assert t.kernels == 100
    assert t.us == pytest.approx(100 * 2.8)  # each step kernel at its measured 2.8 µs


def test_foreach_optimizer_kernels_launch_per_group_of_tensors():
    op = _op("eltwise", "foreach", 1000, 8000, tensors=161)
    assert foreach_kernels(op) == 5  # 161 tensors, at most 36 per launch
    huge = _op("eltwise", "foreach", 25_000_000, 4e8, tensors=10)
    assert foreach_kernels(huge) == 2  # 382 chunks of 65536, 320 per launch
    gpu = _gpu({"eltwise/bf16": ELTWISE})
    assert price(op, gpu, "bf16").us == pytest.approx(5 * 1.4)  # five launches at the floor


def _subs(fn) -> list[tuple[str, str]]:
    return [(o.kind.value, o.sub) for o in record_call(fn, dtype="bf16").ops if o.kernels]


def test_transposed_and_1d_convolutions_have_their_own_curves():
    x2, w2 = torch.empty(1, 64, 8, 8, device="meta"), torch.empty(64, 32, 4, 4, device="meta")
    assert _subs(lambda: F.conv_transpose2d(x2, w2, stride=2, padding=1)) == \
        [("conv", "conv.transposed")]
    x1, w1 = torch.empty(1, 80, 400, device="meta"), torch.empty(256, 80, 11, device="meta")
    assert _subs(lambda: F.conv1d(x1, w1, padding=5)) == [("conv", "conv.1d")]
    dw = torch.empty(80, 1, 31, device="meta")
    assert _subs(lambda: F.conv1d(x1, dw, padding=15, groups=80)) == [("conv", "conv.depthwise")]
    wg = torch.empty(64, 8, 3, 3, device="meta")  # 64 channels in 8 groups
    xg = torch.empty(24, 64, 14, 14, device="meta")
    assert _subs(lambda: F.conv2d(xg, wg, padding=1, groups=8)) == [("conv", "conv.grouped")]


def test_an_lstm_with_projections_is_cudnns_kernels_not_its_meta_cells():
    """Per layer and direction one input GEMM, then per step the recurrent GEMM, the fused
    cell and the projection GEMM (sweep 3's profiles: 3 kernels per step with proj_size)."""
    lstm = nn.LSTM(40, 128, num_layers=2, proj_size=32, bidirectional=True, batch_first=True,
                   device="meta").eval()
    x = torch.empty(4, 50, 40, device="meta")
    ops = record_call(lambda: lstm(x), dtype="bf16").ops
    gemms = [o for o in ops if o.name == "lstm_input_gemm"]
    steps = [o for o in ops if o.kind == "rnn"]
    assert len(gemms) == 2 * 2  # layers x directions
    assert len(steps) == 1 and steps[0].kernels == 2 * 2 * 50 * 3
    assert not [o for o in ops if o.name in ("sigmoid", "tanh", "mm", "addmm")]  # no cells
    gru = nn.GRU(40, 64, batch_first=True, device="meta").eval()
    steps = [o for o in record_call(lambda: gru(x), dtype="bf16").ops if o.kind == "rnn"]
    assert steps[0].kernels == 50 * 2  # GEMM and cell per step


def test_rnn_work_reads_the_weights_layout():
    w_ih, w_hh = torch.empty(512, 80, device="meta"), torch.empty(512, 128, device="meta")
    b = torch.empty(512, device="meta")
    x = torch.empty(8, 20, 80, device="meta")
    work = rnn_work("lstm", (x, (), [w_ih, w_hh, b, b], True, 1, 0.0, False, False, True), 2)
    assert work is not None
    assert work.input_gemms == [(8 * 20, 80, 512)] and work.step_kernels == 40
    assert rnn_work("lstm", (x, (), [w_ih], True, 1, 0.0, False, False, True), 2) is None


def test_masked_and_causal_attention_is_one_fused_kernel_not_the_math_path():
    """nn.MultiheadAttention with a causal mask (as nn.TransformerDecoder makes it) and with a
    key padding mask: the projections, one attention kernel, the mask's conversion; never the
    meta decomposition's ones/tril/where/softmax."""
    mha = nn.MultiheadAttention(64, 4, batch_first=True, device="meta").eval()
    x = torch.empty(1, 16, 64, device="meta")
    causal = nn.Transformer.generate_square_subsequent_mask(16, device="meta")
    ops = record_call(lambda: mha(x, x, x, attn_mask=causal, is_causal=True,
                                  need_weights=False), dtype="bf16").ops
    names = [o.name for o in ops]
    assert names.count("scaled_dot_product_attention") == 1
    assert not {"ones", "tril", "where", "_softmax", "bmm"} & set(names)
    assert sum(o.kind == "matmul" for o in ops) == 2  # packed in-projection, out-projection
    pad = torch.zeros(1, 16, dtype=torch.bool, device="meta")
    kv = torch.empty(1, 16, 64, device="meta")
    ops = record_call(lambda: mha(x, kv, kv, key_padding_mask=pad, need_weights=False),
                      dtype="bf16").ops
    assert [o.name for o in ops].count("scaled_dot_product_attention") == 1
    assert sum(o.kind == "matmul" for o in ops) == 3  # q, kv, out


def test_a_decoder_layer_records_two_attention_kernels_and_no_mask_math():
    layer = nn.TransformerDecoderLayer(64, 4, 128, dropout=0.0, batch_first=True,
                                       device="meta").eval()
    tgt, mem = torch.empty(2, 12, 64, device="meta"), torch.empty(2, 20, 64, device="meta")
    causal = nn.Transformer.generate_square_subsequent_mask(12, device="meta")
    ops = record_call(lambda: layer(tgt, mem, tgt_mask=causal, tgt_is_causal=True),
                      dtype="bf16").ops
    names = [o.name for o in ops]
    assert names.count("scaled_dot_product_attention") == 2
    assert not {"ones", "tril", "_softmax"} & set(names)
