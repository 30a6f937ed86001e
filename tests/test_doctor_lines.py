"""Findings at the line where the mistake is written: assignments in helpers reached from
``__init__`` (any depth, in another of the user's files), subclass chains, loops that append
to the list a container is built from; the same for a model file given as MODEL text and
for a model passed to ``diagnose`` already built (then only the source tells)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from torchinspect.analysis.doctor import diagnose
from torchinspect.sources.case import ModelOptions

PARTS = '''\
from torch import nn


def add_blocks(owner, width):
    owner._build(width)


def attach_heads(model, width, names):
    model.heads = {name: nn.Linear(width, 1) for name in names}  # TI001 here
'''

MODEL = '''\
import torch
from torch import nn
from lines_parts import add_blocks, attach_heads


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 16)


class Middle(Base):
    def __init__(self):
        super().__init__()
        self.offset = torch.zeros(16)  # TI002 here


class Net(Middle):
    def __init__(self):
        super().__init__()
        add_blocks(self, 16)
        attach_heads(self, 16, ["a", "b"])
        norm = nn.BatchNorm1d(16)
        layers = []
        for _ in range(2):
            layers.append(nn.Linear(16, 16))
            layers.append(norm)  # TI023 here
        self.tail = nn.Sequential(*layers)

    def _build(self, width):
        self._deeper(width)

    def _deeper(self, width):
        self.blocks = [nn.Linear(width, width) for _ in range(2)]  # TI001 here

    def forward(self, x):
        h = self.stem(x) + self.offset
        for block in self.blocks:
            h = block(h)
        h = self.tail(h)
        return torch.cat([head(h) for head in self.heads.values()], dim=-1)
'''


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "lines_parts.py").write_text(PARTS)
    (tmp_path / "lines_model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _expected(folder: Path) -> set[tuple[str, str]]:
    out = set()
    for name in ("lines_parts.py", "lines_model.py"):
        for i, line in enumerate((folder / name).read_text().splitlines()):
            if "# TI" in line:
                out.add((line.split("# ")[-1].split()[0], f"{name}:{i + 1}"))
    return out


def _found(result: Any) -> set[tuple[str, str]]:
    return {(f.code, (f.location or "").rpartition("/")[2]) for f in result.findings
            if f.severity.value != "info"}


def test_lines_for_a_model_file(files: Path) -> None:
    r = diagnose("lines_model.py:Net", options=ModelOptions(device="cpu", inputs=["8"], batch=4))
    assert _found(r) == _expected(files), r.findings


def test_lines_for_a_model_built_before_the_doctor_saw_it(files: Path) -> None:
    sys.path.insert(0, str(files))
    try:
        spec = importlib.util.spec_from_file_location("lines_model", files / "lines_model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        r = diagnose(module.Net(), torch.randn(2, 8))
    finally:
        sys.path.remove(str(files))
        sys.modules.pop("lines_parts", None)
    assert _found(r) == _expected(files), r.findings


def test_source_reading_survives_what_it_cannot_read(tmp_path: Path) -> None:
    from torchinspect.analysis.doctor.source import appended_line, attribute_line, call_lines

    assert appended_line(f"{tmp_path}/missing.py:3", "BatchNorm1d") is None
    assert appended_line("no-line-number", "X") is None
    assert attribute_line(torch.nn.Linear, "weight") is None  # torch's own source: not read
    assert call_lines(torch.nn.Sequential, "0") == []
    code = textwrap.dedent("""
        from torch import nn
        class Odd(nn.Module):
            def __init__(self):
                super().__init__()
                exec("self.w = nn.Linear(2, 2)")
    """)
    path = tmp_path / "odd_model.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("odd_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert attribute_line(module.Odd, "w") is None
