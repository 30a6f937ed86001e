"""Exit codes and the one error type the CLI turns into a one-line message.

Nothing here imports torch: the CLI imports this module at start-up.
"""

from __future__ import annotations

import re
import stat
from enum import IntEnum


class ExitStatus(IntEnum):
    """Stable exit codes of every `inspect` subcommand."""

    OK = 0
    CHECK_FAILED = 1  # a check failed or two state_dicts are incompatible
    USAGE = 2  # bad argument, bad input file, unknown model
    INTERNAL = 70  # a bug in torchinspect or in the model's own code (EX_SOFTWARE)
    INTERRUPTED = 130  # Ctrl-C


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes some libraries put in messages


def first_line(exc: BaseException, *, limit: int = 300, typed: bool = False,
               sentence: bool = False) -> str:
    """The first non-empty line of an exception's text, for one output line: colour codes
    dropped, at most ``limit`` characters (cut with "..."). ``typed`` puts the type name in
    front (``ValueError: ...``); ``sentence`` keeps only the first sentence. An exception
    without text is its type name."""
    line = next((t for t in (_ANSI.sub("", raw).strip() for raw in str(exc).splitlines()) if t), "")
    if sentence:
        line = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
    if typed or not line:
        line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= limit else line[:limit - 3] + "..."


# allocator messages of torch (CPU, CUDA, cuBLAS, cuDNN) when something does not fit
_OOM_SIGNS = ("out of memory", "can't allocate memory", "DefaultCPUAllocator",
              "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
              "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE")


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocator failure (CPU or GPU), not a bug: MemoryError, torch's OutOfMemoryError
    (matched by name: no torch import here), or a RuntimeError carrying an allocator message."""
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or (isinstance(exc, RuntimeError) and any(s in str(exc) for s in _OOM_SIGNS)))


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words, from its ``st_mode``."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                        (stat.S_ISBLK, "a device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def not_regular(path: object, mode: int) -> str:
    """``PATH is a FIFO, not a regular file`` (the one wording of every reader)."""
    return f"{path} is {file_kind(mode)}, not a regular file"


class InspectError(Exception):
    """A user-facing error: one line saying what is wrong, plus a hint saying how to fix it.

    The CLI prints ``error: <message>`` and ``hint: <hint>`` on stderr and exits with
    ``status`` (2 unless said otherwise). Library users catch it like any exception.
    """

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        status: ExitStatus = ExitStatus.USAGE,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.status = status

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class ModelCodeError(InspectError):
    """The model's own code ended the run (``sys.exit``, a ``BaseException``) or broke the
    process around it (closed stdout): an error of the model, exit 70. Raised by
    ``torchinspect.guard.model_code``."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint or "fix the model's code; --debug shows the traceback",
                         ExitStatus.INTERNAL)


class UnsafeCheckpointError(InspectError):
    """A checkpoint needs globals that `weights_only=True` refuses (a full pickle)."""

    def __init__(self, path: str, globals_: list[str], hint: str | None = None) -> None:
        shown = ", ".join(globals_[:8]) + (" ..." if len(globals_) > 8 else "")
        message = (
            f"{path}: refused to unpickle: the file needs globals that a weights-only load "
            f"does not allow ({shown or 'unknown globals'})"
        )
        super().__init__(
            message,
            hint
            or "only if you trust this file and where it came from, pass --trust-pickle "
            "(it runs code from the file)",
        )
        self.path = path
        self.globals = globals_
