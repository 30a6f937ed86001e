"""Shared option types, the error boundary, and output helpers for every subcommand.

The model options (``--input --arg --arch --weights --key --strict --trust-pickle
--python-path --device --batch --no-batch --published --weights-config``) and the output options (``--format
--output``) are declared once here. ``@model_command()`` adds them to a command's signature
and hands the command one :class:`ModelOptions` (``opts``) and one :class:`OutputOptions`
(``out``); ``@output_command`` adds only the output options. Both include the error boundary.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from torchinspect.device import parse_device
from torchinspect.errors import ExitStatus, InspectError, first_line, is_out_of_memory
from torchinspect.guard import model_code
from torchinspect.report import OutputFormat, Report, render
from torchinspect.report.render import printable
from torchinspect.sources.case import ModelOptions

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


# Set by the root callback on every invocation (so it never leaks between invocations).
DEBUG: ContextVar[bool] = ContextVar("torchinspect_debug", default=False)


def _debug_enabled() -> bool:
    """--debug on the root command, or TORCHINSPECT_DEBUG=1 in the environment."""
    return DEBUG.get() or os.environ.get("TORCHINSPECT_DEBUG", "") not in ("", "0")


def error_exit(message: str, hint: str | None = None, status: int = ExitStatus.USAGE) -> typer.Exit:
    """Print ``error:``/``hint:`` lines on stderr and return the Exit to raise. Control
    characters in them (a key name or model name holding ``\\x1b[2J``) are shown escaped."""
    typer.echo(f"error: {printable(message)}", err=True)
    if hint:
        typer.echo(f"hint: {printable(hint)}", err=True)
    return typer.Exit(int(status))


def _os_error_text(exc: OSError) -> str:
    """``PATH: reason``, naming the user's path rather than our temporary file."""
    path = exc.filename2 if exc.filename2 is not None else exc.filename
    if path is None:
        return f"{type(exc).__name__}: {exc}"
    # atomic writes go through DIR/.NAME.XXXX.tmp/NAME: the user named DIR/NAME
    shown = re.sub(r"\.([^/]+)\.[A-Za-z0-9_]+\.tmp/\1$", r"\1", os.fspath(path))
    return f"{shown}: {exc.strerror or exc}"


def tolerance(value: float, option: str) -> float:
    """A --atol/--rtol value: finite and not negative (nan would make every comparison pass)."""
    if not value >= 0 or value == float("inf"):
        raise InspectError(f"{option} {value}: a tolerance must be a finite number >= 0",
                           hint=f"e.g. {option} 1e-5")
    return value


def exit_status(exc: BaseException) -> int:
    """The one error boundary of the CLI (commands, the command group, the console script):
    ``exc`` as one ``error:``/``hint:`` pair on stderr (the traceback too with --debug), and
    the exit status it maps to. Ctrl-C is 130; a user error its own status (2 unless said);
    running out of memory 2; a file system refusal 2; the model's own code ending the run or
    any other failure 70."""
    if isinstance(exc, KeyboardInterrupt):
        typer.echo("interrupted", err=True)
        return int(ExitStatus.INTERRUPTED)
    if _debug_enabled():
        traceback.print_exception(exc)
    if isinstance(exc, InspectError):
        return _shown(exc.message, exc.hint, exc.status)
    if is_out_of_memory(exc):
        return _shown(f"ran out of memory: {first_line(exc)}" if str(exc).strip() else
                      "ran out of memory", "use the default --device meta where the command has "
                      "it, a smaller --input or --batch, or a device with more memory")
    if isinstance(exc, OSError):  # the file system refused a path the user gave
        return _shown(_os_error_text(exc), "check the path, its permissions and the free disk space")
    return _shown(  # a bug in torchinspect or in the model's own code
        f"internal error: {first_line(exc, typed=True)}",
        "rerun with --debug (or TORCHINSPECT_DEBUG=1) for the traceback; when it ends in "
        "torchinspect rather than the model's code, report it", ExitStatus.INTERNAL)


def _shown(message: str, hint: str | None, status: int = ExitStatus.USAGE) -> int:
    return error_exit(message, hint, status).exit_code


# The real stdout while a command runs: sys.stdout points at stderr then (model code prints
# there), and the report is rendered here.
REPORT_STDOUT: ContextVar[Any] = ContextVar("torchinspect_report_stdout", default=None)


def report_stdout() -> Any:
    """Where the report goes when there is no --output: the real stdout of the command."""
    stream = REPORT_STDOUT.get()
    return stream if stream is not None else sys.stdout


def command_errors(fn: F) -> F:
    """Decorator for command bodies: the body runs with the model's code contained
    (:class:`torchinspect.guard.model_code`: its prints go to stderr, torch's switches and
    the working folder are put back, ``sys.exit`` is an error of the model), and whatever
    ends it goes through :func:`exit_status`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = REPORT_STDOUT.set(sys.stdout)
        try:
            with model_code(stdout=True):
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except BaseException as exc:  # noqa: BLE001 - the boundary: one line and a status
            raise typer.Exit(exit_status(exc)) from None
        finally:
            REPORT_STDOUT.reset(token)

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------- shared option types

MODEL_FORMS = ("a torchvision name (resnet18), zoo:NAME, file.py:Name, pkg.mod:factory, "
               "timm:NAME, hf:TYPE (hf:bert, hf:LlamaForCausalLM), a Hugging Face model folder "
               "(config.json), a TorchScript file, a torch.export .pt2 file, or a checkpoint "
               "with --arch")
"""Every form a MODEL argument takes (sources/resolve.py); the one help text of every command."""

ModelsArg = Annotated[
    list[str],
    typer.Argument(metavar="MODEL...", help=f"one or more models: {MODEL_FORMS}.",
                   show_default=False),
]
ModelArg = Annotated[
    str,
    typer.Argument(metavar="MODEL", help=f"{MODEL_FORMS}.",
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
PythonPathOpt = Annotated[
    list[str] | None,
    typer.Option("--python-path", metavar="DIR",
                 help="put DIR first on sys.path while the model loads (a whole-model pickle of "
                 "your own class, with --trust-pickle); repeatable."),
]
BatchOpt = Annotated[
    int | None, typer.Option("--batch", "-b", min=1, help="batch size (prepended to --input shapes).")
]
NoBatchOpt = Annotated[
    bool, typer.Option("--no-batch", help="use --input shapes exactly as written (no batch added).")
]
PublishedOpt = Annotated[bool, typer.Option(
    "--published", help="torchvision: build with the first published weights' settings and input size.")]
WeightsConfigOpt = Annotated[str | None, typer.Option(
    "--weights-config", metavar="NAME",
    help="torchvision: build with the settings and input size of weights NAME (e.g. IMAGENET1K_V1).")]
TrainOpt = Annotated[bool, typer.Option("--train", help="trace in training mode (default: eval).")]
DepthOpt = Annotated[int, typer.Option("--depth", min=0, help="deepest module level shown as rows "
                                       "(deeper layers are folded into their parent).")]
FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="output format.", case_sensitive=False)
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="write the report to FILE (atomic).")
]
ForceOpt = Annotated[bool, typer.Option("--force", help="replace the output if it exists (never an input).")]

DEVICE_HELP = "where to trace: auto = meta (no memory) with a CPU fallback; meta; cpu; cuda[:N]."


def _device_opt(help_text: str) -> Any:
    return Annotated[str, typer.Option("--device", "-d", metavar="auto|cpu|cuda|cuda:N|meta",
                                       help=help_text)]


@dataclass
class OutputOptions:
    """``--format`` and ``--output`` of one command."""

    format: OutputFormat = OutputFormat.table
    output: str | None = None


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


_OUTPUT_PARAMS = (("format", FormatOpt, OutputFormat.table), ("output", OutputOpt, None))


def _output_params(output_help: str | None) -> tuple[tuple[str, Any, Any], ...]:
    """--format/--output; ``output_help`` for commands whose -o is a data file (graph, export)."""
    if output_help is None:
        return _OUTPUT_PARAMS
    opt = Annotated[str | None, typer.Option("--output", "-o", metavar="FILE", help=output_help)]
    return (_OUTPUT_PARAMS[0], ("output", opt, None))


def _inject(fn: Callable[..., Any], extra: list[inspect.Parameter], hidden: tuple[str, ...],
            build: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
    """Wrap ``fn``: Typer sees ``fn``'s own parameters (less ``hidden``) plus ``extra``; the
    wrapper turns the ``extra`` values into the hidden objects (``build``) and calls ``fn``."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name not in hidden]
    names = [p.name for p in extra]
    body = command_errors(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        picked = {n: kwargs.pop(n) for n in names if n in kwargs}
        try:
            injected = build(picked)
            _outputs_absolute(injected, kwargs)
            _check_output(injected, [*args, *kwargs.values()])
        except InspectError as exc:  # bad shared option (e.g. --device gpu): same boundary
            return command_errors(_raiser(exc))()
        return body(*args, **injected, **kwargs)

    new_sig = sig.replace(parameters=[*own, *extra])
    wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in new_sig.parameters.values()}
    del wrapper.__wrapped__  # Typer must read __signature__, not fn's own
    return wrapper


# options that name where a command writes (its own --output, --junit, --trace)
_OUTPUT_NAMES = ("output", "junit", "trace")


class OutputPath(str):
    """An output path anchored before any model code runs: its value (what ``open``,
    ``os.fspath`` and path operations see) is absolute, so a model's ``os.chdir`` cannot move
    where the command writes; messages (``f"wrote {path}"``) still show it as the user
    wrote it."""

    shown: str

    def __new__(cls, given: str) -> OutputPath:
        try:
            anchored = super().__new__(cls, os.path.abspath(given))
        except OSError:  # the working folder is gone: nothing to anchor to
            anchored = super().__new__(cls, given)
        anchored.shown = given
        return anchored

    def __format__(self, spec: str) -> str:
        return format(self.shown, spec)

    def __repr__(self) -> str:
        return repr(self.shown)


def _outputs_absolute(injected: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Output paths (``--output``, ``--junit``, ``--trace``) anchored before any model code
    runs (:class:`OutputPath`)."""
    out = injected.get("out")
    if out is not None and out.output:
        out.output = OutputPath(out.output)
    for name in _OUTPUT_NAMES:
        if isinstance(kwargs.get(name), str) and kwargs[name]:
            kwargs[name] = OutputPath(kwargs[name])


def as_written(result: R, output: object, *fields: str) -> R:
    """``result`` (a dataclass) with its path ``fields`` shown the way the user wrote
    ``output``: the core derived them from the anchored, absolute `OutputPath` (the file
    itself, a file inside it, or one beside it), and a report shows the user's own words."""
    if not isinstance(output, OutputPath):
        return result
    anchored = str(output)
    pairs = [(anchored, output.shown), (os.path.dirname(anchored), os.path.dirname(output.shown))]
    changes = {}
    for name in fields:
        value = getattr(result, name)
        if isinstance(value, str):
            changes[name] = _as_given(value, pairs)
    return dataclasses.replace(result, **changes)  # type: ignore[type-var]


def _as_given(value: str, pairs: list[tuple[str, str]]) -> str:
    for anchored, given in pairs:
        if value == anchored:
            return given or "."
        if value.startswith(anchored.rstrip(os.sep) + os.sep):
            return os.path.join(given, value[len(anchored.rstrip(os.sep)) + 1:])
    return value


def _check_output(injected: dict[str, Any], values: list[Any]) -> None:
    """Refuse, before any work, an --output that is one of the command's input files (any
    argument or option naming an existing file) or that lies in a missing folder. Whether an
    existing output may be replaced (--force) is the command's own decision."""
    out, opts = injected.get("out"), injected.get("opts")
    if out is None or not out.output:
        return
    from torchinspect.io.atomic import check_target

    named: list[str | None] = [*(opts.files() if opts is not None else ())]
    for v in values:
        named.extend(v if isinstance(v, (list, tuple)) else [v])
    check_target(out.output, force=True,
                 protect=input_files([v for v in named if isinstance(v, str)]))


def _raiser(exc: Exception) -> Callable[[], None]:
    def _raise() -> None:
        raise exc

    return _raise


def model_command(*, inputs: bool = True, device_default: str = "auto",
                  device_help: str = DEVICE_HELP, batch: bool = True,
                  outputs: bool = True, output_help: str | None = None) -> Callable[[F], F]:
    """Add the shared model and output options to a command; it receives ``opts`` and ``out``.

    ``inputs=False`` leaves out ``--input/--batch/--no-batch`` (``inspect params``).
    ``batch=False`` leaves out only ``--batch``, for a command that declares its own
    (``inspect bench --batch 1,8,32``); ``opts.batch`` is then None.
    ``outputs=False`` leaves out ``--format/--output`` (``inspect features`` uses them for
    its data files); ``out`` is then the default (a table on stdout).
    """
    extra = [
        *([_param("input", InputOpt, None)] if inputs else []),
        _param("arg", ArgOpt, None), _param("arch", ArchOpt, None),
        _param("weights", WeightsOpt, None), _param("key", KeyOpt, None),
        _param("strict", StrictOpt, True), _param("trust_pickle", TrustOpt, False),
        _param("python_path", PythonPathOpt, None),
        _param("device", _device_opt(device_help), device_default),
        *([_param("batch", BatchOpt, None)] if inputs and batch else []),
        *([_param("no_batch", NoBatchOpt, False)] if inputs else []),
        _param("published", PublishedOpt, False), _param("weights_config", WeightsConfigOpt, None),
        *(_param(n, a, d) for n, a, d in (_output_params(output_help) if outputs else ())),
    ]

    def build(v: dict[str, Any]) -> dict[str, Any]:
        config = v["weights_config"] if v["weights_config"] is not None else (
            "default" if v["published"] else None)
        opts = ModelOptions(
            inputs=v.get("input"), args=v["arg"], arch=v["arch"], weights=v["weights"],
            key=v["key"], strict=v["strict"], trust_pickle=v["trust_pickle"],
            device=parse_device(v["device"]), batch=v.get("batch"),
            no_batch=v.get("no_batch", False), weights_config=config,
            python_path=tuple(str(p) for p in v["python_path"] or ()))
        out = OutputOptions(OutputFormat(v["format"]), v["output"]) if outputs else OutputOptions()
        return {"opts": opts, "out": out}

    def deco(fn: F) -> F:
        return _inject(fn, extra, ("opts", "out"), build)  # type: ignore[return-value]

    return deco


def output_command(fn: F | None = None, *, report_file: bool = True) -> Any:
    """Add ``--format/--output`` to a command that takes no model options; it receives ``out``.
    ``@output_command(report_file=False)`` adds only ``--format``: the command's ``-o`` is its
    own product (``inspect convert``'s checkpoint) and the report goes to stdout."""
    params = _OUTPUT_PARAMS if report_file else _OUTPUT_PARAMS[:1]

    def build(v: dict[str, Any]) -> dict[str, Any]:
        return {"out": OutputOptions(OutputFormat(v["format"]), v.get("output"))}

    def deco(f: F) -> F:
        extra = [_param(n, a, d) for n, a, d in params]
        return _inject(f, extra, ("out",), build)  # type: ignore[return-value]

    return deco(fn) if fn is not None else deco


# ---------------------------------------------------------------- output


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
    if out.output:
        import io as _io

        from torchinspect.io.atomic import atomic_write_text

        buf = _io.StringIO()
        render(report, out.format, buf, width=_width())
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
            render(report, out.format, buf, width=_width())
            stdout.write("\n".join(printable(ln) for ln in buf.getvalue().split("\n")))
        else:
            render(report, out.format, stdout, width=_width())
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
    """``run(model)`` for each model. One model: its error ends the command as usual. Several:
    a model that fails does not drop the others; :func:`emit_results` shows their results,
    then the failure named by its model, and exits with its status."""
    runs = ModelRuns([], [])
    for model in models:
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


def _width() -> int | None:
    cols = os.environ.get("COLUMNS")
    if cols and cols.isdigit():
        return int(cols)
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
