"""`inspect diff A B`: why a state_dict won't load, key by key (exit 0 loads, 1 incompatible)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from torchinspect.cli.common import (
    ArchOpt,
    ArgOpt,
    KeyOpt,
    OutputOptions,
    TrustOpt,
    emit,
    output_command,
)
from torchinspect.errors import ExitStatus, InspectError

if TYPE_CHECKING:
    from torchinspect.io.diff import DiffSide

SideArg = Annotated[str, typer.Argument(
    metavar="A", help="target: a model (resnet18, zoo:NAME, file.py:Name) or a checkpoint file.",
    show_default=False)]
OtherArg = Annotated[str | None, typer.Argument(
    metavar="B", help="weights to load into A: a checkpoint file (or a model). Omit it and pass "
    "--arch to compare one checkpoint (A) against an architecture.", show_default=False)]
AutoPrefixOpt = Annotated[bool, typer.Option(
    "--auto-prefix", help="apply the best prefix remap of B's keys (module., _orig_mod., model., ...).")]
StrictExitOpt = Annotated[bool, typer.Option(
    "--strict", help="exit 1 unless B loads into A with strict=True.")]
ValuesOpt = Annotated[bool, typer.Option(
    "--values", help="also compare values (max abs diff, allclose); needs two checkpoint files.")]
RtolOpt = Annotated[float, typer.Option("--rtol", help="relative tolerance for --values.")]
AtolOpt = Annotated[float, typer.Option("--atol", help="absolute tolerance for --values.")]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, help="rows shown per list in table output "
                                       "(JSON always has every key).")]

_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".tar")


def _resolve_side(spec: str, *, args: list[str] | None, key: str | None,
                  trust_pickle: bool) -> DiffSide:
    from pathlib import Path

    from torchinspect.io.diff import checkpoint_side, model_side
    from torchinspect.io.formats import detect_format

    path = Path(spec)
    if path.is_file():
        if not detect_format(path).is_model_archive:
            return checkpoint_side(path, key=key, trust_pickle=trust_pickle)
    elif path.suffix in _WEIGHT_SUFFIXES and ":" not in spec:
        raise InspectError(f"{spec}: no such file", hint="check the path")
    from torchinspect.sources import load_model

    loaded = load_model(spec, args=args, trust_pickle=trust_pickle, device="meta")
    return model_side(spec, loaded.model.state_dict(), loaded.notes)


def _is_weights_file(spec: str) -> bool:
    from pathlib import Path

    from torchinspect.io.formats import detect_format

    path = Path(spec)
    return path.is_file() and not detect_format(path).is_model_archive


@output_command
def diff(
    a: SideArg,
    b: OtherArg = None,
    arch: ArchOpt = None,
    arg: ArgOpt = None,
    key: KeyOpt = None,
    auto_prefix: AutoPrefixOpt = False,
    strict: StrictExitOpt = False,
    values: ValuesOpt = False,
    rtol: RtolOpt = 1e-5,
    atol: AtolOpt = 1e-8,
    trust_pickle: TrustOpt = False,
    limit: LimitOpt = 40,
    *,
    out: OutputOptions,
) -> None:
    """Compare two state_dicts: matched, missing, unexpected, shape/dtype mismatches, prefixes.

    A is the target (a model or a checkpoint), B the weights loaded into it; when one side is
    a model and the other a weights file, the model is the target whatever the order. Exit 0 when B
    loads into A (strict or not), 1 when incompatible (or not strict, with --strict).
    """
    from torchinspect.io.diff import Verdict, compare_values, diff_state_dicts
    from torchinspect.report.diff import diff_report

    if b is None and arch is None:
        raise InspectError("diff needs two sides: A B, or CHECKPOINT --arch MODEL",
                           hint="e.g. inspect diff resnet18 ckpt.pth, or inspect diff ckpt.pth --arch resnet18")
    if b is not None and arch is not None:
        raise InspectError("pass either B or --arch, not both",
                           hint="inspect diff MODEL CKPT is the same as inspect diff CKPT --arch MODEL")
    target, weights = (arch, a) if b is None else (a, b)
    if b is not None and _is_weights_file(a) and not _is_weights_file(b):
        target, weights = b, a  # `diff CKPT MODEL` asks whether CKPT loads into MODEL
    side_a = _resolve_side(target, args=arg, key=key, trust_pickle=trust_pickle)  # type: ignore[arg-type]
    side_b = _resolve_side(weights, args=arg, key=key, trust_pickle=trust_pickle)
    result = diff_state_dicts(side_a, side_b, auto_prefix=auto_prefix)
    if values:
        compare_values(result, trust_pickle=trust_pickle, rtol=rtol, atol=atol)
    emit(diff_report(result, fmt=out.format, limit=limit), out, [a, b, arch])
    verdict = result.verdict
    if verdict is Verdict.incompatible or (strict and verdict is not Verdict.strict):
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
