"""`inspect convert`, phase 1: what will be written where (no byte is written here).

``plan_convert`` opens IN (metadata), checks every output path against every input
before anything is written, applies the key changes in order (container unwrap, strip,
rename, auto prefix), chooses each tensor's output dtype and decides where non-tensor
entries go. The ``ConvertPlan`` it returns travels through ``write`` and ``verify``.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.arguments import as_list
from torchinspect.dtypes import FLOATING, SHORT
from torchinspect.errors import InspectError
from torchinspect.io.atomic import protected
from torchinspect.io.compare import entry_meta
from torchinspect.io.entries import FilePool, LoadedInput, TensorSource
from torchinspect.io.formats import writer_for
from torchinspect.io.meta import TensorMeta
from torchinspect.io.safetensors import scalar_metadata
from torchinspect.io.state_dict import (
    DEFAULT_PREFIXES,
    TRAINING_KEYS,
    PrefixRemap,
    describe_value,
    find_prefix_remaps,
    strip_prefixes,
)
from torchinspect.io.tensors import open_input
from torchinspect.io.torchzip import DTYPE_SIZES, PlainNamespace
from torchinspect.io.writers import OutTensor, parse_size, plan_shards, torch_dtype


class CastDtype(StrEnum):
    """Values of --dtype."""

    fp16 = "fp16"
    bf16 = "bf16"
    fp32 = "fp32"

    @property
    def torch_name(self) -> str:
        return SHORT[self.value]  # dtypes.py: the one table of dtype names


class OutputKind(StrEnum):
    pt = "pt"
    safetensors = "safetensors"
    dcp = "dcp"  # a torch.distributed.checkpoint folder


CASTABLE = frozenset(n for n in FLOATING if not n.startswith("complex"))  # real floats
EXTRA_META_PREFIX = "torchinspect.extra_state."
# what a DCP folder written by `inspect convert` holds (the mark names the writer)
DCP_MARK = ".torchinspect-convert"
_DCP_FILE = re.compile(r"^(\.metadata|__\d+_\d+\.distcp)$")


def output_kind(dst: str | os.PathLike[str]) -> OutputKind:
    """The output format from OUT's name (``NAME/`` with its slash: a DCP folder)."""
    path = Path(dst)
    if str(dst).endswith(("/", os.sep)):
        return OutputKind.dcp
    writer = writer_for(path)  # the format registry: suffix -> the output that writes it
    if writer is not None:
        return OutputKind(writer)
    raise InspectError(f"{path}: unknown output format {path.suffix or '(no extension)'!r}",
                       hint="name OUT *.safetensors, *.pt / *.pth for a torch.save state_dict, "
                       "or NAME.dcp / NAME/ for a torch.distributed.checkpoint folder")


def parse_rename(text: str) -> tuple[re.Pattern[str], str]:
    """``REGEX=REPL`` (split at the last '='), e.g. ``^backbone\\.=encoder.``."""
    if "=" not in text:
        raise InspectError(f"--rename {text!r}: expected REGEX=REPL",
                           hint=r"e.g. --rename '^backbone\.=encoder.'")
    pattern, repl = text.rsplit("=", 1)
    try:
        return re.compile(pattern), repl
    except re.error as exc:
        raise InspectError(f"--rename {text!r}: bad regular expression ({exc})",
                           hint="check the pattern; escape dots as \\.") from None


@dataclass
class Entry:
    """One output entry: its key, where its bytes come from, its output dtype."""

    name: str  # output key
    src: TensorSource
    dtype: str  # output dtype

    @property
    def nbytes(self) -> int:
        if not self.src.is_tensor or self.dtype == self.src.dtype:
            return self.src.nbytes
        return self.src.nbytes // DTYPE_SIZES[self.src.dtype] * DTYPE_SIZES[self.dtype]

    @property
    def quantized(self) -> bool:
        return self.src.kind == "packed" or self.src.dtype.startswith(("qint", "quint"))

    def chunks(self, files: FilePool,
               overflow: dict[str, tuple[int, int]] | None = None) -> Iterator[bytes | memoryview]:
        """The output bytes, chunk by chunk (cast on the fly; values that become inf or 0 in
        the cast are counted into ``overflow[name]``)."""
        if self.dtype == self.src.dtype:
            yield from self.src.chunks(files)
            return
        import torch

        src, dst = torch_dtype(self.src.dtype), torch_dtype(self.dtype)
        to_inf = to_zero = 0
        for chunk in self.src.chunks(files):
            a = torch.frombuffer(bytearray(chunk), dtype=src)
            t = a.to(dst)
            if overflow is not None:
                to_inf += int((torch.isinf(t) & torch.isfinite(a)).sum())
                to_zero += int(((t == 0) & (a != 0)).sum())
            yield t.view(torch.uint8).numpy().data  # the array's bytes as a memoryview
        if overflow is not None and (to_inf or to_zero):
            overflow[self.name] = (to_inf, to_zero)

    def out(self, files: FilePool, overflow: dict[str, tuple[int, int]]) -> OutTensor:
        """This entry for the streaming writers of io/writers.py."""
        return OutTensor(self.name, self.dtype, self.src.shape, self.nbytes,
                         lambda: self.chunks(files, overflow), self.src.tie, self.src.is_tensor,
                         self.src.value)


@dataclass
class ConvertResult:
    """What convert did (the CLI prints it; JSON carries it)."""

    src: Path
    dst: Path
    in_format: str
    out_format: str
    container_key: str | None
    tensors: int
    renamed: list[tuple[str, str]] = field(default_factory=list)
    stripped: list[str] = field(default_factory=list)
    applied_remap: PrefixRemap | None = None
    cast: dict[str, int] = field(default_factory=dict)  # "float32->float16": count
    tied: list[list[str]] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    devices_before: list[str] = field(default_factory=list)
    tensor_bytes_before: int = 0
    tensor_bytes_after: int = 0
    file_size_before: int = 0
    file_size_after: int = 0
    verified: str = ""
    arch_check: str | None = None
    notes: list[str] = field(default_factory=list)
    overflow: dict[str, tuple[int, int]] = field(default_factory=dict)  # key: (to inf, to 0)
    extra_state: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # 0-element tensors
    shards: list[str] = field(default_factory=list)  # shard files (with shard_size)
    folded: list[str] = field(default_factory=list)  # target's num_batches_tracked absent from IN
    wrapper_prefixes: list[str] = field(default_factory=list)  # kept prefixes every key carries

    def to_dict(self) -> dict[str, Any]:
        return {
            "src": str(self.src), "dst": str(self.dst), "in_format": self.in_format,
            "out_format": self.out_format, "container_key": self.container_key,
            "tensors": self.tensors, "renamed": [list(r) for r in self.renamed],
            "stripped": self.stripped,
            "applied_remap": self.applied_remap.to_dict() if self.applied_remap else None,
            "cast": self.cast, "tied": self.tied, "dropped": self.dropped, "metadata": self.metadata,
            "devices_before": self.devices_before, "devices_after": ["cpu"],
            "tensor_bytes_before": self.tensor_bytes_before,
            "tensor_bytes_after": self.tensor_bytes_after,
            "file_size_before": self.file_size_before, "file_size_after": self.file_size_after,
            "verified": self.verified, "arch_check": self.arch_check, "notes": self.notes,
            "overflow": {k: {"to_inf": a, "to_zero": b} for k, (a, b) in self.overflow.items()},
            "extra_state": self.extra_state, "empty": self.empty, "shards": self.shards,
            "folded": self.folded, "wrapper_prefixes": self.wrapper_prefixes,
        }


@dataclass
class ConvertPlan:
    """Everything the write and verify phases need; ``staged`` maps each output file or
    folder to the temporary path it is written to (filled by the write phase)."""

    src: Path
    dst: Path
    kind: OutputKind
    inp: LoadedInput
    entries: list[Entry]
    result: ConvertResult
    cast_to: str | None = None
    allow_overflow: bool = False
    shard_size: int | None = None
    force: bool = False
    trust_pickle: bool = False
    keep_container: bool = False
    target: dict[str, Any] | None = None  # key -> TensorMeta of --arch
    target_name: str = "the target"
    allow_partial: bool = False
    protect: tuple[Path, ...] = ()
    shards: list[tuple[str, list[Entry]]] = field(default_factory=list)  # file name, its tensors
    replaced_shards: list[Path] = field(default_factory=list)  # the old set's, removed after
    staged: dict[Path, Path] = field(default_factory=dict)

    @property
    def tensors(self) -> list[Entry]:
        return [e for e in self.entries if e.src.is_tensor]

    @property
    def out_key(self) -> str | None:
        """Where the state_dict sits in a --keep-extra .pt output."""
        return (self.inp.container_key or "state_dict").split("/")[0] if self.keep_container else None

    @property
    def cast_any(self) -> bool:
        return any(e.dtype != e.src.dtype for e in self.entries)


@dataclass(frozen=True)
class ConvertOptions:
    """The key, dtype and output choices of one conversion (the library call's keywords)."""

    key: str | None = None
    strip_prefix: Sequence[str] = ()
    rename: Sequence[str] = ()
    auto_prefix: bool = False
    target: Mapping[str, Any] | None = None
    target_name: str | None = None
    allow_partial: bool = False
    keep_extra: bool = False
    dtype: CastDtype | str | None = None
    allow_overflow: bool = False
    shard_size: int | str | None = None
    force: bool = False
    trust_pickle: bool = False
    protect: Sequence[str | os.PathLike[str]] = ()


def plan_convert(src: str | os.PathLike[str], out: str | os.PathLike[str],
                 opts: ConvertOptions) -> ConvertPlan:
    """Check the options and the outputs, open IN and plan every entry."""
    src, kind, dst = Path(src), output_kind(out), Path(out)
    if opts.shard_size is not None and kind is not OutputKind.safetensors:
        raise InspectError("--shard-size writes sharded safetensors", hint="name OUT *.safetensors")
    shard_size = parse_size(opts.shard_size) if opts.shard_size is not None else None
    if opts.dtype and str(opts.dtype) not in {d.value for d in CastDtype}:
        raise InspectError(f"--dtype {opts.dtype!r} is not supported", hint="use fp16, bf16 or fp32")
    renames = [parse_rename(r) for r in as_list(opts.rename)]
    keep_container = opts.keep_extra and kind is OutputKind.pt
    inp = open_input(src, key=opts.key, trust_pickle=opts.trust_pickle, need_objects=keep_container)
    protect = tuple(Path(p) for p in opts.protect)
    check_conflicts(dst, kind, inp, protect, opts.force, shard_size)
    result = ConvertResult(src, dst, str(inp.format), str(kind), inp.container_key, len(inp.tensors))
    result.file_size_before = inp.file_size
    result.devices_before = sorted({t.device for t in inp.tensors})
    result.notes.extend(inp.notes)
    plan = ConvertPlan(src, dst, kind, inp, [], result,
                       CastDtype(opts.dtype).torch_name if opts.dtype else None,
                       opts.allow_overflow, shard_size, opts.force, opts.trust_pickle,
                       keep_container, target_meta(opts.target) if opts.target is not None else None,
                       opts.target_name or "the target", opts.allow_partial, protect)
    names = _rename_keys([t.name for t in inp.tensors], as_list(opts.strip_prefix), renames, result)
    if opts.auto_prefix:
        names = _auto_prefix(names, plan.target, result)
    else:  # said where it is made: the output would keep DataParallel's "module." on every key
        result.wrapper_prefixes = strip_prefixes(dict.fromkeys(names), DEFAULT_PREFIXES)[1]
    plan.entries = _plan_entries(inp, names, plan.cast_to, result)
    _plan_extras(plan)
    _plan_objects(plan)
    if shard_size is not None:
        plan.shards = _plan_shards(plan, shard_size)
    return plan


def _plan_shards(plan: ConvertPlan, shard_size: int) -> list[tuple[str, list[Entry]]]:
    """Hugging Face shards (the shared greedy split), each file checked like OUT."""
    by_name = {e.name: e for e in plan.tensors}
    split = plan_shards({e.name: e.nbytes for e in plan.tensors}, shard_size)
    groups = [[by_name[k] for k in shard] for shard in split.shards] or [[]]
    names = [shard_name(plan.dst, i + 1, len(groups)) for i in range(len(groups))]
    if plan.force and any(plan.dst.with_name(n).exists() for n in names):
        # --force over a set with these names: the new set gets names no file has, the
        # index (written last) switches to it in one rename, the old files go after; a kill
        # at any point leaves the old set or the new one, never a mix
        gen = next(g for g in range(1, 10_000) if not any(
            plan.dst.with_name(shard_name(plan.dst, i + 1, len(groups), g)).exists()
            for i in range(len(groups))))
        names = [shard_name(plan.dst, i + 1, len(groups), gen) for i in range(len(groups))]
    if plan.force:  # the old set, and sets of killed runs (our names, no index names them)
        ours = re.compile(re.escape(plan.dst.stem) + r"-\d{5}-of-\d{5}(-r\d+)?" + re.escape(plan.dst.suffix))
        leftovers = [p for p in plan.dst.parent.glob(f"{plan.dst.stem}-*{plan.dst.suffix}")
                     if ours.fullmatch(p.name) and p.is_file()]
        plan.replaced_shards = [p for p in sorted({*_indexed_shards(index_path(plan.dst)), *leftovers})
                                if p.name not in names]
    for name in names:
        out = plan.dst.with_name(name)
        if out.exists() and not plan.force:
            raise InspectError(f"{out} already exists", hint="pass --force to replace it")
        why = protected(out, (plan.inp.path, *plan.inp.files, *plan.protect))
        if why:
            raise InspectError(f"{out}: refusing to overwrite {why}", hint="write to a new file name")
    return list(zip(names, groups, strict=True))


# ------------------------------------------------------------------ outputs against inputs


def output_paths(dst: Path, shard_size: int | None) -> list[Path]:
    return [dst, index_path(dst)] if shard_size is not None else [dst]


def index_path(dst: Path) -> Path:
    return dst.with_name(dst.name + ".index.json")


def shard_name(dst: Path, i: int, n: int, generation: int = 0) -> str:
    """``model-00001-of-00003.safetensors``; a replacement written beside a set of the same
    names is ``model-00001-of-00003-r1.safetensors`` (its index names it)."""
    gen = f"-r{generation}" if generation else ""
    return f"{dst.stem}-{i:05d}-of-{n:05d}{gen}{dst.suffix}"


def _indexed_shards(index: Path) -> list[Path]:
    """The shard files an existing index names (plain names in its folder only), to remove
    once the new index replaced it; nothing when there is no readable index."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        names = set(weight_map.values()) if isinstance(weight_map, dict) else set()
    except (OSError, ValueError, AttributeError, RecursionError):
        return []
    return sorted(index.with_name(n) for n in names if isinstance(n, str) and n
                  and "/" not in n and "\\" not in n and n not in (".", "..")
                  and index.with_name(n).is_file())


def check_conflicts(dst: Path, kind: OutputKind, inp: LoadedInput, protect: Sequence[Path],
                    force: bool, shard_size: int | None) -> None:
    """Every output path against every input and protected file, before anything is written:
    an output may not be an input, nor a folder that holds one."""
    outs = output_paths(dst, shard_size)
    inputs = [inp.path, *inp.files, *protect]
    for out in outs:
        for other in inputs:
            if out.exists() and other.exists() and os.path.samefile(out, other) or \
                    out.resolve() == other.resolve():
                raise InspectError(f"{out}: refusing to overwrite the input file {other}",
                                   hint="write to a new file name")
            if kind is OutputKind.dcp and out.resolve() in other.resolve().parents:
                raise InspectError(f"{out}: refusing to replace a folder that holds the input {other}",
                                   hint="write OUT to a folder outside the inputs")
    for p in protect:
        if p.resolve() in (o.resolve() for o in outs):
            raise InspectError(f"{p}: a protected file (e.g. a report) and OUT are the same file",
                               hint="write the report to another file name")
        if p.resolve() in (inp.path.resolve(), *(f.resolve() for f in inp.files)):
            raise InspectError(f"{p}: refusing to overwrite the input file",
                               hint="write the report to a new file name")
    if kind is OutputKind.dcp:
        check_dcp_target(dst, force)
        return
    if not force:
        for out in outs:
            if out.exists():
                raise InspectError(f"{out} already exists", hint="pass --force to replace it")


def check_dcp_target(dst: Path, force: bool) -> None:
    """A DCP OUT may replace only a DCP folder this tool wrote (an empty folder is fine)."""
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.is_dir():
        raise InspectError(f"{dst}: folder {parent} does not exist", hint="create it first")
    if not dst.exists() and not dst.is_symlink():
        return
    if dst.is_symlink() or not dst.is_dir():
        raise InspectError(f"{dst} exists and is not a folder", hint="choose another OUT")
    if not force:
        raise InspectError(f"{dst} already exists", hint="pass --force to replace it")
    entries = sorted(p.name for p in dst.iterdir())
    if not entries:
        return
    foreign = [n for n in entries if n != DCP_MARK and not _DCP_FILE.match(n)]
    if foreign or DCP_MARK not in entries:
        what = f"it holds {foreign[0]!r}" if foreign else "it has no mark of `inspect convert`"
        raise InspectError(f"{dst}: refusing to replace a folder that is not a DCP checkpoint "
                           f"written by inspect convert ({what})",
                           hint="--force replaces only this tool's own outputs; choose a new OUT "
                           "or remove the folder yourself")


def target_meta(target: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in target.items():
        if isinstance(v, TensorMeta):
            out[k] = v
        else:
            m = entry_meta(k, v)
            if m is not None:
                out[k] = m
    return out


# ------------------------------------------------------------------ keys and dtypes


def _rename_keys(names: list[str], strip_prefix: Sequence[str],
                 renames: list[tuple[re.Pattern[str], str]], result: ConvertResult) -> list[str]:
    for p in strip_prefix:
        hit = sum(1 for n in names if n.startswith(p))
        if not hit:
            result.notes.append(f"--strip-prefix {p!r}: no key starts with it")
            continue
        names = [n[len(p):] if n.startswith(p) else n for n in names]
        result.stripped.append(f"{p} ({hit} keys)")
    for pattern, repl in renames:
        try:
            names = [pattern.sub(repl, n) for n in names]
        except (re.error, IndexError) as exc:
            raise InspectError(f"--rename {pattern.pattern}={repl}: {exc}",
                               hint="check the replacement's group references") from None
    return names


def _auto_prefix(names: list[str], target: dict[str, Any] | None,
                 result: ConvertResult) -> list[str]:
    if target is None:
        stripped, prefixes = strip_prefixes(dict.fromkeys(names), DEFAULT_PREFIXES)
        if prefixes:
            result.stripped.extend(f"{p} (all {len(names)} keys, --auto-prefix)" for p in prefixes)
            return list(stripped)
        result.notes.append("--auto-prefix: no module./_orig_mod. prefix on every key "
                            "(pass --arch to match prefixes against a model)")
        return names
    remaps = find_prefix_remaps(target.keys(), names)
    if not remaps:
        result.notes.append("--auto-prefix: the keys already match the architecture as well as "
                            "any prefix remap would")
        return names
    result.applied_remap = remaps[0]
    return [remaps[0].apply(n) for n in names]


def _plan_entries(inp: LoadedInput, names: list[str], cast_to: str | None,
                  result: ConvertResult) -> list[Entry]:
    """One Entry per input tensor under its new name; ties, byte totals and casts counted."""
    emptied = [t.name for t, n in zip(inp.tensors, names, strict=True) if not n]
    if emptied:
        raise InspectError(f"key changes leave {emptied[0]!r} with an empty key",
                           hint="check --strip-prefix/--rename: every tensor needs a name")
    dupes = [n for n, c in Counter(names).items() if c > 1]
    if dupes:
        raise InspectError(f"key changes map several tensors to the same key {dupes[0]!r}",
                           hint="check --strip-prefix/--rename/--auto-prefix")
    result.renamed = [(t.name, n) for t, n in zip(inp.tensors, names, strict=True) if t.name != n]
    entries = []
    for t, n in zip(inp.tensors, names, strict=True):
        out_dtype = cast_to if cast_to and t.is_tensor and t.dtype in CASTABLE else t.dtype
        if out_dtype != t.dtype:
            label = f"{t.dtype}->{out_dtype}"
            result.cast[label] = result.cast.get(label, 0) + 1
        entries.append(Entry(n, t, out_dtype))
    ties: dict[str, list[Entry]] = {}
    for e in entries:
        ties.setdefault(e.src.tie, []).append(e)
    result.tied = [[e.name for e in g] for g in ties.values() if len(g) > 1]
    result.tensor_bytes_before = sum(g[0].src.nbytes for g in ties.values())
    result.tensor_bytes_after = sum(g[0].nbytes for g in ties.values())
    result.extra_state = [e.name for e in entries if e.name.endswith("_extra_state")]
    result.empty = [e.name for e in entries if e.src.is_tensor and e.src.nbytes == 0]
    if result.empty:
        result.notes.append(f"{len(result.empty)} tensor(s) hold 0 elements (e.g. "
                            f"{result.empty[0]!r}): written as they are; they carry no weights")
    return entries


# ------------------------------------------------------------------ what is not a tensor


def _plan_extras(plan: ConvertPlan) -> None:
    inp, kind, result = plan.inp, plan.kind, plan.result
    if len(inp.extras) > 0 and inp.container_key:
        result.notes.append(f"container entries beside the weights ({len(inp.extras)}): "
                            + ", ".join(sorted(inp.extras)))
    scalars = scalar_metadata(inp.extras)
    if kind is OutputKind.safetensors:
        result.metadata = {**inp.metadata, **scalars}
        for k, v in inp.extras.items():
            if k not in scalars:
                result.dropped[k] = f"{describe_value(v)} (safetensors holds tensors and string metadata)"
        return
    if inp.metadata:
        result.notes.append(f"safetensors __metadata__ not carried into {kind}: {sorted(inp.metadata)}")
    for k, v in inp.extras.items():
        if plan.keep_container:
            continue
        why = "training state; --keep-extra keeps it" if k in TRAINING_KEYS else \
            "not weights; --keep-extra keeps it"
        result.dropped[k] = f"{describe_value(v)} ({why})"


def _plan_objects(plan: ConvertPlan) -> None:
    """Non-tensor state_dict entries (extra state, quantized packing) in each output format."""
    kind, result = plan.kind, plan.result
    objects = [e for e in plan.entries if not e.src.is_tensor]
    quantized = [e for e in plan.entries if e.quantized]
    if quantized and kind is not OutputKind.pt:
        raise InspectError(
            f"{len(quantized)} quantized entr(ies) (torch.ao, e.g. {quantized[0].name!r}, "
            f"{quantized[0].src.dtype}) cannot be stored in {kind}",
            hint="write a .pt file (quantized tensors keep their scale/zero_point there)")
    if kind is not OutputKind.safetensors:
        return
    stored = []
    for e in objects:
        if e.src.kind == "extra_state":
            try:
                text = json.dumps(_plain(e.src.value))
            except (TypeError, ValueError):
                raise InspectError(
                    f"{e.name}: module extra state of type {type(e.src.value).__name__} is not a "
                    "tensor or plain data; safetensors cannot hold it",
                    hint="write a .pt file to keep it (load_state_dict(strict=True) needs it)") from None
            result.metadata[EXTRA_META_PREFIX + e.name] = text
            stored.append(e.name)
    if result.extra_state and stored:
        result.notes.append(f"{len(stored)} module extra state(s) are plain data, kept as JSON in "
                            f"__metadata__ under '{EXTRA_META_PREFIX}<key>' (restore them with "
                            "set_extra_state; a .pt output keeps them as state_dict entries)")


def _plain(v: Any) -> Any:
    if isinstance(v, PlainNamespace):
        return dict(v)
    if isinstance(v, bytes):
        raise TypeError("bytes")
    return v


def needs_materialized(entries: list[Entry]) -> bool:
    """Quantized tensors, packed params or extra state holding tensors: torch.save them whole."""
    for e in entries:
        if e.quantized:
            return True
        if e.src.kind == "extra_state" and not _is_plain(e.src.value):
            return True
    return False


def _is_plain(v: Any) -> bool:
    if isinstance(v, (str, int, float, bool, bytes, type(None))):
        return True
    if isinstance(v, PlainNamespace):
        return False
    if isinstance(v, dict):
        return all(_is_plain(k) and _is_plain(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return all(_is_plain(x) for x in v)
    return False
