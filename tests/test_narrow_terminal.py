"""The commands a new user runs first, in a real 80-column terminal (issue 42): doctor's
findings, check against a baseline, memory --fit and flops of a ViT. Each is a golden of what
the terminal shows (tests/golden/pty80_*.txt, `pytest --update-golden`), no line is longer
than 80, and no word or code line is split; piped, the same words stay whole."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from ptys import write_to_pty
from torchinspect.report.base import Report
from wrapcheck import broken_words

# (golden name, the command's arguments, set-up in the working folder)
CASES: list[tuple[str, list[str], list[str] | None]] = [
    ("doctor", ["doctor", "zoo:pitfall-functional-dropout"], None),
    ("doctor_tensor_attr", ["doctor", "zoo:pitfall-tensor-attr"], None),
    ("check_baseline", ["check", "zoo:convnet", "--baseline", "main.json", "--max-increase",
                        "params=0.5%,macs=5%", "--arg", "num_classes=12"],
     ["check", "zoo:convnet", "--save-baseline", "main.json"]),
    ("memory_fit", ["memory", "zoo:mnist-net", "--fit", "1GB"], None),
    ("memory_fit_t4", ["memory", "resnet18", "--input", "3,64,64", "--fit", "t4", "--no-train"],
     None),
    ("memory_fit_h100", ["memory", "resnet50", "--fit", "h100"], None),
    ("flops_vit", ["flops", "vit_b_16", "--depth", "3"], None),
]
# the question of issue 42 as a user asks it: about 45 s of CPU, run twice (pty and piped)
SLOW = {"memory_fit_h100", "memory_fit", "memory_fit_t4", "check_baseline"}


def _run(args: list[str], stream: io.TextIOBase | None, reports: list[Report]) -> str:
    """The real command in this process, its stdout ``stream`` (a terminal or a pipe); the
    reports it renders are kept."""
    import torchinspect.cli.output as output
    from torchinspect.cli.app import app

    original = output.render

    def keep(report: Report, *args: object, **kwargs: object) -> None:
        reports.append(report)
        original(report, *args, **kwargs)  # type: ignore[arg-type]

    out = stream if stream is not None else io.StringIO()
    output.render = keep  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(SystemExit):
                app(args, prog_name="inspect")
    finally:
        output.render = original
    return out.getvalue() if isinstance(out, io.StringIO) else ""


def _stable(text: str) -> str:
    """Timings and the zoo's folder (models_zoo/ in a clone, torchinspect/zoo/ installed)."""
    text = re.sub(r"\b\d+\.\d\d s\b", "N.NN s", text)
    return text.replace("models_zoo/", "torchinspect/zoo/")


@pytest.mark.parametrize(("name", "args", "setup"), [
    pytest.param(*c, id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in CASES])
def test_first_commands_in_an_80_column_terminal(name: str, args: list[str],
                                                 setup: list[str] | None, golden,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("COLUMNS")
    monkeypatch.chdir(tmp_path)
    if setup:
        _run(setup, None, [])
    reports: list[Report] = []
    text = write_to_pty(lambda s: _run(args, s, reports), 80)
    assert reports, text
    golden(f"pty80_{name}.txt", _stable(text))
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, text
    for report in reports:
        assert not broken_words(report, text, 80), (broken_words(report, text, 80), text)
    # piped: a table of sentences folds at 100 columns, and still splits no word
    piped: list[Report] = []
    plain = _run(args, None, piped)
    for report in piped:
        assert not broken_words(report, plain, None), broken_words(report, plain, None)


def test_doctor_puts_a_fix_it_cannot_fit_under_its_finding(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("COLUMNS")
    monkeypatch.chdir(tmp_path)
    text = write_to_pty(lambda s: _run(["doctor", "zoo:pitfall-tensor-attr"], s, []), 80)
    lines = text.splitlines()
    fix = next(line for line in lines if line.lstrip().startswith("Fix: "))
    # the suggested code, whole on one line, as a linter prints it
    assert 'self.register_buffer("scale", tensor)' in fix
    source = next(line for line in lines if line.lstrip().startswith("Source: "))
    assert re.search(r"pitfalls\.py:\d+$", source)
