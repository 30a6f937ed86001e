"""One output-format rule for every command (issue 33): without -f, the extension of -o picks
the format (.json .csv .md .html; .txt or any other: a table); a -f that contradicts it is a
usage error before any work. Commands whose -o is their product (graph, export, convert) keep
their own rule: the report goes to stdout."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch

from torchinspect.errors import ExitStatus

MODEL = "zoo:mnist-net"


@pytest.fixture
def ckpts(tmp_path):
    a = {"w": torch.ones(2, 2), "b": torch.zeros(2)}
    torch.save(a, tmp_path / "a.pt")
    torch.save(dict(a), tmp_path / "b.pt")
    return tmp_path / "a.pt", tmp_path / "b.pt"


def _argv(command: str, ckpts) -> list:
    """A quick run of each command that writes its report to -o."""
    fast = ["--min-time", "0.02", "--max-time", "0.05", "--warmup", "0.01", "--min-iters", "1"]
    return {
        "env": ["env", "--no-runtime"],
        "summary": ["summary", MODEL],
        "params": ["params", MODEL],
        "flops": ["flops", MODEL],
        "diff": ["diff", *ckpts],
        "doctor": ["doctor", MODEL, "--device", "meta"],
        "check": ["check", MODEL, "--max-params", "1G"],
        "memory": ["memory", MODEL, "--no-train"],
        "bench": ["bench", MODEL, *fast],
        "report": ["report", MODEL, "--no-graph", "--no-doctor"],
    }[command]


COMMANDS = ["env", "summary", "params", "flops", "diff", "doctor", "check", "memory", "bench",
            "report"]
@pytest.mark.parametrize("command", COMMANDS)
def test_a_contradicting_format_is_a_usage_error_before_any_work(invoke, tmp_path, ckpts,
                                                                  command) -> None:
    out = tmp_path / "out.json"
    result = invoke(*_argv(command, ckpts), "-f", "csv", "-o", out)
    assert result.exit_code == ExitStatus.USAGE, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"error: -f csv contradicts -o {out} (a json file name)", lines
    assert len(lines) == 2 and lines[1].startswith("hint: leave out -f")
    assert not out.exists() and "Traceback" not in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_the_extension_picks_the_format(invoke, tmp_path, ckpts, command) -> None:
    out = tmp_path / "out.json"
    result = invoke(*_argv(command, ckpts), "-o", out)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(out.read_text())
    assert doc["schema"].startswith(f"torchinspect/{command}/")


@pytest.mark.parametrize("suffix, check", [
    (".csv", lambda t: len(next(csv.reader(io.StringIO(t)))) >= 2),
    (".md", lambda t: "| " in t and "──" not in t),
    (".html", lambda t: t.lstrip().lower().startswith("<!doctype html")),
    (".txt", lambda t: "──" in t and not t.lstrip().startswith("{")),
    (".log", lambda t: "──" in t),
])
def test_each_extension(invoke, tmp_path, suffix, check) -> None:
    out = tmp_path / f"out{suffix}"
    result = invoke("params", MODEL, "-o", out)
    assert result.exit_code == 0, result.output
    assert check(out.read_text()), out.read_text()[:300]


def test_a_format_that_agrees_or_a_txt_file_takes_any_format(invoke, tmp_path) -> None:
    assert invoke("env", "--no-runtime", "-f", "json", "-o", tmp_path / "a.json").exit_code == 0
    assert invoke("env", "--no-runtime", "-f", "markdown", "-o", tmp_path / "a.txt").exit_code == 0
    assert (tmp_path / "a.txt").read_text().startswith("###")
    assert invoke("env", "--no-runtime", "-f", "JSON", "-o", tmp_path / "b.JSON").exit_code == 0


def test_product_outputs_keep_their_own_rule(invoke, tmp_path) -> None:
    """graph's -o is the picture (its extension picks the picture format) and -f the report on
    stdout: -f json with -o x.dot is no contradiction."""
    out = tmp_path / "g.dot"
    result = invoke("graph", MODEL, "--kind", "module", "-f", "json", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_text().lstrip().startswith(("digraph", "strict digraph"))
    assert json.loads(result.stdout)["schema"].startswith("torchinspect/graph/")
