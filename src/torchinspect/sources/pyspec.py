"""Python specs: ``path/to/file.py:Name`` or ``package.module:Name``.

Name is an nn.Module subclass (instantiated with --arg kwargs), a factory returning a
module, or a module instance. An optional ``example_input`` attribute on it (or a
module-level ``EXAMPLE_INPUT``) declares its example, in the --input grammar with full
shapes (e.g. ``"1,3,32,32"`` or ``["long:1,16", "mask=bool:1,16"]``).
This imports and runs the user's own code, which is what the user asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.guard import model_code

_MODULE_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class PySpec:
    target: str  # file path or dotted module
    attr: str
    is_file: bool


def parse(spec: str) -> PySpec | None:
    """Recognise a python spec; None when ``spec`` is not one."""
    if ":" not in spec or spec.startswith("zoo:"):
        return None
    target, _, attr = spec.rpartition(":")
    if not attr or not all(p.isidentifier() for p in attr.split(".")):
        return None
    if target.endswith(".py"):
        return PySpec(target, attr, True)
    if _MODULE_PATH.match(target):
        return PySpec(target, attr, False)
    return None


@contextlib.contextmanager
def _on_path(path: str) -> Iterator[None]:
    sys.path.insert(0, path)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(path)


def import_target(ps: PySpec) -> Any:
    if ps.is_file:
        path = Path(ps.target)
        if not path.is_file():
            raise InspectError(f"{ps.target}: no such file", hint="check the path before ':'")
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        mod_name = f"_torchinspect_user_{path.stem}_{digest}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise InspectError(f"{ps.target}: cannot be imported as Python", hint="is it a .py file?")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        with _on_path(str(path.resolve().parent)):
            try:
                with model_code(ps.target):
                    loader_spec.loader.exec_module(module)
            except InspectError:  # the model's code ended the import (sys.exit) or closed stdout
                del sys.modules[mod_name]
                raise
            except SyntaxError as exc:
                del sys.modules[mod_name]
                raise InspectError(f"{ps.target}:{exc.lineno}: syntax error: {exc.msg}",
                                   hint="fix the file; torchinspect imports it as-is") from None
            except Exception as exc:
                del sys.modules[mod_name]
                raise _import_failed(ps.target, exc) from exc
            except BaseException:
                del sys.modules[mod_name]
                raise
        return module
    with _on_path(os.getcwd()):
        try:
            with model_code(ps.target):
                return importlib.import_module(ps.target)
        except InspectError:
            raise
        except ModuleNotFoundError as exc:
            raise InspectError(
                f"cannot import module {ps.target!r} ({exc})",
                hint="run from the folder that holds the package, or pip install it; "
                "files are written path/to/file.py:Name",
            ) from None
        except Exception as exc:
            raise _import_failed(ps.target, exc) from exc


def _import_failed(target: str, exc: Exception) -> InspectError:
    """The model's own module raised while being imported: say where, not "report it"."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f"{f.filename}:{f.lineno}" for f in reversed(frames)
                  if "importlib" not in f.filename), None)
    return InspectError(
        f"{target}: the model's code raised while being imported: {type(exc).__name__}: "
        f"{first_line(exc)}" + (f" (at {where})" if where else ""),
        hint="fix the model's code; --debug shows the whole traceback",
        status=ExitStatus.INTERNAL)


def resolve_attr(module: Any, ps: PySpec) -> Any:
    obj = module
    for part in ps.attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_"))[:20]
            raise InspectError(
                f"{ps.target} has no attribute {ps.attr!r}",
                hint=f"names there: {', '.join(public)}" if public else
                "it defines no public names: point the spec at a class or factory there, "
                "written file.py:Name or pkg.mod:Name",
            )
        obj = getattr(obj, part)
    return obj


def declared_example(obj: Any, module: Any) -> Any:
    return getattr(obj, "example_input", None) or getattr(module, "EXAMPLE_INPUT", None)
