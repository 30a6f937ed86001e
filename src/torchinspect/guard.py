"""Containment of the model's own code: what it changes is put back, how it ends is an error.

A model's module file, its ``__init__`` and its ``forward`` are code the user asked us to
run, and they can change the process around them: torch's global switches
(``torch.set_default_dtype(torch.float64)`` in an ``__init__`` makes the next model's byte
counts double), the working folder (an ``os.chdir`` would move relative outputs), stdout
(a ``print`` in ``forward`` breaks ``--format json``), or end the process (``sys.exit``).

``with model_code("file.py:Net"):`` around every place that runs such code:

* torch's global switches (:data:`SWITCHES`) and the working folder are saved on entry and
  put back on exit;
* ``stdout=True`` (the CLI) sends ``sys.stdout`` to stderr for the block: the report alone
  goes to the real stdout (the CLI keeps it for rendering, see cli/boundary.py);
* a ``SystemExit``, ``GeneratorExit`` or other ``BaseException`` raised by the model (not
  ``KeyboardInterrupt``: Ctrl-C stays Ctrl-C) becomes a :class:`ModelCodeError` (exit 70)
  naming where it was raised and the exit code;
* a model that closes ``sys.stdout`` while it points at stderr gets a ModelCodeError.

Not contained (documented in docs/concepts/model-code.md): ``os._exit`` (ends the process at
once), writes to file descriptors 1/2 from C code, threads or processes the model starts,
``set_num_interop_threads`` (torch allows it once per process).

Nothing here imports torch: torch's state is saved only when torch is already imported
(a block that imports torch first cannot have changed its state before).
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal

from torchinspect.errors import ModelCodeError, first_line

# (what, getter, setter) over the torch module; a setter gets what the getter returned
Switch = tuple[str, Callable[[Any], Any], Callable[[Any, Any], None]]


def _set_deterministic(torch: Any, value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _set_cudnn(torch: Any, value: tuple[bool, bool, bool, bool]) -> None:
    cudnn = torch.backends.cudnn
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = value


def _set_matmul(torch: Any, value: tuple[str, bool, bool, bool]) -> None:
    matmul = torch.backends.cuda.matmul
    torch.set_float32_matmul_precision(value[0])  # first: it sets allow_tf32 too
    (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
     matmul.allow_bf16_reduced_precision_reduction) = value[1:]


def _set_default_device(torch: Any, value: Any) -> None:
    torch.set_default_device(None if value == torch.device("cpu") else value)


def _set_fastpath(torch: Any, value: bool | None) -> None:
    if value is not None:
        torch.backends.mha.set_fastpath_enabled(value)


SWITCHES: tuple[Switch, ...] = (
    ("default dtype", lambda t: t.get_default_dtype(), lambda t, v: t.set_default_dtype(v)),
    ("default device", lambda t: t.get_default_device(), _set_default_device),
    ("grad mode", lambda t: t.is_grad_enabled(), lambda t, v: t.set_grad_enabled(v)),
    ("anomaly detection", lambda t: t.is_anomaly_enabled(), lambda t, v: t.set_anomaly_enabled(v)),
    ("threads", lambda t: t.get_num_threads(), lambda t, v: t.set_num_threads(v)),
    ("interop threads", lambda t: t.get_num_interop_threads(),
     lambda t, v: t.set_num_interop_threads(v)),  # fails once set: torch allows it once
    ("deterministic algorithms", lambda t: (t.are_deterministic_algorithms_enabled(),
                                            t.is_deterministic_algorithms_warn_only_enabled()),
     _set_deterministic),
    ("cudnn flags", lambda t: (t.backends.cudnn.enabled, t.backends.cudnn.benchmark,
                               t.backends.cudnn.deterministic, t.backends.cudnn.allow_tf32),
     _set_cudnn),
    ("matmul precision", lambda t: (t.get_float32_matmul_precision(),
                                    t.backends.cuda.matmul.allow_tf32,
                                    t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                                    t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
     _set_matmul),
    ("MHA fast path", lambda t: t.backends.mha.get_fastpath_enabled()
     if hasattr(t.backends, "mha") else None, _set_fastpath),
)


def torch_state() -> dict[str, Any]:
    """The current value of each switch in :data:`SWITCHES` (empty before torch is imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):  # not (fully) imported yet
        return {}
    return {name: get(torch) for name, get, _ in SWITCHES}


def restore_torch_state(saved: dict[str, Any]) -> list[str]:
    """Put back what :func:`torch_state` saved; the names of switches that could not be."""
    if not saved:
        return []
    torch = sys.modules["torch"]
    stuck = []
    for name, get, put in SWITCHES:
        if name in saved and get(torch) != saved[name]:
            try:
                put(torch, saved[name])
            except (RuntimeError, ValueError, TypeError):
                stuck.append(name)
    return stuck


_LIBRARY_DIRS = tuple(os.path.realpath(p) + os.sep for p in {
    os.path.dirname(os.path.abspath(__file__)),
    *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "purelib", "platlib"))} if p)


def _is_model_file(filename: str) -> bool:
    """Code outside torchinspect, the standard library and installed packages: the model's."""
    return not os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def origin(tb: TracebackType | None) -> str | None:
    """``file:line`` where an exception was raised, preferring the innermost frame of the
    model's own file (:func:`_is_model_file`)."""
    frames = traceback.extract_tb(tb)
    if not frames:
        return None
    chosen = next((f for f in reversed(frames) if _is_model_file(f.filename)), frames[-1])
    return f"{_shown_path(chosen.filename)}:{chosen.lineno}"


def _shown_path(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it (as the user wrote it)."""
    here = _cwd()
    if here and os.path.isabs(path) and path.startswith(here + os.sep):
        return os.path.relpath(path, here)
    return path


def _ended(exc: BaseException, what: str | None) -> ModelCodeError:
    """The ModelCodeError for a SystemExit or another non-Exception BaseException."""
    where = origin(exc.__traceback__)
    at = f" (at {where})" if where else ""
    head = f"{what}: " if what else ""
    if isinstance(exc, SystemExit):
        return ModelCodeError(f"{head}the model's code called sys.exit({exc.code!r}){at}; "
                              "a model must not end the process")
    return ModelCodeError(f"{head}the model's code raised {first_line(exc, typed=True)}{at}")


class _StdoutToStderr:
    """``sys.stdout`` while model code runs under the CLI: writes go to stderr; closing it
    is the model's error (the real stdout carries the report)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def write(self, text: str) -> int:
        return self._target.write(text)

    def close(self) -> None:
        raise ModelCodeError(
            "the model's code closed sys.stdout"
            + (f" (at {where})" if (where := _caller()) else "")
            + "; stdout carries the report", hint="fix the model's code: leave sys.stdout open")

    @property
    def closed(self) -> bool:
        return bool(self._target.closed)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer ...
        return getattr(self._target, name)


def _caller() -> str | None:
    frame = sys._getframe(2)
    return f"{_shown_path(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None


class model_code:  # noqa: N801 - used as a context manager, reads as one
    """Run the model's own code contained (see the module docstring). ``what`` names the
    model in error messages; ``stdout=True`` sends ``sys.stdout`` to stderr for the block.
    Nested blocks are cheap (a dozen getter calls) and each restores what it saved."""

    def __init__(self, what: str | None = None, *, stdout: bool = False) -> None:
        self.what = what
        self.stdout = stdout

    def __enter__(self) -> model_code:
        self._torch = torch_state()
        self._cwd = _cwd()  # None when the folder was removed under us: nothing to go back to
        self._stdout = sys.stdout
        if self.stdout:
            sys.stdout = _StdoutToStderr(sys.stderr)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        sys.stdout = self._stdout
        if self._cwd is not None and _cwd() != self._cwd:
            os.chdir(self._cwd)
        restore_torch_state(self._torch)
        if exc is None or isinstance(exc, (Exception, KeyboardInterrupt)):
            return False  # errors keep their own handling; Ctrl-C stays Ctrl-C
        if not isinstance(exc, SystemExit) and not any(
                _is_model_file(f.filename) for f in traceback.extract_tb(tb)):
            return False  # a generator of ours closed (GeneratorExit), a library's own signal
        raise _ended(exc, self.what) from exc


def _cwd() -> str | None:
    """The working folder, or None when it was removed."""
    try:
        return os.getcwd()
    except OSError:
        return None


def contained(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``fn`` runs inside :class:`model_code` (the Python API's entry points).
    The API leaves stdout alone: the caller owns it, and torchinspect itself never prints."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with model_code():
            return fn(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def training_mode(model: Any, train: bool = False) -> Iterator[None]:
    """``model.train(train)`` for the block, then every submodule's ``training`` flag put back
    exactly as it was (a model that was half in eval stays so). The one train/eval switch of
    every command: calling ``train()`` honours a model that overrides it (to freeze its
    BatchNorm, say); an exported GraphModule that refuses it gets the flags set directly."""
    flags = [(m, m.training) for m in model.modules()]
    try:
        try:
            model.train(train)
        except NotImplementedError:  # torch.export's GraphModules refuse .train()/.eval()
            for m, _ in flags:
                m.training = train
        yield
    finally:
        for m, flag in flags:
            m.training = flag
