"""How a command gets its shared options: ``@model_command()`` adds the model options and
``--format/--output`` to a command's signature and hands the command one
:class:`ModelOptions` (``opts``) and one :class:`OutputOptions` (``out``);
``@output_command`` adds only the output options. Both wrap the body in the error boundary
(cli/boundary.py) and anchor output paths (:class:`OutputPath`) before any model code runs.

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand

from torchinspect.cli.boundary import DEBUG, command_errors
from torchinspect.cli.options import (
    DEVICE_HELP,
    ArchOpt,
    ArgOpt,
    BatchOpt,
    DebugOpt,
    FormatOpt,
    InputOpt,
    KeyOpt,
    NoBatchOpt,
    OutputOpt,
    PublishedOpt,
    PythonPathOpt,
    StrictOpt,
    TrustOpt,
    WeightsConfigOpt,
    WeightsOpt,
    check_numbers,
    device_opt,
)
from torchinspect.cli.output import OutputOptions, input_files, output_options
from torchinspect.cli.progress import command_status
from torchinspect.device import parse_device
from torchinspect.errors import InspectError
from torchinspect.sources.case import ModelOptions

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
# click's UsageError through typer's public ancestry (typer vendors click in newer versions)
UsageError: type[Exception] = {c.__name__: c for c in typer.BadParameter.__mro__}["UsageError"]


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


_OUTPUT_PARAMS = (("format", FormatOpt, None), ("output", OutputOpt, None))


def _output_params(output_help: str | None) -> tuple[tuple[str, Any, Any], ...]:
    """--format/--output; ``output_help`` for commands whose -o is a data file (graph, export)."""
    if output_help is None:
        return _OUTPUT_PARAMS
    opt = Annotated[str | None, typer.Option("--output", "-o", metavar="FILE", help=output_help)]
    return (_OUTPUT_PARAMS[0], ("output", opt, None))


def option_fields(cls: type) -> list[inspect.Parameter]:
    """The options a command's options dataclass declares: one per field, in field order,
    each ``name: Annotated[type, typer.Option(...)] = default``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    params = []
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: an option field needs a default")
        params.append(_param(f.name, hints[f.name], f.default))
    return params


def _expand(own: list[inspect.Parameter]) -> tuple[list[inspect.Parameter], dict[str, type]]:
    """``fn``'s own parameters with each one annotated by a dataclass (its options, e.g.
    ``args: BenchArgs``) replaced by that dataclass's fields; and those groups by name."""
    params: list[inspect.Parameter] = []
    groups: dict[str, type] = {}
    for p in own:
        if isinstance(p.annotation, type) and dataclasses.is_dataclass(p.annotation):
            groups[p.name] = p.annotation
            params.extend(option_fields(p.annotation))
        else:
            params.append(p)
    return params, groups


def _pack(groups: dict[str, type], kwargs: dict[str, Any]) -> None:
    """The fields Typer filled, each group's back into its dataclass (``kwargs`` in place)."""
    for name, cls in groups.items():
        kwargs[name] = cls(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(cls)
                              if f.name in kwargs})


def _inject(fn: Callable[..., Any], extra: list[inspect.Parameter], hidden: tuple[str, ...],
            build: Callable[[dict[str, Any]], dict[str, Any]],
            progress: bool = True,
            precheck: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
            ) -> Callable[..., Any]:
    """Wrap ``fn``: Typer sees ``fn``'s own parameters (less ``hidden``, and each options
    dataclass as its fields) plus ``extra``; the wrapper turns the ``extra`` values into the
    hidden objects (``build``), runs ``precheck(arguments, hidden objects)`` (errors found
    before the command's own imports), fills the options dataclasses and calls ``fn``, under
    a status line on a terminal (cli/progress.py) unless ``progress=False``."""
    sig = inspect.signature(fn, eval_str=True)
    own, groups = _expand([p for p in sig.parameters.values() if p.name not in hidden])
    extra = [*extra, _param("debug", DebugOpt, False)]
    names = [p.name for p in extra]
    body = command_errors(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.pop("debug", False):  # `inspect summary X --debug` as `inspect --debug ...`
            DEBUG.set(True)
        with command_status(_status_text(fn.__name__, kwargs), enabled=progress):
            return run(*args, **kwargs)

    def run(*args: Any, **kwargs: Any) -> Any:
        picked = {n: kwargs.pop(n) for n in names if n in kwargs}
        try:
            injected = build(picked)
            _outputs_absolute(injected, kwargs)
            _check_output(injected, [*args, *kwargs.values()])
            if precheck is not None:
                precheck(kwargs, injected)
        except InspectError as exc:  # bad shared option (e.g. --device gpu): same boundary
            return command_errors(_raiser(exc))()
        _pack(groups, kwargs)
        return body(*args, **injected, **kwargs)

    new_sig = sig.replace(parameters=[*own, *extra])
    wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in new_sig.parameters.values()}
    del wrapper.__wrapped__  # Typer must read __signature__, not fn's own
    return wrapper


def _status_text(command: str, kwargs: dict[str, Any]) -> str:
    """``summary resnet18 resnet50``: the command and what it works on, for its status line."""
    given = next((kwargs[k] for k in ("models", "model", "a", "src") if kwargs.get(k)), None)
    named = " ".join(given) if isinstance(given, (list, tuple)) else str(given or "")
    return f"{command} {named[:60]}".strip()


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
                  outputs: bool = True, output_help: str | None = None,
                  progress: bool = True) -> Callable[[F], F]:
    """Add the shared model and output options to a command; it receives ``opts`` and ``out``.

    ``inputs=False`` leaves out ``--input/--batch/--no-batch`` (``inspect params``).
    ``batch=False`` leaves out only ``--batch``, for a command that declares its own
    (``inspect bench --batch 1,8,32``); ``opts.batch`` is then None.
    ``outputs=False`` leaves out ``--format/--output`` (``inspect features`` uses them for
    its data files); ``out`` is then the default (a table on stdout).
    ``progress=False`` for a command that draws its own progress (bench, features).
    """
    extra = [
        *([_param("input", InputOpt, None)] if inputs else []),
        _param("arg", ArgOpt, None), _param("arch", ArchOpt, None),
        _param("weights", WeightsOpt, None), _param("key", KeyOpt, None),
        _param("strict", StrictOpt, True), _param("trust_pickle", TrustOpt, False),
        _param("python_path", PythonPathOpt, None),
        _param("device", device_opt(device_help), device_default),
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
        out = (output_options(v["format"], v["output"], by_extension=output_help is None)
               if outputs else OutputOptions())
        return {"opts": opts, "out": out}

    def deco(fn: F) -> F:
        return _inject(fn, extra, ("opts", "out"), build, progress,  # type: ignore[return-value]
                       _model_name_known)

    return deco


def _model_name_known(kwargs: dict[str, Any], injected: dict[str, Any]) -> None:
    """One MODEL naming no zoo or torchvision model: the did-you-mean error now, before the
    command imports torch (several models: each fails on its own, the others still run)."""
    given = kwargs.get("models") or kwargs.get("model")
    texts = [given] if isinstance(given, str) else list(given or [])
    if len(texts) == 1 and injected["opts"].arch is None:
        from torchinspect.sources.resolve import check_model_text

        check_model_text(texts[0])


def output_command(fn: F | None = None, *, report_file: bool = True) -> Any:
    """Add ``--format/--output`` to a command that takes no model options; it receives ``out``.
    ``@output_command(report_file=False)`` adds only ``--format``: the command's ``-o`` is its
    own product (``inspect convert``'s checkpoint) and the report goes to stdout."""
    params = _OUTPUT_PARAMS if report_file else _OUTPUT_PARAMS[:1]

    def build(v: dict[str, Any]) -> dict[str, Any]:
        return {"out": output_options(v["format"], v.get("output"), by_extension=report_file)}

    def deco(f: F) -> F:
        extra = [_param(n, a, d) for n, a, d in params]
        return _inject(f, extra, ("out",), build)  # type: ignore[return-value]

    return deco(fn) if fn is not None else deco


class InspectCommand(TyperCommand):
    """A subcommand whose help reads as a person writes it: the usage line is
    ``inspect summary [OPTIONS] MODEL...`` (required arguments bare, optional ones in
    brackets, ``...`` once for several), an argument with a metavar shows no Python type
    (``MODEL...`` rather than ``MODEL... <list[str]>``), and a number option without a
    metavar shows ``N`` (whole) or ``NUM`` rather than ``<int range>``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        params: list[Any] = list(self.params)
        for p in params:
            if p.param_type_name == "argument" and p.metavar:
                p.display_type_rich = _no_type
            elif p.param_type_name == "option" and not p.metavar and not p.is_flag:
                kind = _number_kind(p)
                if kind is not None:
                    p.metavar = "N" if kind is int else "NUM"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Click's parsing, then every number option within its bounds (cli/options.py:
        NUMBER_BOUNDS): an infinite, NaN or absurd value is a usage error before the command
        runs."""
        rest = super().parse_args(ctx, args)
        params: list[Any] = list(self.params)
        numbers = {p.name: next((o for o in p.opts if o.startswith("--")), p.opts[0])
                   for p in params if p.param_type_name == "option" and not p.is_flag
                   and _number_kind(p) is not None}
        try:
            check_numbers({k: v for k, v in ctx.params.items() if k in numbers}, numbers)
        except InspectError as exc:
            raise UsageError(exc.message, ctx=ctx) from None  # type: ignore[call-arg]
        return rest

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The help, wrapped at spaces only: never ``--save-`` / ``baseline`` or ``max-`` /
        ``autotune`` across two lines (the text wrapper breaks at hyphens by default)."""
        write_dl, write_text = formatter.write_dl, formatter.write_text

        def dl(rows: Any, *args: Any, **kwargs: Any) -> None:
            write_dl([(term, text.replace("-", _KEEP)) for term, text in rows], *args, **kwargs)

        formatter.write_dl = dl
        formatter.write_text = lambda text: write_text(text.replace("-", _KEEP))
        try:
            super().format_help(ctx, formatter)
        finally:
            formatter.write_dl, formatter.write_text = write_dl, write_text
            formatter.buffer[:] = [part.replace(_KEEP, "-") for part in formatter.buffer]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if p.param_type_name == "argument":
                pieces.append(_usage_name(p))
            else:
                pieces.extend(p.get_usage_pieces(ctx))
        return pieces


_KEEP = "\u2011"  # a hyphen the text wrapper does not break at, put back after wrapping


def _number_kind(p: Any) -> type | None:
    """int or float for a number option (click's ParamType, or typer's annotation)."""
    name = getattr(getattr(p, "type", None), "name", "")
    if name:
        return int if name.startswith("integer") else float if name.startswith("float") else None
    desc = getattr(p, "type_descriptor", None)
    ann = getattr(desc, "annotation", None)
    args = [a for a in getattr(ann, "__args__", ()) if a is not type(None)]
    ann = args[0] if len(args) == 1 else ann
    return ann if ann in (int, float) and ann is not bool else None


def _no_type(ctx: Any) -> None:
    return None


def _usage_name(p: Any) -> str:
    """``MODEL...`` (required, several), ``[B]`` (optional), ``[MODEL]...``."""
    name = (p.metavar or p.name.upper()).strip("[]{}.")
    name = name.removesuffix("]").removeprefix("[")
    shown = name if p.required else f"[{name}]"
    return shown + ("..." if p.nargs != 1 else "")
