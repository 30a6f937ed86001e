"""`inspect diff A B`: why a state_dict won't load, key by key (exit 0 loads, 1 incompatible)."""

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
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.report import KeyValues, OutputFormat, Report, Table, Text

if TYPE_CHECKING:
    from torchinspect.io.diff import DiffResult, DiffSide

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


@command_errors
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
    format: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Compare two state_dicts: matched, missing, unexpected, shape/dtype mismatches, prefixes.

    A is the target (a model or a checkpoint), B the weights loaded into it; when one side is
    a model and the other a weights file, the model is the target whatever the order. Exit 0 when B
    loads into A (strict or not), 1 when incompatible (or not strict, with --strict).
    """
    from torchinspect.io.diff import Verdict, compare_values, diff_state_dicts

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
    emit(diff_report(result, fmt=format, limit=limit), format, output, [a, b, arch])
    verdict = result.verdict
    if verdict is Verdict.incompatible or (strict and verdict is not Verdict.strict):
        raise typer.Exit(int(ExitStatus.CHECK_FAILED))


# ------------------------------------------------------------------ report


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in s) + ")"


def _size(n: int | None) -> str:
    from torchinspect.report import fmt_bytes

    return fmt_bytes(n) if n is not None else "-"


def _group_lines(result: DiffResult, which: str, limit: int) -> list[str]:
    groups = result.grouped(which)
    lines = [f"{g.pattern}" + (f"  ({g.count} keys)" if g.count > 1 else "") for g in groups[:limit]]
    if len(groups) > limit:
        rest = sum(g.count for g in groups[limit:])
        lines.append(f"... {len(groups) - limit} more groups ({rest} keys); --format json lists all")
    return lines


def _key_table(result: DiffResult) -> Table:
    rows: list[list[Any]] = []
    a, b = result.a.tensors, result.b.tensors
    back = {v: k for k, v in result.renamed.items()}

    def meta(side: dict, k: str | None) -> list[Any]:
        t = side.get(k) if k is not None else None
        return [_shape(t.shape), t.dtype] if t is not None else [None, None]

    status: dict[str, str] = {k: "matched" for k in result.matched}
    status.update({m.key: "dtype_mismatch" for m in result.dtype_mismatches})
    status.update({m.key: "shape_mismatch" for m in result.shape_mismatches})
    status.update({k: "missing" for k in result.missing})
    for k in result.folded:
        status[k] = "folded"
    for k, s in status.items():
        if k in a:
            rows.append([k, s, *meta(a, k), *meta(b, back.get(k, k))])
    for k in result.unexpected:
        rows.append([k, "unexpected", None, None, *meta(b, back.get(k, k))])
    return Table("Keys", ["key", "status", "a_shape", "a_dtype", "b_shape", "b_dtype"], rows,
                 primary=True)


def diff_report(result: DiffResult, *, fmt: OutputFormat = OutputFormat.table, limit: int = 40) -> Report:
    """The Report for `inspect diff` (JSON: every list; table: grouped lists)."""
    data = result.to_dict()
    if fmt is OutputFormat.csv:
        return Report("diff", data, [_key_table(result)])
    sections: list[Any] = []
    lines = []
    for name, s in (("A (target): ", result.a), ("B (weights):", result.b)):
        facts = [s.format or s.kind]
        if s.container_key:
            facts.append(f"weights under key {s.container_key!r}")
        if s.kind == "checkpoint":
            facts.append(f"saved on {', '.join(s.devices) or '-'}")
        facts.append(f"{len(s.tensors)} tensors, {_size(s.total_bytes)}")
        lines.append(f"{name} {s.label}  [{'; '.join(facts)}]")
    sections.append(Text(lines))
    counts = KeyValues("Keys", [
        ("matched", len(result.matched)),
        ("missing (in A, not in B)", len(result.missing)),
        ("unexpected (in B, not in A)", len(result.unexpected)),
        ("shape mismatches", len(result.shape_mismatches)),
        ("dtype mismatches", len(result.dtype_mismatches)),
    ])
    sections.append(counts)
    if result.shape_mismatches:
        rows = []
        for g in result.grouped("shape_mismatches")[:limit]:
            sa, sb, _, _ = g.detail
            rows.append([g.pattern, _shape(sa), _shape(sb)])
        sections.append(Table("Shape mismatches", ["key", "A shape", "B shape"], rows,
                              align=["left", "left", "left"]))
    if result.dtype_mismatches:
        rows = [[g.pattern, g.detail[2], g.detail[3]] for g in result.grouped("dtype_mismatches")[:limit]]
        sections.append(Table("Dtype mismatches (load_state_dict casts to A's dtype)",
                              ["key", "A dtype", "B dtype"], rows))
    if result.missing:
        sections.append(Text(_group_lines(result, "missing", limit), title="Missing (in A, not in B)"))
    if result.unexpected:
        sections.append(Text(_group_lines(result, "unexpected", limit), title="Unexpected (in B, not in A)"))
    if result.remaps:
        rows = [[r.describe(), r.matched, r.total, "yes" if r is result.applied_remap else ""]
                for r in result.remaps]
        sections.append(Table("Prefix remaps of B's keys", ["remap", "matched", "of", "applied"], rows))
    if result.values is not None:
        sections.extend(_values_sections(result, limit))
    notes: list[str] = []
    for s in (result.a, result.b):
        notes.extend(f"{s.label}: {n}" for n in s.notes)
        if s.extras:
            shown = ", ".join(f"{k}={v}" for k, v in list(s.extras.items())[:6])
            notes.append(f"{s.label}: other container entries: {shown}")
    if result.folded:
        notes.append(f"{len(result.folded)} num_batches_tracked entries present on one side only "
                     "were folded (BatchNorm counters, not weights)")
    if result.applied_remap:
        notes.append(f"--auto-prefix applied: {result.applied_remap.describe()} "
                     f"({len(result.renamed)} keys renamed)")
    elif result.remaps:
        best = result.remaps[0]
        notes.append(f"best remap: {best.describe()} would match {best.matched} of {best.total} "
                     "keys; pass --auto-prefix to apply it")
    if notes:
        sections.append(Text(notes, title="Notes"))
    style = {"strict": "green", "partial": "yellow", "incompatible": "red"}[str(result.verdict)]
    sections.append(Text([f"verdict: {result.verdict_text()}"], style=style))
    return Report("diff", data, sections)


def _values_sections(result: DiffResult, limit: int) -> list[Any]:
    vals = result.values or []
    equal = sum(v.equal for v in vals)
    close = sum(v.allclose and not v.equal for v in vals)
    differ = [v for v in vals if not v.allclose]
    out: list[Any] = [KeyValues(f"Values (rtol={result.rtol:g}, atol={result.atol:g})", [
        ("identical", equal), ("allclose, not identical", close), ("differ", len(differ))])]
    shown = sorted((v for v in vals if not v.equal), key=lambda v: -v.max_abs_diff)[:limit]
    if shown:
        out.append(Table("Largest differences", ["key", "max abs diff", "allclose"],
                         [[v.key, v.max_abs_diff, v.allclose] for v in shown]))
    return out
