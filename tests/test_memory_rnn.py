"""cuDNN's RNN in the memory model against what an H100 allocated: LSTM projections
(``proj_size``), the weight layout, reserve, forward and backward, from the committed runs of
benchmarks/cudnn_rnn_memory.py (no GPU needed); and, on a GPU, the LSTM-projection models."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchinspect.memory.cudnn_rnn import FLATTENED, reserve_bytes

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = BENCH / "results"
PROJ_RUN = RESULTS / "cudnn-rnn-proj-h100.jsonl"
RNN_RUN = RESULTS / "cudnn-rnn-h100.jsonl"
MIB = 1 << 20
sys.path.insert(0, str(BENCH))
import cudnn_rnn_memory as sweep  # noqa: E402 - benchmarks/cudnn_rnn_memory.py


def _rows(path: Path) -> list[dict]:
    return sweep.measured_rows(path)


def test_the_proj_run_is_complete_and_gru_refuses_projections():
    lines = [json.loads(line) for line in PROJ_RUN.read_text().splitlines()]
    assert lines[0]["kind"] == "gru" and lines[0]["proj_size"].startswith("refused")
    rows = _rows(PROJ_RUN)
    assert len(rows) == 120 and not any("error" in r for r in lines)
    assert {r["run"]["device"] for r in rows} == {"NVIDIA H100 80GB HBM3"}
    # 78 cases with a projection, 74 of them beside the same LSTM without one
    assert sum(bool(r["case"]["proj"]) for r in rows) == 78
    plain = {json.dumps(r["case"], sort_keys=True) for r in rows if not r["case"]["proj"]}
    assert sum(json.dumps({**r["case"], "proj": 0}, sort_keys=True) in plain
               for r in rows if r["case"]["proj"]) == 74


def test_reserve_with_projections_matches_every_measured_shape():
    """The reserve read from the autograd node's saved tensors (``_saved_result3``) of every
    training case, with and without proj_size, to the byte."""
    trained = [r for r in _rows(PROJ_RUN) if r["train"]]
    assert len(trained) == 60
    for r in trained:
        c = r["case"]
        want = reserve_bytes("lstm", c["layers"], c["seq"], c["batch"], c["hidden"],
                             2 if c["bidir"] else 1, 4 if c["dtype"] == "fp32" else 2, c["proj"])
        assert r["saved"]["_saved_result3"] == want, c


def test_flat_weight_layout_matches_the_gpus():
    """nn.LSTM's flat weights (names, shapes, bytes) as PyTorch laid them out on the GPU:
    ``weight_hr_l{k}`` after each layer's biases; one flat buffer for fp32 (what the model
    assumes for the dtypes in FLATTENED), separate storages for bf16 (copied per call)."""
    for r in _rows(PROJ_RUN):
        c = r["case"]
        kw = {"proj_size": c["proj"]} if c["proj"] else {}
        with torch.device("meta"):
            m = nn.LSTM(c["input"], c["hidden"], c["layers"], batch_first=True,
                        bidirectional=c["bidir"], **kw)
        w = r["weights"]
        assert list(m._flat_weights_names) == w["names"], c
        assert [list(t.shape) for t in m._flat_weights] == w["shapes"], c
        size = 4 if c["dtype"] == "fp32" else 2
        assert sum(t.numel() for t in m._flat_weights) * size == w["param_bytes"], c
        flat = {"fp32": torch.float32, "bf16": torch.bfloat16}[c["dtype"]] in FLATTENED
        assert w["one_buffer"] == flat, c
        if c["proj"]:
            assert f"weight_hr_l{c['layers'] - 1}" in w["names"]
            assert [c["proj"], c["hidden"]] in w["shapes"]
            assert r["output_shapes"][0][-1] == c["proj"] * (2 if c["bidir"] else 1)
            assert r["output_shapes"][1][-1] == c["proj"]  # h_n: proj wide
            assert r["output_shapes"][2][-1] == c["hidden"]  # c_n: hidden wide


def _check(rows: list[dict]) -> None:
    """Each case through the memory model (fake tensors, CUDA's kernels, the allocator's
    replay) with the forward workspace it measured: what the forward keeps, and what the
    backward leaves, as on the GPU (within the allocator's block rounding); the backward
    workspace the measured peak implies is the training forward's (cuDNN sizes both from
    one training workspace: the model logs it once per backward phase)."""
    misses = []
    for r in rows:
        c = r["case"]
        log = sweep.replay_case(c)
        forward = r["fwd_peak"] - r["fwd_kept"]
        got = sweep.figures(log, forward)
        if abs(got["fwd_kept"] - r["fwd_kept"]) > 1.1 * MIB:
            misses.append((c, "fwd_kept", got["fwd_kept"], r["fwd_kept"]))
        if c["train"]:
            backward = sweep.backward_workspace(log, forward, r["bwd_peak"])
            got = sweep.figures(log, forward, backward)
            if abs(got["bwd_after"] - r["bwd_after"]) > 1.1 * MIB:
                misses.append((c, "bwd_after", got["bwd_after"], r["bwd_after"]))
            if abs(backward - forward) > 2 * MIB:
                misses.append((c, "backward workspace", backward, forward))
    assert not misses, misses


@pytest.mark.parametrize("run", [PROJ_RUN, RNN_RUN], ids=["lstm-proj", "lstm-gru-rnn"])
def test_every_measured_case_forward_and_backward_as_measured(run):
    _check(_rows(run))


def test_the_table_holds_every_measured_projection_forward():
    from torchinspect.memory.workspace import rnn_problem, shipped_table

    table = shipped_table()
    for r in _rows(PROJ_RUN):
        c = r["case"]
        key = rnn_problem("lstm", backward=False, input_size=c["input"], hidden=c["hidden"],
                          layers=c["layers"], dirs=2 if c["bidir"] else 1, seq=c["seq"],
                          batch=c["batch"], dtype=c["dtype"], train=c["train"], bias=True,
                          batch_first=True, proj=c["proj"]).key
        assert table.entries[key] == r["fwd_peak"] - r["fwd_kept"], key
        assert ("proj=" in key) == bool(c["proj"])  # keys without projection unchanged


@pytest.mark.slow
def test_unmeasured_lstm_configurations_from_the_workspace_model():
    """Each LSTM configuration of the proj run left out of the table (every length, batch and
    mode of it): the RNN workspace model refitted without it lands within 10% of the
    measurement for 90% of them and never beyond the envelope the table ships."""
    from torchinspect.memory.workspace import WorkspaceTable, problem_from_key, shipped_table

    table = shipped_table()
    rnn = {k: v for k, v in table.entries.items() if k.startswith("rnn")}
    cv = WorkspaceTable({}, rnn, table.envelopes)
    shape = ("input", "hidden", "proj", "layers", "dirs", "dtype")
    errors, outside = [], []
    for key, measured in rnn.items():
        p = problem_from_key(key).params
        if p["kind"] != "lstm" or "proj" not in p:
            continue
        mine = tuple(p.get(k) for k in shape)
        point = cv.nearest(problem_from_key(key), lambda k, mine=mine: problem_from_key(k)
                           .params["kind"] == "lstm" and tuple(problem_from_key(k).params.get(
                               s, 0 if s == "proj" else None) for s in shape) == mine)
        assert point is not None
        errors.append(abs(point - measured) / measured)
        above, below = table.spread(problem_from_key(key))
        if not point - below <= measured <= point + above:
            outside.append(key)
    assert len(errors) == 117  # 78 forward, 39 backward (training)
    assert sorted(errors)[int(0.9 * len(errors))] < 0.10
    assert not outside


@pytest.mark.slow
def test_lstm_with_projections_takes_cudnns_path_in_a_prediction():
    """No unrolled cells: one cuDNN call whose reserve and projected output wait for the
    backward, and the workspace problems carry proj_size."""
    from torchinspect.inputs import ExampleInputs, TensorSpec
    from torchinspect.memory import StepConfig, predict_case
    from torchinspect.memory.faking import make_target
    from torchinspect.sources.case import make_case

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(40, 256, 2, batch_first=True, proj_size=64)
            self.head = nn.Linear(64, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0])

    def predict(seq: int) -> Any:
        case = make_case(Net(), ExampleInputs((TensorSpec((4, seq, 40)),)))
        return predict_case(case, StepConfig(optimizer="sgd"), make_target("cuda", "h100"),
                            inference=False)

    r = predict(50)
    reserve = reserve_bytes("lstm", 2, 50, 4, 256, 1, 4, 64)
    rnn_saved = dict(r.training.saved)["rnn"]
    # + the output and the zero initial states (h: proj wide, c: hidden wide)
    assert reserve <= rnn_saved <= reserve + 4 * 50 * 64 * 4 + 2 * 4 * (64 + 256) * 4 + 8 * 512
    assert predict(100).training.ops == r.training.ops  # one call, not a cell per step
    assert any("proj 64" in n for n in r.notes) or "proj 64" in r.training.high_at


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from memory_validation import case
from memory_heldout import _cfg
from torchinspect.memory import predict_case
from torchinspect.memory.faking import make_target
from torchinspect.memory.predict import example_at
from torchinspect.memory.verify import measure
name, mode = sys.argv[2], sys.argv[3]
c, cfg = case(name), _cfg(mode)
measured = measure(c, example_at(c, None), cfg, "training" if cfg.train else "inference")
r = predict_case(c, cfg, make_target("cuda", calibrate=True), inference=not cfg.train)
run = r.training if cfg.train else r.inference
print(json.dumps([measured["peak"], run.peak_low, run.peak, run.peak_high]))
"""


@pytest.mark.cuda
def test_lstm_projection_models_match_the_gpu(tmp_path):
    """The four LSTM-with-projection development models (benchmarks/memory_validation.py,
    set rnnproj) x inference, AdamW fp32, AdamW bf16 autocast: the calibrated prediction
    within 3% of ``max_memory_allocated``. Each (model, mode) in a fresh process, four at a
    time (each process's allocator counts only its own memory).

        .venv/bin/pytest tests/test_memory_rnn.py -m cuda -q -p no:cacheprovider
    """
    import os
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(BENCH))
    from memory_validation import MODES, RNNPROJ

    def one(item: tuple[str, str]) -> tuple[str, str, list[int] | str]:
        name, mode = item
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / f"{name}-{mode}")}
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(BENCH), name, mode],
                              env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode:
            return name, mode, proc.stderr[-1500:]
        return name, mode, json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, [(n, m) for n in RNNPROJ for m in MODES]))
    failed = [(n, m, out) for n, m, out in results if isinstance(out, str)]
    assert not failed, failed
    off = [(n, m, out) for n, m, out in results
           if abs(out[2] - out[0]) / out[0] > 0.03 or not out[1] == out[2] == out[3]]
    assert not off, off
