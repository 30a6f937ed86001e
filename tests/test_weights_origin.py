"""Random weights are said (issue 21, item 3): every command that runs real numbers through a
model built here (doctor's real checks, export's verification, bench, report) says `random
init` or names the weights file with its sha256, in the table, the JSON and the notes; a random
init is seeded, so those runs are reproducible."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from torchinspect.sources import origin as origin_mod
from torchinspect.sources.case import ModelOptions, make_case
from torchinspect.sources.origin import WeightsSource
from torchinspect.zoo import REGISTRY

FAST_ARGS = ["--warmup", "0.02", "--min-time", "0.05", "--max-time", "0.2", "--min-iters", "2"]
RANDOM = {"source": "random-init", "seed": 0, "sha256": None}


@pytest.fixture
def convnet_weights(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A state_dict file for zoo:convnet and the record each command must give for it."""
    path = tmp_path / "convnet.pt"
    torch.save(REGISTRY["convnet"].build().state_dict(), path)
    return path, {"source": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _said(text: str) -> str:
    return " ".join(text.split())


def _file_said(text: str, record: dict[str, object]) -> bool:
    return f"{record['source']} (sha256 {str(record['sha256'])[:12]})" in _said(text)


def _random_note(notes: list[str]) -> bool:
    return any(n.startswith("random init (seed 0): no weights were loaded") for n in notes)


# ------------------------------------------------------------------ the model case


def test_random_init_is_seeded_and_leaves_the_callers_rng_alone() -> None:
    states = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        before = torch.get_rng_state()
        for device in ("cpu", "meta"):  # built real at once, or on meta and rebuilt
            case = make_case("zoo:convnet", device=device)
            states.append(case.real_model("cpu").state_dict())
        assert torch.equal(torch.get_rng_state(), before)
        assert case.weights.is_random and case.weights.to_dict(digest=False) == RANDOM
    for other in states[1:]:
        assert all(torch.equal(states[0][k], other[k]) for k in states[0])


def test_the_origin_of_each_source(tmp_path: Path, convnet_weights) -> None:
    path, record = convnet_weights
    assert make_case("zoo:convnet", options=ModelOptions(weights=str(path))).weights.to_dict() == record
    # a checkpoint given as MODEL with --arch
    assert make_case(str(path), options=ModelOptions(arch="zoo:convnet")).weights.to_dict() == record
    # a model file: TorchScript is its own weights
    script = tmp_path / "net.jit"
    torch.jit.script(REGISTRY["convnet"].build()).save(script)
    w = make_case(str(script), options=ModelOptions(trust_pickle=True), need_inputs=False).weights
    assert w.source is WeightsSource.file
    assert w.to_dict() == {"source": str(script),
                           "sha256": hashlib.sha256(script.read_bytes()).hexdigest()}
    # a module passed in: its own weights, as they are; on meta: initialized here, seeded
    net = nn.Linear(4, 2)
    assert make_case(net, inputs="4").weights.describe() == "weights of the module passed in (Linear)"
    with torch.device("meta"):
        meta = nn.Linear(4, 2)
    case = make_case(meta, inputs="4")
    assert case.weights.is_random
    assert torch.equal(case.real_model("cpu").weight, make_case(meta, inputs="4").real_model("cpu").weight)


def test_the_file_is_hashed_only_when_a_command_asks(monkeypatch, convnet_weights) -> None:
    path, record = convnet_weights
    calls: list[Path] = []
    real = origin_mod.file_sha256
    monkeypatch.setattr(origin_mod, "file_sha256", lambda p: calls.append(p) or real(p))
    from torchinspect import summarize

    summarize("zoo:convnet", options=ModelOptions(weights=str(path)))
    assert calls == []  # summary never reads the file for its digest
    case = make_case("zoo:convnet", options=ModelOptions(weights=str(path)))
    assert case.weights.to_dict(digest=False)["sha256"] is None and calls == []
    assert case.weights.sha256() == case.weights.sha256() == record["sha256"]
    assert len(calls) == 1  # hashed once


# ------------------------------------------------------------------ the commands


def test_doctor_says_the_weights(invoke, convnet_weights) -> None:
    r = invoke("doctor", "zoo:convnet")
    assert r.exit_code == 0, r.output
    assert re.search(r"Weights\s+random init \(seed 0\)", r.stdout)
    from torchinspect.analysis.doctor.rules import fold_codes, run_codes

    assert f"random init (seed 0): no weights were loaded, so the {len(run_codes())} checks " \
           f"that run it ({fold_codes(run_codes())}) ran on an untrained model" in _said(r.stdout)
    data = json.loads(invoke("doctor", "zoo:convnet", "--format", "json").stdout)
    assert data["weights"] == RANDOM and _random_note(data["notes"])
    path, record = convnet_weights
    r = invoke("doctor", "zoo:convnet", "--weights", path)
    assert r.exit_code == 0, r.output
    assert _file_said(r.stdout, record) and "random init" not in r.stdout
    data = json.loads(invoke("doctor", "zoo:convnet", "--weights", path, "--format", "json").stdout)
    assert data["weights"] == record and not _random_note(data["notes"])


def test_doctor_api_names_the_module_passed_in() -> None:
    from torchinspect.analysis.doctor import diagnose

    result = diagnose(nn.Sequential(nn.Linear(4, 2)), torch.randn(3, 4))
    assert result.run_device == "cpu"
    assert result.weights == {"source": "module Sequential", "sha256": None}
    assert not _random_note(result.notes)


@pytest.mark.slow
def test_export_says_what_it_wrote_and_verified(invoke, tmp_path, convnet_weights) -> None:
    import onnxruntime  # noqa: F401 - a required dependency: a broken install fails, never skips
    r = invoke("export", "zoo:convnet", "-o", tmp_path / "a.onnx")
    assert r.exit_code == 0, r.output
    assert re.search(r"Weights\s+random init \(seed 0\)", r.stdout)
    assert "the file holds untrained weights (verified with them)" in _said(r.stdout)
    path, record = convnet_weights
    r = invoke("export", "zoo:convnet", "--weights", path, "-o", tmp_path / "b.onnx",
               "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["verified"] is True and data["weights"] == record
    assert not _random_note(data["notes"])


def test_bench_says_what_it_timed(invoke, convnet_weights) -> None:
    r = invoke("bench", "zoo:convnet", *FAST_ARGS)
    assert r.exit_code == 0, r.output
    assert re.search(r"weights\s+random init \(seed 0\)", r.stdout)
    path, record = convnet_weights
    r = invoke("bench", "zoo:convnet", "--weights", path, *FAST_ARGS, "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["weights"] == record and not _random_note(data["notes"])
    r = invoke("bench", "zoo:convnet", *FAST_ARGS, "--format", "json")
    data = json.loads(r.stdout)
    assert data["weights"] == RANDOM and _random_note(data["notes"])


@pytest.mark.slow
def test_report_says_the_weights(invoke, convnet_weights) -> None:
    r = invoke("report", "resnet18", "--no-graph", "--no-doctor", "--format", "markdown")
    assert r.exit_code == 0, r.output
    assert "| Weights | random init (seed 0) |" in r.stdout
    data = json.loads(invoke("report", "resnet18", "--no-graph", "--no-doctor",
                             "--format", "json").stdout)
    assert data["models"][0]["weights"] == RANDOM
    path, record = convnet_weights
    r = invoke("report", "zoo:convnet", "--weights", path, "--no-graph", "--doctor-run",
               "--format", "json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["models"][0]
    assert m["weights"] == record and m["doctor"]["weights"] == record
