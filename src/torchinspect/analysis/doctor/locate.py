"""``file:line`` for findings in the user's own code (not in site-packages, torch or us).

A finding names a module; its location is the closest module on the path from it up to
the root whose class is defined in a user's file: the line of that class's ``__init__``
for what the model declares (layers, attributes, sizes), or of its ``forward`` for what a
run found (no gradient, eval randomness, NaN). Only source files are read; nothing runs.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
from pathlib import Path
from typing import Any

from torchinspect.analysis.doctor.rules import Finding

# the fix is in the forward: call the module, pass training=, guard the operation
FORWARD_CODES = {"TI003", "TI004", "TI005"}


def _library_roots() -> tuple[str, ...]:
    import torch

    import torchinspect

    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    roots |= {str(Path(m.__file__).resolve().parent) for m in (torch, torchinspect) if m.__file__}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def user_file(path: str | None, roots: tuple[str, ...]) -> bool:
    """A real source file outside the libraries (site-packages, the stdlib, torch, us)."""
    if not path or not os.path.isfile(path):
        return False
    real = os.path.realpath(path)
    parts = Path(real).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not any(real.startswith(root) for root in roots)


def _source_line(cls: type, method: str, roots: tuple[str, ...]) -> str | None:
    """``file:line`` of ``cls.method`` (defined by ``cls`` itself), else of the class."""
    fn = cls.__dict__.get(method)
    for obj in (fn, cls):
        if obj is None:
            continue
        try:
            path = inspect.getsourcefile(obj)
            line = inspect.getsourcelines(obj)[1]
        except (OSError, TypeError):
            code = getattr(obj, "__code__", None)
            if code is None:
                continue
            path, line = code.co_filename, code.co_firstlineno
        if path is not None and user_file(path, roots):
            return f"{_shown(path)}:{line}"
    return None


def _shown(path: str) -> str:
    """Relative to the current folder when inside it (as linters print), else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _chain(model: Any, name: str) -> list[Any]:
    """The module called ``name`` and its parents up to the model (closest first)."""
    parts = name.split(".") if name else []
    out = [model]
    for part in parts:
        child = getattr(out[-1], "_modules", {}).get(part)
        if child is None:
            break
        out.append(child)
    return out[::-1]


def locate(findings: list[Finding], model: Any) -> None:
    """Fill ``Finding.location`` where the code that caused it is the user's."""
    roots = _library_roots()
    for f in findings:
        method = "forward" if f.code in FORWARD_CODES else "__init__"
        for module in _chain(model, f.module):
            where = _source_line(type(module), method, roots)
            if where:
                f.location = where
                break
