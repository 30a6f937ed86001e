"""Errors fit 80 columns (issue 42): over a suite of bad inputs to every command, the error is
``error: ...`` naming the problem, then ``hint: ...`` naming the fix, each folded at 80
columns on a terminal by the one wrapping rule (going on under its own text), exit 2, no
traceback. A
typo'd model name is answered before torch is imported; a wrong-rank ``--input`` proposes
the corrected shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchinspect.errors import ExitStatus

# (arguments, what the error must name); each ends in exit 2
BAD_INPUTS = [
    (["summary", "resnet19"], "resnet18"),
    (["summary", "zoo:convnett"], "zoo:convnet"),
    (["summary", "resnet18", "--input", "3,224"], "--input 3,224,224"),
    (["summary", "resnet18", "--input", "3,,224"], "3,,224"),
    (["summary", "resnet18", "--input", "float99:3,224,224"], "float99"),
    (["summary", "resnet18", "--arg", "nonsense"], "nonsense"),
    (["summary", "resnet18", "--device", "tpu"], "tpu"),
    (["summary", "resnet18", "--depth", "-1"], "--depth"),
    (["summary", "resnet18", "--columns", "layer,bogus"], "bogus"),
    (["summary", "resnet18", "--bogus"], "--bogus"),
    (["summary"], "MODEL"),
    (["summry", "resnet18"], "summary"),
    (["params", "nothere.pth", "--arch", "resnet18"], "nothere.pth"),
    (["flops", "resnet18", "--batch", "0"], "--batch"),
    (["memory", "resnet18", "--fit", "lots"], "--fit"),
    (["memory", "resnet18", "--fit", "1e400GB"], "more memory than any GPU has"),
    (["memory", "resnet18", "--fit", "h10"], "did you mean h100?"),
    (["memory", "resnet18", "--fit", "h100", "--gpu", "a10"], "name different GPUs"),
    (["check", "zoo:convnet", "--max-train-mb", "h10"], "did you mean h100?"),
    (["check", "zoo:convnet", "--max-train-mb", "a10", "--gpu", "h100"], "name different GPUs"),
    (["check", "zoo:convnet", "--max-train-mb", "24XB"], "24GB or 80GiB"),
    (["memory", "resnet18", "--optimizer", "adamx"], "adamx"),
    (["diff", "nothere.pt", "alsonot.pt"], "nothere.pt"),
    (["convert", "nothere.pt", "-o", "out.safetensors"], "nothere.pt"),
    (["graph", "resnet18", "-o", "graph.xyz"], ".xyz"),
    (["export", "resnet18", "-o", "model.txt"], "model.txt"),
    (["doctor", "zoo:convnet", "--select", "TI999"], "TI999"),
    (["check", "zoo:convnet", "--max-params", "lots"], "lots"),
    (["check", "zoo:convnet", "--baseline", "missing.json"], "missing.json"),
    (["bench", "resnet18", "--dtype", "fp99"], "fp99"),
    (["features", "resnet18", "--layers", "nope", "-o", "out"], "nope"),
    (["memory", "resnet18", "--checkpointing", "Block"], "BasicBlock"),
    (["graph", "resnet18", "--kind", "bogus"], "bogus"),
    (["report", "resnet18", "--format", "pdf"], "pdf"),
    (["env", "--format", "yaml"], "yaml"),
]


def terminal_stderr(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """Errors as on a terminal ``width`` columns wide (the CliRunner's stderr is not one;
    test_errors_fold_in_a_real_terminal runs a real one)."""
    import torchinspect.cli.boundary as boundary

    monkeypatch.setattr(boundary, "_stderr_width", lambda: min(boundary.ERROR_WIDTH, width))


@pytest.mark.parametrize(("args", "needle"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_a_short_error_and_a_hint(invoke, tmp_path: Path, monkeypatch,
                                               args: list[str], needle: str) -> None:
    monkeypatch.chdir(tmp_path)
    terminal_stderr(monkeypatch, 80)
    result = invoke(*args)
    assert result.exit_code == ExitStatus.USAGE, result.output
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.output
    assert lines[0].startswith("error: "), result.stderr
    assert any(line.startswith("hint: ") for line in lines), result.stderr
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long, result.stderr
    # a folded line goes on under its own text, so "error:"/"hint:" start the two parts
    assert all(line.startswith(("error: ", "hint: ", " ")) for line in lines), result.stderr
    assert needle in " ".join(line.strip() for line in lines), result.stderr


def test_a_typo_is_answered_before_torch_is_imported(tmp_path: Path) -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom torchinspect.cli.app import app\n"
            "r = CliRunner().invoke(app, ['summary', sys.argv[1]])\n"
            "print(r.exit_code, 'torch' in sys.modules)\nprint(r.output)")
    for typo, near in (("resnt18", "resnet18"), ("zoo:gpt-tni", "zoo:gpt-tiny")):
        done = subprocess.run([sys.executable, "-c", code, typo], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
        first, _, output = done.stdout.partition("\n")
        assert first == "2 False", done.stdout + done.stderr
        assert f"did you mean {near}" in output


def test_the_torchvision_names_are_read_without_importing_it() -> None:
    """The names come from torchvision's source files (no torch import); they are exactly what
    torchvision.models.list_models() gives."""
    done = subprocess.run([sys.executable, "-c",
                           "import sys, json\nfrom torchinspect.sources.torchvision import "
                           "registered_names\nn = registered_names()\n"
                           "print(json.dumps([n, 'torch' in sys.modules]))"],
                          capture_output=True, text=True, timeout=120)
    import json

    names, imported = json.loads(done.stdout)
    import torchvision

    assert not imported
    assert names == sorted(torchvision.models.list_models())


@pytest.mark.parametrize(("given", "proposed"), [
    ("3,224", "3,224,224"), ("224,224", "3,224,224"), ("3,64", "3,64,64"),
    ("float16:3,224", "float16:3,224,224"), ("1,1,3,224,224", "3,224,224")])
def test_a_wrong_rank_input_gets_the_corrected_shape(invoke, given: str, proposed: str) -> None:
    result = invoke("summary", "resnet18", "--input", given)
    assert result.exit_code == ExitStatus.USAGE
    hint = result.stderr.split("hint: ")[1]
    assert hint.startswith(f"--input {proposed} (batch prepended)"), result.stderr
    assert "--no-batch" in hint


def test_piped_errors_stay_one_line_each(invoke) -> None:
    result = invoke("summary", "zoo:convnett")  # COLUMNS=160 here: still not a terminal
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == ["error", "hint"]


def test_errors_fold_in_a_real_terminal() -> None:
    from ptys import run_in_pty

    exe = Path(sys.executable).with_name("inspect")
    status, text = run_in_pty([str(exe), "summary", "zoo:convnett"], 60)
    assert status == ExitStatus.USAGE
    lines = text.strip().splitlines()
    assert lines[0] == "error: unknown zoo model zoo:convnett"
    assert lines[1].startswith("hint: did you mean zoo:convnet?")
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines)
    assert all(line.startswith("      ") for line in lines[2:])
