"""`inspect diff` -> Report: sides, key counts, mismatches, remaps, values, verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Table, Text, fmt_bytes
from torchinspect.report.render import OutputFormat

if TYPE_CHECKING:
    from torchinspect.checkpoints.diff import DiffResult


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in s) + ")"


def _size(n: int | None) -> str:
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


# rows per list in table output when --limit is not given
LIMIT = 40


def diff_report(result: DiffResult, *, fmt: OutputFormat = OutputFormat.table,
                limit: int | None = None) -> Report:
    """The Report for `inspect diff` (JSON: every list; table: grouped lists, ``limit`` rows
    each; without ``limit``, LIMIT, and only the count of missing and unexpected keys once a
    prefix remap not applied names the fix: the keys it renames are the same list twice)."""
    data = result.to_dict()
    named_fix = limit is None and bool(result.remaps) and result.applied_remap is None
    limit = LIMIT if limit is None else limit
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
        if s.tied:
            facts.append(f"{sum(len(g) - 1 for g in s.tied)} tied")
        if s.extra_state:
            facts.append(f"{len(s.extra_state)} extra state")
        lines.append(f"{name} {s.label}  [{'; '.join(facts)}]")
    sections.append(Text(lines))
    sections.extend(_remap_sections(result))
    counts = KeyValues("Keys", [
        ("matched", len(result.matched)),
        ("missing (in A, not in B)", len(result.missing)),
        ("unexpected (in B, not in A)", len(result.unexpected)),
        ("shape mismatches", len(result.shape_mismatches)),
        ("dtype mismatches", len(result.dtype_mismatches)),
        *([("set through a tie in A", len(result.tied_fill))] if result.tied_fill else []),
        *([("folded num_batches_tracked", len(result.folded))] if result.folded else []),
    ])
    sections.append(counts)
    rows: list[list[Any]]
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
    sections.extend(_key_lists(result, limit, named_fix))
    if result.values is not None:
        sections.extend(_values_sections(result, limit))
    notes: list[str] = []
    for s in (result.a, result.b):
        notes.extend(f"{s.label}: {n}" for n in s.notes)
        if s.extras:
            items = list(s.extras.items())
            shown = ", ".join(f"{k}={v}" for k, v in items[:12])
            more = f" ... and {len(items) - 12} more (--format json lists all)" if len(items) > 12 else ""
            notes.append(f"{s.label}: other container entries ({len(items)}): {shown}{more}")
    notes.extend(result.notes[:limit])
    if len(result.notes) > limit:
        notes.append(f"... {len(result.notes) - limit} more notes (--format json lists all)")
    if result.folded:
        notes.append(f"{len(result.folded)} num_batches_tracked entries present on one side only "
                     "were folded (BatchNorm counters, not weights)")
    if notes:
        sections.append(Text(notes, title="Notes"))
    style = {"strict": "green", "complete": "green", "partial": "yellow",
             "incompatible": "red"}[str(result.verdict)]
    sections.append(Text([f"verdict: {result.verdict_text()}"], style=style))
    code, why_not = result.load_code()
    if code:
        sections.append(Text(code, title="Load it with (model: the target module)", code=True))
    elif result.verdict.loads:
        sections.append(Text([f"no load line: {why_not}"]))
    return Report("diff", data, sections)


def _key_lists(result: DiffResult, limit: int, named_fix: bool) -> list[Text]:
    """The missing and the unexpected keys, grouped; only their counts once a prefix remap
    names the fix (the same keys, renamed)."""
    out = []
    for which, title, keys in (("missing", "Missing (in A, not in B)", result.missing),
                               ("unexpected", "Unexpected (in B, not in A)", result.unexpected)):
        if keys and named_fix:
            out.append(Text([f"{len(keys)} keys: the remap above names them (--limit "
                             f"{LIMIT} lists them, --format json all)"], title=title))
        elif keys:
            out.append(Text(_group_lines(result, which, limit), title=title))
    return out


def _remap_sections(result: DiffResult) -> list[Any]:
    """The prefix remaps first, before the key listings they explain: the best one applied
    (--auto-prefix) or the one line that says what --auto-prefix would do."""
    if not result.remaps:
        return []
    rows = [[r.describe(), r.matched, r.total, "yes" if r is result.applied_remap else ""]
            for r in result.remaps]
    table = Table("Prefix remaps of B's keys", ["remap", "matched", "of", "applied"], rows)
    if result.applied_remap:
        line = Text([f"--auto-prefix applied: {result.applied_remap.describe()} "
                     f"({len(result.renamed)} keys renamed)"])
    else:
        best = result.remaps[0]
        line = Text([f"best remap: {best.describe()} would match {best.matched} of {best.total} "
                     "keys; pass --auto-prefix to apply it"], style="yellow")
    return [table, line]


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
