"""The table of commands (pip's ``commands_dict``): one row per subcommand, in the order
``inspect --help`` lists them. Adding a command is one module under ``torchinspect.cli``
and one row here; cli/app.py registers every row (a module that fails to import is an
error, never skipped).

A command module imports only typer and the torch-free cli/ modules at start-up, so that
``inspect --help`` stays instant.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandInfo(NamedTuple):
    """``inspect NAME`` runs ``torchinspect.cli.MODULE:FUNCTION``."""

    name: str
    module: str
    function: str


COMMANDS: tuple[CommandInfo, ...] = (
    CommandInfo("summary", "summary", "summary"),
    CommandInfo("params", "params", "params"),
    CommandInfo("flops", "flops", "flops"),
    CommandInfo("diff", "diff", "diff"),
    CommandInfo("convert", "convert", "convert"),
    CommandInfo("env", "env", "env"),
    CommandInfo("graph", "graph", "graph"),
    CommandInfo("export", "export", "export"),
    CommandInfo("doctor", "doctor", "doctor"),
    CommandInfo("check", "check", "check"),
    CommandInfo("bench", "bench", "bench"),
    CommandInfo("features", "features", "features"),
    CommandInfo("report", "report", "report"),
    CommandInfo("memory", "memory", "memory"),
)
