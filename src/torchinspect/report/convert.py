"""`inspect convert` -> Report: what was written, verified, renamed, cast and dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.io.keys import group_keys, key_template
from torchinspect.io.state_dict import WRAPPER_PREFIXES
from torchinspect.report.base import KeyValues, Report, Table, Text, fmt_bytes

if TYPE_CHECKING:
    from torchinspect.checkpoints import ConvertResult


#: Groups of renamed keys the table shows without --all.
RENAMES_SHOWN = 8


def _examples(pairs: list[tuple[str, str]], limit: int | None = RENAMES_SHOWN) -> list[str]:
    """Renames grouped by layer pattern: 80 layers read as one line (``limit=None``: all)."""
    new_of = dict(pairs)
    groups = group_keys([a for a, _ in pairs], {a: key_template(b) for a, b in pairs})
    lines = []
    for g in groups if limit is None else groups[:limit]:
        news = group_keys([new_of[k] for k in g.keys])
        target = news[0].pattern if len(news) == 1 else new_of[g.keys[0]]
        lines.append(f"{g.pattern} -> {target}" + (f"  ({g.count} keys)" if g.count > 1 else ""))
    if limit is not None and len(groups) > limit:
        rest = sum(g.count for g in groups[limit:])
        lines.append(f"... {len(groups) - limit} more groups ({rest} keys); --all lists every one "
                     "(--format json always does)")
    return lines


#: Characters of one metadata/dropped line shown in the table (the JSON report keeps all):
#: rendering wraps a line in time quadratic in its length, and a 16 MB value took 8 s.
SHOWN_CHARS = 200


def _shown(line: str, limit: int = SHOWN_CHARS) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line):,} characters; --format json shows all)"


def wrapper_note(prefixes: list[str]) -> str:
    """``note: every key starts with 'module.' (DataParallel/DDP); --auto-prefix strips it``."""
    who = "/".join(dict.fromkeys(WRAPPER_PREFIXES[p] for p in prefixes))
    return (f"note: every key starts with '{''.join(prefixes)}' ({who}); "
            f"--auto-prefix strips {'it' if len(prefixes) == 1 else 'them'}")


def convert_report(r: ConvertResult, *, show_all: bool = False) -> Report:
    """The Report of `inspect convert` (``show_all``: every renamed key group in the table)."""
    sections: list[Any] = []
    facts: list[tuple[str, Any]] = [
        ("input", f"{r.src} ({r.in_format}, {fmt_bytes(r.file_size_before)})"),
        ("output", f"{r.dst.with_name(r.dst.name + '.index.json') if r.shards else r.dst} "
                   f"({r.out_format}{', sharded' if r.shards else ''}, {fmt_bytes(r.file_size_after)})"),
        ("weights taken from", f"key {r.container_key!r}" if r.container_key else "top level"),
        ("tensors", r.tensors),
        ("saved on", f"{', '.join(r.devices_before) or '-'} -> cpu"),
        ("tensor bytes", f"{fmt_bytes(r.tensor_bytes_before)} -> {fmt_bytes(r.tensor_bytes_after)}"),
        ("keys renamed", len(r.renamed)),
        ("verified", r.verified),
    ]
    if r.tied:
        facts.append(("tied", f"{sum(len(g) - 1 for g in r.tied)} (bytes count each once)"))
    if r.arch_check:
        facts.append(("architecture", r.arch_check))
    if r.folded:
        facts.append(("folded num_batches_tracked", f"{len(r.folded)} (absent from IN; BatchNorm "
                                                    "fills them on load)"))
    sections.append(KeyValues("Converted", facts))
    if r.wrapper_prefixes:
        sections.append(Text([wrapper_note(r.wrapper_prefixes)], style="yellow"))
    if r.cast:
        sections.append(Table("Dtype changes", ["change", "tensors"], [[k, v] for k, v in r.cast.items()]))
    done: list[str] = [f"stripped prefix {s}" for s in r.stripped]
    if r.applied_remap:
        done.append(f"auto prefix: {r.applied_remap.describe()}: "
                    f"{r.applied_remap.matched} of {r.applied_remap.total} model keys match")
    if done:
        sections.append(Text(done, title="Key changes"))
    if r.renamed:
        sections.append(Text(_examples(r.renamed, None if show_all else RENAMES_SHOWN),
                             title="Renamed keys"))
    if r.dropped:
        sections.append(Text([_shown(f"{k}: {v}") for k, v in r.dropped.items()], title="Dropped"))
    if r.metadata:
        sections.append(Text([_shown(f"{k} = {v}") for k, v in r.metadata.items()],
                             title="Kept as safetensors metadata"))
    if r.tied:
        sections.append(Text([" = ".join(g) for g in r.tied], title="Tied tensors"))
    if r.notes:
        sections.append(Text(r.notes, title="Notes"))
    if r.shards:
        index = r.dst.with_name(r.dst.name + ".index.json")
        done_line = f"wrote {len(r.shards)} shard(s) ({r.shards[0]} ...) and {index}"
    else:
        done_line = f"wrote {r.dst}"
    sections.append(Text([done_line], style="green"))
    return Report("convert", r.to_dict(), sections)
