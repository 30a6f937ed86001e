"""cuDNN workspaces in `inspect memory`: problem keys, the shipped table, ranges, the
calibration cache, --fit's rows, --checkpointing on CLI-built models, the encoder fast path."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from torchinspect.inputs import ExampleInputs, TensorSpec
from torchinspect.memory import StepConfig, predict_case, predict_memory
from torchinspect.memory.faking import make_target
from torchinspect.memory.workspace import (
    Estimate,
    Problem,
    Workspaces,
    WorkspaceTable,
    build_table,
    conv_problem,
    envelope,
    held_out_errors,
    problem_from_key,
    rnn_problem,
    shipped_table,
)
from torchinspect.sources.case import make_case


def conv(batch: int, dtype: str = "fp32", cin: int = 64, size: int = 56) -> Problem:
    x = torch.empty(batch, cin, size, size, device="meta",
                    dtype=getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dtype]))
    w = torch.empty(64, cin, 3, 3, device="meta", dtype=x.dtype)
    problem = conv_problem("convolution", (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
    assert problem is not None
    return problem


def test_problem_key_round_trip_and_describe():
    p = conv(8)
    assert problem_from_key(p.key) == p and hash(problem_from_key(p.key)) == hash(p)
    assert p.family == "conv_fwd/2d/dense/fp32"
    assert p.describe() == "conv2d 64->64 3x3 forward, fp32, input 8x64x56x56"
    r = rnn_problem("lstm", backward=True, input_size=32, hidden=64, layers=2, dirs=2, seq=10,
                    batch=4, dtype=torch.bfloat16, train=True, bias=True, batch_first=True)
    assert problem_from_key(r.key) == r and r.family == "rnn_bwd/lstm/half"
    with pytest.raises(ValueError, match="unknown workspace op"):
        problem_from_key("matmul x=1")


def test_envelope_quantiles_grow_with_the_size_and_scale_beyond_it():
    mib = 1 << 20
    # 100 problems of 1-2 MiB: 98 exact, one 5 MiB above its point, one 3 MiB below
    small = [(mib, 0)] * 98 + [(mib, 5 * mib), (mib, -3 * mib)]
    env = envelope(small, quantile=0.99)
    assert env.at(mib) == (0, 0)  # the 99th percentile of each side is 0
    env = envelope(small, quantile=1.0)
    assert env.at(mib + 1) == (5 * mib, 3 * mib)
    # a larger size class with smaller errors keeps the smaller class's (non-decreasing)
    env = envelope([*small, (4 * mib, mib), (4 * mib, 0)], quantile=1.0)
    assert env.at(4 * mib) == (5 * mib, 3 * mib)
    assert env.at(mib // 4) == (5 * mib, 3 * mib)  # below every class: the first
    # twice as large as anything held out: twice the allowance of the largest class
    assert env.at(16 * mib) == (10 * mib, 6 * mib)
    assert envelope([]).at(mib) == (0, 0)


def table_of(entries: dict[Problem, int]) -> WorkspaceTable:
    return build_table({p.key: w for p, w in entries.items()}, {"gpu": "NVIDIA H100"}, "test")


def test_table_lookup_is_exact_and_others_take_the_nearest_scaled_by_size():
    t = table_of({conv(1): 1 << 20, conv(8): 8 << 20, conv(32): 40 << 20,
                  conv(8, cin=32): 2 << 20})
    assert t.estimate(conv(8)) == Estimate(8 << 20, 8 << 20, 8 << 20, "table")
    # a convolution's point: the median of its 3 nearest in shape space (batch 32, batch 8,
    # then batch 8 with 32 input channels), each scaled by the ratio of problem sizes
    near = t.estimate(conv(20))
    scaled = sorted(w * conv(20).size / p.size for p, w in (
        (conv(32), 40 << 20), (conv(8), 8 << 20), (conv(8, cin=32), 2 << 20)))
    assert near.source == "estimate" and near.point == int(scaled[1])
    assert near.low <= near.point <= near.high
    # a bf16 problem with no bf16 measurement: the op's pool (all precisions)
    assert t.estimate(conv(8, "bf16")).source == "estimate"
    assert WorkspaceTable({}, {}).estimate(conv(8)).source == "none"


def test_cross_validation_leaves_out_every_problem_of_the_same_models():
    entries = {conv(1).key: 1 << 20, conv(8).key: 8 << 20, conv(32).key: 40 << 20,
               conv(8, cin=32).key: 2 << 20}
    # conv(*) of cin 64 belong to model a, the cin-32 one to model b
    owners = {k: {"a"} for k in entries}
    owners[conv(8, cin=32).key] = {"b"}
    errors = held_out_errors(entries, owners)["conv_fwd"]
    # each cin-64 problem is estimated from the only problem of another model (cin 32)
    by_size = {s: (w, p) for _, s, w, p in errors}
    small = conv(8, cin=32)
    assert by_size[conv(8).size] == (8 << 20, (2 << 20) * conv(8).size // small.size)
    # without owners each problem is left out alone: batch 32 then has its batch siblings
    alone = {s: p for _, s, _, p in held_out_errors(entries, {})["conv_fwd"]}
    scaled = sorted(w * conv(32).size / p.size for p, w in (
        (conv(8), 8 << 20), (conv(8, cin=32), 2 << 20), (conv(1), 1 << 20)))
    assert alone[conv(32).size] == int(scaled[1])
    # the envelope covers every held-out error of its table at quantile 1
    t = build_table(entries, {}, "", owners)
    assert set(t.envelopes) == {"conv_fwd"}


def test_shipped_table_names_its_machine_coverage_and_envelopes():
    t = shipped_table()
    assert "H100" in t.machine["gpu"] and t.machine["cudnn"] >= 90000
    assert len(t.entries) > 5000 and "torchvision" in t.coverage
    # convolutions per op, RNN calls per op and cell (the RNN model errs differently by cell)
    assert set(t.envelopes) == {"conv_fwd", "conv_bwd"} | {
        f"rnn_{op}/{cell}" for op in ("fwd", "bwd") for cell in ("lstm", "gru", "rnn_tanh")}
    for env in t.envelopes.values():  # non-decreasing with the size
        above = [row[1] for row in env.bins]
        assert above == sorted(above) and len(env.bins) >= 3
    assert set(t.rnn_fit()) == {f"{cell}/{mode}" for cell in ("lstm", "gru", "rnn_tanh")
                                for mode in ("train", "eval")}
    # a problem in the table is exact; the same layer at an unmeasured batch is a range
    key = next(k for k in sorted(t.entries) if k.startswith("conv_bwd") and t.entries[k] > 0)
    assert t.estimate(problem_from_key(key)).exact
    spec = dict(problem_from_key(key).spec)
    spec["x"] = [5, *spec["x"][1:]]
    other = t.estimate(Problem("conv_bwd", tuple(sorted(spec.items()))))
    assert other.source == "estimate" and other.low <= other.point < other.high


def test_other_gpu_turns_table_entries_into_ranges():
    t = table_of({conv(8): 8 << 20, conv(32): 30 << 20})
    same, other = Workspaces(t, True), Workspaces(t, False)
    assert same.estimate(conv(8)).exact
    found = other.estimate(conv(8))
    assert not found.exact and found.point == 8 << 20 and found.high >= 8 << 20
    assert other.notes("a100") and "not measured for a100" in other.notes("a100")[0]


class Convs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 48, 5, padding=2)
        self.b = nn.Conv2d(48, 48, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.slow
def test_unknown_convolutions_give_a_range_with_the_op_at_its_upper_end():
    case = make_case(Convs(), ExampleInputs((TensorSpec((6, 3, 72, 72)),)))
    r = predict_case(case, StepConfig(), make_target("cuda", "h100", calibrate=False))
    for run in (r.inference, r.training):
        assert run.peak_low <= run.peak <= run.peak_high
    assert r.training.peak_high > r.training.peak_low
    assert "workspace" in r.training.high_at and "conv2d" in r.training.high_at
    assert any("not measured for h100" in n for n in r.notes)
    data = r.to_dict()
    assert {"peak_low", "peak_high", "high_at"} <= set(data["training"])


@pytest.mark.slow
def test_a_table_problem_is_exact_and_cpu_predictions_have_no_workspace():
    case = make_case(Convs(), ExampleInputs((TensorSpec((6, 3, 72, 72)),)))
    r = predict_case(case, StepConfig(train=False), make_target("cpu"))
    assert r.inference.peak_low == r.inference.peak == r.inference.peak_high
    # every problem in the table: the range closes on the point
    from torchinspect.memory import predict as p

    ws = p.make_workspaces(make_target("cuda", "h100", calibrate=False))
    seen: list[Problem] = []
    original = ws.estimate
    ws.estimate = lambda problem: (seen.append(problem), original(problem))[1]  # type: ignore[method-assign]
    p.track(case, p.example_at(case, None), StepConfig(), make_target("cuda", "h100"),
            "training", 5, ws)
    known = Workspaces(table_of(dict.fromkeys(seen, 3 << 20)), True)
    run, _ = p.track(case, p.example_at(case, None), StepConfig(),
                     make_target("cuda", "h100"), "training", 5, known)
    assert run.peak_low == run.peak == run.peak_high and run.breakdown is not None


@pytest.mark.slow
def test_rnn_calls_log_their_workspace():
    lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
    r = predict_memory(lstm, ExampleInputs((TensorSpec((4, 10, 16)),)), calibrate=False)
    assert r.training.peak_high > r.training.peak_low  # forward and backward workspaces
    assert "lstm 16->32 x2" in r.training.high_at


# ------------------------------------------------------------ margins


def test_margins_widen_by_the_measured_extremes():
    from torchinspect.memory.margins import Margin, margins_from, margins_from_dict, run_kind

    m = Margin(-0.02, 0.04, 17)  # predictions from 2% under to 4% over the measurement
    low, high = m.widen(1_040_000, 980_000)
    assert low == 1_000_000 and high == 1_000_000  # each end moved to the measurement
    assert m.widen(100, 100) == (96, 103)  # floor and ceiling: the range never shrinks
    found = margins_from({"inference": [0.01, 0.03], "training": [-0.05, -0.01],
                          "training-amp": []})
    assert found["inference"] == Margin(0.0, 0.03, 2)  # 0 is always inside
    assert found["training"] == Margin(-0.05, 0.0, 2) and "training-amp" not in found
    assert [run_kind("inference", None), run_kind("training", None),
            run_kind("training", "bf16")] == ["inference", "training", "training-amp"]
    for bad in ([], {"version": 2}, {"version": 1, "kinds": {"training": {
            "low": 0.1, "high": 0.2, "n": 3}}}, {"version": 1, "kinds": {"other": {
                "low": 0, "high": 0, "n": 1}}}):
        with pytest.raises((ValueError, KeyError)):
            margins_from_dict(bad)


def test_shipped_margins_come_from_the_development_set():
    from torchinspect.memory.margins import KINDS, shipped_margins

    found = shipped_margins()
    assert set(found) == set(KINDS)
    for m in found.values():
        assert m.n >= 15 and -0.1 < m.low <= 0 <= m.high < 0.1


@pytest.mark.slow
def test_a_prediction_without_a_gpu_carries_the_margins():
    from torchinspect.memory.margins import shipped_margins

    case = make_case(Convs(), ExampleInputs((TensorSpec((6, 3, 72, 72)),)))
    cfg = StepConfig(amp="bf16")
    r = predict_case(case, cfg, make_target("cuda", "h100", calibrate=False))
    amp = shipped_margins()["training-amp"]
    run = r.training
    assert run.peak_low < run.peak < run.peak_high
    # at least the margin on each side of the point (workspace ranges add to it)
    assert run.peak_high >= run.peak / (1 + amp.low) - 1
    assert run.peak_low <= run.peak / (1 + amp.high) + 1
    assert any("error measured on the development set" in n for n in r.notes)
    # a CPU prediction has no margin (none was measured)
    cpu = predict_case(case, cfg, make_target("cpu"))
    assert cpu.training.peak_low == cpu.training.peak == cpu.training.peak_high


# ------------------------------------------------------------ calibration cache


def test_calibration_cache_is_keyed_by_machine_and_ignores_bad_files(tmp_path):
    from torchinspect.memory.calibrate import cache_path, load_cache

    h100 = {"gpu": "NVIDIA H100 80GB HBM3", "cudnn": 91900, "torch": "2.11.0"}
    a100 = {"gpu": "NVIDIA A100-SXM4-80GB", "cudnn": 91900, "torch": "2.11.0"}
    assert cache_path(h100, tmp_path) != cache_path(a100, tmp_path)
    assert cache_path(h100, tmp_path) != cache_path({**h100, "cudnn": 90100}, tmp_path)
    cal = load_cache(h100, tmp_path)
    cal.entries = {conv(8).key: 1024, conv(32).key: None}  # None: it ran out of memory
    cal.dirty = True
    cal.save()
    again = load_cache(h100, tmp_path)
    assert again.entries == cal.entries and not again.notes
    # the file of another machine under this machine's name: ignored, with a note
    path = cache_path(h100, tmp_path)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "key": a100, "data": {"x": 1}}))
    other = load_cache(h100, tmp_path)
    assert other.entries == {} and "A100" in other.notes[0]
    for junk in (b"\x00not json", b'{"version": 2, "machine": null}', b"[]",
                 json.dumps({**doc, "data": {"k": -5}}).encode(),
                 json.dumps({**doc, "data": {"k": 1e300}}).encode(),
                 json.dumps({"version": 1, "machine": h100, "entries": {"k": 5}}).encode()):
        path.write_bytes(junk)
        bad = load_cache(h100, tmp_path)
        assert bad.entries == {} and "ignored the calibration cache" in bad.notes[0]


def test_out_of_memory_rows_fall_back_to_the_table_with_a_note():
    t = table_of({conv(8): 8 << 20})
    ws = Workspaces(t, True, calibrated={conv(8).key: None, conv(32).key: 5 << 20})
    assert ws.estimate(conv(32)) == Estimate(5 << 20, 5 << 20, 5 << 20, "calibrated")
    assert ws.estimate(conv(8)).point == 8 << 20
    assert "ran out of GPU memory measuring conv2d 64->64 3x3 forward" in ws.notes("h100")[0]


def test_calibrate_needs_the_gpu_it_measures(monkeypatch):
    from torchinspect import gpus
    from torchinspect.errors import InspectError

    monkeypatch.setattr(gpus, "detect_gpu", lambda: None)
    with pytest.raises(InspectError, match="no CUDA device"):
        make_target("cuda", calibrate=True)
    assert not make_target("cuda").calibrate
    monkeypatch.setattr(gpus, "detect_gpu", lambda: gpus.CATALOGUE["h100"])
    assert make_target("cuda").calibrate and not make_target("cuda", "a100").calibrate
    with pytest.raises(InspectError, match="not --gpu a100"):
        make_target("cuda", "a100", calibrate=True)


# ------------------------------------------------------------ fused paths


def test_encoder_eval_takes_cudas_fast_path():
    from torchinspect.memory import fused

    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    example = ExampleInputs((TensorSpec((4, 50, 64)),))
    fast = predict_memory(enc, example, train=False).inference.peak
    original, original_mha = fused.takes_fast_path, fused.mha_takes_fast_path
    try:
        fused.takes_fast_path = lambda layer, src: False  # the slow path, as before
        fused.mha_takes_fast_path = lambda *a: False
        slow = predict_memory(enc, example, train=False).inference.peak
    finally:
        fused.takes_fast_path, fused.mha_takes_fast_path = original, original_mha
    assert fast < slow
    assert nn.TransformerEncoderLayer.forward is not None and "fast_path" not in repr(
        nn.TransformerEncoderLayer.forward)  # put back after the prediction
    first = enc.layers[0]
    first.train()
    assert not fused.takes_fast_path(first, torch.empty(2, 3, 64))  # training: slow path


# ------------------------------------------------------------ CLI


@pytest.mark.slow
def test_cli_range_and_fit_rows(runner):
    from torchinspect.cli.app import app

    args = ["memory", "resnet18", "--input", "3,40,40", "--no-calibrate"]
    res = runner.invoke(app, [*args, "--batch", "4"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    assert "Upper end set by" in res.output and "workspace" in res.output
    # 1GB is read as 1 GiB (a GPU size), less the CUDA context and the allocator's reserve
    fit = runner.invoke(app, [*args, "--batch", "2", "--fit", "1GB"], env={"COLUMNS": "100"})
    assert fit.exit_code == 0, fit.output
    assert "The batch found and the next one up" in fit.output and "Binding" in fit.output
    assert "(upper end)" in fit.output
    js = json.loads(runner.invoke(app, [*args, "--batch", "2", "--fit", "1GB",
                                        "-f", "json"]).output)
    found = js["fit"]
    mode = found["binding"]
    assert mode in ("inference", "training")
    probes = {p["batch"]: p["peak"] for p in found["probes"] if p["mode"] == mode}
    assert found["budget"] < 2**30
    assert probes[found[mode]] <= found["budget"] < probes[found[mode] + 1]


def test_cli_no_train_table_has_no_training_columns(runner):
    from torchinspect.cli.app import app

    res = runner.invoke(app, ["memory", "resnet18", "--input", "3,32,32", "--batch", "2,4",
                              "--no-train"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    assert "Training peak" not in res.output and "Inference peak at" in res.output


@pytest.mark.slow
def test_cli_checkpointing_on_a_torchvision_model(runner):
    from torchinspect.cli.app import app

    args = ["memory", "resnet18", "--input", "3,64,64", "--batch", "8", "--amp", "--dtype",
            "bf16", "-f", "json", "--no-calibrate"]
    plain = runner.invoke(app, args)
    res = runner.invoke(app, [*args, "--checkpointing", "BasicBlock"])
    assert res.exit_code == 0, res.output
    saved = json.loads(res.output)["training"]["saved_total"]
    assert saved < json.loads(plain.output)["training"]["saved_total"]


# ------------------------------------------------------------ on the GPU


def unet() -> nn.Module:
    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
            self.mid = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU())
            self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.out = nn.Conv2d(64, 2, 1)

        def forward(self, x):
            skip = self.down(x)
            y = self.up(self.mid(nn.functional.max_pool2d(skip, 2)))
            return self.out(torch.cat([y, skip], 1))

    return Tiny()


def gpu_case(name: str):
    from torchinspect.sources.case import ModelOptions

    if name == "alexnet":
        return make_case("alexnet", options=ModelOptions(inputs=["3,224,224"], batch=16))
    if name == "lstm":
        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = nn.LSTM(256, 512, num_layers=2, batch_first=True)
                self.head = nn.Linear(512, 10)

            def forward(self, x):
                return self.head(self.rnn(x)[0])

        return make_case(Net(), ExampleInputs((TensorSpec((16, 100, 256)),)))
    if name == "encoder":
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        return make_case(nn.TransformerEncoder(layer, 3, enable_nested_tensor=False),
                         ExampleInputs((TensorSpec((8, 128, 256)),)))
    return make_case(unet(), ExampleInputs((TensorSpec((8, 3, 128, 128)),)))


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_memory_workspace import gpu_case
from torchinspect.memory import StepConfig, predict_case
from torchinspect.memory.predict import example_at
from torchinspect.memory.faking import make_target
from torchinspect.memory.verify import measure
name, cfg = sys.argv[2], StepConfig(**json.loads(sys.argv[3]))
case = gpu_case(name)
measured = measure(case, example_at(case, None), cfg, "training" if cfg.train else "inference")
r = predict_case(case, cfg, make_target("cuda", calibrate=True), inference=not cfg.train)
run = r.training if cfg.train else r.inference
print(json.dumps([measured["peak"], run.peak_low, run.peak, run.peak_high]))
"""


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["alexnet", "lstm", "encoder", "unet"])
@pytest.mark.parametrize("cfg", [{"train": False}, {}, {"amp": "bf16"}],
                         ids=["inference", "adamw", "bf16amp"])
def test_calibrated_prediction_matches_the_gpu(name, cfg, tmp_path):
    # each case in a fresh process, as `inspect memory --verify` runs: what earlier tests
    # left allocated in this process (cuDNN dropout states, cached handles) would count in
    # this case's measured peak
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(Path(__file__).parent), name,
                           json.dumps(cfg)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured, low, peak, high = json.loads(proc.stdout.strip().splitlines()[-1])
    assert low == peak == high  # every workspace measured
    assert abs(peak - measured) / measured <= 0.03, (peak, measured)
