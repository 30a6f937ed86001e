"""One vocabulary across the commands (issue 24): a test walks every command's options.

The same option name means the same thing (same help text, or each command's meaning declared
in MEANINGS, checked against its help and default) and has the same type in every command; the short names are the
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
    default: Any = None


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
                           " ".join((p.help or "").split()), p.default))
    return out


OPTIONS = _options()
OLD_TYPER = any(o.type == "?" for o in OPTIONS)
needs_annotations = pytest.mark.skipif(OLD_TYPER, reason="this typer keeps no option annotations")
BY_NAME: dict[str, list[Opt]] = defaultdict(list)
for _o in OPTIONS:
    BY_NAME[_o.name].append(_o)
SHARED = sorted(n for n, opts in BY_NAME.items() if len({o.command for o in opts}) > 1)

# Options whose wording or default differs between commands. Each command's meaning is stated
# here, with words its help must say and its default, so a difference is a documented, checked
# fact and never a switched-off check: (meaning, words in the help, default). "*" is the shared
# meaning of every command not named (their helps must then be one text). A command that adds
# the option must be named here or use the shared wording, or the test fails.
MEANINGS: dict[str, dict[str, tuple[str, str, Any]]] = {
    "--device": {
        "*": ("where the model is traced: meta, with a CPU fallback", "where to trace", "auto"),
        "graph": ("autograd graph: where the forward runs; module graph: where it is traced",
                  "autograd: where the forward runs", "auto"),
        "export": ("where the model runs for the export (auto = cpu)",
                   "where the model runs for export", "auto"),
        "doctor": ("where the checks that need a real run run (the rest use meta)",
                   "where the checks that need a real run", "cpu"),
        "bench": ("where the timed forwards run", "where to run", "cpu"),
        "features": ("where the extraction runs; one GPU per rank under torchrun",
                     "where to run", "cpu"),
        "report": ("trace on meta; real runs (--bench, --doctor-run) on the CPU",
                   "auto = trace on meta", "auto"),
        "memory": ("the device the prediction is FOR (nothing runs there): cuda or cpu",
                   "the device the prediction is for", "cuda"),
    },
    "--output": {
        "*": ("where the report goes (an atomic file)", "write the report to FILE", None),
        "convert": ("the converted checkpoint (the product; the report goes to stdout)",
                    "the converted checkpoint to write", None),
        "graph": ("the picture or its source (the product)", "the picture", None),
        "export": ("the ONNX file (the product)", "the ONNX file to write", None),
        "features": ("the output folder of shards and manifest (the product)",
                     "output folder", None),
    },
    "--depth": {
        "*": ("the deepest module level shown as rows", "deepest module level shown", 3),
        "graph": ("the module depth below which the graph collapses into one node",
                  "collapse everything below this module depth", None),
    },
    "--dtype": {
        "convert": ("the dtype floating tensors are cast to (default: kept)",
                    "cast floating tensors", None),
        "bench": ("weights and float inputs cast to it; a comma list sweeps",
                  "weights and float inputs cast to this dtype", "fp32"),
        "features": ("the compute dtype (fp16/bf16 through autocast)", "compute dtype", "fp32"),
        "memory": ("weights and float inputs cast to it (default: kept)",
                   "cast weights and float inputs", None),
    },
    "--all": {command: ("list every row instead of the most common; JSON always lists all",
                        "JSON always lists all", False) for command in ("convert", "graph", "export")},
    "--atol": {
        "diff": ("absolute tolerance of --values", "absolute tolerance", 1e-08),
        "export": ("absolute tolerance of the ONNX verification", "absolute tolerance", 1e-4),
    },
    "--rtol": {
        "diff": ("relative tolerance of --values", "relative tolerance", 1e-05),
        "export": ("relative tolerance of the ONNX verification", "relative tolerance", 1e-3),
    },
    "--allow-partial": {
        "diff": ("exit 0 when some of A's tensors get no value", "get no value", False),
        "convert": ("write even when some model tensors get no value (with --arch)",
                    "get no value", False),
    },
    "--auto-prefix": {
        "diff": ("apply the best prefix remap of B's keys", "apply the best prefix remap", False),
        "convert": ("apply the best prefix remap of the keys, as diff does",
                    "apply the best prefix remap", False),
    },
    "--shard-size": {
        "convert": ("the largest safetensors shard (default: one file)", "at most SIZE", None),
        "features": ("the largest feature shard file", "largest shard file", "1GB"),
    },
    "--strict": {
        "*": ("the loaded weights must match every key (strict=True)",
              "require every key to match", True),
        "diff": ("exit 1 unless B loads with strict=True (a check, so off by default)",
                 "unless B loads into A with strict=True", False),
    },
    "--batch": {
        "*": ("the batch dimension prepended to the --input shapes", "batch size (prepended", None),
        "bench": ("the batch sizes of the sweep", "batch sizes to sweep", None),
        "memory": ("the batch sizes to predict", "batch sizes to predict", None),
        "features": ("inputs per forward (default 64, smaller when it does not fit)",
                     "the batch a forward runs with", None),
    },
    "--train": {
        "*": ("trace in training mode (default eval)", "trace in training mode", False),
        "memory": ("also predict a training step: on by default, the command's purpose",
                   "also predict a training step", True),
        "bench": ("with --predict: predict a training step instead of a forward",
                  "predict an eager training step", False),
    },
    "--gpu": {  # a GPU by name (h100, a100, ...) that a prediction is made for
        "memory": ("the GPU whose cuBLAS workspace size to count", "cuBLAS workspace", None),
        "summary": ("the GPU the time column and the memory lines are predicted for",
                    "the `time` column", None),
        "check": ("the GPU the memory budgets are predicted for, and the latency budget when "
                  "no CUDA is here", "judge the latency predicted", None),
        "report": ("the GPU whose predicted latency, roofline and memory the page shows",
                   "roofline chart", None),
    },
    "--verify": {
        "export": ("run the ONNX file in onnxruntime and compare (on when installed)",
                   "compare with PyTorch", None),
        "memory": ("run the steps on the GPU and compare with the prediction",
                   "compare each phase with the prediction", False),
    },
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
    if name not in MEANINGS:  # one meaning, one help text
        helps = {o.help for o in opts}
        assert len(helps) == 1, {o.command: o.help for o in opts}
    assert all(o.help for o in opts), [o.command for o in opts if not o.help]


@pytest.mark.parametrize("name", sorted(MEANINGS))
def test_an_option_whose_meaning_differs_says_so_in_each_command(name: str) -> None:
    """Each command's meaning of the option is declared in MEANINGS, its help says it and its
    default is the declared one; the commands that share the "*" meaning share one help."""
    table = MEANINGS[name]
    opts = BY_NAME[name]
    assert set(table) - {"*"} <= {o.command for o in opts}, "a row for a command without it"
    for o in opts:
        declared = table.get(o.command, table.get("*"))
        assert declared is not None, f"{o.command} {name}: declare its meaning in MEANINGS"
        meaning, words, default = declared
        assert words in o.help, (o.command, name, meaning, o.help)
        assert o.default == default, (o.command, name, meaning, o.default)
    shared = {o.help for o in opts if o.command not in table}
    assert len(shared) <= 1, {o.command: o.help for o in opts if o.command not in table}


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
    from torchinspect.cli.commands import COMMANDS

    result = invoke("--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0
    listing = " ".join(result.output.split("Commands:")[1].split())
    assert "..." not in listing
    root = typer.main.get_command(app)
    for name, _, _ in COMMANDS:
        summary = " ".join(root.commands[name].help.split("\n\n")[0].split())
        assert f"{name} {summary}" in listing, name
