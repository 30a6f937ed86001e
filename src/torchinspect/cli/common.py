"""Shared option types, the error boundary, and output helpers for every subcommand.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Annotated, Any, TypeVar

import typer

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.report import OutputFormat, Report, render

F = TypeVar("F", bound=Callable[..., Any])


# Set by the root callback on every invocation (so it never leaks between invocations).
DEBUG: ContextVar[bool] = ContextVar("torchinspect_debug", default=False)


def _debug_enabled() -> bool:
    """--debug on the root command, or TORCHINSPECT_DEBUG=1 in the environment."""
    return DEBUG.get() or os.environ.get("TORCHINSPECT_DEBUG", "") not in ("", "0")


def error_exit(message: str, hint: str | None = None, status: int = ExitStatus.USAGE) -> typer.Exit:
    """Print ``error:``/``hint:`` lines on stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    return typer.Exit(int(status))


def command_errors(fn: F) -> F:
    """Decorator for command bodies: user errors become one line and a stable exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InspectError as exc:
            if _debug_enabled():
                traceback.print_exc()
            raise error_exit(exc.message, exc.hint, exc.status) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except MemoryError:
            raise error_exit(
                "ran out of memory",
                "use the default --device meta (no memory for weights), a smaller --input or --batch",
            ) from None
        except Exception as exc:  # a bug in torchinspect or in the model's own code
            if _debug_enabled():
                traceback.print_exc()
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise error_exit(
                f"internal error: {type(exc).__name__}: {msg}"[:500],
                "rerun with --debug (or TORCHINSPECT_DEBUG=1) for the traceback and report it",
                ExitStatus.INTERNAL,
            ) from None

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------- shared option types

ModelsArg = Annotated[
    list[str],
    typer.Argument(metavar="MODEL...", help="one or more models (see `inspect summary --help`)",
                   show_default=False),
]
InputOpt = Annotated[
    list[str] | None,
    typer.Option("--input", "-i", metavar="SPEC",
                 help="[NAME=][DTYPE:]D1,D2,... e.g. 3,224,224 (batch 1 prepended), long:1,128, "
                 "ids=long:1,128. Repeat for several inputs. Default: the model's own example."),
]
ArgOpt = Annotated[
    list[str] | None,
    typer.Option("--arg", "-a", metavar="K=V",
                 help="keyword argument for the model builder/factory, value as a Python literal "
                 "(--arg num_classes=10). Repeatable."),
]
ArchOpt = Annotated[
    str | None,
    typer.Option("--arch", metavar="MODEL",
                 help="architecture to load a weights checkpoint into (torchvision name, zoo:NAME, "
                 "python spec)."),
]
WeightsOpt = Annotated[
    str | None,
    typer.Option("--weights", metavar="FILE", help="local state_dict file to load into MODEL."),
]
KeyOpt = Annotated[
    str | None,
    typer.Option("--key", metavar="KEY",
                 help="container key holding the weights (default: state_dict, model, model_ema, ...)."),
]
StrictOpt = Annotated[
    bool, typer.Option("--strict/--no-strict", help="require every key to match when loading weights.")
]
TrustOpt = Annotated[
    bool,
    typer.Option("--trust-pickle",
                 help="allow full pickles (runs code from the file!). Only for files you trust."),
]
DeviceOpt = Annotated[
    str,
    typer.Option("--device", "-d", metavar="auto|cpu|cuda|cuda:N|meta",
                 help="where to trace: auto = meta (no memory) with a CPU fallback."),
]
BatchOpt = Annotated[
    int | None, typer.Option("--batch", "-b", min=1, help="batch size (prepended to --input shapes).")
]
NoBatchOpt = Annotated[
    bool, typer.Option("--no-batch", help="use --input shapes exactly as written (no batch added).")
]
TrainOpt = Annotated[bool, typer.Option("--train", help="trace in training mode (default: eval).")]
FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="output format.", case_sensitive=False)
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="write the report to FILE (atomic).")
]


def parse_device(text: str) -> str:
    """Validate --device; returns the canonical text (auto, cpu, cuda, cuda:N, meta)."""
    t = text.strip().lower()
    if t in ("auto", "cpu", "cuda", "meta"):
        return t
    if t.startswith("cuda:") and t[5:].isdigit():
        return t
    raise InspectError(f"--device {text!r} is not a device",
                       hint="use auto, cpu, cuda, cuda:N (e.g. cuda:1) or meta")


def _input_files(inputs: Sequence[str | None]) -> tuple[str, ...]:
    """The files among MODEL-like arguments (``file.py:Name`` counts as file.py)."""
    found = []
    for spec in inputs:
        if not spec:
            continue
        for candidate in (spec, spec.rpartition(":")[0]):
            if candidate and os.path.isfile(candidate):
                found.append(candidate)
    return tuple(found)


def emit(report: Report, fmt: OutputFormat, output: str | None = None,
         inputs: Sequence[str | None] = ()) -> None:
    """Render to stdout, or atomically to --output FILE (never one of the ``inputs``)."""
    if output:
        import io as _io

        from torchinspect.io.atomic import atomic_write_text

        buf = _io.StringIO()
        render(report, fmt, buf, width=_width())
        atomic_write_text(output, buf.getvalue(), protect=_input_files(inputs))
        typer.echo(f"wrote {output}", err=True)
        return
    render(report, fmt, sys.stdout, width=_width())


def check_depth(depth: int) -> None:
    if depth < 0:
        raise InspectError(f"--depth {depth}: the depth must be 0 or more",
                           hint="e.g. --depth 3 (0 shows the model as one row)")


def emit_results(command: str, results: list[Any], fmt: OutputFormat, output: str | None,
                 inputs: Sequence[str | None] = (), **report_kw: Any) -> None:
    """One model: its full report; several: one comparison table (a row per model)."""
    if len(results) > 1:
        from torchinspect.analysis.compare import comparison_report

        emit(comparison_report(command, results), fmt, output, inputs)
    else:
        emit(results[0].to_report(**report_kw), fmt, output, inputs)


def _width() -> int | None:
    cols = os.environ.get("COLUMNS")
    if cols and cols.isdigit():
        return int(cols)
    return None
