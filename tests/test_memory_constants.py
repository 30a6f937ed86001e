"""Every constant of the memory model sits in memory/constants.py with its provenance."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchinspect.memory import constants
from torchinspect.memory.constants import DATA_TABLES, TABLE, Provenance, value

ROOT = Path(__file__).resolve().parents[1]
MEMORY = ROOT / "src" / "torchinspect" / "memory"
# module-level numbers that are not part of the model, and why
NOT_MODEL = {
    ("fit.py", "BATCH_LIMIT"): "the --fit search's upper bound",
    ("step.py", "MAX_FSDP_RANKS"): "a limit on the user's --fsdp argument",
    ("timeline.py", "TIMELINE_POINTS"): "how many points a rendered timeline keeps",
    ("rnn_workspace.py", "MIB"): "a unit",
    ("tracker.py", "_MATRIX_ARGS"): "argument positions in aten schemas",
    ("tracker.py", "_CONTIGUOUS_ARGS"): "argument positions in aten schemas",
    # main's (merged with issue 40's memory work): input and cache checks, not the model
    ("budget.py", "MOST"): "the largest memory size an argument may name (an input check)",
    ("calibrate.py", "CACHE_VERSION"): "the calibration cache file's schema version",
    ("calibrate.py", "MAX_WORKSPACE"): "the largest entry a cache file may hold (damage check)",
    # issue 43's generate: how the prediction is made, not a number of the GPU's memory
    ("generate.py", "TRACED_STEPS"): "decode steps traced before the pattern is written out "
                                     "(the steps after are the same; a method, not a figure)",
    ("generate.py", "FIT_LIMIT"): "the generate --fit search's upper bound",
}


def _numeric(node: ast.AST) -> bool:
    """A literal number, or an expression, tuple or dict built only from literals that holds
    one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_numeric(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(v is not None and _numeric(v) for v in node.values)
    return False


def _own_numbers(path: Path) -> list[str]:
    out = []
    for node in ast.parse(path.read_text()).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value_node = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value_node = [node.target], node.value
        else:
            continue
        for target in targets:
            names = [t.id for t in (target.elts if isinstance(target, ast.Tuple) else [target])
                     if isinstance(t, ast.Name)]
            for name in names:
                bare = name.lstrip("_")
                if bare and bare == bare.upper() and _numeric(value_node):
                    out.append(name)
    return out


def test_no_module_of_the_model_keeps_a_number_of_its_own():
    found = []
    for path in sorted(MEMORY.glob("*.py")):
        if path.name == "constants.py":
            continue
        found += [f"{path.name}: {name}" for name in _own_numbers(path)
                  if (path.name, name) not in NOT_MODEL]
    assert not found, ("numbers of the memory model outside memory/constants.py (add a row "
                       f"with its provenance and read it with value()): {found}")


def test_the_scan_finds_a_number_where_there_is_one(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("A = 512\nB = {'x': 4}\nC = ('a', 'b')\nD = value('x')\n_E = 1 << 20\n")
    assert _own_numbers(code) == ["A", "B", "_E"]


def test_every_constant_names_where_it_comes_from():
    names = [c.name for c in TABLE]
    assert len(names) == len(set(names)), "a constant is listed twice"
    for c in (*TABLE, *DATA_TABLES):
        assert c.source and c.unit, c
        if c.provenance is Provenance.measured:
            assert c.card, f"{c.name}: measured on which GPU?"
        if c.provenance is Provenance.fitted:
            assert c.fitted_on, f"{c.name}: fitted on which set?"
            assert "validation set" not in c.fitted_on or "never" in c.fitted_on, c
        for part in c.source.replace(",", " ").split():  # committed raw data exists
            if part.startswith("results/"):
                assert (ROOT / "benchmarks" / part).exists(), f"{c.name}: {part} missing"


def test_the_modules_read_the_table():
    from torchinspect.memory import allocator, cudnn_rnn, gpu, reduction, workspace

    assert allocator.MIN_BLOCK == value("allocator.min_block") == 512
    assert cudnn_rnn.GATES["lstm"] == value("cudnn_rnn.reserve_units.lstm")
    assert gpu.LT_WORKSPACE == value("cublaslt.workspace")
    assert reduction.MAX_THREADS == value("reduction.max_threads")
    assert workspace.NEIGHBOURS["conv"] == value("workspace.neighbours.conv")
    with pytest.raises(KeyError):
        value("no.such.constant")
    assert constants.constant("cudnn_rnn.proj_round").provenance is Provenance.measured
