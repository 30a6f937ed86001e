"""``file:line`` for findings that did not name their statement themselves.

A statement-level finding (the ``F.dropout`` call, the ``torch.log`` call) carries its own
line. Any other finding names a module (or ``module.attribute``); its location is, in
order: the line that built that module (recorded while the model was built, or the
``self.NAME = ...`` statement in its parent's ``__init__``), the same for the closest
parent, and only then the ``def`` line of the closest class in the model's code (its
``forward`` for what a run found, its ``__init__`` otherwise). Only source files are read.
"""

from __future__ import annotations

import inspect
from typing import Any

from torchinspect.analysis.doctor.rules import Finding
from torchinspect.analysis.doctor.sites import is_user_file, shown
from torchinspect.analysis.doctor.source import attribute_line

# the fix is in the forward: pass training=, guard the operation, fix the statement
FORWARD_CODES = {"TI004", "TI005", "TI011"}


def _source_line(cls: type, method: str) -> str | None:
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
        if path is not None and is_user_file(path):
            return f"{shown(path)}:{line}"
    return None


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


def _built_at(model: Any, name: str, sites: dict[str, str]) -> str | None:
    """Where ``name`` (a module, or ``module.attribute``) was built, else its closest parent."""
    modules = dict(model.named_modules())
    while name:
        if name in sites:
            return sites[name]
        parent, _, attr = name.rpartition(".")
        owner = modules.get(parent)
        if owner is not None and not attr.isdigit():
            found = attribute_line(type(owner), attr)
            if found:
                return found
        name = parent
    return None


def locate(findings: list[Finding], model: Any, sites: dict[str, str] | None = None) -> None:
    """Fill ``Finding.location`` where the code that caused it is the user's (a source that
    cannot be read leaves it empty: the finding stands without its line)."""
    for f in findings:
        if f.location:
            continue
        try:
            _locate(f, model, sites or {})
        except Exception:  # noqa: BLE001, S112 - a line is a help, never a reason to fail
            continue


def _locate(f: Finding, model: Any, sites: dict[str, str]) -> None:
    if f.code not in FORWARD_CODES:
        f.location = _built_at(model, f.module, sites)
        if f.location:
            return
    method = "forward" if f.code in FORWARD_CODES else "__init__"
    for module in _chain(model, f.module):
        where = _source_line(type(module), method)
        if where:
            f.location = where
            return
