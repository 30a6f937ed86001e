"""Long work shows progress on a terminal and nothing when piped (issue 33): a status line
(spinner, what runs, time so far) on stderr, cleared before the report or an error."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptys import ANSI, run_in_pty, write_to_pty
from torchinspect.cli.progress import Working, command_status, current, pause, per_model

SPINNER = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
INSPECT = str(Path(sys.executable).with_name("inspect"))


def test_a_terminal_sees_the_status_and_its_updates() -> None:
    def work(stream) -> None:
        with Working("summary a b", stream=stream, delay=0) as say:
            time.sleep(0.3)
            for _ in per_model(["a", "b"], say):
                time.sleep(0.3)

    text = write_to_pty(work, 80)
    assert "summary a b" in text or "summary a b: b (2 of 2)" in text


def test_the_raw_terminal_bytes_hold_the_spinner_and_the_per_model_text(monkeypatch) -> None:
    import ptys

    monkeypatch.setattr(ptys, "plain", lambda raw: raw.decode("utf-8", "replace"))

    def work(stream) -> None:
        with Working("params a b", stream=stream, delay=0) as say:
            for _ in per_model(["a", "b"], say):
                time.sleep(0.4)

    raw = write_to_pty(work, 80)
    assert SPINNER & set(raw) and "params a b: a (1 of 2)" in raw and "params a b: b (2 of 2)" in raw
    assert "0:00:0" in raw  # the time so far


def test_a_pipe_gets_nothing() -> None:
    read, write = os.pipe()
    with open(write, "w", encoding="utf-8") as stream:
        with Working("summary a", stream=stream, delay=0) as say:
            say("tracing")
            time.sleep(0.3)
    with open(read, encoding="utf-8") as f:
        assert f.read() == ""


def test_a_quick_command_shows_nothing() -> None:
    def work(stream) -> None:
        with Working("env", stream=stream):  # ends before DELAY_S
            pass

    assert write_to_pty(work, 80) == ""


def test_outside_a_command_the_status_is_silent_and_pause_ends_it() -> None:
    current()("nothing to show")  # no command: a no-op
    with command_status("x", enabled=True) as status:
        assert current() is status
        pause()
        assert status.ended
    assert not current().shown()


def test_the_cli_under_a_pipe_prints_no_status(invoke) -> None:
    result = invoke("summary", "zoo:mnist-net", "zoo:convnet", "--totals")
    assert result.exit_code == 0
    assert not SPINNER & set(result.output) and "(2 of 2)" not in result.output


@pytest.mark.slow
def test_a_real_command_shows_progress_on_a_terminal_and_none_piped() -> None:
    argv = [INSPECT, "summary", "zoo:mnist-net", "zoo:convnet", "--totals"]
    status, raw = run_in_pty(argv, 80, raw=True)
    assert status == 0 and SPINNER & set(raw), raw[:500]
    assert "summary zoo:mnist-net zoo:convnet" in ANSI.sub("", raw)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert done.returncode == 0 and not SPINNER & set(done.stderr + done.stdout)
    assert "zoo:mnist-net" in done.stdout


def test_lines_written_to_stderr_meanwhile_go_above_the_status(monkeypatch) -> None:
    """'wrote FILE' or a note printed while the status shows starts on a line of its own
    (click's echo would reach past rich's stderr proxy through .buffer)."""
    import re

    import typer

    import ptys

    monkeypatch.setattr(ptys, "plain", lambda raw: raw.decode("utf-8", "replace"))

    def work(stream) -> None:
        monkeypatch.setattr(sys, "stderr", stream)
        with Working("graph m", stream=stream, delay=0):
            time.sleep(0.3)
            typer.echo("wrote g.svg", err=True)
            time.sleep(0.3)
        assert sys.stderr is stream  # put back

    raw = write_to_pty(work, 80)
    assert "wrote g.svg" in raw
    assert not re.search(r"0:00:\d\d(\x1b\[0m)?wrote", raw), raw
