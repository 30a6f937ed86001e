"""Where a report goes: :func:`emit` renders it to stdout or atomically to ``--output``
(never over an input), at the terminal's width.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer

from torchinspect.cli.boundary import report_stdout
from torchinspect.cli.progress import pause
from torchinspect.report import Report, render

if TYPE_CHECKING:
    from torchinspect.cli.command import OutputOptions


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
        typer.echo(f"wrote {out.output}", err=True)
        return
    try:
        stdout = report_stdout()
        render(report, out.format, stdout, width=terminal_width(stdout))
        stdout.flush()
    except BrokenPipeError:  # `inspect ... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())


def emit_results(command: str, results: list[Any], build: Callable[..., Report],
                 out: OutputOptions, inputs: Sequence[str | None] = (), **report_kw: Any) -> None:
    """One model: ``build(result)``; several: one comparison table (a row per model)."""
    if len(results) > 1:
        from torchinspect.report.compare import comparison_report

        emit(comparison_report(command, results), out, inputs)
    else:
        emit(build(results[0], **report_kw), out, inputs)


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
    base = re.sub(r"\.(pth?|bin|ckpt|safetensors|tar|json|py|pkl|pt2|onnx)$", "", base)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("._") or "model"
