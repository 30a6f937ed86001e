"""JSON files the tool wrote earlier, crafted (issue 29, item 9): exit 2 with one line, never
exit 70, never a wrong verdict (a NaN or negative number judged as faster or as PASS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _one_error(result) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len([ln for ln in result.output.splitlines() if ln.startswith("error:")]) == 1, result.output


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from typer.testing import CliRunner

    from torchinspect.cli.app import app

    out = tmp_path_factory.mktemp("b") / "main.json"
    r = CliRunner().invoke(app, ["check", "zoo:mnist-net", "--save-baseline", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def _models(doc: dict) -> dict:
    return next(iter(doc["models"].values()))


CRAFTED_BASELINES = {
    "huge_int": lambda d: json.dumps(d).replace('"params": ', '"params": ' + "9" * 5000 + ", \"x\": "),
    "deep": lambda d: '{"schema": "' + d["schema"] + '", "models": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "null_metric": lambda d: json.dumps({**d, "models": {k: {**v, "metrics": {**v["metrics"], "params": None}}
                                                        for k, v in d["models"].items()}}),
    "string_metric": lambda d: json.dumps({**d, "models": {k: {**v, "metrics": {**v["metrics"], "params": "1"}}
                                                          for k, v in d["models"].items()}}),
    "negative_params": lambda d: json.dumps({**d, "models": {k: {**v, "metrics": {**v["metrics"], "params": -5}}
                                                            for k, v in d["models"].items()}}),
    "nan": lambda d: json.dumps(d).replace('"params": ', '"params": NaN, "x": '),
    "infinity": lambda d: json.dumps(d).replace('"params": ', '"params": Infinity, "x": '),
    "models_list": lambda d: json.dumps({**d, "models": []}),
    "not_utf8": lambda d: b"\xff\xfe" + json.dumps(d).encode(),
}


@pytest.mark.parametrize("how", sorted(CRAFTED_BASELINES))
def test_crafted_baselines_are_exit_2(baseline, tmp_path: Path, invoke, how: str) -> None:
    text = CRAFTED_BASELINES[how](baseline)
    path = tmp_path / "b.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _one_error(invoke("check", "zoo:mnist-net", "--baseline", path))


def test_a_fifo_baseline_does_not_hang(tmp_path: Path, invoke) -> None:
    import os

    os.mkfifo(tmp_path / "b.json")
    _one_error(invoke("check", "zoo:mnist-net", "--baseline", tmp_path / "b.json"))


@pytest.fixture(scope="module")
def bench_result() -> dict:
    return {"schema": "torchinspect.bench/1", "model": "m", "device": "cpu", "inputs": "1,3",
            "configs": [{"dtype": "float32", "batch": 1, "status": "ok",
                         "timing": {"stats": {"median": 0.01, "median_cov": 0.01}}}]}


@pytest.mark.parametrize("median", [0, -1.0, "0.01", None, "NaN", "Infinity", "9" * 5000])
def test_crafted_bench_results_are_exit_2(bench_result, tmp_path: Path, median: object) -> None:
    from torchinspect.bench.compare import SCHEMA_PREFIX, load_bench_json
    from torchinspect.errors import InspectError

    doc = json.loads(json.dumps(bench_result))
    doc["schema"] = SCHEMA_PREFIX + "1"
    text = json.dumps(doc).replace('"median": 0.01',
                                   f'"median": {median if isinstance(median, (int, float)) or median in ("NaN", "Infinity") or str(median).isdigit() else json.dumps(median)}')
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(InspectError, match="r.json"):
        load_bench_json(str(path))
    doc["configs"][0]["timing"]["stats"]["median"] = 0.01
    path.write_text(json.dumps(doc))
    assert load_bench_json(str(path))["configs"][0]["timing"]["stats"]["median"] == 0.01
