"""Ctrl-C, from the first instant of the tool's own code: the console script's SIGINT handler
and what it has seen. Only the standard library here (it is installed before anything slow).

The interpreter's own start (~30 ms before the first module of the tool runs) is Python's.
After it, a Ctrl-C

* before the command runs (while the CLI's modules import, ~0.5 s) ends the process at
  once: exit 130, one line, no traceback;
* while the command runs raises KeyboardInterrupt as usual (inside an import, where a
  KeyboardInterrupt raised into a C extension's initialisation can abort the process, it
  ends the process at once, as before the command) and is also remembered
  (:func:`seen`), because a library may swallow it (torch's import did: the command ran on
  and exited 0), or leave a half-imported module behind whose next import fails: any error
  after a Ctrl-C is the interruption's (exit 130), never an "internal error";
* once the command is done (:func:`finishing`: its outputs in place or refused) is only
  remembered, and the exit status is 130.
"""

from __future__ import annotations

import os
import signal
from typing import Any

_STATE = {"running": False, "seen": False, "finishing": False}
#: the real ``os._exit``, taken before anything runs: while a model's code runs,
#: guard.model_code puts a stand-in in its place (a model must not end the process)
_EXIT = os._exit


def _on_sigint(signum: int, frame: Any) -> None:
    _STATE["seen"] = True
    if _STATE["finishing"]:
        return
    if not _STATE["running"] or _importing(frame):
        # before the command, or inside an import: a KeyboardInterrupt raised into a C
        # extension's initialisation (torch's) can abort the process (SIGABRT, a C++
        # terminate): end it here instead; an output is never half-written (they are
        # atomic), and a temporary folder left is marked, removed by the next run
        os.write(2, b"interrupted\n")
        _EXIT(130)
    raise KeyboardInterrupt


def _importing(frame: Any) -> bool:
    """Whether the interrupted code runs inside an import (a frame of importlib's)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def install() -> None:
    """The handler, unless someone else's is in place (embedded in another program)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def running() -> None:
    """The command starts: a Ctrl-C from now on is a KeyboardInterrupt."""
    _STATE["running"] = True


def finishing() -> None:
    """The command is done: a Ctrl-C from now on is only remembered."""
    _STATE["finishing"] = True


def seen() -> bool:
    """Whether a Ctrl-C reached this process (through our handler)."""
    return _STATE["seen"]


def hold() -> None:
    """Block SIGINT for the last instructions of the process (a pending one dies with it)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def exit_now(code: int) -> None:
    """End the process with ``code`` at once (the real ``os._exit``)."""
    _EXIT(code)
