"""Tables fit the terminal they are shown in (issue 33): the width comes from the tty itself
(COLUMNS still wins), the least useful columns are left out first with a footer saying how to
get them, shapes never fold, and piped output keeps every column."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from ptys import run_in_pty, write_to_pty
from torchinspect.cli.boundary import REPORT_STDOUT
from torchinspect.cli.output import OutputOptions, emit, terminal_width
from torchinspect.report.base import Report

DEFAULT_HEADERS = ["Layer", "Type", "Input shape", "Output shape", "Kernel", "Params",
                   "% params", "MACs", "Self MACs", "Trainable"]
SHAPE = re.compile(r"\[[0-9, ]*\]")


@pytest.fixture(scope="module")
def resnet18_report() -> Report:
    from torchinspect.analysis.summary import summarize
    from torchinspect.report.summary import summary_report

    return summary_report(summarize("resnet18", ["3,224,224"]))


def _emit(report: Report, stream) -> None:
    token = REPORT_STDOUT.set(stream)
    try:
        emit(report, OutputOptions())
    finally:
        REPORT_STDOUT.reset(token)


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Layer "))


def _check_fits(text: str, width: int | None) -> None:
    lines = text.splitlines()
    if width is not None:
        assert max(len(line) for line in lines) <= width, [ln for ln in lines if len(ln) > width]
    table = [ln for ln in lines if ln.startswith(("│", "├", "└", "resnet18 "))]
    for line in table:  # every shape on a row is whole: "[1, 64," never ends a line
        assert line.count("[") == line.count("]") == len(SHAPE.findall(line)), line


@pytest.mark.parametrize("width", [80, 120])
def test_summary_fits_a_real_terminal(monkeypatch, golden, resnet18_report, width: int) -> None:
    monkeypatch.delenv("COLUMNS")
    text = write_to_pty(lambda s: _emit(resnet18_report, s), width)
    golden(f"summary_resnet18_pty_{width}.txt", text)
    _check_fits(text, width)
    shown = _header(text).split("  ")
    shown = [h.strip() for h in shown if h.strip()]
    # the least useful go first, in this order, and the footer names them and the way back
    order = ["Self MACs", "% params", "Trainable", "Kernel", "Input shape"]
    left = [h for h in order if h not in shown]
    assert left == order[:len(left)] and set(DEFAULT_HEADERS) - set(shown) == set(left)
    assert left and shown[:2] == ["Layer", "Type"] and {"Output shape", "Params", "MACs"} <= set(shown)
    assert f"Left out to fit {width} columns: {', '.join(left)}." in text
    assert "--columns" in text.split("Left out")[1].split("Totals")[0]


def test_summary_piped_keeps_every_column(monkeypatch, golden, resnet18_report) -> None:
    monkeypatch.delenv("COLUMNS")
    read, write = os.pipe()
    with open(write, "w", encoding="utf-8") as stream:
        assert terminal_width(stream) is None
        _emit(resnet18_report, stream)
    with open(read, encoding="utf-8") as f:
        text = f.read()
    golden("summary_resnet18_piped.txt", text)
    _check_fits(text, None)
    assert all(h in _header(text) for h in DEFAULT_HEADERS) and "Left out" not in text


def test_columns_wins_over_the_terminal(monkeypatch, resnet18_report) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    text = write_to_pty(lambda s: _emit(resnet18_report, s), 80)
    assert "Left out to fit 120 columns" in text and max(map(len, text.splitlines())) > 80


def test_terminal_width_reads_the_tty(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS")
    seen = []
    write_to_pty(lambda s: seen.append(terminal_width(s)), 97)
    assert seen == [97]
    assert terminal_width(io.StringIO()) is None and terminal_width(None) is None
    monkeypatch.setenv("COLUMNS", "abc")  # not a number: ignored
    assert terminal_width(io.StringIO()) is None


def test_columns_the_user_picked_all_stay(monkeypatch) -> None:
    from torchinspect.analysis.summary import parse_columns, summarize
    from torchinspect.report.summary import summary_report

    monkeypatch.delenv("COLUMNS")
    cols = parse_columns("layer,type,input,output,kernel,params,macs")
    report = summary_report(summarize("resnet18", ["3,224,224"], columns=cols))
    text = write_to_pty(lambda s: _emit(report, s), 80)
    header = _header(text)
    assert all(h in header for h in ("Input shape", "Output shape", "Kernel")), header
    assert "Left out" not in text
    _check_fits(text, None)  # wider than asked, but no shape folded


class _SharedRelu(nn.Module):
    example_input = "1,4"

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc2(self.act(self.fc1(x))))


class _Loop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(x))


def _rows(model: nn.Module) -> tuple[dict[str, list[str]], str]:
    from torchinspect.analysis.summary import summarize
    from torchinspect.report.summary import summary_report

    report = summary_report(summarize(model, torch.zeros(1, 4)))
    buf = io.StringIO()
    _emit(report, buf)
    text = buf.getvalue()
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"[├└│ ─]*(\w+) \(call (\d)/\d\)\s+\w+\s+\S+, \S+\s+\S+, \S+\s+\S+\s+(\S+)", line)
        if m:
            rows.setdefault(m.group(1), []).append(m.group(3))
    return rows, text


def test_a_second_call_of_a_module_without_parameters_shows_0() -> None:
    rows, text = _rows(_SharedRelu())
    assert rows["act"] == ["0", "0"], text  # nothing to count twice: no "(recursive)"
    assert "(recursive)" not in text


def test_a_second_call_of_a_module_with_parameters_says_recursive() -> None:
    rows, text = _rows(_Loop())
    assert rows["block"] == ["20", "(recursive)"], text
    assert "later ones say (recursive)" in text


@pytest.mark.slow
def test_the_headline_command_in_a_real_80_column_terminal() -> None:
    exe = Path(sys.executable).with_name("inspect")
    status, text = run_in_pty([str(exe), "summary", "resnet18", "--input", "3,224,224"], 80)
    assert status == 0, text
    assert max(len(line) for line in text.splitlines()) <= 80
    _check_fits(text, 80)
    assert "Left out to fit 80 columns" in text


def test_params_fits_80_columns_leaving_out_its_least_useful_columns(monkeypatch) -> None:
    """params resnet18 printed 81 columns with module names folded in an 80-column terminal."""
    from torchinspect.analysis.params import count_params
    from torchinspect.report.params import params_report

    monkeypatch.delenv("COLUMNS")
    text = write_to_pty(lambda s: _emit(params_report(count_params("resnet18", depth=4)), s), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "layer4.0.downsample.0" in text  # names whole
    assert "Left out to fit 80 columns: Frozen, Trainable." in text
    assert "A wider terminal, a pipe or --format csv shows them." in text


def test_a_table_closes_up_before_it_folds() -> None:
    """No optional column: the gap narrows (3, 2, then 1) only while that saves folding."""
    from torchinspect.report.base import Table
    from torchinspect.report.render import render

    def shown(width: int) -> str:
        t = Table(None, ["Name", "Kind", "Count"], [["a" * 30, "b" * 30, 12345]])
        buf = io.StringIO()
        render(Report("x", {}, [t]), "table", buf, width=width)
        return buf.getvalue().splitlines()[2]

    assert shown(72) == "a" * 30 + "   " + "b" * 30 + "   12,345"
    assert shown(71) == "a" * 30 + "  " + "b" * 30 + "  12,345"
    assert shown(69) == "a" * 30 + " " + "b" * 30 + " 12,345"
    assert len(shown(60)) <= 60  # folded at last
