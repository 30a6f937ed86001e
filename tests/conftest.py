"""Shared fixtures: a CLI runner with a fixed terminal width, golden files, CUDA skip."""

from __future__ import annotations

from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
DATA_DIR = Path(__file__).parent / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current output instead of comparing")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fixed_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("TORCHINSPECT_DEBUG", raising=False)


@pytest.fixture
def runner():
    from typer.testing import CliRunner

    return CliRunner()


@pytest.fixture
def invoke(runner):
    """invoke(args...) -> Result, running the real `inspect` app."""
    from torchinspect.cli.app import app

    def _invoke(*args: str, **kw):
        return runner.invoke(app, [str(a) for a in args], **kw)

    return _invoke


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """golden(name, text): compare text with tests/golden/NAME (or rewrite it)."""
    update = request.config.getoption("--update-golden")

    def _check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if not update and not path.exists():
            pytest.fail(f"golden file {path} is missing; run pytest --update-golden to write it")
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        expected = path.read_text()
        assert text == expected, f"output differs from {path}; review and run pytest --update-golden"

    return _check
