"""Every option shared by two or more commands, declared once (pip's ``cmdoptions``).

A command module imports its options from here; an option only one command has stays in
that command's module. Where commands word one meaning for themselves (``--device``,
``--dtype``, ``--train``, ``--all``, ``--atol``/``--rtol``, a sweep's ``--batch``, ``--gpu``,
``--auto-prefix``, ``--allow-partial``, ``--shard-size``), a
function here returns the ``typer.Option`` with the one spelling and metavar, and the
command passes its help text: ``Annotated[bool, all_opt("list every node type ...")]``. The model options
(``--input --arg --arch --weights --key --strict --trust-pickle --python-path --device
--batch --no-batch --published --weights-config``) and ``--format/--output`` are added to a
command by ``@model_command``/``@output_command`` (cli/command.py).

No torch here: importing this module must stay instant (`inspect --help`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from torchinspect.arguments import MAX_BATCH, MAX_COUNT, MAX_SECONDS, bounded, max_threads
from torchinspect.errors import InspectError
from torchinspect.report.render import OutputFormat

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
DepthOpt = Annotated[int, typer.Option("--depth", min=0, help="deepest module level shown as rows "
                                       "(deeper layers are folded into their parent).")]
FormatOpt = Annotated[
    OutputFormat | None, typer.Option("--format", "-f", help="output format.", case_sensitive=False,
                                      show_default=False)
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", metavar="FILE", help="write the report to FILE "
                             "(atomic); without -f its extension picks the format: .json, .csv, "
                             ".md, .html, else a table.")
]
DebugOpt = Annotated[bool, typer.Option(
    "--debug", help="show Python tracebacks for errors (also before the command: inspect "
    "--debug COMMAND).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="replace the output if it exists (never an input).")]

DEVICE_HELP = "where to trace: auto = meta (no memory) with a CPU fallback; meta; cpu; cuda[:N]."


def device_opt(help_text: str) -> Any:
    """``-d/--device``: one spelling and metavar; the help says what the device is for here."""
    return Annotated[str, typer.Option("--device", "-d", metavar="auto|cpu|cuda|cuda:N|meta",
                                       help=help_text)]


def train_opt(help_text: str) -> Any:
    """``--train/--no-train``: training mode instead of eval. Summary and flops trace the
    forward in it (default off); memory predicts a training step (default on)."""
    return typer.Option("--train/--no-train", help=help_text)


TrainOpt = Annotated[bool, train_opt("trace in training mode (default: eval).")]

DTYPE_WORDS = "fp32|fp16|bf16"


def dtype_opt(help_text: str, *, sweep: bool = False, parser: Any = None) -> Any:
    """``--dtype fp32|fp16|bf16``: the dtype weights or compute are cast to (the words of
    ``dtypes.SHORT``); ``sweep`` takes a comma list, one run each (bench). The cores check
    the value (each names its own fix)."""
    extra = {"parser": parser} if parser is not None else {}
    return typer.Option("--dtype", metavar=DTYPE_WORDS + ("[,...]" if sweep else ""),
                        help=help_text, show_default=False, **extra)


AmpOpt = Annotated[bool, typer.Option("--amp", help="fp32 weights, forward under torch.autocast "
                                      "(--dtype fp16/bf16; fp32 means fp16 on CUDA, bf16 on CPU).")]
OptimizerOpt = Annotated[str, typer.Option(
    "--optimizer", metavar="adamw|adam|sgd|sgd-momentum|none",
    help="the optimizer of the training step (PyTorch's defaults: foreach on CUDA).")]


def amp_split(dtype: str | None, amp: bool) -> tuple[str | None, str | None]:
    """(weights dtype, autocast dtype) of a training step from --dtype and --amp: with --amp
    the weights stay fp32 and --dtype names the autocast dtype (fp32 or none: fp16)."""
    if not amp:
        return dtype, None
    return None, (dtype if dtype not in (None, "fp32") else "fp16")


def batches_opt(help_text: str) -> Any:
    """``-b/--batch N[,N...]``: batch sizes to sweep (bench, memory); the others take one."""
    return typer.Option("--batch", "-b", metavar="N[,N...]", help=help_text)


def all_opt(help_text: str) -> Any:
    """``--all``: every row instead of the most common (JSON always lists all)."""
    return typer.Option("--all", help=help_text)


def atol_opt(help_text: str) -> Any:
    """``--atol``: absolute tolerance of a value comparison (checked by :func:`tolerance`)."""
    return typer.Option("--atol", help=help_text)


def rtol_opt(help_text: str) -> Any:
    """``--rtol``: relative tolerance of a value comparison (checked by :func:`tolerance`)."""
    return typer.Option("--rtol", help=help_text)


def gpu_opt(help_text: str, *, metavar: str = "NAME") -> Any:
    """``--gpu NAME``: a GPU by name (h100, a100, l4, ...) that a prediction is made for; no
    GPU is needed. The help says what is predicted for it."""
    return typer.Option("--gpu", metavar=metavar, help=help_text, show_default=False)


def auto_prefix_opt(help_text: str) -> Any:
    """``--auto-prefix``: apply the best prefix remap of checkpoint keys (diff, convert)."""
    return typer.Option("--auto-prefix", help=help_text)


def allow_partial_opt(help_text: str) -> Any:
    """``--allow-partial``: go on (exit 0, write) when some tensors get no value."""
    return typer.Option("--allow-partial", help=help_text)


def shard_size_opt(help_text: str) -> Any:
    """``--shard-size SIZE``: the largest shard file to write (5GB, 500MB)."""
    return typer.Option("--shard-size", metavar="SIZE", help=help_text)


# text generation (inspect memory and inspect bench): trace/generation.py, docs/concepts/serving.md
MAX_NEW_TOKENS = 1 << 20
GenerateOpt = Annotated[int | None, typer.Option(
    "--generate", metavar="N", min=1, max=MAX_NEW_TOKENS, show_default=False,
    help="text generation of N new tokens after the token input (--input long:BATCH,PROMPT "
    "--no-batch): a decoder's KV cache, prefill and decode.")]
CacheOpt = Annotated[str, typer.Option(
    "--cache", metavar="dynamic|static|quantized",
    help="with --generate: the KV cache generate uses (transformers' cache_implementation; "
    "quantized: the FP8 QuantizedCache).")]
CacheArgOpt = Annotated[str | None, typer.Option(
    "--cache-arg", metavar="NAME", show_default=False,
    help="with --generate: the keyword a model of your own takes its cache by (default: cache; "
    "its forward returns (logits, cache)).")]
RecomputeOpt = Annotated[bool, typer.Option(
    "--recompute", help="with --generate: a model without a KV cache runs the whole sequence "
    "again for every new token; price that.")]


def tolerance(value: float, option: str) -> float:
    """A --atol/--rtol value: finite and not negative (nan would make every comparison pass)."""
    if not value >= 0 or value == float("inf"):
        raise InspectError(f"{option} {value}: a tolerance must be a finite number >= 0",
                           hint=f"e.g. {option} 1e-5")
    return value


# ------------------------------------------------------------------ bounds of number options


#: Every number option of every command: (least, most, unit, why the most), checked after
#: parsing and before the command runs (cli/command.py: InspectCommand), so ``--warmup inf``,
#: ``--threads 100000`` or ``--batch-size 1000000000000`` are one line and exit 2, never a
#: run that does not end, a crash in libgomp or 80 s before "ran out of memory". ``most`` may
#: be a function (a bound of this machine). A row that is a text names the check the command
#: makes itself, with its own words (a finite tolerance >= 0; 1 to 1,024 FSDP ranks). A new
#: number option needs a row (tests/test_absurd_sizes.py checks that every one has).
NUMBER_BOUNDS: dict[str, tuple[float, Any, str, str] | str] = {
    "--batch": (1, MAX_BATCH, "samples per batch", "more than any machine holds"),
    "--batch-size": (1, MAX_BATCH, "samples per batch", "more than any machine holds"),
    "--threads": (1, max_threads, "threads", "4 x this machine's CPUs"),
    "--workers": (0, max_threads, "worker processes", "4 x this machine's CPUs"),
    "--warmup": (0, MAX_SECONDS, "seconds", "a day"),
    "--min-time": (0, MAX_SECONDS, "seconds", "a day"),
    "--max-time": (0, MAX_SECONDS, "seconds", "a day"),
    "--bench-seconds": (0, MAX_SECONDS / 3, "seconds", "8 hours: a part may time 3 x it"),
    "--min-iters": (1, MAX_COUNT, "iterations", "a billion"),
    "--target": (0, 100, "percent", ""),
    "--tolerance": (0, 1e6, "a relative error", ""),
    "--atol": "cli/options.py: tolerance (finite, >= 0)",
    "--rtol": "cli/options.py: tolerance (finite, >= 0)",
    "--depth": (0, MAX_COUNT, "levels", ""),
    "--graph-depth": (0, MAX_COUNT, "levels", ""),
    "--top": (0, MAX_COUNT, "rows", ""),
    "--limit": (1, MAX_COUNT, "rows", ""),
    "--opset": (7, 99, "an ONNX opset", ""),
    "--resize": (1, 65_536, "pixels", "larger than any image file holds"),
    "--crop": (1, 65_536, "pixels", "larger than any image file holds"),
    "--fsdp": "memory/step.py: StepConfig (1 to MAX_FSDP_RANKS GPUs)",
    "--generate": (1, MAX_NEW_TOKENS, "new tokens", "a million tokens"),
}


def check_numbers(params: dict[str, Any], options: dict[str, str]) -> None:
    """Every number option given (``params``: name -> value; ``options``: name -> its
    ``--flag``) within :data:`NUMBER_BOUNDS`; InspectError (exit 2) for the first that is not."""
    for name, value in params.items():
        flag = options.get(name)
        if flag is None or value is None or isinstance(value, bool):
            continue
        bound = NUMBER_BOUNDS[flag]
        if isinstance(bound, str):
            continue  # the command's own check
        least, most, unit, why = bound
        bounded(value, flag, least=least, most=most() if callable(most) else most, unit=unit,
                why=why)
