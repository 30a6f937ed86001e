"""Terminals for tests: a real pseudo-terminal of a given size, so that what a command reads
from the tty (its width, whether it is a terminal) is what a user's terminal gives it."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def plain(raw: bytes) -> str:
    """What a person reads: no colour codes or cursor moves; a line rewritten after a
    carriage return (a spinner, a progress bar) is what it showed last."""
    text = ANSI.sub("", raw.decode("utf-8", errors="replace"))
    return "\n".join(_last(line.split("\r")) for line in text.split("\n"))


def _last(parts: list[str]) -> str:
    shown = [p for p in parts if p.strip()]
    return shown[-1] if shown else ""


def _sized_pty(columns: int, rows: int = 50) -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return master, slave


def _drain(master: int, into: bytearray, until: Callable[[], bool]) -> None:
    """Read ``master`` until ``until()`` and then until nothing more is waiting (what was
    written just before ``until()`` turned true is read too)."""
    finishing = False
    while True:
        ready, _, _ = select.select([master], [], [], 0.2 if finishing else 0.05)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other side closed
                return
            if not data:
                return
            into.extend(data)
        elif finishing:
            return
        elif until():
            finishing = True  # one more look: the writer may have just written its last


def write_to_pty(write: Callable[[IO[str]], Any], columns: int) -> str:
    """Call ``write(stream)`` with ``stream`` a terminal ``columns`` wide (in this process);
    return what it showed."""
    master, slave = _sized_pty(columns)
    got = bytearray()
    done = threading.Event()
    reader = threading.Thread(target=_drain, args=(master, got, done.is_set))
    reader.start()
    try:
        with open(slave, "w", encoding="utf-8", closefd=True) as stream:
            write(stream)
            stream.flush()
    finally:
        done.set()
        reader.join(10)
        os.close(master)
    return plain(bytes(got))


def run_in_pty(argv: Sequence[str], columns: int, *, env: dict[str, str] | None = None,
               stderr_too: bool = True, timeout: float = 120,
               raw: bool = False) -> tuple[int, str]:
    """Run ``argv`` with stdout (and stderr) on a terminal ``columns`` wide and no COLUMNS in
    its environment; return (exit status, what the terminal showed; ``raw``: every byte
    written, status lines that were later cleared included)."""
    master, slave = _sized_pty(columns)
    environ = {k: v for k, v in (env or os.environ).items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave if stderr_too else subprocess.PIPE, env=environ,
                            close_fds=True)
    os.close(slave)
    got = bytearray()
    reader = threading.Thread(target=_drain, args=(master, got, lambda: proc.poll() is not None))
    reader.start()
    try:
        proc.wait(timeout)
    finally:
        reader.join(10)
        os.close(master)
    return proc.returncode, (bytes(got).decode("utf-8", "replace") if raw else plain(bytes(got)))
