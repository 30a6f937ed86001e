"""The shape of the code itself, read with ``ast`` (nothing is imported): no import cycles
between modules (function-level imports included), functions short enough to read, and a
public API that type checkers see the same way Python does."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import torchinspect
from torchinspect import errors

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "torchinspect"

# Functions over MAX_LINES that are one documented algorithm, read top to bottom; each entry
# says which. Anything else over the limit is split into named phases.
MAX_LINES = 80
LONG_BY_DESIGN = {
    # the timing loop of torch.utils.benchmark's blocked_autorange: warm-up, blocks, stopping
    # rule and CUDA synchronisation in one place so the clock reads are visibly paired
    ("torchinspect.bench.timing", "measure"),
}


ZOO = ROOT / "models_zoo"  # installed as torchinspect.zoo (pyproject's package-dir)


def _modules() -> dict[str, Path]:
    out = {}
    for base, prefix in ((PACKAGE, ["torchinspect"]), (ZOO, ["torchinspect", "zoo"])):
        for path in sorted(base.rglob("*.py")):
            parts = prefix + list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ours that importing ``name`` loads (a module, or the package above)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, ``if TYPE_CHECKING:`` bodies left out (they never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _imports(module: str, path: Path) -> set[str]:
    """Our modules that ``module`` imports anywhere in its code (top level or in functions)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {_owner(a.name) for a in node.names if a.name.startswith("torchinspect")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base.split(".")[0] != "torchinspect":
                continue
            # `from pkg import sub` loads pkg.sub when it is a module, else only pkg
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else _owner(base)
                      for a in node.names}
    found.discard(None)
    found.discard(module)
    return {m for m in found if m is not None}


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_graph_reader_sees_function_level_and_relative_imports(tmp_path) -> None:
    # the reader itself, on modules whose imports are known: a cycle only through a function
    # body is still a cycle; a TYPE_CHECKING import is not an edge
    a = ast.parse("def f():\n    from torchinspect import errors\n")
    assert any(isinstance(n, ast.ImportFrom) for n in _runtime_nodes(a))
    b = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torchinspect.env\n")
    assert not any(isinstance(n, ast.Import) for n in _runtime_nodes(b))
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _graph()
    assert "torchinspect.errors" in graph["torchinspect.cli.boundary"]
    assert "torchinspect.report.base" in graph["torchinspect.report.summary"]


def test_no_two_modules_import_each_other() -> None:
    graph = _graph()
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps
                    if a in graph.get(b, ())})
    assert pairs == []
    assert _cycles(graph) == []


# Code that may not reach into another module's private names: the package and the zoo, the
# benchmarks, the docs hooks and the tools. Tests are exempt: a test is white-box by design
# (it pins a module's own helpers where they live, and a rename breaks it at once, in the
# same commit), while production code that leans on another module's private name is what
# breaks silently when that module changes.
CHECKED_TREES = {"benchmarks": ROOT / "benchmarks", "docs": ROOT / "docs", "tools": ROOT / "tools"}


def _checked_files() -> dict[str, Path]:
    files = dict(MODULES)
    for prefix, base in CHECKED_TREES.items():
        for path in sorted(base.rglob("*.py")):
            files[".".join([prefix, *path.relative_to(base).with_suffix("").parts])] = path
    return files


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _inside(module: str, owner: str) -> bool:
    return module == owner or module.startswith(owner + ".")


def _private_reaches(module: str, code: str) -> list[str]:
    """``from torchinspect.x import _y`` and ``x._y`` (``x`` a module of ours, however it was
    imported) in the source ``code`` of ``module``, where ``x`` is not ``module`` itself:
    ``LINE: what``."""
    tree = ast.parse(code)
    aliases: dict[str, str] = {}  # local name -> our module it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchinspect"):
            base = node.module or ""
            for a in node.names:
                if _private(a.name) and not _inside(module, base):
                    found.append(f"{node.lineno}: from {base} import {a.name}")
                if f"{base}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torchinspect"):
                    aliases[a.asname or "torchinspect"] = a.name if a.asname else "torchinspect"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        chain, base = [], node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in aliases:
            owner = ".".join([aliases[base.id], *reversed(chain)])
            if owner in MODULES and not _inside(module, owner):
                found.append(f"{node.lineno}: {owner}.{node.attr}")
    return found


def test_the_private_name_reader_sees_both_forms() -> None:
    code = ("from torchinspect.trace.ops import _x\nimport torchinspect.trace.ops as ops\n"
            "from torchinspect.trace import formulas\nimport torchinspect\nops._y\n"
            "formulas._z\nformulas.__doc__\ntorchinspect.trace.counting._w\n")
    assert _private_reaches("benchmarks.probe", code) == [
        "1: from torchinspect.trace.ops import _x", "5: torchinspect.trace.ops._y",
        "6: torchinspect.trace.formulas._z", "8: torchinspect.trace.counting._w"]
    assert _private_reaches("torchinspect.trace.ops", "from torchinspect.trace.ops import _x\n"
                            "from torchinspect.trace import ops\nops._y\n") == []


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = [f"{path.relative_to(ROOT)}:{hit}" for module, path in _checked_files().items()
             for hit in _private_reaches(module, path.read_text())]
    assert found == [], ("private names used outside their module; give the helper a public "
                         "name in its home:\n" + "\n".join(found))


def _defines(path: Path) -> tuple[set[str], set[str]]:
    """(names ``path`` defines at its top level, its ``__all__``)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    declared: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and \
                    isinstance(node.value, (ast.List, ast.Tuple)):
                declared = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return names, declared


@pytest.mark.slow
def test_every_name_is_imported_from_its_home() -> None:
    """One door per name: ``from torchinspect.x import y`` where x defines y (or y is a
    submodule); a package's ``__init__`` and a module's ``__all__`` are declared doors."""
    homes = {m: _defines(p) for m, p in MODULES.items() if p.name != "__init__.py"}
    found = []
    for path in [*_checked_files().values(), *sorted((ROOT / "tests").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module in homes):
                continue
            names, declared = homes[node.module]
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} from {node.module}"
                      for a in node.names if a.name not in names and a.name not in declared
                      and f"{node.module}.{a.name}" not in MODULES]
    assert found == [], "names imported through a second door:\n" + "\n".join(found)


def _layers_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")


def _diagram_in(page: Path) -> str:
    """The layer diagram of a docs page: the fenced block that starts with ``cli > report``,
    its lines joined (the docs wrap it over several lines)."""
    blocks = page.read_text().split("```")
    diagram = next(b for b in blocks[1::2] if b.strip().startswith("cli > report"))
    return " ".join(diagram.split())


@pytest.mark.parametrize("page", ["development.md", "development-layout.md"])
def test_the_layer_diagram_in_the_docs_is_the_import_linter_contract(page: str) -> None:
    contract = _layers_contract()
    assert contract["exhaustive"] is True and contract["containers"] == ["torchinspect"]
    layers = [layer for layer in contract["layers"] if layer != "__main__"]
    assert _diagram_in(ROOT / "docs" / page) == " > ".join(layers), (
        f"docs/{page}: the layer diagram differs from pyproject.toml's layers contract")
    # every package and root module of ours has a place in the diagram (exhaustive)
    named = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    children = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()
                if (path.suffix == ".py" and path.stem != "__init__")
                or (path / "__init__.py").is_file()}
    assert children == named


def test_the_wheel_lists_every_package_and_serves_the_zoo_from_models_zoo() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"": "src", "torchinspect.zoo": "models_zoo"}
    on_disk = {".".join(p.parent.relative_to(SRC).parts) for p in PACKAGE.rglob("__init__.py")}
    assert set(config["packages"]) == on_disk | {"torchinspect.zoo"}
    assert not (PACKAGE / "zoo").exists()
    import torchinspect.zoo

    assert Path(torchinspect.zoo.__file__).parent == ZOO  # the editable install maps it


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_function_over_80_lines_outside_a_documented_algorithm() -> None:
    long = set()
    for module, path in MODULES.items():
        for fn in _functions(ast.parse(path.read_text(), str(path))):
            assert fn.end_lineno is not None
            if fn.end_lineno - fn.lineno + 1 > MAX_LINES:
                long.add((module, fn.name))
    assert long - LONG_BY_DESIGN == set()
    assert LONG_BY_DESIGN - long == set(), "an exception that is no longer needed"


def _type_checking_names() -> dict[str, str]:
    """name -> module of the imports in ``torchinspect/__init__.py``'s TYPE_CHECKING block."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    assert alias.asname == alias.name, "re-export as `import X as X`"
                    out[alias.name] = imp.module
    return out


def test_every_lazy_name_is_typed_listed_and_importable() -> None:
    lazy = torchinspect.PUBLIC_NAMES
    assert _type_checking_names() == lazy
    assert set(torchinspect.__all__) == {"__version__", *lazy}
    for name in lazy:  # the lazy import and the static one name the same object
        assert getattr(torchinspect, name) is not None
    assert torchinspect.InspectError is errors.InspectError


def test_the_package_ships_its_types_and_one_version() -> None:
    assert (PACKAGE / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    setuptools = project["tool"]["setuptools"]
    assert setuptools["dynamic"]["version"] == {"attr": "torchinspect.__version__"}
    assert "py.typed" in setuptools["package-data"]["torchinspect"]


def test_import_torchinspect_and_the_cli_stay_torch_free() -> None:
    code = ("import sys, torchinspect, torchinspect.errors, torchinspect.cli.app; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'onnx', 'numpy', 'torchvision')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# every public function that takes one model: fn(model: ModelLike, ..., *, options=...)
MODEL_FUNCTIONS = ["make_case", "summarize", "count_params", "count_flops", "diagnose",
                   "build_graph", "export_onnx", "benchmark", "extract_features",
                   "predict_memory"]


@pytest.mark.parametrize("name", MODEL_FUNCTIONS)
def test_one_signature_shape_for_functions_that_take_a_model(name: str) -> None:
    params = list(inspect.signature(getattr(torchinspect, name)).parameters.values())
    assert (params[0].name, params[0].annotation) == ("model", "ModelLike")
    options = next(p for p in params if p.name == "options")
    assert options.kind is inspect.Parameter.KEYWORD_ONLY
    assert (options.annotation, options.default) == ("ModelOptions | None", None)


# every public keyword that was renamed: (function, old keyword, new keyword, other arguments)
RENAMED_KEYWORDS = [
    ("make_case", "model_or_spec", "model", {"inputs": "1,4"}),
    ("summarize", "model_or_spec", "model", {"inputs": "1,4", "memory": "none"}),
    ("count_params", "model_or_spec", "model", {}),
    ("count_flops", "model_or_spec", "model", {"inputs": "1,4"}),
    ("diagnose", "model_or_spec", "model", {"inputs": "1,4", "device": "meta"}),
    ("predict_memory", "model_or_case", "model", {"inputs": "1,4", "train": False}),
    ("build_graph", "case_or_model", "model", {"inputs": "1,4", "kind": "module"}),
    ("export_onnx", "case_or_model", "model", {"path": "not-onnx.txt", "inputs": "1,4"}),
]


def test_every_renamed_keyword_is_listed() -> None:
    """Every ``@renamed_keywords`` in the package has a row above (and no row is stale)."""
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "renamed_keywords":
                    assert not node.name.startswith("_"), f"{module}.{node.name}: not public"
                    found |= {(node.name, kw.arg, kw.value.value) for kw in dec.keywords
                              if isinstance(kw.value, ast.Constant)}
    assert found == {(fn, old, new) for fn, old, new, _ in RENAMED_KEYWORDS}


@pytest.mark.parametrize(("name", "old", "new", "kwargs"), RENAMED_KEYWORDS,
                         ids=[row[0] for row in RENAMED_KEYWORDS])
def test_old_keyword_names_still_work_with_a_warning(name: str, old: str, new: str,
                                                     kwargs: dict, tmp_path, monkeypatch) -> None:
    from torch import nn

    monkeypatch.chdir(tmp_path)
    fn = getattr(torchinspect, name)
    model = nn.Linear(4, 2)
    with pytest.warns(DeprecationWarning, match=rf"{name}\({old}=\.\.\.\) is deprecated; "
                                                rf"use {new}="):
        try:
            result = fn(**{old: model}, **kwargs)
        except torchinspect.InspectError as exc:  # reached the function: not a TypeError
            assert name == "export_onnx" and "not-onnx.txt" in exc.message
            result = None
    if name == "count_params":
        assert result.total == fn(model).total == 4 * 2 + 2
    with pytest.raises(TypeError, match=f"got both {old}= and {new}="):
        fn(**{old: model, new: model}, **kwargs)


def test_a_model_case_is_taken_as_it_is() -> None:
    from torch import nn

    model = nn.Linear(4, 2)
    case = torchinspect.make_case(model, "1,4")
    assert torchinspect.make_case(case) is case  # a ModelCase is taken as it is
