"""Stdout plumbing: the exporters log graphs and progress, and C++ code writes to file
descriptor 1; both are kept off the user's terminal and out of ``--format json``."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def quiet_exporters() -> Iterator[None]:
    """The exporters log graphs and progress; keep them off the user's terminal."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), _native_stdout_to_stderr():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _no_fflush(_: None) -> int:
    return 0


@contextlib.contextmanager
def _native_stdout_to_stderr() -> Iterator[None]:
    """C++ code (the TorchScript exporter's "Torch IR graph at exception" dump) writes to file
    descriptor 1, past Python's sys.stdout: send it to stderr so stdout stays the report
    (``--format json`` must stay parseable)."""
    import ctypes
    import sys

    try:
        sys.__stdout__.flush() if sys.__stdout__ else None
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (embedded, closed): nothing to protect
        yield
        return
    fflush: Callable[[None], object]
    try:
        fflush = ctypes.CDLL(None).fflush
    except (OSError, AttributeError):  # no C library to flush (not POSIX)
        fflush = _no_fflush
    try:
        fflush(None)
        os.dup2(2, 1)
        yield
    finally:
        fflush(None)  # what C stdio buffered while redirected goes to stderr
        os.dup2(saved, 1)
        os.close(saved)

