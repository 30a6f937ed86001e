"""`inspect convert IN OUT` (or `IN -o OUT`): a CPU state_dict that loads (.pt/.pth or
.safetensors), verified. The report goes to stdout: -o is the converted checkpoint."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.command import output_command
from torchinspect.cli.options import (
    ArchOpt,
    ArgOpt,
    ForceOpt,
    KeyOpt,
    TrustOpt,
    all_opt,
    allow_partial_opt,
    auto_prefix_opt,
    dtype_opt,
    shard_size_opt,
)
from torchinspect.cli.output import OutputOptions, emit

InArg = Annotated[str, typer.Argument(metavar="IN", help="checkpoint to convert (never modified).",
                                      show_default=False)]
_OUT_FORMATS = "*.pt/*.pth, *.safetensors, or NAME.dcp (a DCP folder)"
OutArg = Annotated[str | None, typer.Argument(
    metavar="OUT", help=f"the converted checkpoint: {_OUT_FORMATS}; or give it with -o.",
    show_default=False)]
OutputOpt = Annotated[str | None, typer.Option(
    "--output", "-o", metavar="OUT", show_default=False,
    help=f"the converted checkpoint to write ({_OUT_FORMATS}), the same as the OUT argument; "
    "the report goes to stdout.")]
AllOpt = Annotated[bool, all_opt(
    "list every renamed key (default: the first 8 groups; JSON always lists all).")]
StripOpt = Annotated[list[str] | None, typer.Option(
    "--strip-prefix", metavar="PREFIX", help="remove PREFIX from keys that start with it (repeatable).")]
RenameOpt = Annotated[list[str] | None, typer.Option(
    "--rename", metavar="REGEX=REPL", help="re.sub on every key, e.g. '^backbone\\.=encoder.' (repeatable).")]
AutoPrefixOpt = Annotated[bool, auto_prefix_opt(
    "apply the best prefix remap of the keys, as diff --auto-prefix does: "
    "with --arch the remap that matches the most model keys; without, the module./_orig_mod. "
    "prefix every key has (noted when left).")]
KeepExtraOpt = Annotated[bool, typer.Option(
    "--keep-extra", help="keep optimizer/scheduler and other container entries (.pt output).")]
DtypeOpt = Annotated[str | None, dtype_opt("cast floating tensors (integer tensors untouched).")]
AllowOverflowOpt = Annotated[bool, typer.Option(
    "--allow-overflow", help="write even when --dtype turns values into inf or 0 (counted and reported).")]
AllowPartialOpt = Annotated[bool, allow_partial_opt(
    "with --arch: write even when some of the model's tensors get no value.")]
ShardSizeOpt = Annotated[str | None, shard_size_opt(
    "write Hugging Face style safetensors shards of at most SIZE (e.g. 5GB, 500MB) plus "
    "OUT.index.json.")]


@output_command(report_file=False)
def convert(
    src: InArg,
    dst: OutArg = None,
    out_option: OutputOpt = None,  # not "output": a DCP "NAME/" keeps its slash
    key: KeyOpt = None,
    strip_prefix: StripOpt = None,
    rename: RenameOpt = None,
    auto_prefix: AutoPrefixOpt = False,
    arch: ArchOpt = None,
    arg: ArgOpt = None,
    keep_extra: KeepExtraOpt = False,
    dtype: DtypeOpt = None,
    force: ForceOpt = False,
    trust_pickle: TrustOpt = False,
    allow_overflow: AllowOverflowOpt = False,
    allow_partial: AllowPartialOpt = False,
    shard_size: ShardSizeOpt = None,
    show_all: AllOpt = False,
    *,
    out: OutputOptions,
) -> None:
    """Write IN as a CPU state_dict file: unwrap, rename keys, cast, drop training state; verify.

    OUT is the second argument or -o/--output (not both). The report goes to stdout
    (--format json for the complete record)."""
    from torchinspect.checkpoints import CastDtype, convert_checkpoint
    from torchinspect.errors import InspectError
    from torchinspect.report.convert import convert_report

    if dst is not None and out_option is not None:
        raise InspectError(f"OUT given twice: {dst!r} and -o {out_option!r}",
                           hint="-o/--output is the converted checkpoint, the same as OUT: give one "
                           "of them (the report goes to stdout; redirect it to keep it)")
    dst = dst if dst is not None else out_option
    if dst is None:
        raise InspectError("missing the converted checkpoint OUT",
                           hint="inspect convert IN OUT, or inspect convert IN -o OUT")
    if dtype is not None and dtype not in CastDtype.__members__:
        raise InspectError(f"--dtype {dtype!r} is not supported", hint="use fp16, bf16 or fp32")
    target = None
    if arch is not None:
        from torchinspect.checkpoints import arch_state_dict
        from torchinspect.sources.case import ModelOptions

        target, _ = arch_state_dict(arch, ModelOptions(args=arg))
    result = convert_checkpoint(
        src, dst, key=key, strip_prefix=strip_prefix or (), rename=rename or (),
        auto_prefix=auto_prefix, target=target, target_name=arch, allow_partial=allow_partial,
        keep_extra=keep_extra, dtype=dtype, allow_overflow=allow_overflow,
        shard_size=shard_size,
        force=force, trust_pickle=trust_pickle,
    )
    emit(convert_report(result, show_all=show_all), out, [src, dst, arch])
