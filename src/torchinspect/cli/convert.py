"""`inspect convert IN OUT`: a CPU state_dict that loads (.pt/.pth or .safetensors), verified."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from torchinspect.cli.common import (
    ArchOpt,
    ArgOpt,
    FormatOpt,
    KeyOpt,
    OutputOpt,
    TrustOpt,
    command_errors,
    emit,
)
from torchinspect.report import KeyValues, OutputFormat, Report, Table, Text, fmt_bytes

if TYPE_CHECKING:
    from torchinspect.io.convert import ConvertResult

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
ForceOpt = Annotated[bool, typer.Option("--force", help="replace OUT if it exists (never IN).")]


@command_errors
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
    format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Write IN as a CPU state_dict file: unwrap, rename keys, cast, drop training state; verify."""
    from torchinspect.errors import InspectError
    from torchinspect.io.convert import CastDtype, convert_checkpoint

    if dtype is not None and dtype not in CastDtype.__members__:
        raise InspectError(f"--dtype {dtype!r} is not supported", hint="use fp16, bf16 or fp32")
    result = convert_checkpoint(
        src, dst, key=key, strip_prefix=strip_prefix or (), rename=rename or (),
        auto_prefix=auto_prefix, arch=arch, arch_args=arg, keep_extra=keep_extra,
        dtype=dtype, force=force, trust_pickle=trust_pickle,
    )
    emit(convert_report(result), format, output, [src, dst, arch])


def _examples(pairs: list[tuple[str, str]], limit: int = 8) -> list[str]:
    """Renames grouped by layer pattern: 80 layers read as one line."""
    from torchinspect.io.keys import group_keys, key_template

    new_of = dict(pairs)
    groups = group_keys([a for a, _ in pairs], {a: key_template(b) for a, b in pairs})
    lines = []
    for g in groups[:limit]:
        news = group_keys([new_of[k] for k in g.keys])
        target = news[0].pattern if len(news) == 1 else new_of[g.keys[0]]
        lines.append(f"{g.pattern} -> {target}" + (f"  ({g.count} keys)" if g.count > 1 else ""))
    if len(groups) > limit:
        lines.append(f"... {len(groups) - limit} more; --format json lists all")
    return lines


def convert_report(r: ConvertResult) -> Report:
    sections: list[Any] = []
    facts: list[tuple[str, Any]] = [
        ("input", f"{r.src} ({r.in_format}, {fmt_bytes(r.file_size_before)})"),
        ("output", f"{r.dst} ({r.out_format}, {fmt_bytes(r.file_size_after)})"),
        ("weights taken from", f"key {r.container_key!r}" if r.container_key else "top level"),
        ("tensors", r.tensors),
        ("saved on", f"{', '.join(r.devices_before) or '-'} -> cpu"),
        ("tensor bytes", f"{fmt_bytes(r.tensor_bytes_before)} -> {fmt_bytes(r.tensor_bytes_after)}"),
        ("keys renamed", len(r.renamed)),
        ("verified", r.verified),
    ]
    if r.arch_check:
        facts.append(("architecture", r.arch_check))
    sections.append(KeyValues("Converted", facts))
    if r.cast:
        sections.append(Table("Dtype changes", ["change", "tensors"], [[k, v] for k, v in r.cast.items()]))
    done: list[str] = [f"stripped prefix {s}" for s in r.stripped]
    if r.applied_remap:
        done.append(f"auto prefix: {r.applied_remap.describe()} "
                    f"({r.applied_remap.matched} of {r.applied_remap.total} model keys match)")
    if done:
        sections.append(Text(done, title="Key changes"))
    if r.renamed:
        sections.append(Text(_examples(r.renamed), title="Renamed keys"))
    if r.dropped:
        sections.append(Text([f"{k}: {v}" for k, v in r.dropped.items()], title="Dropped"))
    if r.metadata:
        sections.append(Text([f"{k} = {v}" for k, v in r.metadata.items()],
                             title="Kept as safetensors metadata"))
    if r.tied:
        sections.append(Text([" = ".join(g) for g in r.tied], title="Tied tensors"))
    if r.notes:
        sections.append(Text(r.notes, title="Notes"))
    sections.append(Text([f"wrote {r.dst}"], style="green"))
    return Report("convert", r.to_dict(), sections)
