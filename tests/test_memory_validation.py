"""The published memory accuracy, guarded without a GPU.

The committed predictions (benchmarks/results/memory-validation-predicted.jsonl for issue
40's sets, memory-heldout-predicted/ for issue 22/32's) are predicted again with today's
code from the committed list of models, and compared with the GPU's committed
measurements: a change that moves a point further from its measurement, loses a measurement
from the range of the cuDNN workspaces widened with today's margins, or widens that range,
fails. A fast sample runs in ``make test``; every committed prediction under ``-m slow``.
The page itself is checked against the same data by tests/test_benchmarks.py (report.py
--check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import memory_heldout  # noqa: E402
import memory_validation  # noqa: E402
import pages_memory  # noqa: E402

# a point may move by this much of the measurement, the range widen by this much, before
# the change counts as worse (the allocator's block placement can shift a block)
POINT_SLACK = 0.001
WIDTH_SLACK = 0.005


def _committed() -> list[dict[str, Any]]:
    """Every committed prediction with its measurement: set, model, mode, measured peak,
    the stored prediction, and how to build the case."""
    measured = {(r["model"], r["mode"]): r["measured"]["peak"]
                for r in pages_memory._lines(pages_memory.MEASURED) if "measured" in r}
    out = []
    for r in pages_memory._lines(pages_memory.PREDICTED):
        if "predicted" in r and not r.get("dry_run"):
            out.append({"set": r["set"], "model": r["model"], "mode": r["mode"],
                        "real": measured.get((r["model"], r["mode"])), "pred": r["predicted"],
                        "build": memory_validation.case})
    for set_name, models in pages_memory._heldout_sets().items():
        for model in models:
            mpath = pages_memory.RESULTS / pages_memory.HELDOUT[0] / f"{model}.json"
            ppath = pages_memory.RESULTS / pages_memory.HELDOUT[1] / f"{model}.json"
            if not (mpath.exists() and ppath.exists()):
                continue
            mrow, prow = json.loads(mpath.read_text()), json.loads(ppath.read_text())
            for mode in pages_memory.MODES:
                pred = prow.get(mode, {})
                if "ws_low" in pred:
                    out.append({"set": f"heldout-{set_name}", "model": model, "mode": mode,
                                "real": mrow.get(mode, {}).get("measured", {}).get("peak"),
                                "pred": pred,
                                "build": lambda name: memory_heldout.find(name)()})
    return [r for r in out if r["real"]]


COMMITTED = _committed()
FAST = {("rnnproj", "lstmp-seqfirst", "adamw-fp32"), ("rnnproj", "lstmp-bi-2l", "inference"),
        ("val", "lstm-2l-seqfirst", "adamw-bf16amp"), ("val", "wavenet-b4", "inference"),
        ("heldout-dev", "lstm", "adamw-fp32"), ("heldout-val", "gru-1", "inference")}


def _id(r: dict[str, Any]) -> str:
    return f"{r['set']}/{r['model']}/{r['mode']}"


def _check(r: dict[str, Any]) -> None:
    from torchinspect.memory.faking import make_target

    margins, _ = pages_memory._margins()
    now = memory_heldout._predicted(r["build"](r["model"]), r["mode"],
                                    make_target("cuda", "h100", calibrate=False))
    real, before = r["real"], r["pred"]
    was = abs(before["peak"] - real) / real
    err = abs(now["peak"] - real) / real
    assert err <= was + POINT_SLACK, (
        f"{_id(r)}: the point moved from {100 * was:.2f}% to {100 * err:.2f}% of the measurement")
    low0, high0 = pages_memory._widened(before, r["mode"], margins)
    low, high = pages_memory._widened(now, r["mode"], margins)
    if low0 <= real <= high0:
        assert low <= real <= high, f"{_id(r)}: the measurement left the range {low}-{high}"
    assert (high - low) - (high0 - low0) <= WIDTH_SLACK * real, (
        f"{_id(r)}: the range widened from {high0 - low0} to {high - low} bytes")


def test_the_committed_predictions_cover_every_set():
    sets = {r["set"] for r in COMMITTED}
    assert {"rnnproj", "val", "heldout-dev", "heldout-val"} <= sets
    assert {(r["set"], r["model"], r["mode"]) for r in COMMITTED} >= FAST
    for r in COMMITTED:  # what the page widens: the workspaces' own range around the point
        p = r["pred"]
        assert p["ws_low"] <= p["peak"] <= p["ws_high"], _id(r)


@pytest.mark.parametrize("row", [r for r in COMMITTED
                                 if (r["set"], r["model"], r["mode"]) in FAST], ids=_id)
def test_a_sample_of_the_published_predictions_is_not_worse(row):
    _check(row)


@pytest.mark.slow
@pytest.mark.replay
@pytest.mark.parametrize("row", COMMITTED, ids=_id)
def test_no_published_prediction_is_worse(row):
    _check(row)


def test_figures_count_what_the_files_hold():
    """The page's figures: a row without a measurement or a prediction is listed as missing,
    never counted; the targets say '-' where nothing is measured."""
    rows = [{"model": "a", "mode": "inference", "real": 100, "point": 104, "low": 90,
             "high": 110},
            {"model": "a", "mode": "adamw-fp32", "real": 100, "point": 95, "low": 80,
             "high": 99, "cal": 102},
            {"model": "b", "mode": "inference", "real": None, "point": 50, "low": 40,
             "high": 60}]
    f = pages_memory.figures(rows)
    assert (f["n"], f["measured"], f["inside"], f["within5"]) == (2, 2, 1, 2)
    assert (f["cal_n"], f["cal3"]) == (1, 1) and f["median_width"] == pytest.approx(0.195)
    line = pages_memory.target_line(f)
    assert "every peak inside [low, high]: **no**" in line
    assert "calibrated within 3% for every peak: yes" in line
    gaps = pages_memory.missing({"val": [{**r, "cal": r.get("cal")} for r in rows]})
    assert any("not measured yet (1 of 3 peaks): b (inference)" in g for g in gaps)
    empty = pages_memory.figures([rows[2]])
    assert pages_memory.target_line(empty).count(": -") == 4
