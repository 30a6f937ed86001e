"""One vocabulary across the commands (issue 24): a test walks every command's options.

The same option name means the same thing (same help text, or an equivalence declared
below with its reason) and has the same type in every command; the short names are the
same everywhere (``-f`` = ``--format``, ``-o`` = ``--output``, ``-b`` = ``--batch``, ...).
Hidden options are deprecated aliases and stay out of the vocabulary.
"""

from __future__ import annotations

import types
import typing
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
import typer

from torchinspect.cli.app import app


@dataclass(frozen=True)
class Opt:
    command: str
    name: str  # the long name, e.g. --format
    names: tuple[str, ...]  # every spelling, e.g. ("-f", "--format")
    type: str
    help: str


def _type(param: Any) -> str:
    """The option's Python type, Optional removed; flags are 'flag'."""
    if param.is_flag:
        return "flag"
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:  # older typer keeps no annotation: the type checks skip (see OLD_TYPER)
        return "?"
    ann = descriptor.annotation
    if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = args[0] if len(args) == 1 else ann
    return getattr(ann, "__name__", None) or str(ann)


def _options() -> list[Opt]:
    root = typer.main.get_command(app)
    out = []
    for command, cmd in root.commands.items():
        for p in cmd.params:
            if p.param_type_name != "option" or p.hidden:
                continue
            long = next((o for o in p.opts if o.startswith("--")), p.opts[0])
            out.append(Opt(command, long, (*p.opts, *p.secondary_opts), _type(p),
                           " ".join((p.help or "").split())))
    return out


OPTIONS = _options()
OLD_TYPER = any(o.type == "?" for o in OPTIONS)
needs_annotations = pytest.mark.skipif(OLD_TYPER, reason="this typer keeps no option annotations")
BY_NAME: dict[str, list[Opt]] = defaultdict(list)
for _o in OPTIONS:
    BY_NAME[_o.name].append(_o)
SHARED = sorted(n for n, opts in BY_NAME.items() if len({o.command for o in opts}) > 1)

# one meaning, worded for each command (the reason is the meaning they share)
EQUIVALENT = {
    "--device": "where the model runs or is traced; each command says its default",
    "--output": "where the command's product goes; each help says what it is",
    "--depth": "the deepest module level shown",
    "--dtype": "the dtype the weights/compute are cast to",
    "--all": "list every row instead of the most common (JSON always lists all)",
    "--atol": "absolute tolerance of a value comparison",
    "--rtol": "relative tolerance of a value comparison",
    "--allow-partial": "accept a state_dict that leaves some tensors without a value",
    "--auto-prefix": "apply the best prefix remap of the keys",
    "--shard-size": "the largest shard file (e.g. 500MB)",
    "--strict": "require every key to match when a state_dict is loaded (strict=True)",
    "--batch": "the batch dimension a forward runs with (prepended to --input shapes)",
    "--train": "training mode instead of eval (summary/flops trace it, memory predicts a step)",
    "--gpu": "the GPU, by name (h100, a100, ...), a prediction is made for; each help says "
             "what it predicts there",
    "--verify": "run the real thing and compare it with what the command produced; exit 1 "
                "beyond the tolerance",
}
# a command that sweeps takes a list where the others take one value
TYPE_EXCEPTIONS = {("bench", "--batch"): "a sweep: --batch 1,8,32",
                   ("memory", "--batch"): "a sweep: --batch 1,8,32"}
# other helpers' areas that still break the vocabulary: xfail(strict) flips when fixed
PENDING: dict[str, str] = {}
SHORT = {"-f": "--format", "-o": "--output", "-b": "--batch", "-d": "--device", "-i": "--input",
         "-a": "--arg"}
# spellings of an idea that has its one name already
NOT_NAMES = {"--batch-size": "--batch", "--report": "--format", "--out": "--output"}


def _pending(name: str) -> Any:
    if name in PENDING:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=PENDING[name]))
    return name


def test_the_walk_sees_every_command() -> None:
    commands = {o.command for o in OPTIONS}
    assert {"summary", "bench", "flops", "doctor", "env", "report", "features"} <= commands
    assert {"--format", "--output", "--batch", "--device"} <= set(SHARED)


@needs_annotations
@pytest.mark.parametrize("name", [_pending(n) for n in SHARED])
def test_same_name_same_meaning_and_type(name: str) -> None:
    opts = BY_NAME[name]
    types_ = {o.type for o in opts if (o.command, name) not in TYPE_EXCEPTIONS}
    assert len(types_) == 1, {o.command: o.type for o in opts}
    if name not in EQUIVALENT:
        helps = {o.help for o in opts}
        assert len(helps) == 1, {o.command: o.help for o in opts}
    assert all(o.help for o in opts), [o.command for o in opts if not o.help]


@pytest.mark.parametrize("short", sorted(SHORT))
def test_short_names_mean_one_option(short: str) -> None:
    wrong = {o.command: o.name for o in OPTIONS if short in o.names and o.name != SHORT[short]}
    assert not wrong


@needs_annotations
def test_format_is_the_report_format_everywhere() -> None:
    from torchinspect.report import OutputFormat

    for o in BY_NAME["--format"]:
        assert o.type == OutputFormat.__name__, o


@pytest.mark.parametrize("command", sorted({o.command for o in OPTIONS}))
def test_one_name_per_idea(command: str) -> None:
    names = {o.name for o in OPTIONS if o.command == command}
    assert not {n: NOT_NAMES[n] for n in names & set(NOT_NAMES)}


def test_convert_output_is_the_product() -> None:
    """-o/--output is where the product goes: for convert, the converted checkpoint."""
    root = typer.main.get_command(app)
    opts = {o: p for p in root.commands["convert"].params for o in p.opts}
    assert "converted checkpoint" in (opts["--output"].help or "")
    assert opts["-o"] is opts["--output"]


def test_deprecated_aliases_stay_hidden() -> None:
    root = typer.main.get_command(app)
    flops = {o: p for p in root.commands["flops"].params for o in p.opts}
    assert flops["--compare"].hidden and not flops["--cross-check"].hidden


def test_help_lists_every_command_whole(invoke) -> None:
    from torchinspect.cli.app import COMMANDS

    result = invoke("--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0
    listing = " ".join(result.output.split("Commands:")[1].split())
    assert "..." not in listing
    root = typer.main.get_command(app)
    for name, _, _ in COMMANDS:
        summary = " ".join(root.commands[name].help.split("\n\n")[0].split())
        assert f"{name} {summary}" in listing, name
