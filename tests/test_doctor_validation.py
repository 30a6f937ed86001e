"""The doctor on the held-out pitfall models of tests/data/doctor_validation/ (not tuned on):
every marked statement found at its line, every clean twin without warnings or errors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from torchinspect.analysis.doctor import diagnose
from torchinspect.sources.case import ModelOptions

FILES = sorted((Path(__file__).parent / "data" / "doctor_validation").glob("v*.py"))


def expected(path: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """The ``# expect: TIxxx`` marks (code, line) and the file's ``INPUT``."""
    text = path.read_text()
    marks = [(m.group(1), i + 1) for i, line in enumerate(text.splitlines())
             for m in [re.search(r"# expect: (TI\d{3})", line)] if m]
    inputs = next(ast.literal_eval(node.value) for node in ast.parse(text).body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "INPUT")
    return marks, inputs


def test_the_set_is_there() -> None:
    assert len(FILES) >= 15
    assert all(expected(f)[0] for f in FILES)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_found_at_the_line_and_twin_clean(path: Path) -> None:
    marks, inputs = expected(path)
    opts = ModelOptions(device="cpu", inputs=inputs)
    found = diagnose(f"{path}:Net", options=opts)
    for code, line in marks:
        at = [f.location for f in found.findings if f.code == code]
        assert any(loc and loc.endswith(f"{path.name}:{line}") for loc in at), (code, line, at)
    twin = diagnose(f"{path}:Fixed", options=opts)
    assert [f for f in twin.findings if f.severity.value != "info"] == [], twin.findings
