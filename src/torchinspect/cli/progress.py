"""A status line for long work: a spinner, what is running and the time so far, on stderr
while a command works, cleared when it ends. Shown only when stderr is a terminal (piped or
redirected, nothing is written: a CI log stays clean), and only after ``DELAY_S`` (a quick
command shows nothing).

Every model command gets one from ``@model_command`` (cli/command.py), from its first moment
(importing torch is seconds of it); the command's text is updated through
:func:`current`, a :class:`torchinspect.arguments.ProgressFn` the cores take
(``collect_overview``, ``run_check``, ``sweep_with_fit``). :func:`pause` ends it before the
report is printed (``emit``) or an error is (the report goes to stdout, the status to
stderr: on one terminal they would mix). ``bench`` and ``features`` draw their own.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import IO, Any

DELAY_S = 0.5


class Working:
    """The status line of one command (see the module docstring)."""

    def __init__(self, what: str, *, stream: IO[str] | None = None,
                 delay: float = DELAY_S) -> None:
        self.what = what
        self.text = what
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.bar: Any = None
        self.task: Any = None
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()
        self.ended = False
        self.saved_stderr: IO[str] | None = None

    def shown(self) -> bool:
        """Whether the status can show: stderr is a terminal."""
        try:
            return bool(self.stream is not None and self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def __enter__(self) -> Working:
        if self.shown():
            self.timer = threading.Timer(self.delay, self._start)
            self.timer.daemon = True
            self.timer.start()
        return self

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.ended:
                return
            console = Console(file=self.stream, highlight=False)
            # text, not markup: a model spec "[/x]" is shown as it is
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.fields[text]}", markup=False),
                                TimeElapsedColumn(), console=console, transient=True,
                                redirect_stdout=False, redirect_stderr=False)
            self.task = self.bar.add_task("", total=None, text=self.text)
            self.bar.start()
            # lines written to stderr meanwhile ("wrote FILE", a note) go above the status
            # line instead of onto it
            if sys.stderr is self.stream:
                self.saved_stderr = sys.stderr
                sys.stderr = _Above(console, self.stream)

    def __call__(self, text: str, *, final: bool = False) -> None:
        """Show ``text`` after the command's name (``final`` steps too: they pass)."""
        with self.lock:
            command, _, subject = self.what.partition(" ")
            names_it = subject and text.partition(":")[0] in subject.split()
            self.text = f"{command} {text}" if names_it else f"{self.what}: {text}"
            if self.bar is not None:
                self.bar.update(self.task, text=self.text)

    def end(self) -> None:
        """Clear the status line for good (idempotent)."""
        if self.timer is not None:
            self.timer.cancel()
        with self.lock:
            self.ended = True
            if self.saved_stderr is not None:
                if isinstance(sys.stderr, _Above):
                    sys.stderr.flush()
                    sys.stderr = self.saved_stderr
                self.saved_stderr = None
            if self.bar is not None:
                self.bar.stop()
                self.bar = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end()


class _Above:
    """stderr while the status line shows: whole lines are printed above it (rich's
    ``FileProxy`` does the same, but click's ``echo`` would reach past it through
    ``.buffer``, so this one has none)."""

    def __init__(self, console: Any, stream: IO[str]) -> None:
        self.console, self.stream, self.pending = console, stream, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            lines, _, self.pending = self.pending.rpartition("\n")
            from rich.text import Text

            self.console.print(Text(lines), highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            from rich.text import Text

            self.console.print(Text(self.pending), highlight=False, soft_wrap=True)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:
        return getattr(self.stream, "errors", None)


_ACTIVE: ContextVar[Working | None] = ContextVar("torchinspect_progress", default=None)


class _Quiet(Working):
    """No status (outside a command, or where the command draws its own)."""

    def __init__(self) -> None:
        super().__init__("")

    def shown(self) -> bool:
        return False


@contextmanager
def command_status(what: str, *, enabled: bool = True) -> Iterator[Working]:
    """The status line of the command running ``what`` (``summary resnet18``), found by
    :func:`current` and :func:`pause` while it runs; ``enabled=False``: none."""
    status = Working(what) if enabled else _Quiet()
    token = _ACTIVE.set(status)
    try:
        with status:
            yield status
    finally:
        _ACTIVE.reset(token)


def current() -> Working:
    """The running command's status (a silent one outside a command): call it with a text."""
    return _ACTIVE.get() or _Quiet()


def pause() -> None:
    """End the running command's status line before its report or an error is printed."""
    status = _ACTIVE.get()
    if status is not None:
        status.end()


def per_model(models: list[str], say: Working | None = None) -> Iterator[str]:
    """Each of ``models``, saying which one runs when there are several (``resnet50 (2 of 3)``)."""
    say = say if say is not None else current()
    for i, model in enumerate(models):
        if len(models) > 1:
            say(f"{model} ({i + 1} of {len(models)})")
        yield model
