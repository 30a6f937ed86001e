"""TorchScript archives run code on load (issue 29, item 6): never loaded without --trust-pickle.

The fixture is a real ``torch.jit.save`` archive whose module's ``__setstate__`` calls
``torch.from_file(marker, shared=True, size=...)``, which creates the marker file: the
attack of the audit (it could as well overwrite ~/.bashrc). Every command that takes a
model is run on it; the marker must never appear. ``params`` lists the tensors read from the
archive's data.pkl (labelled as not loaded), the others refuse with one line.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from zip_forge import Member, build_zip


class _Trap(torch.nn.Module):
    """No tensors; its __setstate__ creates (or would overwrite) the file named in it."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return (self.marker, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.marker = state[0]
        written = torch.from_file(self.marker, shared=True, size=8, dtype=torch.uint8)
        self.training = state[1] or bool(written.sum() > 255 * 8)


class _Payload(torch.nn.Module):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)
        self.trap = _Trap(marker)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trap(self.norm(self.lin(x)))


def _save(module: torch.nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(module), str(path))


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "PWNED"
    path = tmp_path / "model.pt"
    _save(_Payload(str(marker)), path)
    assert not marker.exists()
    return path, marker


def test_the_fixture_really_runs_code_on_load(evil) -> None:
    """Guard against a toothless fixture: torch.jit.load creates the marker."""
    path, marker = evil
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.load(str(path))
    assert marker.exists()


COMMANDS = [
    ["summary"], ["flops"], ["doctor"], ["memory"], ["features", "--list"], ["report", "-o", "r.html"],
    ["export", "-o", "m.onnx"], ["graph", "-o", "g.json"], ["diff", "resnet18"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_commands_refuse_a_torchscript_file_without_running_it(evil, invoke, cmd, monkeypatch, tmp_path) -> None:
    path, marker = evil
    monkeypatch.chdir(tmp_path)
    args = [cmd[0], path, *cmd[1:]] if cmd[0] != "diff" else ["diff", path, *cmd[1:]]
    result = invoke(*args)
    assert not marker.exists(), result.output
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "TorchScript" in errors[0] and "--trust-pickle" in result.output
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "g.json").exists()


def test_check_reports_the_refusal_as_an_error_row(evil, invoke) -> None:
    path, marker = evil
    result = invoke("check", path, "--max-params", "1M")
    assert not marker.exists()
    assert result.exit_code == 1, result.output  # check: a model that errors fails the check
    assert "refused without --trust-pickle" in result.output


def test_params_lists_the_tensors_without_loading(evil, invoke) -> None:
    path, marker = evil
    result = invoke("params", path, "--format", "json")
    assert not marker.exists()
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    notes = " ".join(data["notes"] if "notes" in data else data[0]["notes"])
    assert "NOT loaded" in notes
    table = invoke("params", path)
    assert "TorchScript archive NOT loaded" in table.output
    assert "lin" in table.output and "norm" in table.output
    # 4*3 + 3 (lin) + 3 + 3 (norm affine) + 3 + 3 + 1 (running stats, batches tracked)
    assert "28" in table.output


def test_convert_reads_the_tensors_without_loading(evil, invoke, tmp_path) -> None:
    from safetensors.torch import load_file

    path, marker = evil
    out = tmp_path / "out.safetensors"
    result = invoke("convert", path, out)
    assert not marker.exists()
    assert result.exit_code == 0, result.output
    got = load_file(str(out))
    module = _Payload("unused")
    assert {k: tuple(v.shape) for k, v in got.items()} == \
        {k: tuple(v.shape) for k, v in module.state_dict().items()}


def test_trusted_torchscript_still_loads(tmp_path: Path, invoke) -> None:
    path = tmp_path / "plain.pt"
    _save(torch.nn.Sequential(torch.nn.Linear(4, 3)), path)
    result = invoke("summary", path, "--input", "4", "--trust-pickle")
    assert result.exit_code == 0, result.output
    assert "15" in result.output


def _members(path: Path) -> list[Member]:
    with zipfile.ZipFile(path) as zf:
        return [Member(i.filename, zf.read(i)) for i in zf.infolist()]


def _mutations(members: list[Member], marker: Path) -> list[tuple[str, list[Member]]]:
    root = members[0].name.split("/", 1)[0]
    evil_pkl = pickle.dumps(_Reduce())
    out: list[tuple[str, list[Member]]] = []
    for i, m in enumerate(members):
        rel = m.name.split("/", 1)[1]
        out.append((f"upper:{rel}", members[:i] + [Member(f"{root}/{rel.upper()}", m.data)] + members[i + 1:]))
        out.append((f"duplicate:{rel}", members + [Member(m.name, m.data)]))
        out.append((f"duplicate_case:{rel}", members + [Member(f"{root}/{rel.swapcase()}", m.data)]))
        out.append((f"dotdot:{rel}", members[:i] + [Member(f"{root}/../{rel}", m.data)] + members[i + 1:]))
    out.append(("evil_data_pkl", [Member(m.name, evil_pkl) if m.name.endswith("/data.pkl") else m
                                  for m in members]))
    return out


class _Reduce:
    def __reduce__(self):  # noqa: ANN204 - a payload, never unpickled by the tool
        import os

        return (os.system, ("touch PWNED_REDUCE",))


@pytest.mark.slow
def test_mutated_torchscript_archives_never_run(evil, invoke, tmp_path, monkeypatch) -> None:
    path, marker = evil
    monkeypatch.chdir(tmp_path)
    for label, mutated in _mutations(_members(path), marker):
        bad = tmp_path / "m.pt"
        bad.write_bytes(build_zip(mutated))
        for cmd in ("params", "summary"):
            result = invoke(cmd, bad)
            assert not marker.exists() and not (tmp_path / "PWNED_REDUCE").exists(), label
            assert "Traceback" not in result.output, (label, result.output)
            assert result.exit_code in (0, 2), (label, result.output)
            if cmd == "summary" or result.exit_code == 2:
                assert len([ln for ln in result.output.splitlines() if ln.startswith("error:")]) == 1


def test_restricted_reader_ignores_the_code_folder(evil) -> None:
    """The listing comes from data.pkl alone: code/ is never read, let alone compiled."""
    from torchinspect.io.torchscript import read_torchscript_structure

    path, marker = evil
    tensors, _ = read_torchscript_structure(path)
    assert not marker.exists()
    assert {"lin.weight", "lin.bias", "norm.running_mean"} <= set(tensors)
