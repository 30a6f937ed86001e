"""Names from files reach the terminal escaped (issue 29, item 11): C0, C1 (U+009B is a CSI
to xterm) and bidi overrides/isolates (U+202E, U+2066-2069), in tables, error lines, "wrote
FILE" lines and CSV/JSON written to a terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from torchinspect.report.render import printable

HOSTILE = "a\x1b]0;pwn\x07b\x9b2Jc\u202eevil\u2066d\u200f"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u200f")


def test_printable_escapes_c0_c1_and_bidi() -> None:
    shown = printable(HOSTILE)
    assert not any(c in shown for c in RAW)
    assert "\\x9b" in shown and "\\u202e" in shown and "\\u2066" in shown and "\\x1b" in shown
    assert printable("résumé 中文 ok") == "résumé 中文 ok"  # printable text untouched


@pytest.fixture
def hostile_checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "w.pt"
    torch.save({f"layer{HOSTILE}.weight": torch.zeros(2, 2), "ok.bias": torch.zeros(2)}, path)
    return path


def test_table_and_error_lines_escape_keys(hostile_checkpoint: Path, invoke) -> None:
    r = invoke("params", hostile_checkpoint)
    assert r.exit_code == 0, r.output
    assert not any(c in r.output for c in RAW), repr(r.output)
    r = invoke("convert", hostile_checkpoint, hostile_checkpoint.with_name("o.safetensors"),
               "--rename", "zzz=yyy")
    assert not any(c in r.output for c in RAW), repr(r.output)


def test_wrote_lines_escape_the_file_name(tmp_path: Path, invoke) -> None:
    out = tmp_path / f"out{HOSTILE}.json"
    r = invoke("params", "zoo:mnist-net", "-f", "json", "-o", out)
    assert r.exit_code == 0, r.output
    assert out.exists()
    assert "wrote" in r.output and not any(c in r.output for c in RAW), repr(r.output)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_data_formats_to_a_terminal_are_escaped_but_raw_to_a_pipe(hostile_checkpoint: Path, invoke,
                                                                  fmt: str, monkeypatch) -> None:
    from torchinspect.cli import output

    tty = _Tty()
    with monkeypatch.context() as m:
        m.setattr(output, "report_stdout", lambda: tty)
        r = invoke("params", hostile_checkpoint, "-f", fmt)
    assert r.exit_code == 0, r.output
    assert "layer" in tty.getvalue() and not any(c in tty.getvalue() for c in RAW), repr(tty.getvalue())
    if fmt == "csv":  # to a pipe or file the data stays exact
        piped = invoke("params", hostile_checkpoint, "-f", fmt)
        assert "\u202e" in piped.stdout
