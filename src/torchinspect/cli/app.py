"""The Typer app: one small module per subcommand, registered here from the table in
cli/commands.py.

`main()` is the console-script entry point. Every error, wherever it escapes (a command body,
the command group, the console script), goes through the one boundary
``cli/boundary.py: exit_status``: one ``error:`` line, Ctrl-C 130.
"""

# ruff: noqa: E402 - the Ctrl-C handler is installed before the (slow) imports below
from __future__ import annotations

from torchinspect.cli import interrupt

interrupt.install()  # Ctrl-C from the first instant (cli/interrupt.py)

import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from torchinspect import __version__
from torchinspect.cli.boundary import DEBUG, error_exit, exit_status, interrupted_shown
from torchinspect.cli.command import InspectCommand
from torchinspect.cli.commands import COMMANDS
from torchinspect.errors import ExitStatus

# Newer typer vendors click privately, older typer uses click itself: take the classes
# from the public typer.BadParameter's ancestry, which works with both.
_MRO = {c.__name__: c for c in typer.BadParameter.__mro__}
UsageError: type[Exception] = _MRO["UsageError"]
ClickException: type[Exception] = _MRO["ClickException"]


def _plain(message: str) -> str:
    """A usage error in our words, not a validation library's: ``Invalid value for '--format'
    / '-f': 'yaml' is not one of 'table', 'json'.`` -> ``--format / -f 'yaml': not one of
    table, json``."""
    message = message.replace("Value error, ", "").replace("Input should be ", "must be ")
    message = message.replace("greater than or equal to", "at least").replace(
        "less than or equal to", "at most")
    message = re.sub(r", unable to parse string as an? \w+", "", message)
    m = re.match(r"Invalid value for (.+?): '(.*)' is not one of (.+?)\.?$", message, re.S)
    if m is None:
        return re.sub(r"^Invalid value for (.+?): ", lambda v: v.group(1).replace("'", "") + ": ",
                      message)
    options = [o.strip().strip("'") for o in m.group(3).split(",")]
    where = m.group(1).replace("'", "")
    return f"{where} {m.group(2)!r}: not one of {', '.join(options)}"


class InspectGroup(TyperGroup):
    """Usage errors (unknown option, bad --format value, --batch 0) in the same two-line
    ``error:``/``hint:`` form as every other error, exit 2; Ctrl-C exits 130."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The group's options, the on/off flags among them defaulting to False: typer coerces a
        value that is not a bool (the None that ``--help`` and the completion flags default to)
        through its pydantic adapter, whose first use imports pydantic, which every `inspect
        CMD --help` paid at start-up (tests/test_startup.py)."""
        params: list[Any] = super().get_params(ctx)
        for p in params:
            if getattr(p, "is_bool_flag", False) and p.default is None:
                p.default = False
        return params

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        passed = {"windows_expand_args": windows_expand_args, **extra}
        interrupted_shown(reset=True)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **passed)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **passed)
        except UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `inspect` alone: show the help
                exc.show()  # type: ignore[attr-defined]
                sys.exit(exc.exit_code)  # type: ignore[attr-defined]
            ctx = getattr(exc, "ctx", None)
            path = ctx.command_path if ctx is not None else "inspect"
            message, hint = _plain(exc.format_message()), f"see `{path} --help`"  # type: ignore[attr-defined]
            forced = self._force_meant(exc, args)
            if forced:
                message += " -f is --format; did you mean --force?"
                hint = (f"--force replaces an existing output; -f/--format FORMAT picks the report "
                        f"format (see `inspect {forced} --help`)")
            sys.exit(error_exit(message, hint).exit_code)
        except ClickException as exc:
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except typer.Abort:  # click's own Ctrl-C (at a prompt)
            sys.exit(exit_status(KeyboardInterrupt()))
        except Exception as exc:  # noqa: BLE001 - one boundary for what escapes a command
            sys.exit(exit_status(exc))
        if rv == ExitStatus.INTERRUPTED and not interrupted_shown():
            # typer turns a Ctrl-C outside the command's body (while it builds or parses)
            # into a silent exit 130: the one line is said here
            sys.exit(exit_status(KeyboardInterrupt()))
        sys.exit(rv if isinstance(rv, int) else 0)

    def _force_meant(self, exc: Exception, args: Any) -> str | None:
        """The subcommand, when ``-f`` came without a value in a command that has --force (the
        user meant --force; click's error carries no context to tell the command by)."""
        if getattr(exc, "option_name", None) != "-f":
            return None
        argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        name = next((a for a in argv if not a.startswith("-")), None)
        cmd = self.commands.get(name) if name else None
        has_force = cmd is not None and any("--force" in getattr(p, "opts", ()) for p in cmd.params)
        return name if has_force else None


app = typer.Typer(
    cls=InspectGroup,
    name="inspect",
    help="Inspect PyTorch models: summary, params, FLOPs, checkpoints, export. "
    "Typical call: inspect summary resnet18 --input 3,224,224",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"torchinspect {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="show Python tracebacks for errors "
                               "(also after the command: inspect COMMAND ... --debug)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit."),
) -> None:
    """Inspect PyTorch models. Errors are one line; --debug shows the traceback."""
    DEBUG.set(debug)


def _register() -> None:
    """Register every command; a module that fails to import is an error, never skipped."""
    for name, module, func in COMMANDS:
        mod = importlib.import_module(f"torchinspect.cli.{module}")
        fn = getattr(mod, func)
        # the docstring's first sentence, whole, in `inspect --help` (Click cuts it with "..."
        # at 45-70 characters unless it is given as short_help)
        app.command(name, short_help=_summary(fn), cls=InspectCommand)(fn)


def _summary(fn: Any) -> str | None:
    """A command's docstring up to its first blank line (the summary, which may run over two
    lines), on one line."""
    doc = (fn.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc else None


_register()


def main() -> None:
    """Console-script entry point.

    Ends with ``os._exit`` after flushing: tearing down torch and torchvision at interpreter
    exit costs ~0.7 s and does nothing useful (every file we write is already closed and
    renamed into place). Tests use ``app`` directly and never reach this.
    """
    code: int = 0
    interrupt.running()
    try:
        try:
            app()
        except SystemExit as exc:
            if isinstance(exc.code, int):
                code = exc.code
            elif exc.code is not None:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C and the rest: the one boundary
            code = exit_status(exc)
    except KeyboardInterrupt:  # a second Ctrl-C while the first error was being shown
        code = int(ExitStatus.INTERRUPTED)
    interrupt.finishing()  # from here a Ctrl-C is only remembered: exit 130 below
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    interrupt.hold()  # nothing can arrive between the last look and the exit
    if interrupt.seen() and code != int(ExitStatus.INTERRUPTED):  # swallowed, or at the end
        code = exit_status(KeyboardInterrupt())
    elif code == int(ExitStatus.INTERRUPTED) and not interrupted_shown():
        code = exit_status(KeyboardInterrupt())
    try:
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    interrupt.exit_now(code)
