"""The command reference, generated from the Typer app itself (so the docs cannot drift).

`command_reference("summary")` returns Markdown: the usage line, the arguments and every
visible option with its help text and default, exactly as `inspect summary --help` knows
them. docs/hooks.py writes it under ``<!-- inspect-options NAME -->`` of each command page.
"""

from __future__ import annotations

import re
from typing import Any

import typer

__all__ = ["command_names", "command_reference", "visible_options"]


def _group() -> Any:
    from torchinspect.cli.app import app

    return typer.main.get_command(app)


def command_names() -> list[str]:
    """Every registered subcommand, in registration order."""
    return list(_group().commands)


def _command(name: str) -> tuple[Any, Any]:
    group = _group()
    if name not in group.commands:
        raise KeyError(f"no command {name!r}; commands: {', '.join(group.commands)}")
    cmd = group.commands[name]
    ctx = typer.Context(cmd, info_name=f"inspect {name}")
    return cmd, ctx


def visible_options(name: str) -> list[str]:
    """The long (or only) spelling of every option `inspect NAME --help` shows."""
    cmd, _ = _command(name)
    names: list[str] = []
    for p in cmd.params:
        if p.param_type_name == "option" and not p.hidden:
            longs = [o for o in p.opts if o.startswith("--")] or list(p.opts)
            names.append(longs[0])
    return names


def _cell(text: str) -> str:
    # `[NAME=][DTYPE:]` would read as a Markdown reference link: brackets escaped too
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def _code(text: str) -> str:
    """A code cell: in backticks a `\\|` would show its backslash, so HTML with an entity."""
    import html

    return "<code>" + html.escape(" ".join(text.split())).replace("|", "&#124;") + "</code>"


def _argument_rows(cmd: Any) -> list[str]:
    rows = []
    for p in cmd.params:
        if p.param_type_name != "argument" or p.hidden:
            continue
        meta = p.metavar or p.name.upper()
        need = "required" if p.required else "optional"
        rows.append(f"| {_code(meta)} | {need} | {_cell(p.help or '')} |")
    return rows


def _option_rows(cmd: Any, ctx: Any) -> list[str]:
    rows = []
    for p in cmd.params:
        if p.param_type_name != "option" or p.hidden:
            continue
        record = p.get_help_record(ctx)
        if record is None:
            continue
        spelling, text = record
        rows.append(f"| {_code(spelling)} | {_cell(text)} |")
    rows.append("| `-h, --help` | show the help and exit. |")
    return rows


def command_reference(name: str) -> str:
    """Markdown reference of one subcommand: usage, description, arguments, options."""
    cmd, ctx = _command(name)
    usage = re.sub(r"\{([^{}]*)\}", r"\1", " ".join(cmd.collect_usage_pieces(ctx)))
    parts = [f"```text\ninspect {name} {usage}\n```", "", (cmd.help or "").strip(), ""]
    args = _argument_rows(cmd)
    if args:
        parts += ["| argument | | description |", "|---|---|---|", *args, ""]
    parts += ["| option | description |", "|---|---|", *_option_rows(cmd, ctx), ""]
    return "\n".join(parts)
