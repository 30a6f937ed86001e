"""`inspect convert IN OUT`: a CPU state_dict that loads (.pt/.pth or .safetensors), verified."""

from __future__ import annotations

from typing import Annotated

import typer

from torchinspect.cli.common import (
    ArchOpt,
    ArgOpt,
    ForceOpt,
    KeyOpt,
    OutputOptions,
    TrustOpt,
    emit,
    output_command,
)

InArg = Annotated[str, typer.Argument(metavar="IN", help="checkpoint to convert (never modified).",
                                      show_default=False)]
OutArg = Annotated[str, typer.Argument(metavar="OUT", help="output file: *.pt/*.pth or *.safetensors.",
                                       show_default=False)]
StripOpt = Annotated[list[str] | None, typer.Option(
    "--strip-prefix", metavar="PREFIX", help="remove PREFIX from keys that start with it (repeatable).")]
RenameOpt = Annotated[list[str] | None, typer.Option(
    "--rename", metavar="REGEX=REPL", help="re.sub on every key, e.g. '^backbone\\.=encoder.' (repeatable).")]
AutoPrefixOpt = Annotated[bool, typer.Option(
    "--auto-prefix", help="with --arch: apply the prefix remap that matches the most model keys; "
    "without: strip module./_orig_mod. when every key has it.")]
KeepExtraOpt = Annotated[bool, typer.Option(
    "--keep-extra", help="keep optimizer/scheduler and other container entries (.pt output).")]
DtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", metavar="fp16|bf16|fp32", help="cast floating tensors (integer tensors untouched).")]


@output_command
def convert(
    src: InArg,
    dst: OutArg,
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
    *,
    out: OutputOptions,
) -> None:
    """Write IN as a CPU state_dict file: unwrap, rename keys, cast, drop training state; verify."""
    from torchinspect.errors import InspectError
    from torchinspect.io.convert import CastDtype, convert_checkpoint
    from torchinspect.report.convert import convert_report

    if dtype is not None and dtype not in CastDtype.__members__:
        raise InspectError(f"--dtype {dtype!r} is not supported", hint="use fp16, bf16 or fp32")
    result = convert_checkpoint(
        src, dst, key=key, strip_prefix=strip_prefix or (), rename=rename or (),
        auto_prefix=auto_prefix, arch=arch, arch_args=arg, keep_extra=keep_extra,
        dtype=dtype, force=force, trust_pickle=trust_pickle,
    )
    emit(convert_report(result), out, [src, dst, arch])
