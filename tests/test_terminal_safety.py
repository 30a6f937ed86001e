"""Names from files reach the terminal escaped (issue 29, item 11): C0, C1 (U+009B is a CSI
to xterm) and bidi overrides/isolates (U+202E, U+2066-2069), in tables, error lines, "wrote
FILE" lines and CSV/JSON written to a terminal. Every writer follows the one policy of
``torchinspect.escape`` (issue 38, item 5): a property test feeds hostile module names, class
names and check results through the table, CSV, Markdown, JSON, HTML, JUnit XML and DOT."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from torchinspect.escape import dot_text, printable, utf8_safe, xml_text

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


# ------------------------------------------------------------------ every writer (issue 38, item 5)




#: what no terminal, Markdown viewer or XML parser may receive raw: C0 (but newline and tab in
#: multi-line texts), DEL, C1, bidi controls, line/paragraph separators, lone surrogates
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                  "\u2028\u2029\ud800-\udfff]")
_SPICE = "\x00\x01\x07\x08\x0b\x0c\x1b\x7f\x85\x9b\u061c\u200f\u202e\u2028\u2066\ufeff\ufffe" \
    "\uffff\ud800\udcff\U0001f600<>&\"'|\\`\n\r\t,;"
#: hostile names: any code point, with the dangerous ones made frequent
HOSTILE_NAMES = st.text(st.one_of(st.sampled_from(_SPICE), st.characters()), min_size=1,
                        max_size=12).filter(lambda s: "." not in s)


def _model(names: list[str]) -> nn.Module:
    """A model whose module names (and one class name) are ``names``."""
    model = nn.Sequential()
    for name in dict.fromkeys(names):
        model.add_module(name, nn.Linear(4, 4))
    cls_name = names[0].replace("\x00", "") or "X"
    try:
        odd = type(cls_name, (nn.Identity,), {})()
    except (ValueError, UnicodeEncodeError):  # type() refuses surrogates: keep the module name
        odd = nn.Identity()
    model.add_module("odd" + str(len(model)), odd)
    return model


def _check_result(name: str) -> object:
    from torchinspect.check.metrics import Metric
    from torchinspect.check.records import CheckResult, Measured, ModelCheck

    failing = Measured(Metric("params"), 10.0, 20.0, False, f"{name}: params over budget")
    return CheckResult([ModelCheck(name, name, f"x:{name}", [failing], notes=[name]),
                        ModelCheck(f"b{name}", name, "1,4", error=f"cannot build {name}",
                                   hint=name)], notes=[name])


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(names=st.lists(HOSTILE_NAMES, min_size=1, max_size=3))
def test_every_writer_escapes_hostile_names(names: list[str]) -> None:
    """Module names, class names and check results holding any code point, through the table,
    CSV (file and terminal), Markdown, JSON, HTML, JUnit XML and DOT writers: what reaches a
    terminal or viewer is escaped, every file is valid UTF-8 in its own syntax, and the data
    formats keep the names exact (but lone surrogates)."""
    from torchinspect.analysis import summarize
    from torchinspect.check.junit import junit_xml
    from torchinspect.export.graph import build_graph, to_dot
    from torchinspect.report.render import render
    from torchinspect.report.summary import summary_report

    report = summary_report(summarize(_model(names), "4", depth=2, memory="none"))
    texts = {}
    for fmt in ("table", "csv", "markdown", "json", "html"):
        buf = io.StringIO()
        render(report, fmt, buf, width=100)
        texts[fmt] = buf.getvalue()
        texts[fmt].encode("utf-8")  # every format writes valid UTF-8
    for fmt in ("table", "markdown"):
        assert not _RAW.search(texts[fmt].replace("\n", "")), (fmt, repr(texts[fmt]))
    assert not re.search(r"<(?=[A-Za-z/!?])", texts["markdown"].replace("<details>", "")
                         .replace("<summary>", "").replace("</summary>", "")
                         .replace("</details>", ""))
    assert not _RAW.search(texts["html"].replace("\n", "").replace("\t", "").replace("\r", ""))
    cells = {c for row in csv.reader(io.StringIO(texts["csv"])) for c in row}
    for name in names:  # CSV keeps names exact for programs (lone surrogates as \udcXX)
        assert any(utf8_safe(name) in c for c in cells), (name, cells)
    doc = json.loads(texts["json"])
    json.dumps(doc, ensure_ascii=False).encode("utf-8")  # no lone surrogate survives decoding
    xml = junit_xml(_check_result(names[0]))  # type: ignore[arg-type]
    root = ET.fromstring(xml.encode("utf-8"))  # a CI parser reads it
    failures = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert len(failures) == 1 and root.get("failures") == "1" and root.get("errors") == "1"
    assert failures[0].find("failure").get("message").endswith("params over budget")
    dot = to_dot(build_graph(_model(names), "4"))
    dot.encode("utf-8")
    assert not _RAW.search(dot.replace("\n", "")), repr(dot)


def test_escape_helpers_on_the_audit_strings() -> None:
    assert xml_text("k\x00\x1b\udcff\ufffe") == "k\\x00\\x1b\\udcff\\ufffe"
    assert xml_text("a\nb\tc") == "a\nb\tc"
    assert dot_text('a"\\\x00\nb') == 'a\\"\\\\\\\\x00\\nb'
    assert utf8_safe("é\udcff") == "é\\udcff" and utf8_safe("ok") == "ok"
    assert printable("\u2028\u2029\ufeff\udcff") == "\\u2028\\u2029\\ufeff\\udcff"


def _hostile_check_config(tmp_path: Path, name: str) -> list[str]:
    model = tmp_path / "net.py"
    model.write_text("import torch\nfrom torch import nn\n\nclass Net(nn.Module):\n"
                     "    example_input = '1,4'\n\n    def __init__(self):\n        super().__init__()\n"
                     f"        self.add_module({name!r}, nn.Linear(4, 4))\n\n"
                     f"    def forward(self, x):\n        return getattr(self, {name!r})(x)\n")
    return [f"{model}:Net"]


def test_junit_of_a_hostile_model_parses_and_shows_the_failure(tmp_path: Path, invoke) -> None:
    """A control character from a model's module name made the JUnit file invalid XML: a CI
    parser rejected it and the failing check disappeared from the test view."""
    spec = _hostile_check_config(tmp_path, f"l{HOSTILE}\x00\x0b")
    junit = tmp_path / "report.xml"
    r = invoke("check", spec[0], "--max-params", "1", "--junit", junit)
    assert r.exit_code == 1, r.output
    root = ET.fromstring(junit.read_bytes())
    assert [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None] == ["max-params"]


def test_dot_of_a_module_name_with_nul_renders(tmp_path: Path, invoke) -> None:
    """A NUL in a module name produced DOT that Graphviz rejected."""
    spec = _hostile_check_config(tmp_path, f"a\x00b{HOSTILE}")
    out = tmp_path / "g.dot"
    r = invoke("graph", spec[0], "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    assert "\x00" not in text and "a\\\\x00b" in text
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg", str(out)], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
