"""The doctor's validation pairs (tests/data/doctor_validation/) and how a run is scored.

One case is a file ``vNN_name.py`` or a folder ``vNN_name/`` whose ``model.py`` holds the
models (the other files of the folder are the model's own helpers, imported by it). The model
file defines ``Net`` (the mistake), ``Fixed`` (the same model written the right way) and
``INPUT`` (the ``--input`` specs). Every offending statement, in any file of the case, is
marked ``# expect: TIxxx``; ``also: TIyyy`` on the same line names a code that may be reported
there too (a second true finding about the same statement, e.g. the host sync of a
``.numpy()`` round trip).

Scores, per case (``score``): the expected codes are found at all; at their lines; with the
right diagnosis (found at the line, and no warning or error of a code that is neither
expected nor allowed: a misdiagnosis such as "a CPU tensor" for a cut graph); the clean twin
draws no warning or error; nothing raised (what would be exit 70 on the command line).
``tests/test_doctor_validation.py`` and ``benchmarks/doctor_pitfalls.py`` both read this.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).parent / "data" / "doctor_validation"
# the cases written for the third pass (before its checks were written or tuned)
THIRD_PASS = 16

_MARK = re.compile(r"# expect: (TI\d{3})(?:\s+also: (TI\d{3}(?:,\s*TI\d{3})*))?")


@dataclass
class Case:
    name: str
    model_file: Path
    expected: list[tuple[str, str, int]]  # (code, file name, line)
    also: set[str] = field(default_factory=set)
    inputs: list[str] = field(default_factory=list)

    @property
    def number(self) -> int:
        return int(self.name[1:3])

    @property
    def trigger(self) -> str:
        return f"{self.model_file}:Net"

    @property
    def twin(self) -> str:
        return f"{self.model_file}:Fixed"


def _marks(path: Path) -> tuple[list[tuple[str, str, int]], set[str]]:
    expected, also = [], set()
    for i, line in enumerate(path.read_text().splitlines()):
        m = _MARK.search(line)
        if m:
            expected.append((m.group(1), path.name, i + 1))
            also.update(c.strip() for c in (m.group(2) or "").split(",") if c.strip())
    return expected, also


def _inputs(path: Path) -> list[str]:
    return next(ast.literal_eval(node.value) for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "INPUT")


def load(path: Path) -> Case:
    model_file = path / "model.py" if path.is_dir() else path
    files = sorted(path.glob("*.py")) if path.is_dir() else [path]
    expected: list[tuple[str, str, int]] = []
    also: set[str] = set()
    for f in files:
        e, a = _marks(f)
        expected += e
        also |= a
    return Case(path.stem if path.is_file() else path.name, model_file, expected, also,
                _inputs(model_file))


def cases() -> list[Case]:
    return [load(p) for p in sorted(FOLDER.glob("v[0-9][0-9]_*"))
            if p.is_dir() or p.suffix == ".py"]


def score(case: Case, found: list[dict[str, Any]], clean: list[dict[str, Any]]) -> dict[str, Any]:
    """``found``/``clean``: the trigger's and the twin's findings as ``{code, severity,
    location}`` dicts."""
    def at(code: str, name: str, line: int) -> bool:
        return any(f["code"] == code and (f["location"] or "").endswith(f"{name}:{line}")
                   for f in found)

    codes = {c for c, _, _ in case.expected}
    found_code = all(any(f["code"] == c for f in found) for c in codes)
    at_line = all(at(*e) for e in case.expected)
    wrong = [f for f in found if f["severity"] != "info" and f["code"] not in codes | case.also]
    return {"found_code": found_code, "found_at_line": at_line,
            "right_diagnosis": at_line and not wrong, "misdiagnosed": wrong,
            "twin_noise": [f for f in clean if f["severity"] != "info"],
            "twin_info": sum(f["severity"] == "info" for f in clean)}
