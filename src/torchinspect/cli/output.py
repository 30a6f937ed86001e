"""Where a report goes: :func:`emit` renders it to stdout or atomically to ``--output``
(never over an input), at the terminal's width.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import typer

from torchinspect.cli.boundary import exit_status, report_stdout
from torchinspect.cli.progress import pause, per_model
from torchinspect.errors import InspectError
from torchinspect.escape import printable
from torchinspect.report import OutputFormat, Report, render


@dataclasses.dataclass
class OutputOptions:
    """``--format`` and ``--output`` of one command."""

    format: OutputFormat = OutputFormat.table
    output: str | None = None


# the report format a --output FILE's extension asks for (without -f)
FORMAT_BY_EXTENSION = {
    ".json": OutputFormat.json, ".csv": OutputFormat.csv, ".md": OutputFormat.markdown,
    ".markdown": OutputFormat.markdown, ".html": OutputFormat.html, ".htm": OutputFormat.html,
    ".txt": OutputFormat.table, ".text": OutputFormat.table,
}


def output_options(fmt: OutputFormat | str | None, output: str | None, *,
                   by_extension: bool = True) -> OutputOptions:
    """--format/--output, one rule for every command: without -f, the extension of -o picks
    the format (.json .csv .md .html; .txt or any other: a table); a -f that contradicts
    .json .csv .md or .html is a usage error. ``by_extension=False`` where -o is the
    command's product and the report goes to stdout (graph, export)."""
    given = OutputFormat(fmt) if fmt is not None else None
    implied = (FORMAT_BY_EXTENSION.get(os.path.splitext(output)[1].lower())
               if output and by_extension else None)
    loose = implied is OutputFormat.table  # a .txt may hold any text format
    if given is not None and implied is not None and given is not implied and not loose:
        raise InspectError(f"-f {given.value} contradicts -o {output} (a {implied.value} "
                           "file name)", hint=f"leave out -f (the extension picks "
                           f"{implied.value}), or name the file for {given.value}")
    return OutputOptions(given or implied or OutputFormat.table, output)


def input_files(inputs: Sequence[str | None]) -> tuple[str, ...]:
    """The files and folders among MODEL-like arguments: ``file.py:Name`` counts as file.py,
    ``pkg.mod:Name`` as the module's source found from the current folder or PYTHONPATH, a
    checkpoint folder as the folder (outputs must not land inside it)."""
    found = []
    for spec in inputs:
        if not spec:
            continue
        head = spec.rpartition(":")[0]
        for candidate in (spec, head, *_module_sources(head)):
            if candidate and os.path.exists(candidate):
                found.append(candidate)
    return tuple(dict.fromkeys(found))


def _module_sources(module: str) -> list[str]:
    """Where ``pkg.mod`` would be imported from, without importing it (cwd, PYTHONPATH)."""
    if not module or not all(part.isidentifier() for part in module.split(".")):
        return []
    rel = os.path.join(*module.split("."))
    roots = [".", *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return [os.path.join(root, rel + ext) for root in roots
            for ext in (".py", os.sep + "__init__.py")]


def emit(report: Report, out: OutputOptions, inputs: Sequence[str | None] = ()) -> None:
    """Render to stdout, or atomically to --output FILE (never one of the ``inputs``)."""
    pause()  # the status line ends before the report starts
    if out.output:
        import io as _io

        from torchinspect.io.atomic import atomic_write_text

        buf = _io.StringIO()
        render(report, out.format, buf, width=terminal_width())
        atomic_write_text(out.output, buf.getvalue(), protect=input_files(inputs))
        typer.echo(f"wrote {printable(str(out.output))}", err=True)
        return
    try:
        stdout = report_stdout()
        if str(out.format) in ("csv", "json") and stdout.isatty():
            # data formats keep names raw for files and pipes; a terminal gets them escaped
            # (an ESC, OSC, C1 or bidi override in a key would act on the terminal)
            import io as _io

            buf = _io.StringIO()
            render(report, out.format, buf, width=terminal_width(stdout))
            stdout.write("\n".join(printable(ln) for ln in buf.getvalue().split("\n")))
        else:
            render(report, out.format, stdout, width=terminal_width(stdout))
        stdout.flush()
    except BrokenPipeError:  # `inspect ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())


@dataclasses.dataclass
class ModelRuns:
    """What a multi-model command got: each model's result, and each failure with its model."""

    results: list[Any]
    failures: list[tuple[str, Exception]]


def each_model(models: Sequence[str], run: Callable[[str], Any]) -> ModelRuns:
    """``run(model)`` for each model (the status line says which: ``resnet50 (2 of 3)``). One
    model: its error ends the command as usual. Several: a model that fails does not drop the
    others; :func:`emit_results` shows their results, then the failure named by its model,
    and exits with its status."""
    runs = ModelRuns([], [])
    for model in per_model(list(models)):
        try:
            runs.results.append(run(model))
        except Exception as exc:
            if len(models) == 1:
                raise
            runs.failures.append((model, exc))
    return runs


def _named(model: str, exc: Exception) -> Exception:
    if isinstance(exc, InspectError):
        return InspectError(f"{model}: {exc.message}", exc.hint, exc.status)
    typer.echo(f"error in {model}:", err=True)
    return exc


def emit_results(command: str, results: list[Any] | ModelRuns, build: Callable[..., Report],
                 out: OutputOptions, inputs: Sequence[str | None] = (), **report_kw: Any) -> None:
    """One model: ``build(result)``; several: one comparison table (a row per model). With
    :class:`ModelRuns`, the models that failed are named after the others' results, and the
    command exits with the first failure's status."""
    runs = results if isinstance(results, ModelRuns) else ModelRuns(list(results), [])
    if len(runs.results) > 1:
        from torchinspect.report.compare import comparison_report

        emit(comparison_report(command, runs.results), out, inputs)
    elif runs.results:
        emit(build(runs.results[0], **report_kw), out, inputs)
    if runs.failures:
        statuses = [exit_status(_named(model, exc)) for model, exc in runs.failures]
        raise typer.Exit(statuses[0])


def terminal_width(stream: Any = None) -> int | None:
    """The width tables fit: COLUMNS when set (a number), else the width of the terminal
    ``stream`` is (read from the tty itself, as ``stty size`` does), else None: piped or
    written to a file, a table keeps its natural width and every column."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    if stream is None:
        return None
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):  # not a real file, or closed
        pass
    return None


def model_file_stem(spec: str) -> str:
    """A safe file name stem from a MODEL text, for outputs named after the model:
    ``resnet18``, ``zoo:gpt`` -> ``gpt``, ``net.py:Net`` -> ``Net``, ``ckpt/model.pth`` ->
    ``model``, ``hf:org/bert`` -> ``bert``."""
    base = os.path.basename(spec.rstrip("/\\").split(":")[-1].rstrip("/\\"))
    from torchinspect.io.formats import suffixes  # the checkpoint-format registry (no torch)

    known = next((s for s in (*suffixes(), ".py", ".onnx") if base.endswith(s)), "")
    base = base[:len(base) - len(known)]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("._") or "model"
