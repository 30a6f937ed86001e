"""Latency prediction (`inspect bench --predict`): roofline arithmetic, op records, tables, CLI."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from torchinspect.errors import InspectError
from torchinspect.gpus import CATALOGUE
from torchinspect.latency import latency_gpu, predict_latency
from torchinspect.latency.calibrated import LatencyGpu, load_table, parse_table
from torchinspect.latency.ops import OpRecord, record_call, record_ops
from torchinspect.latency.roofline import (
    group,
    interpolate,
    kernel_floor_us,
    math_for,
    price,
    price_ops,
)

H100 = LatencyGpu(CATALOGUE["h100"], None)  # datasheet only: the reference table's curves


def _op(kind: str, flops: float, nbytes: float, sub: str | None = None) -> OpRecord:
    return OpRecord("op", kind, sub or kind, flops, nbytes, 1, "Linear", "fc")


def test_compute_bound_matmul_is_priced_at_the_tensor_core_peak():
    t = price(_op("matmul", 2e12, 1e6), H100, "bf16")
    assert t.compute_us == pytest.approx(2e12 / 989.4e12 * 1e6)  # 2021.4 µs
    assert t.memory_us == pytest.approx(1e6 / 3.35e12 * 1e6)
    assert t.bound == "compute"
    assert t.calibrated and t.us >= t.compute_us  # the reference curve: never under the roof


def test_an_op_no_curve_covers_costs_its_roofline_plus_the_measured_floor():
    """No fixed constant: the floor of the smallest measured element-wise call."""
    table = load_table("h100")
    t = price(_op("other", 1e6, 1e6), H100, "bf16")
    assert not t.calibrated
    assert t.us == pytest.approx(t.roofline_us + kernel_floor_us(table, "bf16"))
    assert 0.5 < kernel_floor_us(table, "bf16") < 3.0  # about 1.4 µs on the H100


def test_memory_bound_eltwise_is_priced_at_the_bandwidth():
    t = price(_op("eltwise", 1e6, 3.35e9), H100, "fp32")
    assert t.memory_us == pytest.approx(1000.0)
    assert t.bound == "memory"
    assert t.us > 0


def test_which_peak_follows_pytorchs_tf32_defaults():
    assert math_for("conv", "fp32", H100, None) == "tf32"  # cudnn.allow_tf32 is on
    assert math_for("matmul", "fp32", H100, None) == "fp32"  # matmul TF32 is off
    assert math_for("matmul", "fp32", H100, True) == "tf32"
    assert math_for("conv", "fp32", H100, False) == "fp32"
    assert math_for("matmul", "bf16", H100, None) == "tensor16"
    assert math_for("matmul", "bf16", LatencyGpu(CATALOGUE["t4"], None), None) == "fp32"  # no bf16
    assert math_for("eltwise", "bf16", H100, None) == "fp32"


def test_interpolation_is_linear_inside_and_flat_outside():
    curve = [(0.0, 0.1), (1.0, 0.5)]
    assert interpolate(curve, 0.5) == pytest.approx(0.3)
    assert interpolate(curve, -3) == 0.1
    assert interpolate(curve, 9) == 0.5


def test_linear_is_one_addmm_with_its_exact_flops_and_bytes():
    x, w, b = (torch.empty(*s, device="meta") for s in ((8, 64), (32, 64), (32,)))
    ops = record_call(lambda: F.linear(x, w, b), dtype="bf16").ops
    assert [(o.name, o.kind) for o in ops] == [("addmm", "matmul")]
    assert ops[0].flops == 2 * 8 * 64 * 32
    assert ops[0].bytes == 2 * (8 * 64 + 32 * 64 + 32 + 8 * 32)  # bf16: 2 bytes, read/written once


def test_conv_bias_is_its_own_kernel_and_views_launch_none():
    x, w, b = (torch.empty(*s, device="meta") for s in ((1, 3, 8, 8), (4, 3, 3, 3), (4,)))
    ops = record_call(lambda: F.conv2d(x, w, b, padding=1).flatten(1).t()).ops
    assert [o.kind for o in ops] == ["conv", "eltwise"]
    assert ops[0].sub == "conv.kxk"


def test_attention_is_one_fused_kernel():
    q = torch.empty(2, 4, 16, 8, device="meta")
    ops = record_call(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)).ops
    assert [o.kind for o in ops] == ["attention"]
    assert ops[0].flops == 2.0 * 2 * 4 * 16 * 16 * 16 / 2  # causal: half


def _encoder_ops(training: bool = False, batch_first: bool = True) -> list[OpRecord]:
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=batch_first,
                                             device="meta").train(training)
    x = torch.empty(2, 16, 64, device="meta")
    return record_call(lambda: layer(x), dtype="bf16").ops


def test_an_eval_encoder_layer_is_one_fast_path_call():
    ops = _encoder_ops()
    assert {o.fastpath for o in ops} == {"encoder#1"}  # every op, the attention included
    assert any(o.kind == "attention" for o in ops)
    assert {o.fastpath for o in _encoder_ops(training=True)} == {""}
    assert {o.fastpath for o in _encoder_ops(batch_first=False)} == {""}


def test_self_attention_without_weights_is_the_mha_fast_path():
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True, device="meta").eval()
    x, y = torch.empty(2, 16, 64, device="meta"), torch.empty(2, 16, 64, device="meta")
    fast = record_call(lambda: mha(x, x, x, need_weights=False), dtype="bf16").ops
    assert {o.fastpath for o in fast} == {"mha#1"}
    weights = record_call(lambda: mha(x, x, x), dtype="bf16").ops  # need_weights=True
    cross = record_call(lambda: mha(x, y, y, need_weights=False), dtype="bf16").ops
    assert {o.fastpath for o in weights} == {o.fastpath for o in cross} == {""}


def _table(**extra: object) -> LatencyGpu:
    data = {"format": 2, "gpu": "h100", "device_name": "x", "source": "test", "torch": "2",
            "gap_us": 0.3, "host_factor": 1.0,
            "curves": {"matmul/bf16": [[-3, 0.5], [3, 0.5]],
                       "eltwise/bf16": [[-3, 0.25], [3, 0.25]]}, **extra}
    return LatencyGpu(CATALOGUE["h100"], parse_table(data, "test"))


def test_fast_path_ops_are_priced_together_by_the_measured_factor():
    plain = _table(scales={"matmul": 2.0})
    fast = _table(scales={"matmul": 2.0},
                  curves={"matmul/bf16": [[-3, 0.5], [3, 0.5]],
                          "fastpath.encoder/bf16": [[-3, 0.6], [3, 0.6]]})
    ops = [OpRecord("addmm", "matmul", "matmul", 2e9, 1e6, 1, "Linear", "a", fastpath="encoder#1"),
           OpRecord("addmm", "matmul", "matmul", 2e9, 1e6, 1, "Linear", "b")]
    unscaled = price(ops[0], plain, "bf16", table=plain.table, scaled=False)
    scaled = unscaled.floor_us + 2.0 * (unscaled.us - unscaled.floor_us)  # above the floor
    times = price_ops(ops, fast, "bf16", table=fast.table)
    assert times[0].us == pytest.approx(0.6 * unscaled.us)  # the factor, not the scale
    assert times[1].us == pytest.approx(scaled)  # outside a fast path: the scale
    assert [t.us for t in price_ops(ops, plain, "bf16", table=plain.table)] == \
        pytest.approx([scaled] * 2)  # a table without the curve: as before


def test_measured_kernel_counts_replace_the_traced_ones():
    gpu = _table(kernels={"matmul/bf16": 3})
    op = OpRecord("addmm", "matmul", "matmul", 2e9, 1e6, 1, "Linear", "a")
    assert price(op, gpu, "bf16", table=gpu.table).kernels == 3
    assert price(op, _table(), "bf16", table=_table().table).kernels == 1


def test_3d_convolutions_have_their_own_in_model_correction():
    assert group("conv", "conv.3d") == "conv3d"
    assert group("conv", "conv.kxk") == "conv"
    assert group("copy") == "memory"


def test_packaged_h100_table_loads_and_is_labelled():
    table = load_table("h100")
    assert table is not None and table.gap_us > 0 and table.host_factor > 0
    assert {"matmul/bf16", "conv.1x1/bf16", "eltwise/fp32"} <= set(table.curves)
    assert table.validation["median_abs_error"] is not None
    assert load_table("l4") is None
    assert "uncalibrated" in latency_gpu("l4").source
    assert "calibrated table h100.json" in latency_gpu("H100").source


def test_a_malformed_table_is_refused_with_a_hint():
    with pytest.raises(InspectError, match="format"):
        parse_table({"format": 99}, "x.json")
    with pytest.raises(InspectError, match="malformed"):
        parse_table({"format": 2, "gpu": "h100"}, "x.json")


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(InspectError) as err:
        latency_gpu("h10")
    assert "did you mean h100" in (err.value.hint or "")
    assert "a100" in (err.value.hint or "")


def test_prediction_totals_and_eager_binding():
    pred = predict_latency("zoo:convnet", "h100", dtypes=("bf16",), batches=(1, 64))
    small, big = pred.results
    assert 0 < small.gpu_ms < big.gpu_ms
    assert small.eager_ms == max(small.gpu_ms, small.host_ms)
    assert small.binds == "host"  # a tiny net: Python and dispatch bind, not the GPU
    assert sum(r.us for r in small.layers) / 1e3 == pytest.approx(small.gpu_ms)
    assert small.kernels == sum(r.kernels for r in small.layers) > 0


def test_cli_predict_without_a_gpu(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "h100", "--dtype", "bf16",
                    "--batch", "1,8")
    assert result.exit_code == 0, result.output
    assert "PREDICTED, not measured" in result.output
    assert "calibrated table h100.json" in result.output
    assert "validation error" in result.output
    assert "Conv2d" in result.output and "not calibrated" in result.output


def test_cli_predict_json_has_gpu_and_eager_ms_per_batch(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "l4", "--batch", "1,8",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    pred = doc["predicted"]
    assert pred["predicted"] is True and pred["calibrated"] is False
    assert "uncalibrated" in pred["table"]
    assert [r["batch"] for r in pred["results"]] == [1, 8]
    assert all(r["gpu_ms"] > 0 and r["eager_ms"] >= r["gpu_ms"] for r in pred["results"])


def test_cli_unknown_gpu_exits_2(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "h1000")
    assert result.exit_code == 2
    assert "did you mean h100" in result.output


MODELS = [("resnet18", "bf16", 32), ("vit_b_32", "bf16", 32), ("hf:gpt2", "bf16", 1)]


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize(("model", "dtype", "batch"), MODELS)
def test_prediction_against_a_measured_graph_replay(model, dtype, batch):
    """On an H100 or H200: the prediction for that GPU within 35% of a measured replay."""
    from torchinspect.bench.run import BenchOptions, run_bench
    from torchinspect.bench.timing import TimingConfig
    from torchinspect.gpus import match_device_name
    from torchinspect.sources.case import make_case

    found = match_device_name(torch.cuda.get_device_name())
    name = found.name if found is not None else None
    if name not in ("h100", "h200"):
        pytest.skip(f"no table to compare with on {torch.cuda.get_device_name()}")
    case = make_case(model, device="meta")
    measured = run_bench(case, BenchOptions(
        device="cuda", batches=(batch,), dtypes=(dtype,), cuda_graphs=True,
        timing=TimingConfig(warmup_s=0.2, min_time=0.3, max_time=1.0)))
    ms = measured.configs[0].timing.stats.median * 1e3
    pred = predict_latency(case, name, dtypes=(dtype,), batches=(batch,)).results[0]
    assert pred.gpu_ms == pytest.approx(ms, rel=0.35), (pred.gpu_ms, ms)


def test_check_max_latency_without_a_gpu_uses_the_prediction(invoke):
    result = invoke("check", "zoo:convnet", "--max-latency-ms", "0.001", "--gpu", "h100")
    assert result.exit_code == 1, result.output  # a tiny net still needs more than 1 µs
    assert "predicted-ms" in result.output
    assert "PREDICTED eager latency on h100" in result.output
    ok = invoke("check", "zoo:convnet", "--max-latency-ms", "100", "--gpu", "h100",
                "--format", "json")
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output[ok.output.index("{"):])
    assert set(doc["models"][0]["readings"]) == {"predicted-ms"}


def test_check_unknown_gpu_exits_2(invoke):
    result = invoke("check", "zoo:convnet", "--max-latency-ms", "1", "--gpu", "a100x")
    assert result.exit_code == 2
    assert "did you mean a100" in result.output


def test_summary_time_column_is_predicted_for_a_named_gpu(invoke):
    result = invoke("summary", "zoo:convnet", "--columns", "type,macs,time", "--gpu", "h100",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows = doc["layers"]
    assert rows[0]["time_ms"] > 0
    leaves = [r for r in rows if r["depth"] == 1 and r["time_ms"] is not None]
    assert sum(r["time_ms"] for r in leaves) == pytest.approx(rows[0]["time_ms"], rel=1e-6)
    assert any("PREDICTED ms per call on h100" in n for n in doc["notes"])


def test_summary_gpu_names_the_memory_line_and_adds_the_time_column(invoke):
    """`summary --gpu a100` predicted the times for an A100 beside a memory line computed for
    an H100 it did not name; `--gpu a10` without a time column was ignored without a word."""
    text = invoke("summary", "zoo:convnet", "--gpu", "a100")
    assert text.exit_code == 0, text.output
    assert "Time (pred.)" in text.output  # added to the default columns
    assert "Peak memory, inference (predicted, A100)" in text.output
    narrow = invoke("summary", "zoo:convnet", "--columns", "type,params", "--gpu", "a10",
                    "--format", "json")
    doc = json.loads(narrow.output)
    assert doc["totals"]["memory_gpu"] == "a10" and doc["layers"][0]["time_ms"] > 0
    h100 = json.loads(invoke("summary", "zoo:convnet", "--gpu", "h100", "--format",
                             "json").output)["totals"]["peak_inference_bytes"]
    # the cuBLAS workspace of an Ampere card (8.125 MiB) against a Hopper's (32 MiB)
    assert h100 - doc["totals"]["peak_inference_bytes"] == (32 << 20) - (8 << 20) - (128 << 10)


def test_summarize_fills_time_ms_in_the_core():
    from torchinspect import summarize

    s = summarize("zoo:convnet", gpu="H100", memory="none")
    assert all(r.time_ms is not None and r.time_ms > 0 for r in s.rows if r.ran)
    assert any("PREDICTED ms per call on h100" in n for n in s.notes)
    assert summarize("zoo:convnet", memory="none").rows[0].time_ms is None


def test_summary_time_column_needs_a_gpu(invoke):
    result = invoke("summary", "zoo:convnet", "--columns", "time")
    assert result.exit_code == 2
    assert "--gpu" in result.output


def test_report_roofline_chart_draws_both_roofs_and_one_point_per_module(tmp_path, invoke):
    page = tmp_path / "r.html"
    result = invoke("report", "zoo:convnet", "--gpu", "h100", "-o", page, "--no-graph",
                    "--no-doctor")
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "Roofline on the NVIDIA H100" in text and "PREDICTED, not measured" in text
    svg = text[text.index("arithmetic intensity (FLOP per"):]
    svg = svg[:svg.index("</svg>")]
    assert "TF32 tensor cores" in svg and "fp32 CUDA cores" in svg and "memory" in svg
    assert svg.count("<circle") >= 5  # the convs, norms, linear... and the legend


def test_cli_predict_refuses_options_of_a_real_run(invoke):
    result = invoke("bench", "zoo:convnet", "--predict", "h100", "--channels-last")
    assert result.exit_code == 2
    assert "--channels-last has no effect" in result.output


# ---- one host for every GPU, and the GPUs in order -------------------------------------


def _dominates(a, b) -> bool:
    """``a`` is at least as fast as ``b`` on every datasheet rate (and natively bf16 if b is)."""
    return all(getattr(a, r) >= getattr(b, r) for r in ("tensor_16", "tf32", "fp32",
                                                        "bandwidth", "bf16"))


ORDER = [("resnet18", "bf16", 1), ("resnet18", "fp32", 32), ("zoo:gpt-tiny", "fp32", 1),
         ("zoo:convnet", "bf16", 1), ("vit_b_16", "bf16", 1)]


@pytest.mark.parametrize(("model", "dtype", "batch"), ORDER)
def test_predictions_from_one_cpu_are_ordered_by_gpu_and_share_the_host_time(model, dtype, batch):
    """Over the whole catalogue: the host time is the host's (one figure for every GPU), and
    a GPU at least as fast on every rate is never predicted slower, in graph replay or eager
    (the H100 table's curves read at the rooflines of each GPU)."""
    from itertools import permutations

    from torchinspect.inputs import rebatch
    from torchinspect.latency.eager import HostModel, host_factor
    from torchinspect.latency.host import HostCost
    from torchinspect.latency.predict import price_trace
    from torchinspect.sources.case import make_case

    case = make_case(model, device="meta")
    trace = record_ops(case.model, rebatch(case.require_example(), batch), dtype=dtype)
    host = HostModel(HostCost(2.0, 1.5, "test"), host_factor())
    preds = {name: price_trace(trace, latency_gpu(name), dtype, batch, host) for name in CATALOGUE}
    assert len({p.host_ms for p in preds.values()}) == 1
    pairs = [(a, b) for a, b in permutations(CATALOGUE, 2)
             if _dominates(CATALOGUE[a], CATALOGUE[b])]
    assert len(pairs) > 50  # the catalogue orders many pairs: not a vacuous check
    slower = [(a, b, preds[a].gpu_ms, preds[b].gpu_ms) for a, b in pairs
              if preds[a].gpu_ms > preds[b].gpu_ms or preds[a].eager_ms > preds[b].eager_ms]
    assert slower == []


def test_eager_predictions_share_the_hosts_factor_whatever_the_gpu():
    """resnet-like net at batch 1: host-bound on every GPU, so one eager time (it was 4.01 ms
    on the H100, 3.65 on the T4 and 2.26 on the A100 when the factor was the GPU's)."""
    preds = [predict_latency("zoo:convnet", gpu, dtypes=("bf16",), batches=(1,))
             for gpu in ("h100", "t4", "a100")]
    assert len({p.host_factor for p in preds}) == 1
    assert len({p.results[0].host_ms for p in preds}) == 1
    assert all(p.results[0].binds == "host" for p in preds)
    assert len({p.results[0].eager_ms for p in preds}) == 1
    t4, h100 = preds[1].results[0], preds[0].results[0]
    assert t4.gpu_ms > h100.gpu_ms  # the GPU side still tells them apart


def test_the_table_gpu_is_predicted_exactly_as_its_curves_say():
    """The monotone reading of the curves is anchored at the table's own GPU: its predictions
    are the curves' ``roof / eff`` (so the validation on its results page still holds)."""
    from torchinspect.latency.roofline import curve_time

    curve = [(-1.0, 0.05), (0.0, 0.4), (1.0, 0.5)]  # steep: roof/eff falls from 2 µs to 2.5
    assert curve_time(curve, 0.5, 0.5) == pytest.approx(0.5 / interpolate(curve, -0.30103))
    # a GPU twice as fast is never slower than the anchor, a GPU twice as slow never faster
    assert curve_time(curve, 0.25, 0.5) <= curve_time(curve, 0.5, 0.5)
    assert curve_time(curve, 1.0, 0.5) >= curve_time(curve, 0.5, 0.5)
    xs = [10 ** (x / 20) for x in range(-40, 30)]
    times = [curve_time(curve, r, 0.5) for r in xs]
    assert times == sorted(times)


def test_a_replaced_mac_formula_changes_the_latency_prediction():
    """The pricer takes the trace's own MACs (the registry, its precedence included), not
    torch's flop_registry first: a formula registered with replace=True is what it prices."""
    from torch import nn

    from torchinspect import register_mac_formula, unregister_mac_formula
    from torchinspect.sources.case import make_case

    case = make_case(nn.Linear(4096, 4096, bias=False), "512,4096")  # compute-bound on an H100

    def predict():
        return predict_latency(case, "h100", dtypes=("fp32",)).results[0]

    before = predict()
    register_mac_formula("mm", lambda args, kwargs, out: 2 * out.numel() * args[0].shape[-1],
                         family="matmul/linear", replace=True)
    try:
        after = predict()
    finally:
        unregister_mac_formula("mm")
    assert after.flops - before.flops == 2 * 512 * 4096 * 4096  # the mm's FLOPs, doubled
    assert after.gpu_ms > 1.5 * before.gpu_ms
    assert predict().flops == before.flops  # unregistered: torch's formula again


def test_a_dtype_the_tables_do_not_price_is_refused():
    with pytest.raises(InspectError, match="fp64"):
        predict_latency("zoo:convnet", "h100", dtypes=("fp64",))
