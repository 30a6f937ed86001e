"""The one wrapping rule (issue 42): text folds where a reader would break it, never inside an
identifier that fits, a quoted string, a number or a call that fits the line; a code cell that
can't fit goes on its own line under its row."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchinspect.report.base import Report, Table
from torchinspect.report.render import render
from torchinspect.report.wrap import wrap


@pytest.mark.parametrize(("text", "width", "lines"), [
    # a dotted path breaks after a dot; the identifier after it stays whole
    ("encoder.layers.encoder_layer_0", 16, ["encoder.layers.", "encoder_layer_0"]),
    ("layer4.2.relu (steady step)", 12, ["layer4.2.", "relu (steady", "step)"]),
    # a path breaks after "/", and a file keeps its extension and line number
    ("torchinspect/zoo/pitfalls.py:31", 16, ["torchinspect/", "zoo/", "pitfalls.py:31"]),
    # a quoted string is never cut; a call breaks at its own commas only when it must
    ('self.register_buffer("scale", tensor) instead of self.scale = tensor', 24,
     ['self.register_buffer(', '"scale", tensor) instead', "of self.scale = tensor"]),
    ("F.dropout(..., training=self.training), or an nn.Dropout module", 40,
     ["F.dropout(..., training=self.training),", "or an nn.Dropout module"]),
    # "(...)" stays whole, and so do numbers
    ("self.layers = nn.ModuleList(...) instead of a list", 18,
     ["self.layers =", "nn.ModuleList(...)", "instead of a list"]),
    ("10,432 parameters and 2.00 GB", 10, ["10,432", "parameters", "and 2.00", "GB"]),
    # an identifier longer than the line breaks after "_", nothing else fits: anywhere
    ("an_identifier_longer_than_this", 16, ["an_identifier_", "longer_than_this"]),
    ("x" * 20, 8, ["x" * 8, "x" * 8, "x" * 4]),
    # an apostrophe is no quote
    ("the model's own code isn't quoted", 12, ["the model's", "own code", "isn't quoted"]),
])
def test_text_breaks_where_a_reader_would(text: str, width: int, lines: list[str]) -> None:
    assert wrap(text, width) == lines
    assert all(len(line) <= width for line in lines)


def test_a_folded_name_stays_under_itself() -> None:
    assert wrap("      encoder.layers.encoder_layer_0", 22) == [
        "      encoder.layers.", "      encoder_layer_0"]
    # a tree's branch goes on down beside the folded name
    assert wrap("│    └─layer1.0.downsample.0", 20) == ["│    └─layer1.0.", "│      downsample.0"]
    # an identifier that fits a line is never cut at "_": the line ends before it
    assert wrap("Fix: use a call_like_this(x) here", 20, indent="     ") == [
        "Fix: use a", "     call_like_this(", "     x) here"]


words = st.text(alphabet="abcdefgh_.,/() '\"=0123", min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(words, min_size=1, max_size=8).map(" ".join), st.integers(4, 40))
def test_nothing_is_lost_and_no_line_is_too_long(text: str, width: int) -> None:
    lines = wrap(text, width, indent="")
    assert all(len(line) <= width for line in lines), lines
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def _shown(table: Table, width: int | None) -> list[str]:
    buf = io.StringIO()
    render(Report("x", {}, [table]), "table", buf, width=width)
    return buf.getvalue().splitlines()


FIX = 'self.register_buffer("scale", tensor) instead of self.scale = tensor'
FINDINGS = Table("Findings", ["Code", "Severity", "Module", "Source", "What", "Fix"],
                 [["TI002", "warning", "scale", "torchinspect/zoo/pitfalls.py:45",
                   "tensor attribute 'scale' (32, float32) kept outside the state_dict", FIX]],
                 wrap=["What"], code=["Fix", "Source"])


def test_code_that_does_not_fit_goes_under_its_row() -> None:
    lines = _shown(FINDINGS, 80)
    assert lines[1].split() == ["Code", "Severity", "Module", "What"]
    under = [ln for ln in lines if ln.startswith("       ") and ":" in ln.split()[0]]
    assert [ln.strip() for ln in under] == ["Source: torchinspect/zoo/pitfalls.py:45",
                                            f"Fix: {FIX}"]
    assert max(map(len, lines)) <= 80
    # wide enough: the file stays in the grid, the fix still goes under its row
    wide = _shown(FINDINGS, 140)
    assert "Source" in wide[1] and "Fix" not in wide[1] and f"Fix: {FIX}" in wide[-1]
    # wide enough for everything: one row
    assert "Fix" in _shown(FINDINGS, 220)[1]
    # a table of sentences piped (no terminal) fits WRAP_WIDTH the same way
    assert max(map(len, _shown(FINDINGS, None))) <= 100 and f"Fix: {FIX}" in "\n".join(
        _shown(FINDINGS, None))


def test_a_code_line_too_long_for_the_terminal_folds_by_the_rule() -> None:
    lines = _shown(FINDINGS, 50)
    assert max(map(len, lines)) <= 50
    fix = [ln for ln in lines if ln.lstrip().startswith("Fix:")]
    assert fix and '"scale"' in "\n".join(lines)
    assert all(ln.count('"') % 2 == 0 for ln in lines)  # the string is whole on one line


def test_a_narrow_column_keeps_its_words_whole() -> None:
    rows = [["zoo:convnet", "activation-mb", "--max-increase", "a sentence that can fold " * 3]]
    t = Table(None, ["Model", "Metric", "Budget", "Note"], rows, wrap=["Note"])
    lines = _shown(t, 60)
    text = "\n".join(lines)
    assert "activation-mb" in text and "--max-increase" in text
    assert max(map(len, lines)) <= 60
