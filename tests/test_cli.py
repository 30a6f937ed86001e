"""CLI conventions: start-up without torch, exit codes, one-line errors for bad input."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchinspect.errors import ExitStatus

SUBCOMMANDS = ["summary", "params", "flops", "diff", "convert", "env"]


def _run_py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "120"})


def test_help_does_not_import_torch():
    code = textwrap.dedent(
        """
        import sys
        from typer.testing import CliRunner
        from torchinspect.cli.app import app
        runner = CliRunner()
        for args in (["--help"], *[[c, "--help"] for c in SUBCOMMANDS]):
            r = runner.invoke(app, args)
            assert r.exit_code == 0, (args, r.output)
        heavy = [m for m in ("torch", "torchvision", "onnx", "graphviz", "safetensors") if m in sys.modules]
        print("HEAVY", heavy)
        """
    ).replace("SUBCOMMANDS", repr(SUBCOMMANDS))
    proc = _run_py(code)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout


def test_every_subcommand_is_registered(invoke):
    result = invoke("--help")
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in result.output


def test_version(invoke):
    from torchinspect import __version__

    result = invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output


def test_python_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "torchinspect", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "torchinspect" in proc.stdout


def test_unknown_option_is_usage_error(invoke):
    result = invoke("summary", "resnet18", "--no-such-option")
    assert result.exit_code == ExitStatus.USAGE


# ------------------------------------------------------------------ bad input, no traceback


class Payload:
    """Unpickling this would create a marker file: it must never happen."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _assert_clean_failure(result, *needles: str) -> None:
    assert result.exit_code == ExitStatus.USAGE, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: "), result.stderr
    for needle in needles:
        assert needle in result.output


def test_unknown_model(invoke):
    _assert_clean_failure(invoke("summary", "resnet19"), "resnet19", "resnet18")


def test_unknown_zoo_model(invoke):
    _assert_clean_failure(invoke("summary", "zoo:nope"), "zoo:nope")


def test_missing_file(invoke, tmp_path: Path):
    _assert_clean_failure(invoke("summary", tmp_path / "missing.pth", "--arch", "resnet18"), "missing.pth")


def test_empty_file(invoke, tmp_path: Path):
    path = tmp_path / "empty.pth"
    path.write_bytes(b"")
    _assert_clean_failure(invoke("summary", path, "--arch", "resnet18"), "empty.pth")


def test_truncated_checkpoint(invoke, tmp_path: Path):
    import torch

    full = tmp_path / "full.pth"
    torch.save(torch.nn.Linear(64, 64).state_dict(), full)
    cut = tmp_path / "cut.pth"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    _assert_clean_failure(invoke("summary", cut, "--arch", "resnet18"), "cut.pth")


def test_text_file_as_checkpoint(invoke, tmp_path: Path):
    path = tmp_path / "notes.pth"
    path.write_text("these are not weights\n")
    _assert_clean_failure(invoke("summary", path, "--arch", "resnet18"), "notes.pth")


@pytest.mark.parametrize("protocol", [2, 4])
def test_pickled_payload_never_runs(invoke, tmp_path: Path, protocol: int):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pth"
    with open(path, "wb") as fh:
        pickle.dump({"state_dict": Payload(str(marker))}, fh, protocol=protocol)
    result = invoke("summary", path, "--arch", "resnet18")
    _assert_clean_failure(result, "evil.pth", "--trust-pickle")
    assert not marker.exists()


def test_zip_pickled_payload_never_runs(invoke, tmp_path: Path):
    import torch

    marker = tmp_path / "PWNED"
    path = tmp_path / "evil_zip.pth"
    torch.save({"w": torch.zeros(2), "x": Payload(str(marker))}, path)
    result = invoke("summary", path, "--arch", "resnet18")
    _assert_clean_failure(result, "--trust-pickle")
    assert "posix.system" in result.output or "os.system" in result.output
    assert not marker.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["summary", "resnet18", "--input", "3,,224"],
        ["summary", "resnet18", "--input", "float99:3,224,224"],
        ["summary", "resnet18", "--arg", "nonsense"],
        ["summary", "resnet18", "--device", "tpu"],
    ],
)
def test_bad_arguments(invoke, args):
    result = invoke(*args)
    _assert_clean_failure(result)


@pytest.mark.parametrize("args", [["--debug", "summary", "resnet19"],
                                  ["summary", "resnet19", "--debug"],
                                  ["diff", "nothere.pt", "--arch", "resnet18", "--debug"],
                                  ["env", "--format", "json", "--debug", "-o", "/nonexistent/x.json"]],
                         ids=["before", "after", "output-command", "shared-option-error"])
def test_debug_shows_traceback(invoke, args):
    """The hint says "rerun with --debug": before or after the command, it works."""
    result = invoke(*args)
    assert result.exit_code == ExitStatus.USAGE
    assert "Traceback" in result.output


def test_every_command_takes_debug_after_it() -> None:
    import typer

    from torchinspect.cli.app import app

    root = typer.main.get_command(app)
    assert all(any("--debug" in p.opts for p in cmd.params) for cmd in root.commands.values())


# ------------------------------------------------------------------ every source kind, end to end

SMALL_PY = textwrap.dedent(
    """
    from torch import nn

    class Small(nn.Module):
        example_input = "1,3,8,8"

        def __init__(self, width=4):
            super().__init__()
            self.conv = nn.Conv2d(3, width, 3)
            self.fc = nn.Linear(width, 2)

        def forward(self, x):
            return self.fc(self.conv(x).mean((2, 3)))
    """
)


@pytest.fixture
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A python-spec model plus every file form of it; returns {kind: argv}."""
    import torch
    from safetensors.torch import save_file

    (tmp_path / "smallpkg.py").write_text(SMALL_PY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import smallpkg

    model = smallpkg.Small().eval()
    spec = f"{tmp_path / 'smallpkg.py'}:Small"
    torch.save({"model": model.state_dict()}, tmp_path / "w.pth")
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    torch.jit.save(torch.jit.script(model), str(tmp_path / "m.ts"))
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 8, 8),)), str(tmp_path / "m.pt2"))
    torch.save(model, tmp_path / "full.pth")
    return {
        "python file": [spec],
        "python module": ["smallpkg:Small", "--arg", "width=4"],
        "checkpoint --arch": [tmp_path / "w.pth", "--arch", spec],
        "--weights": [spec, "--weights", tmp_path / "w.pth"],
        "safetensors": [tmp_path / "w.safetensors", "--arch", spec],
        "torchscript": [tmp_path / "m.ts", "--input", "3,8,8", "--trust-pickle"],
        "torch.export": [tmp_path / "m.pt2"],
        "trusted pickle": [tmp_path / "full.pth", "--trust-pickle", "--input", "3,8,8"],
    }


KINDS = ["python file", "python module", "checkpoint --arch", "--weights", "safetensors",
         "torchscript", "torch.export", "trusted pickle"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_file_source_kind_summarizes(invoke, small, kind):
    import json

    result = invoke("summary", *small[kind], "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # conv 3*4*9+4 = 112, fc 4*2+2 = 10: the same model whatever the source
    assert data["totals"]["params"] == 3 * 4 * 9 + 4 + 4 * 2 + 2
    assert data["totals"]["macs"] == 3 * 4 * 9 * 6 * 6 + 4 * 2


@pytest.mark.parametrize("model", ["resnet18", "zoo:convnet", "zoo:llama-tiny", "zoo:multi-input"])
def test_torchvision_and_zoo_sources_summarize(invoke, model):
    result = invoke("summary", model, "--depth", "1")
    assert result.exit_code == 0, result.output
    assert "Total params" in result.output


def test_output_never_overwrites_an_input(invoke, small, tmp_path: Path):
    ckpt = tmp_path / "w.pth"
    before = ckpt.read_bytes()
    result = invoke("summary", *small["checkpoint --arch"], "--output", ckpt)
    _assert_clean_failure(result, "overwrite")
    assert ckpt.read_bytes() == before
    spec_file = tmp_path / "smallpkg.py"
    result = invoke("params", f"{spec_file}:Small", "--output", spec_file)
    _assert_clean_failure(result, "overwrite")


def test_output_is_written(invoke, tmp_path: Path):
    import json

    out = tmp_path / "s.json"
    result = invoke("summary", "zoo:convnet", "--format", "json", "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["schema"] == "torchinspect/summary/v4"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no temporary left behind


def test_ctrl_c_exits_130_without_traceback(invoke, tmp_path: Path):
    path = tmp_path / "slow.py"
    path.write_text(textwrap.dedent(
        """
        from torch import nn

        class Slow(nn.Module):
            example_input = "1,2"

            def forward(self, x):
                raise KeyboardInterrupt
        """
    ))
    result = invoke("summary", f"{path}:Slow")
    assert result.exit_code == ExitStatus.INTERRUPTED
    assert "Traceback" not in result.output and "interrupted" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["summary", "resnet18", "--batch", "0"], "--batch"),
        (["summary", "resnet18", "--format", "xml"], "xml"),
        (["summary", "resnet18", "--no-such-option"], "--no-such-option"),
        (["diff", "a.pt", "b.pt", "--limit", "0"], "--limit"),
        (["no-such-command"], "no-such-command"),
        (["summary"], "MODEL"),
    ],
)
def test_usage_errors_are_one_error_line_and_a_hint(invoke, args, needle):
    result = invoke(*args)
    assert result.exit_code == ExitStatus.USAGE, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: ")
    assert needle in lines[0] and "--help" in lines[1]
    # our words, not a validation library's ("Value error, ...", "Input should be ...")
    for words in ("Value error", "Input should", "Invalid value for", "unable to parse"):
        assert words not in lines[0]


def test_a_bad_choice_lists_the_choices_plainly(invoke):
    r = invoke("summary", "resnet18", "--format", "yaml")
    assert r.stderr.splitlines()[0] == (
        "error: --format / -f 'yaml': not one of table, json, csv, markdown, html")
    r = invoke("summary", "resnet18", "--batch", "0")
    assert r.stderr.splitlines()[0] == "error: --batch / -b: must be at least 1"


def test_builder_failure_from_arg_values_names_them(invoke):
    result = invoke("summary", "resnet18", "--arg", "num_classes=-3")
    _assert_clean_failure(result, "--arg num_classes=-3")


def test_published_only_for_torchvision(invoke):
    _assert_clean_failure(invoke("summary", "zoo:convnet", "--published"), "torchvision")


def test_zoo_models_do_not_import_torchvision():
    proc = _run_py(
        "import sys; from torchinspect.sources import load_model; "
        "load_model('zoo:llama-tiny'); print('TV', 'torchvision' in sys.modules)"
    )
    assert proc.returncode == 0, proc.stderr
    assert "TV False" in proc.stdout


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_closed_pipe_exits_quietly_with_0(fmt: str) -> None:
    """`inspect summary ... | head -1`: the reader has what it wanted; no error, exit 0.

    The reader here (`true`) exits before the model is even built, so every write meets a
    closed pipe (EPIPE) — deterministic, unlike a `head` that may read everything in time."""
    import subprocess
    import sys

    cmd = (f"set -o pipefail; {sys.executable} -m torchinspect summary zoo:convnet "
           f"--format {fmt} | true")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr


def test_a_closed_pipe_is_not_called_a_disk_problem(capsys):
    """A BrokenPipeError (the program reading our output exited) says so, without the
    file-system hint about permissions and disk space that other OSErrors get."""
    from torchinspect.cli.boundary import exit_status

    status = exit_status(BrokenPipeError(32, "Broken pipe"))
    err = capsys.readouterr().err
    assert status == ExitStatus.USAGE
    assert "closed it before the end" in err
    assert "disk" not in err and "Traceback" not in err
