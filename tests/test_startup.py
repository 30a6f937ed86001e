"""The import budget of `inspect --help`: what a fresh interpreter has imported after the app
and every command's help. Timing lives in benchmarks/startup.py (RESULTS-startup.md); this
keeps what makes it fast: no torch, no model source beyond the CLI's options, no io reader."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CODE = """
import json, sys
from typer.testing import CliRunner
from torchinspect.cli.app import app
from torchinspect.cli.commands import COMMANDS
runner = CliRunner()
for args in (["--help"], *[[c.name, "--help"] for c in COMMANDS]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, (args, r.output)
print(json.dumps(sorted(sys.modules)))
"""

# heavy third-party packages, and our modules that pull them or read files
FORBIDDEN_PACKAGES = ("torch", "torchvision", "numpy", "onnx", "onnxruntime", "graphviz",
                      "safetensors", "transformers", "timm", "huggingface_hub", "PIL",
                      "pydantic")  # (typer imports it to coerce a non-bool value: app.py)
FORBIDDEN_OURS = ("torchinspect.io", "torchinspect.sources.resolve", "torchinspect.sources.hf",
                  "torchinspect.sources.timm", "torchinspect.sources.torchvision",
                  "torchinspect.trace", "torchinspect.analysis", "torchinspect.memory",
                  "torchinspect.latency", "torchinspect.privtorch", "torchinspect.export.onnx",
                  "torchinspect.checkpoints", "torchinspect.overview")


def _imported_by_help() -> list[str]:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_help_of_every_command_stays_within_the_import_budget() -> None:
    modules = _imported_by_help()
    heavy = [m for m in modules if _under(m, FORBIDDEN_PACKAGES)]
    ours = [m for m in modules if _under(m, FORBIDDEN_OURS)]
    assert heavy == [], f"`inspect --help` imports {heavy[:10]}: import them inside the command"
    assert ours == [], (f"`inspect --help` imports {ours}: import them inside the function that "
                        "needs them (or make the package's __init__ lazy, as sources/ does)")
    assert "torchinspect.cli.summary" in modules  # the check itself saw the commands


def test_the_lazy_package_doors_still_give_their_names() -> None:
    from torchinspect import sources
    from torchinspect.export import graph

    assert sources.load_model.__module__ == "torchinspect.sources.resolve"
    assert graph.GraphKind.__module__ == "torchinspect.export.graph.model"
    for package in (sources, graph):
        for name in package.__all__:
            assert getattr(package, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sources.nope  # noqa: B018 - the error a mistyped name gets
