"""Containment of the model's own code: what it changes is put back, how it ends is an error.

A model's module file, its ``__init__`` and its ``forward`` are code the user asked us to
run, and they can change the process around them: torch's global switches
(``torch.set_default_dtype(torch.float64)`` in an ``__init__`` makes the next model's byte
counts double), the working folder (an ``os.chdir`` would move relative outputs), stdout
(a ``print`` in ``forward`` breaks ``--format json``), signal handlers, the recursion
limit, or end the process (``sys.exit``, ``os._exit``, a signal it sends itself).

``with model_code("file.py:Net"):`` around every place that runs such code:

* torch's global switches (:func:`switches`: their getters and setters are torch's own
  functions, taken once when torch is first seen, so a model that monkeypatches
  ``torch.get_default_dtype`` cannot hide a change), the working folder, the recursion limit
  and the SIGINT/SIGTERM/SIGPIPE handlers are saved on entry and put back on exit;
* ``stdout=True`` (the CLI) sends ``sys.stdout`` to stderr for the block: the report alone
  goes to the real stdout (the CLI keeps it for rendering, see cli/boundary.py);
* a ``SystemExit``, ``GeneratorExit`` or other ``BaseException`` raised by the model (not
  ``KeyboardInterrupt``: Ctrl-C stays Ctrl-C) becomes a :class:`ModelCodeError` (exit 70)
  naming where it was raised and the exit code;
* while a block runs, ``os._exit``, ``os.abort``, ``os.exec*`` and a signal the model sends
  to its own process (``os.kill``, ``os.killpg``, ``signal.raise_signal``,
  ``signal.pthread_kill``) raise :class:`ProcessEnd` instead, which the block turns into a
  ModelCodeError naming the call (a child process forked inside gets the real functions);
* Python's recursion limit hit inside the block (a model nested 5,000 modules deep) is a
  ModelCodeError too (:func:`too_deep`);
* a model that closes ``sys.stdout`` while it points at stderr gets a ModelCodeError.

Not contained (documented in docs/concepts/model-code.md): the same calls made through
``ctypes`` or a C extension, a real segmentation fault, writes to file descriptors 1/2 from
C code, threads or processes the model starts, ``set_num_interop_threads`` (torch allows it
once per process).

Nothing here imports torch: torch's state is saved only when torch is already imported
(a block that imports torch first cannot have changed its state before).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal

from torchinspect.errors import ModelCodeError, first_line

# (what, getter, setter): torch's own functions, taken once (see :func:`switches`)
Switch = tuple[str, Callable[[], Any], Callable[[Any], None]]


@functools.cache
def _bound(t: Any) -> tuple[Switch, ...]:
    """The switches over the torch module ``t``, each getter and setter a reference taken
    now (torch's C functions where torch has them): a model that later replaces
    ``torch.get_default_dtype`` or ``torch.set_num_threads`` changes neither what is read
    nor what puts it back."""
    from torchinspect.privtorch import c_switches

    set_dtype, get_grad, set_grad = c_switches(t)
    get_dtype = t.get_default_dtype
    get_device, set_device, cpu = t.get_default_device, t.set_default_device, t.device("cpu")
    get_anomaly, set_anomaly = t.is_anomaly_enabled, t.set_anomaly_enabled
    get_threads, set_threads = t.get_num_threads, t.set_num_threads
    get_interop, set_interop = t.get_num_interop_threads, t.set_num_interop_threads
    get_det, get_warn = t.are_deterministic_algorithms_enabled, \
        t.is_deterministic_algorithms_warn_only_enabled
    set_det = t.use_deterministic_algorithms
    cudnn, matmul = t.backends.cudnn, t.backends.cuda.matmul
    get_precision, set_precision = t.get_float32_matmul_precision, t.set_float32_matmul_precision
    mha = getattr(t.backends, "mha", None)

    def set_det_both(v: tuple[bool, bool]) -> None:
        set_det(v[0], warn_only=v[1])

    def set_cudnn(v: tuple[bool, bool, bool, bool]) -> None:
        cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = v

    def set_matmul(v: tuple[str, bool, bool, bool]) -> None:
        set_precision(v[0])  # first: it sets allow_tf32 too
        (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
         matmul.allow_bf16_reduced_precision_reduction) = v[1:]

    def set_fastpath(v: bool | None) -> None:
        if v is not None and mha is not None:
            mha.set_fastpath_enabled(v)

    return (
        ("default dtype", get_dtype, set_dtype),
        ("default device", get_device, lambda v: set_device(None if v == cpu else v)),
        ("grad mode", get_grad, set_grad),
        ("anomaly detection", get_anomaly, set_anomaly),
        ("threads", get_threads, set_threads),
        ("interop threads", get_interop, set_interop),  # fails once set: torch allows it once
        ("deterministic algorithms", lambda: (get_det(), get_warn()), set_det_both),
        ("cudnn flags", lambda: (cudnn.enabled, cudnn.benchmark, cudnn.deterministic,
                                 cudnn.allow_tf32), set_cudnn),
        ("matmul precision", lambda: (get_precision(), matmul.allow_tf32,
                                      matmul.allow_fp16_reduced_precision_reduction,
                                      matmul.allow_bf16_reduced_precision_reduction), set_matmul),
        ("MHA fast path", lambda: mha.get_fastpath_enabled() if mha is not None else None,
         set_fastpath),
    )


#: torch's public functions that read or set a switch: a model that replaces one in the
#: torch module gets it put back (our own references never changed, see :func:`_bound`)
_PUBLIC = ("get_default_dtype", "set_default_dtype", "get_default_device", "set_default_device",
           "is_grad_enabled", "set_grad_enabled", "is_anomaly_enabled", "set_anomaly_enabled",
           "get_num_threads", "set_num_threads", "get_num_interop_threads",
           "set_num_interop_threads", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "use_deterministic_algorithms",
           "get_float32_matmul_precision", "set_float32_matmul_precision")


@functools.cache
def _public(t: Any) -> dict[str, Any]:
    return {name: getattr(t, name) for name in _PUBLIC if hasattr(t, name)}


def switches() -> tuple[Switch, ...]:
    """torch's global switches with their real getters and setters, taken when torch was
    first seen (at import of this module, or by the first block after torch's import: our
    code imports torch before any model's); empty before torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):  # not (fully) imported yet
        return ()
    _public(torch)
    return _bound(torch)


def torch_state() -> dict[str, Any]:
    """The current value of each switch (empty before torch is imported)."""
    return {name: get() for name, get, _ in switches()}


def restore_torch_state(saved: dict[str, Any]) -> list[str]:
    """Put back what :func:`torch_state` saved; the names of switches that could not be."""
    if not saved:
        return []
    torch = sys.modules.get("torch")
    if torch is not None:  # a replaced torch.get_default_dtype & co: the real one back
        for name, real in _public(torch).items():
            if getattr(torch, name, None) is not real:
                setattr(torch, name, real)
    stuck = []
    for name, get, put in switches():
        if name in saved and get() != saved[name]:
            try:
                put(saved[name])
            except (RuntimeError, ValueError, TypeError):
                stuck.append(name)
    return stuck


switches()  # taken now when torch is already imported (an API user's process)


# ------------------------------------------------------------------ calls that end the process


class ProcessEnd(BaseException):
    """Raised, inside :class:`model_code`, in place of a call of the model's that would end or
    replace the process (``os._exit``, ``os.abort``, ``os.exec*``, a signal it sends to itself):
    the block turns it into a :class:`ModelCodeError` naming the call."""

    def __init__(self, call: str) -> None:
        super().__init__(call)
        self.call = call


_OWN = {name: getattr(os, name) for name in ("_exit", "abort", "kill", "killpg", "execv", "execve")
        if hasattr(os, name)}
_OWN_SIGNAL = {name: getattr(signal, name) for name in ("raise_signal", "pthread_kill")
               if hasattr(signal, name)}
#: the process whose calls are contained: a child forked inside a block (a DataLoader worker)
#: gets the real functions
_OWNER = os.getpid()


def _signal_name(sig: Any) -> str:
    try:
        return signal.Signals(sig).name
    except (ValueError, TypeError):
        return repr(sig)


def _ours(pid: Any) -> bool:
    """``pid`` (os.kill's, or killpg's group) names this process or its group."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    me = os.getpid()
    group = os.getpgid(0) if hasattr(os, "getpgid") else me
    return pid in (me, 0, -1, -group) or (pid < -1 and -pid == group)


def _stand_ins() -> dict[tuple[Any, str], Callable[..., Any]]:
    """(module, name) -> the function that replaces it while model code runs."""
    real_exit, real_abort = _OWN.get("_exit"), _OWN.get("abort")
    real_kill, real_killpg = _OWN.get("kill"), _OWN.get("killpg")

    def forked() -> bool:
        return os.getpid() != _OWNER

    def _exit(code: int = 0) -> None:
        if forked() and real_exit is not None:
            real_exit(code)
        raise ProcessEnd(f"os._exit({code!r})")

    def abort() -> None:
        if forked() and real_abort is not None:
            real_abort()
        raise ProcessEnd("os.abort()")

    def kill(pid: int, sig: int) -> None:
        if not forked() and sig != 0 and _ours(pid):
            raise ProcessEnd(f"os.kill({pid}, {_signal_name(sig)}) on its own process")
        assert real_kill is not None
        real_kill(pid, sig)

    def killpg(group: int, sig: int) -> None:
        if not forked() and sig != 0 and _ours(-int(group) if int(group) > 0 else group):
            raise ProcessEnd(f"os.killpg({group}, {_signal_name(sig)}) on its own process group")
        assert real_killpg is not None
        real_killpg(group, sig)

    def execer(name: str) -> Callable[..., Any]:
        real = _OWN[name]

        def exec_(path: Any, *args: Any) -> None:
            if forked():
                real(path, *args)
            raise ProcessEnd(f"os.{name}({path!r}, ...), replacing the process")
        return exec_

    def raise_signal(sig: int) -> None:
        raise ProcessEnd(f"signal.raise_signal({_signal_name(sig)})")

    def pthread_kill(thread_id: int, sig: int) -> None:
        if sig != 0 and not forked():
            raise ProcessEnd(f"signal.pthread_kill(..., {_signal_name(sig)}) on its own thread")
        _OWN_SIGNAL["pthread_kill"](thread_id, sig)

    made: dict[str, Callable[..., Any]] = {"_exit": _exit, "abort": abort, "kill": kill,
                                           "killpg": killpg}
    made.update({n: execer(n) for n in ("execv", "execve") if n in _OWN})
    out: dict[tuple[Any, str], Callable[..., Any]] = {}
    for module in (os, sys.modules.get("posix") or sys.modules.get("nt")):
        for name, fn in made.items():
            if module is not None and name in _OWN and getattr(module, name, None) is _OWN[name]:
                out[(module, name)] = fn
    if "raise_signal" in _OWN_SIGNAL:
        out[(signal, "raise_signal")] = raise_signal
    if "pthread_kill" in _OWN_SIGNAL:
        out[(signal, "pthread_kill")] = pthread_kill
    return out


class _Contained:
    """The process-ending calls replaced while any :class:`model_code` block runs (blocks
    nest; the outermost puts the real functions back)."""

    def __init__(self) -> None:
        self.depth = 0
        self.lock = threading.Lock()
        self.saved: dict[tuple[Any, str], Any] = {}

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth == 1:
                for (module, name), fn in _stand_ins().items():
                    self.saved[(module, name)] = getattr(module, name)
                    setattr(module, name, fn)

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                for (module, name), fn in self.saved.items():
                    setattr(module, name, fn)
                self.saved.clear()


_CONTAINED = _Contained()


_LIBRARY_DIRS = tuple(os.path.realpath(p) + os.sep for p in {
    os.path.dirname(os.path.abspath(__file__)),
    *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "purelib", "platlib"))} if p)


_OUR_DIR = os.path.realpath(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_model_file(filename: str) -> bool:
    """Code outside torchinspect, the standard library and installed packages: the model's
    (not ``<frozen importlib._bootstrap>`` and other pseudo-files)."""
    return not filename.startswith("<") and not os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def raised_by_model(exc: BaseException, what: str | None = None) -> ModelCodeError | None:
    """The ModelCodeError (exit 70, "the model's code ...") for an exception that came out of
    the model's own code: Python's recursion limit (:func:`too_deep`), or one raised in the
    model's file (its innermost frame, import machinery aside, is there). One raised inside
    torch (a shape the input gave, met in a layer) or inside torchinspect is not the model's:
    None (the command's own classification, else an internal error)."""
    deep = too_deep(exc, what)
    if deep is not None:
        return deep
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if not frames or not _is_model_file(frames[-1].filename):
        return None  # raised in torch (a shape the input gave) or in torchinspect: not blamed
    head = f"{what}: " if what else ""
    return ModelCodeError(f"{head}the model's code raised {first_line(exc, typed=True)} "
                          f"(at {_shown_path(frames[-1].filename)}:{frames[-1].lineno})")


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
    """The ModelCodeError for a SystemExit, a contained process end (:class:`ProcessEnd`) or
    another non-Exception BaseException."""
    where = origin(exc.__traceback__)
    at = f" (at {where})" if where else ""
    head = f"{what}: " if what else ""
    if isinstance(exc, SystemExit):
        return ModelCodeError(f"{head}the model's code called sys.exit({exc.code!r}){at}; "
                              "a model must not end the process")
    if isinstance(exc, ProcessEnd):
        return ModelCodeError(f"{head}the model's code called {exc.call}{at}; a model must not "
                              "end the process")
    return ModelCodeError(f"{head}the model's code raised {first_line(exc, typed=True)}{at}")


def too_deep(exc: BaseException, what: str | None = None) -> ModelCodeError | None:
    """The ModelCodeError for Python's recursion limit hit while the model's code ran (a
    module tree nested thousands deep that torch walks recursively, or a forward that calls
    itself without end), else None."""
    if not isinstance(exc, RecursionError):
        return None
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_model_file(f.filename)]
    at = f" (at {_shown_path(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    head = f"{what}: " if what else ""
    return ModelCodeError(
        f"{head}the model's code went deeper than Python's recursion limit "
        f"({sys.getrecursionlimit():,} nested calls){at}: a model whose modules nest thousands "
        "of levels deep, or a forward that calls itself without end",
        hint="nest fewer levels (a loop over an nn.ModuleList instead of a chain of wrappers); "
        "--debug shows the traceback")


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
        self._limit = sys.getrecursionlimit()
        self._handlers = _signal_handlers()
        if self.stdout:
            sys.stdout = _StdoutToStderr(sys.stderr)
        _CONTAINED.enter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        _CONTAINED.leave()
        sys.stdout = self._stdout
        if self._cwd is not None and _cwd() != self._cwd:
            os.chdir(self._cwd)
        restore_torch_state(self._torch)
        if sys.getrecursionlimit() != self._limit:
            sys.setrecursionlimit(self._limit)
        _restore_signal_handlers(self._handlers)
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return False  # Ctrl-C stays Ctrl-C
        deep = too_deep(exc, self.what)
        if deep is not None:
            raise deep from exc
        if isinstance(exc, Exception):
            return False  # errors keep their own handling
        if not isinstance(exc, (SystemExit, ProcessEnd)) and not any(
                _is_model_file(f.filename) for f in traceback.extract_tb(tb)):
            return False  # a generator of ours closed (GeneratorExit), a library's own signal
        raise _ended(exc, self.what) from exc


#: the handlers a model may change and the CLI relies on (Ctrl-C is exit 130)
_HANDLED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGPIPE") if hasattr(signal, n))


def _signal_handlers() -> dict[int, Any]:
    """The handlers of :data:`_HANDLED` (only the main thread can set them: else none)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in _HANDLED}


def _restore_signal_handlers(saved: dict[int, Any]) -> None:
    for sig, handler in saved.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)


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
