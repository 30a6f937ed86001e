"""`inspect diff A B`: why a state_dict won't load, key by key (exit 0 loads, 1 incompatible)."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import output_command
from torchinspect.cli.options import (
    MODEL_FORMS,
    ArchOpt,
    ArgOpt,
    KeyOpt,
    TrustOpt,
    allow_partial_opt,
    atol_opt,
    auto_prefix_opt,
    rtol_opt,
)
from torchinspect.cli.output import OutputOptions, emit
from torchinspect.errors import ExitStatus

SideArg = Annotated[str, typer.Argument(
    metavar="A", help=f"target: a checkpoint file or a model ({MODEL_FORMS}).",
    show_default=False)]
OtherArg = Annotated[str | None, typer.Argument(
    metavar="B", help="weights to load into A: a checkpoint file (or a model). Omit it and pass "
    "--arch to compare one checkpoint (A) against an architecture.", show_default=False)]
AutoPrefixOpt = Annotated[bool, auto_prefix_opt(
    "apply the best prefix remap of B's keys (module., _orig_mod., model., ...).")]
StrictExitOpt = Annotated[bool, typer.Option(
    "--strict", help="exit 1 unless B loads into A with strict=True.")]
ValuesOpt = Annotated[bool, typer.Option(
    "--values", help="also compare values (max abs diff, allclose); needs two checkpoint files.")]
RtolOpt = Annotated[float, rtol_opt("relative tolerance for --values.")]
AtolOpt = Annotated[float, atol_opt("absolute tolerance for --values.")]
LimitOpt = Annotated[int | None, typer.Option(
    "--limit", min=1, show_default=False,
    help="rows shown per list in table output (default 40; only the counts of missing and "
    "unexpected keys when a prefix remap names the fix; JSON always has every key).")]

AllowPartialOpt = Annotated[bool, allow_partial_opt(
    "exit 0 even when some of A's tensors get no value from B.")]


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
    limit: LimitOpt = None,
    allow_partial: AllowPartialOpt = False,
    *,
    out: OutputOptions,
) -> None:
    """Compare two state_dicts: matched, missing, unexpected, shape/dtype mismatches, prefixes.

    A is the target (a model or a checkpoint: file, sharded index/folder, DCP folder), B the
    weights loaded into it; when one side is a model and the other weights, the model is the
    target whatever the order. Exit 0 when every tensor of A gets a value from B (extra keys in
    B are a note); 1 when some are missing (unless --allow-partial), on a shape mismatch, or
    with --strict unless it loads with strict=True.
    """
    from torchinspect.checkpoints import diff_specs
    from torchinspect.checkpoints.diff import Verdict
    from torchinspect.cli.options import tolerance
    from torchinspect.report.diff import diff_report
    from torchinspect.sources.case import ModelOptions

    rtol, atol = tolerance(rtol, "--rtol"), tolerance(atol, "--atol")
    result = diff_specs(a, b, arch=arch, options=ModelOptions(args=arg, trust_pickle=trust_pickle),
                        key=key, trust_pickle=trust_pickle, auto_prefix=auto_prefix,
                        values=values, rtol=rtol, atol=atol)
    emit(diff_report(result, fmt=out.format, limit=limit), out, [a, b, arch])
    verdict = result.verdict
    if strict and verdict is not Verdict.strict:
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
    if verdict is Verdict.incompatible or (verdict is Verdict.partial and not allow_partial):
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))
