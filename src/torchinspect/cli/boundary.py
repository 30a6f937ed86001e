"""The CLI's one error boundary: every error, wherever it escapes (a command body, the
command group, the console script), becomes one ``error:``/``hint:`` pair on stderr and an
exit status (:func:`exit_status`); ``--debug`` adds the traceback.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import typer

from torchinspect.cli import interrupt
from torchinspect.cli.progress import pause
from torchinspect.errors import ExitStatus, InspectError, first_line, is_out_of_memory
from torchinspect.escape import printable
from torchinspect.guard import model_code, raised_by_model
from torchinspect.report.wrap import wrap

F = TypeVar("F", bound=Callable[..., Any])


# Set by the root callback on every invocation (so it never leaks between invocations).
DEBUG: ContextVar[bool] = ContextVar("torchinspect_debug", default=False)


def _debug_enabled() -> bool:
    """--debug on the root command, or TORCHINSPECT_DEBUG=1 in the environment."""
    return DEBUG.get() or os.environ.get("TORCHINSPECT_DEBUG", "") not in ("", "0")


# errors fold at this width on a terminal (or at the terminal's, when narrower)
ERROR_WIDTH = 80


def error_exit(message: str, hint: str | None = None, status: int = ExitStatus.USAGE) -> typer.Exit:
    """Print ``error:``/``hint:`` lines on stderr and return the Exit to raise. Control
    characters in them (a key name or model name holding ``\\x1b[2J``) are shown escaped.
    On a terminal each folds at 80 columns, or the terminal's (or COLUMNS) when narrower, by
    the one wrapping rule, going on under its own text; piped or in a log, each stays one
    line (grep finds it whole)."""
    pause()  # the command's status line ends before its error is shown
    width = _stderr_width()
    for label, text in (("error: ", message), ("hint: ", hint)):
        if text:
            for line in wrap(label + printable(_relative(text)), width, " " * len(label)):
                typer.echo(line, err=True)
    return typer.Exit(int(status))


def _relative(text: str) -> str:
    """Paths inside the working folder named from it (``feats``, not ``/home/.../feats``):
    what the user typed, and shorter."""
    try:
        here = os.getcwd()
    except OSError:  # the working folder is gone
        return text
    return text.replace(here + os.sep, "") if len(here) > 1 else text


def _stderr_width() -> int | None:
    """The width errors fold at when stderr is a terminal (at most ERROR_WIDTH; COLUMNS, when
    set, before the terminal's own), else None."""
    try:
        if not sys.stderr.isatty():
            return None
        cols = os.environ.get("COLUMNS", "")
        width = int(cols) if cols.isdigit() and int(cols) > 0 else \
            os.get_terminal_size(sys.stderr.fileno()).columns
        return min(ERROR_WIDTH, width)
    except (AttributeError, ValueError, OSError):
        return None


def _os_error_text(exc: OSError) -> str:
    """``PATH: reason``, naming the user's path rather than our temporary file."""
    path = exc.filename2 if exc.filename2 is not None else exc.filename
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # never a bare "[Errno 28]"
        return f"{path if path is not None else 'a file being written'}: no space left on the device"
    if path is None:
        return f"{type(exc).__name__}: {exc}"
    # atomic writes go through DIR/.NAME.XXXX.tmp/NAME: the user named DIR/NAME
    shown = re.sub(r"\.([^/]+)\.[A-Za-z0-9_]+\.tmp/\1$", r"\1", os.fspath(path))
    return f"{shown}: {exc.strerror or exc}"


# Whether this invocation said "interrupted" already (one line, however many boundaries the
# Ctrl-C crosses on its way out).
_INTERRUPTED: ContextVar[bool] = ContextVar("torchinspect_interrupted", default=False)


def interrupted_shown(reset: bool = False) -> bool:
    """Whether "interrupted" was said in this invocation (``reset``: a new one starts)."""
    if reset:
        _INTERRUPTED.set(False)
    return _INTERRUPTED.get()


def exit_status(exc: BaseException) -> int:
    """The one error boundary of the CLI (commands, the command group, the console script):
    ``exc`` as one ``error:``/``hint:`` pair on stderr (the traceback too with --debug), and
    the exit status it maps to. Ctrl-C is 130; a user error its own status (2 unless said);
    running out of memory 2; a file system refusal 2; the model's own code ending the run or
    any other failure 70."""
    pause()
    if isinstance(exc, KeyboardInterrupt) or interrupt.seen():  # also what a Ctrl-C broke
        if not interrupted_shown():
            _INTERRUPTED.set(True)
            typer.echo("interrupted", err=True)
        return int(ExitStatus.INTERRUPTED)
    if _debug_enabled():
        traceback.print_exception(exc)
    if isinstance(exc, InspectError):
        return _shown(exc.message, exc.hint, exc.status)
    if is_out_of_memory(exc):
        return _shown(f"ran out of memory: {first_line(exc)}" if str(exc).strip() else
                      "ran out of memory", "use the default --device meta where the command has "
                      "it, a smaller --input or --batch, or a device with more memory")
    if isinstance(exc, BrokenPipeError):  # not the disk: the reader of a pipe went away
        try:
            return _shown("the program reading the output closed it before the end", None)
        except OSError:  # stderr is that pipe too
            return int(ExitStatus.USAGE)
    blamed = raised_by_model(exc)  # the model's own code (its file, or its nesting depth)
    if blamed is not None:
        return _shown(blamed.message, blamed.hint, blamed.status)
    if isinstance(exc, OSError):  # the file system refused a path the user gave
        return _shown(_os_error_text(exc), "check the path, its permissions and the free disk space")
    return _shown(  # a bug in torchinspect (or in a library)
        f"internal error: {first_line(exc, typed=True)}",
        "rerun with --debug (or TORCHINSPECT_DEBUG=1) for the traceback; when it ends in "
        "torchinspect rather than the model's code, report it", ExitStatus.INTERNAL)


def _shown(message: str, hint: str | None, status: int = ExitStatus.USAGE) -> int:
    return error_exit(message, hint, status).exit_code


# The real stdout while a command runs: sys.stdout points at stderr then (model code prints
# there), and the report is rendered here.
REPORT_STDOUT: ContextVar[Any] = ContextVar("torchinspect_report_stdout", default=None)


def report_stdout() -> Any:
    """Where the report goes when there is no --output: the real stdout of the command."""
    stream = REPORT_STDOUT.get()
    return stream if stream is not None else sys.stdout


def command_errors(fn: F) -> F:
    """Decorator for command bodies: the body runs with the model's code contained
    (:class:`torchinspect.guard.model_code`: its prints go to stderr, torch's switches and
    the working folder are put back, ``sys.exit`` is an error of the model), and whatever
    ends it goes through :func:`exit_status`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = REPORT_STDOUT.set(sys.stdout)
        try:
            with model_code(stdout=True):
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except BaseException as exc:  # noqa: BLE001 - the boundary: one line and a status
            raise typer.Exit(exit_status(exc)) from None
        finally:
            REPORT_STDOUT.reset(token)

    return wrapper  # type: ignore[return-value]
