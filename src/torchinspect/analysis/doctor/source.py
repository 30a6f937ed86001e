"""What the model's source says: the statement that sets an attribute, calls a submodule, or
appends a module to a list, found by reading the code (``ast``), never by running it.

* :func:`attribute_line`: the ``self.NAME = ...`` (or ``register_buffer("NAME", ...)``)
  statement reached from ``__init__`` (or ``forward``): in the class and its bases, in the
  helper methods they call (any depth), and in functions of any of the user's files that get
  the module as an argument (``add_heads(self, ...)`` -> ``model.heads = [...]``);
* :func:`call_lines`: the statements that call ``self.NAME(...)`` in the class's methods;
* :func:`module_sites`: where each module of a model was built (the recorded lines, else
  the statement that sets it in its parent's ``__init__``);
* :func:`appended_line`: for a container built from a list (``nn.Sequential(*layers)``), the
  ``layers.append(x)`` that adds an object made before the loop (the same object each time).

Only the user's own files are read (``sites.is_user_file``); a source that cannot be read
gives None.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchinspect.analysis.doctor.sites import is_user_file, shown, source_path

DEPTH = 4  # helper calls followed from __init__/forward


@dataclass(frozen=True)
class _Function:
    path: str
    first: int  # the file line of the function's first line
    tree: ast.AST  # the parsed (dedented) function
    owner: str  # the name the module has inside it ("self", or a helper's parameter)
    fn: Any  # the function object (its globals resolve the helpers it calls)


def _parse(fn: Any, owner: str | None = None) -> _Function | None:
    code = getattr(fn, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    node = tree.body[0] if tree.body else None
    if owner is None:
        args = node.args.args if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
        owner = args[0].arg if args else "self"
    return _Function(code.co_filename, first, tree, owner, fn)


def _methods(cls: type, name: str) -> Iterator[Any]:
    """``name`` as defined by ``cls`` and each of its bases (the most derived first)."""
    for klass in cls.__mro__:
        fn = klass.__dict__.get(name)
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if fn is not None and hasattr(fn, "__code__"):
            yield fn


def _reachable(cls: type, start: str) -> Iterator[_Function]:
    """``cls.start`` (and its bases' versions), then the helpers they call with the module:
    ``self.helper(...)`` methods and ``helper(self, ...)`` functions, breadth first."""
    queue: list[tuple[Any, str | None, int]] = [(fn, None, 0) for fn in _methods(cls, start)]
    seen: set[tuple[int, str | None]] = set()
    while queue:
        fn, owner, depth = queue.pop(0)
        key = (id(fn), owner)
        if key in seen:
            continue
        seen.add(key)
        parsed = _parse(fn, owner)
        if parsed is None:
            continue
        yield parsed
        if depth >= DEPTH:
            continue
        for call in (n for n in ast.walk(parsed.tree) if isinstance(n, ast.Call)):
            queue += [(f, o, depth + 1) for f, o in _callees(cls, parsed, call)]


def _callees(cls: type, at: _Function, call: ast.Call) -> list[tuple[Any, str | None]]:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == at.owner:  # self.helper(...): a method of the class
        return [(fn, None) for fn in _methods(cls, func.attr)]
    if isinstance(func, ast.Name):  # helper(self, ...): a function that gets the module
        target = getattr(at.fn, "__globals__", {}).get(func.id)
        target = getattr(target, "__func__", target)
        if not hasattr(target, "__code__") or isinstance(target, type):
            return []
        params = [a.arg for a in _arguments(target)]
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Name) and arg.id == at.owner and i < len(params):
                return [(target, params[i])]
        for kw in call.keywords:
            if isinstance(kw.value, ast.Name) and kw.value.id == at.owner and kw.arg:
                return [(target, kw.arg)]
    return []


def _arguments(fn: Any) -> list[ast.arg]:
    parsed = _parse(fn, owner="")
    node = parsed.tree.body[0] if parsed is not None and isinstance(parsed.tree, ast.Module) \
        and parsed.tree.body else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*node.args.posonlyargs, *node.args.args]
    return []


def _names_attribute(node: ast.AST, owner: str, attr: str) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == attr and isinstance(node.value, ast.Name) and node.value.id == owner
    if isinstance(node, (ast.Tuple, ast.List)):
        return any(_names_attribute(e, owner, attr) for e in node.elts)
    if isinstance(node, ast.Starred):
        return _names_attribute(node.value, owner, attr)
    return False


def _registers(node: ast.AST, owner: str, attr: str) -> bool:
    """``owner.register_buffer("attr", ...)`` / ``register_parameter`` / ``add_module``;
    ``setattr(owner, "attr", ...)``."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
        return (isinstance(node.args[0], ast.Name) and node.args[0].id == owner
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr)
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id == owner
            and func.attr in ("register_buffer", "register_parameter", "add_module",
                              "register_module")
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == attr)


def _line(at: _Function, node: ast.AST) -> str:
    return f"{shown(at.path)}:{at.first + getattr(node, 'lineno', 1) - 1}"


def attribute_line(cls: type, attr: str, start: str = "__init__", *,
                   graph: bool = False) -> str | None:
    """``file:line`` of the statement that sets ``attr`` on the module, in ``cls.start`` or
    what it calls (see the module docstring); None when the source says nothing. ``graph``:
    only a statement that may store a graph tensor (not ``= x.detach()``, ``= None``)."""
    for at in _reachable(cls, start):
        for node in ast.walk(at.tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            if graph and _detached(getattr(node, "value", None)):
                continue
            if any(_names_attribute(t, at.owner, attr) for t in targets) \
                    or _registers(node, at.owner, attr):
                return _line(at, node)
    return None


def _detached(value: ast.AST | None) -> bool:
    """``x.detach()``, ``x.detach().clone()``, ``x.item()``, a constant: no graph kept."""
    if isinstance(value, ast.Constant):
        return True
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr in ("detach", "detach_", "item", "tolist", "numpy"):
            return True
        value = value.func.value
    return False


def call_lines(cls: type, attr: str) -> list[str]:
    """``file:line`` of every ``self.attr(...)`` call reached from ``forward``, in order."""
    out: list[str] = []
    for at in _reachable(cls, "forward"):
        calls = sorted((n for n in ast.walk(at.tree) if isinstance(n, ast.Call)
                        and _names_attribute(n.func, at.owner, attr)),
                       key=lambda n: (n.lineno, n.col_offset))
        out += [line for line in (_line(at, n) for n in calls) if line not in out]
    return out


# ---------------------------------------------------------------- lists of modules


def _file_at(location: str) -> tuple[ast.Module, int] | None:
    """The parsed file of ``file:line`` and the line (None when it can't be read)."""
    path_text, _, line_text = location.rpartition(":")
    path = source_path(path_text)
    tree = _module_tree(path) if path else None
    return (tree, int(line_text)) if tree is not None and line_text.isdigit() else None


def statement_at(location: str) -> ast.AST | None:
    """The parsed statement at ``file:line`` (None when it can't be read)."""
    found = _file_at(location)
    if found is None:
        return None
    tree, line = found
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or 0):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef,
                                     ast.If, ast.For, ast.While, ast.With, ast.Try)):
                best = node
    return best


@functools.lru_cache(maxsize=64)
def _module_tree(path: str) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return None


def _enclosing(tree: ast.AST, line: int) -> ast.AST:
    """The innermost function (or the module) holding ``line``."""
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is tree or node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def _list_argument(statement: ast.AST) -> str | None:
    """``nn.Sequential(*layers)`` / ``nn.ModuleList(layers)``: the list's name."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Call):
            for arg in node.args:
                if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
                    return arg.value.id
                if isinstance(arg, ast.Name):
                    return arg.id
    return None


def _adds(node: ast.AST, name: str) -> list[ast.expr]:
    """What ``name.append(x)`` / ``name.extend([...])`` / ``name += [...]`` /
    ``name.insert(i, x)`` adds to the list ``name``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
        if node.func.attr == "append" and node.args:
            return [node.args[0]]
        if node.func.attr == "insert" and len(node.args) == 2:
            return [node.args[1]]
        if node.func.attr == "extend" and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            return list(node.args[0].elts)
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
            and node.target.id == name and isinstance(node.value, (ast.List, ast.Tuple)):
        return list(node.value.elts)
    return []


def appended_line(site: str, type_name: str) -> str | None:
    """The line that appends one object made before a loop to the list a container is built
    from: in ``layers.append(norm)`` (a name, not a call) inside a ``for`` loop, ``norm``
    assigned from a ``type_name(...)`` call when several names are appended so."""
    located = _file_at(site)
    statement = statement_at(site)
    name = _list_argument(statement) if statement is not None else None
    if located is None or name is None:
        return None
    scope = _enclosing(*located)
    made = {t.id for node in ast.walk(scope) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and _called_name(node.value) == type_name
            for t in node.targets if isinstance(t, ast.Name)}
    found: list[tuple[bool, int]] = []
    for loop in (n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.While))):
        for node in ast.walk(loop):
            for item in _adds(node, name):
                if isinstance(item, (ast.Name, ast.Attribute)):
                    label = item.id if isinstance(item, ast.Name) else item.attr
                    found.append((label in made, getattr(node, "lineno", 0)))
    if not found:
        return None
    chosen = [n for m, n in found if m] or ([found[0][1]] if len({n for _, n in found}) == 1
                                           else [])
    return f"{site.rpartition(':')[0]}:{chosen[0]}" if chosen else None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def module_sites(model: Any, recorded: dict[int, str]) -> dict[str, str]:
    """``{qualified name: "file:line"}`` where each module was built: the recorded lines
    first, else the ``self.NAME = ...`` statement in the parent's ``__init__``, else the
    parent's own site (a ``Sequential``'s children share its statement)."""
    out: dict[str, str] = {}
    modules = dict(model.named_modules(remove_duplicate=False))
    for name, module in modules.items():
        site = recorded.get(id(module))
        if site is None and name:
            parent_name, _, attr = name.rpartition(".")
            parent = modules.get(parent_name)
            if parent is not None:
                site = attribute_line(type(parent), attr) or out.get(parent_name)
        if site is not None:
            out[name] = site
    return out
