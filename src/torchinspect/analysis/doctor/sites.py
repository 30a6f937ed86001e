"""Where the model's code is: ``file:line`` of statements and of the lines that built modules.

* :func:`is_user_file`: a source file of the model's own code (not torch, not the installed
  packages or the standard library; the zoo counts as model code);
* :func:`direct_caller` / :func:`user_caller`: the line that called a torch function, as
  seen from inside a ``TorchFunctionMode`` or a registration hook;
* :func:`recording_sites`: while a model is built, the line that constructed each module
  (torch's global registration hooks, removed on exit: the model is never touched);
* :func:`source_path`: the file behind a shown ``file`` (the zoo's ``torchinspect/zoo/...``).

What the source itself says (the statement that sets an attribute, ...) is ``.source``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@functools.cache
def _roots() -> tuple[tuple[str, ...], str, str]:
    import torch

    import torchinspect

    here = str(Path(torchinspect.__file__).resolve().parent)
    roots = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib")}
    return (tuple(os.path.join(r, "") for r in roots),
            os.path.join(str(Path(torch.__file__).resolve().parent), ""),
            os.path.join(here, ""))


@functools.cache
def is_user_file(path: str) -> bool:
    """A real source file of the model's code: outside site-packages, the standard library,
    torch and torchinspect (whose ``zoo`` models are model code all the same)."""
    if not path or path.startswith("<") or not os.path.isfile(path):
        return False
    real = os.path.realpath(path)
    libraries, torch_dir, ours = _roots()
    if real.startswith(ours):
        return real.startswith(os.path.join(ours, "zoo", ""))
    parts = Path(real).parts
    if "site-packages" in parts or "dist-packages" in parts or real.startswith(torch_dir):
        return False
    return not any(real.startswith(root) for root in libraries)


@functools.cache
def _kind(path: str) -> str:
    """"torch", "ours" (torchinspect, not the zoo), "user" or "library" for a code file."""
    if path.startswith("<"):
        return "library"
    real = os.path.realpath(path)
    _, torch_dir, ours = _roots()
    if real.startswith(torch_dir):
        return "torch"
    if is_user_file(path):
        return "user"
    return "ours" if real.startswith(ours) else "library"


_OBSERVERS = ("watch.py", "sites.py")  # the mode and the hooks asking "who called?"


@functools.cache
def _is_observer(path: str) -> bool:
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.realpath(path) in {os.path.join(here, name) for name in _OBSERVERS}


def _outside_doctor(frame: types.FrameType | None) -> types.FrameType | None:
    """Skip the observer's own frames (the mode, the hooks) at the top of the stack."""
    while frame is not None and _is_observer(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def shown(path: str) -> str:
    """Relative to the current folder when inside it (as linters print); the zoo's files as
    ``torchinspect/zoo/...`` (where the package is installed says nothing); else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    if not rel.startswith(".."):
        return rel
    ours = _roots()[2]
    real = os.path.realpath(path)
    zoo = _zoo_root()
    if real.startswith(zoo):  # an editable checkout serves the zoo from models_zoo/
        return os.path.join("torchinspect", "zoo", real[len(zoo):])
    if real.startswith(ours):
        return os.path.join("torchinspect", real[len(ours):])
    return path


@functools.cache
def _zoo_root() -> str:
    import torchinspect.zoo

    return os.path.join(str(Path(torchinspect.zoo.__file__).resolve().parent), "")


def source_path(path: str) -> str | None:
    """The file a shown path names (``shown`` writes the zoo as ``torchinspect/zoo/...``
    wherever it is installed), None when there is none."""
    if os.path.isfile(path):
        return path
    for prefix, root in ((os.path.join("torchinspect", "zoo", ""), _zoo_root()),
                         (os.path.join("torchinspect", ""), _roots()[2])):
        if path.startswith(prefix) and os.path.isfile(os.path.join(root, path[len(prefix):])):
            return os.path.join(root, path[len(prefix):])
    return None


def where(frame: types.FrameType) -> str:
    return f"{shown(frame.f_code.co_filename)}:{frame.f_lineno}"


def direct_caller() -> str | None:
    """The line of the model's own code that called into torch (through torch's own Python
    frames only); None when a library or torchinspect itself made the call."""
    frame = _outside_doctor(sys._getframe(1))
    while frame is not None and _kind(frame.f_code.co_filename) == "torch":
        frame = frame.f_back
    if frame is None or _kind(frame.f_code.co_filename) != "user":
        return None
    return where(frame)


def user_caller(*, not_self: Any = None) -> str | None:
    """The innermost frame of the model's own code (through any library); while ``not_self``
    is being built (its ``__init__`` is on the stack), frames whose ``self`` is ``not_self``
    are skipped: a module's own ``__init__`` and the helpers it calls are not where it was
    built. (In its ``forward``, ``self.w = nn.Parameter(...)`` is the line.) None when
    torchinspect's own code (a hook of ours) made the call."""
    frame = _outside_doctor(sys._getframe(1))
    building = not_self is not None and _building(frame, not_self)
    while frame is not None:
        kind = _kind(frame.f_code.co_filename)
        if kind == "ours":
            return None
        if kind == "user" and not (building and frame.f_locals.get("self") is not_self):
            return where(frame)
        frame = frame.f_back
    return None


def _building(frame: types.FrameType | None, module: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module:
            return True
        frame = frame.f_back
    return False


def _innermost_user() -> str | None:
    """The innermost frame of the model's code on the stack, whoever called in between
    (our watch calls torch on the model's behalf)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if _kind(frame.f_code.co_filename) == "user":
            return where(frame)
        frame = frame.f_back
    return None


@contextlib.contextmanager
def model_warnings(notes: list[str]) -> Iterator[None]:
    """Warnings the model's own code raises while the doctor runs it become one note each
    (``the model's code warns (at file:line): UserWarning: ...``), said once however many
    forwards raise them; a library's warnings are shown as before. Without this they print
    once per forward, located in the doctor's own files (torch warns from the frame that
    called it: our watch)."""
    import warnings

    seen: dict[str, str | None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        shown_before = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            at = _innermost_user()
            if at is None:
                shown_before(message, category, filename, lineno, file, line)
                return
            text = f"{category.__name__}: {str(message).strip().splitlines()[0][:200]}"
            seen.setdefault(text, at)

        warnings.showwarning = show
        try:
            yield
        finally:
            notes += [f"the model's code warns (at {at}): {text}" for text, at in seen.items()
                      if not any(text in n for n in notes)]


@dataclass
class Built:
    """What :func:`recording_sites` saw: ``{id(module): line}`` and, for ``nn.init.*``
    calls made by the model's own code, ``{id(tensor): line}``."""

    modules: dict[int, str] = field(default_factory=dict)
    tensors: dict[tuple[int, str], str] = field(default_factory=dict)  # (module, name) -> line
    inits: dict[int, str] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # what was recorded: no id reused meanwhile


def _init_caller(*, through_init: bool = False) -> str | None:
    """The line of the model's code that called ``torch.nn.init.*`` (not a layer's own
    reset_parameters). ``through_init``: the call must come from inside torch.nn.init (an
    in-place op of an init function that does not dispatch itself, such as ``zeros_``)."""
    frame = _outside_doctor(sys._getframe(1))
    seen_init = False
    while frame is not None and _kind(frame.f_code.co_filename) == "torch":
        path = frame.f_code.co_filename
        if f"{os.sep}nn{os.sep}modules{os.sep}" in path:
            return None  # a layer's own reset_parameters
        seen_init = seen_init or path.endswith(f"{os.sep}nn{os.sep}init.py")
        frame = frame.f_back
    if frame is None or _kind(frame.f_code.co_filename) != "user" or (through_init
                                                                      and not seen_init):
        return None
    return where(frame)


def _init_mode(built: Built) -> Any:
    from torch.overrides import TorchFunctionMode

    class InitCalls(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            tensor, at = None, None
            if getattr(func, "__module__", None) == "torch.nn.init":
                tensor = kwargs.get("tensor", args[0] if args else None)
                at = _init_caller()
            elif getattr(func, "__name__", "").endswith("_") and args:
                tensor, at = args[0], _init_caller(through_init=True)
            if at is not None and tensor is not None:
                built.inits[id(tensor)] = at
                built.keep.append(tensor)
            return func(*args, **kwargs)

    return InitCalls()


@contextlib.contextmanager
def recording_sites() -> Iterator[Built]:
    """The statements that build modules (and call ``nn.init``) in the block.

    torch's global registration hooks fire when a module registers a parameter, a buffer or
    a submodule; the line is the innermost model-code frame that is not the module's own
    ``__init__`` (for ``nn.Conv2d(...)`` inside ``nn.Sequential(...)``: the Conv2d's line).
    The first record wins. A TorchFunctionMode notes ``nn.init.*`` calls of the model's
    code. Hooks and mode end with the block; the modules are never touched.
    """
    from torch.nn.modules import module as torch_module

    built = Built()

    def note(module: Any) -> None:
        if id(module) not in built.modules:
            at = user_caller(not_self=module)
            if at is not None:
                built.modules[id(module)] = at
                built.keep.append(module)

    def on_tensor(module: Any, name: str, value: Any) -> None:
        note(module)
        at = user_caller()  # the register_buffer / self.w = nn.Parameter(...) statement
        if at is not None:
            built.tensors.setdefault((id(module), name), at)

    def on_module(parent: Any, name: str, child: Any) -> None:
        if child is not None:
            note(child)
        note(parent)

    handles = [torch_module.register_module_parameter_registration_hook(on_tensor),
               torch_module.register_module_buffer_registration_hook(on_tensor),
               torch_module.register_module_module_registration_hook(on_module)]
    try:
        with _init_mode(built):
            yield built
    finally:
        for h in handles:
            h.remove()


def init_sites(model: Any, built: Built) -> dict[str, str]:
    """``{parameter name: line}`` of the ``nn.init.*`` call that last set each parameter."""
    return {name: built.inits[id(p)] for name, p in model.named_parameters()
            if id(p) in built.inits}


def tensor_sites(model: Any, built: Built) -> dict[str, str]:
    """``{parameter or buffer name: line}`` of the statement that registered it."""
    import torch

    out = {}
    for owner_name, owner in model.named_modules():
        if isinstance(owner, torch.jit.ScriptModule):  # its tensors were not built by Python
            continue
        for name in [*owner._parameters, *owner._buffers]:
            at = built.tensors.get((id(owner), name))
            if at is not None:
                out[f"{owner_name}.{name}" if owner_name else name] = at
    return out
