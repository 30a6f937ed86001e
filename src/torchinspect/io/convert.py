"""Make a checkpoint load: CPU storages, unwrapped container, clean keys, chosen dtype.

The output is written tensor by tensor (one chunk in memory at a time) to a temporary file
next to OUT, reloaded and compared with the input (bit-exact, or exact after the requested
cast), optionally checked against a target state_dict (the caller builds it, e.g. from
``--arch``: io imports nothing above it), and only then moved into place. IN is never
overwritten; an existing OUT only with ``force``; every conflict is checked before anything
is written. ``shard_size`` writes Hugging Face style shards plus ``*.index.json``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.arguments import as_list
from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.io.atomic import atomic_path
from torchinspect.io.formats import detect_format
from torchinspect.io.safetensors import encode_header, scalar_metadata
from torchinspect.io.state_dict import (
    DEFAULT_PREFIXES,
    TRAINING_KEYS,
    PrefixRemap,
    describe_value,
    find_prefix_remaps,
    strip_prefixes,
)
from torchinspect.io.tensors import FilePool, LoadedInput, TensorSource, open_input
from torchinspect.io.torchzip import DTYPE_SIZES
from torchinspect.io.writers import parse_size


class CastDtype(StrEnum):
    """Values of --dtype."""

    fp16 = "fp16"
    bf16 = "bf16"
    fp32 = "fp32"

    @property
    def torch_name(self) -> str:
        return {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[self.value]


class OutputKind(StrEnum):
    pt = "pt"
    safetensors = "safetensors"
    dcp = "dcp"  # a torch.distributed.checkpoint folder


CASTABLE = frozenset({"float16", "bfloat16", "float32", "float64"})
_PT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def output_kind(path: Path) -> OutputKind:
    if path.suffix == ".safetensors":
        return OutputKind.safetensors
    if path.suffix in _PT_SUFFIXES:
        return OutputKind.pt
    if path.suffix == ".dcp" or str(path).endswith(("/", os.sep)):
        return OutputKind.dcp
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
class _Entry:
    name: str  # output key
    src: TensorSource
    dtype: str  # output dtype

    @property
    def nbytes(self) -> int:
        if not self.src.is_tensor or self.dtype == self.src.dtype:
            return self.src.nbytes
        return self.src.nbytes // DTYPE_SIZES[self.src.dtype] * DTYPE_SIZES[self.dtype]


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
            "folded": self.folded,
        }


def convert_checkpoint(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    key: str | None = None,
    strip_prefix: Sequence[str] = (),
    rename: Sequence[str] = (),
    auto_prefix: bool = False,
    target: Mapping[str, Any] | None = None,
    target_name: str | None = None,
    allow_partial: bool = False,
    keep_extra: bool = False,
    dtype: CastDtype | str | None = None,
    allow_overflow: bool = False,
    shard_size: int | str | None = None,
    force: bool = False,
    trust_pickle: bool = False,
    protect: Sequence[str | os.PathLike[str]] = (),
) -> ConvertResult:
    """Convert ``src`` into a CPU state_dict file ``dst`` (.pt/.pth, .safetensors, or a DCP
    folder ``NAME.dcp``/``NAME/``).

    ``src`` is a checkpoint file, a Hugging Face sharded checkpoint (index or folder) or a
    DCP folder. Key changes apply in order: container unwrap (``key``; EMA with
    ``key="model_ema"``), ``strip_prefix``, ``rename`` (``REGEX=REPL`` with ``re.sub``),
    ``auto_prefix`` (the best remap onto ``target``'s keys, or without a target the
    ``module.``/``_orig_mod.`` prefixes every key carries). ``dtype`` casts floating tensors
    only; a value that overflows to inf or underflows to 0 is refused unless
    ``allow_overflow``. Training state is dropped unless ``keep_extra``; scalar entries go to
    a safetensors ``__metadata__``. Modules' ``_extra_state`` entries are kept. Tied tensors
    stay shared in ``.pt`` and are copies in safetensors. ``shard_size`` (bytes, safetensors
    only; or a text such as ``"5GB"``) writes ``NAME-0000i-of-0000N.safetensors`` plus
    ``NAME.safetensors.index.json``. ``strip_prefix`` and ``rename`` take one text or several.

    ``target`` (key -> tensor or TensorMeta, e.g. an architecture's ``state_dict()`` on meta,
    built by the caller) checks that the result loads with strict=True by PyTorch's rules
    (``allow_partial``: every present key loads, some target keys stay unset). ``protect``
    names other files that must not be overwritten (e.g. a report's ``-o``).

    The result is verified before it replaces ``dst``: reloaded and compared tensor by tensor.
    """
    src, dst = Path(src), Path(dst)
    kind = output_kind(dst)
    if shard_size is not None and kind is not OutputKind.safetensors:
        raise InspectError("--shard-size writes sharded safetensors", hint="name OUT *.safetensors")
    if shard_size is not None:
        shard_size = parse_size(shard_size)
    if dtype and str(dtype) not in {d.value for d in CastDtype}:
        raise InspectError(f"--dtype {dtype!r} is not supported", hint="use fp16, bf16 or fp32")
    cast_to = CastDtype(dtype).torch_name if dtype else None
    strip_prefix = as_list(strip_prefix)
    renames = [parse_rename(r) for r in as_list(rename)]
    keep_container = keep_extra and kind is OutputKind.pt
    inp = open_input(src, key=key, trust_pickle=trust_pickle, need_objects=keep_container)
    _check_conflicts(dst, inp, protect, force, shard_size)
    if str(inp.format) == "torch_zip":
        _check_source_crcs(Path(src))
    result = ConvertResult(src, dst, str(inp.format), str(kind), inp.container_key, len(inp.tensors))
    result.file_size_before = inp.file_size
    result.devices_before = sorted({t.device for t in inp.tensors})
    result.notes.extend(inp.notes)

    names = _rename_keys([t.name for t in inp.tensors], strip_prefix, renames, result)
    tmeta = _target_meta(target) if target is not None else None
    if auto_prefix:
        names = _auto_prefix(names, tmeta, result)
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
        entries.append(_Entry(n, t, out_dtype))
    ties: dict[str, list[_Entry]] = {}
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
    _plan_extras(inp, kind, keep_container, result)
    _plan_objects(entries, kind, result)

    with FilePool() as files:
        if kind is OutputKind.safetensors and shard_size is not None:
            _write_sharded(dst, entries, files, result, shard_size, force, cast_to, allow_overflow,
                           tmeta, target_name, allow_partial)
            return result
        if kind is OutputKind.dcp:
            _write_dcp_folder(dst, entries, files, result, force, cast_to, allow_overflow,
                              tmeta, target_name, allow_partial)
            return result
        with atomic_path(dst, force=force, protect=(src, *inp.files, *protect)) as tmp:
            if kind is OutputKind.safetensors:
                _write_safetensors(tmp, entries, files, result.metadata, result)
            elif keep_container or _needs_materialized(entries):
                _write_pt_materialized(tmp, entries, files, inp, keep_container, result)
            else:
                _write_pt_streaming(tmp, entries, files, result)
            _check_overflow(result, cast_to, allow_overflow)
            result.verified = _verify(tmp, kind, entries, files, inp, keep_container)
            if tmeta is not None:
                result.arch_check = _check_target(tmp, kind, tmeta, target_name or "the target",
                                                  inp.container_key if keep_container else None,
                                                  allow_partial, folded=result.folded)
            result.file_size_after = tmp.stat().st_size
    if result.tied and kind is OutputKind.safetensors:
        result.notes.append(f"{len(result.tied)} group(s) of tied tensors written as separate copies "
                            "(safetensors cannot alias); load_state_dict re-ties them via the model")
    return result


def _check_conflicts(dst: Path, inp: LoadedInput, protect: Sequence[str | os.PathLike[str]],
                     force: bool, shard_size: int | None) -> None:
    """Every output path against every input and protected file, before anything is written."""
    outs = [dst]
    if shard_size is not None:
        outs.append(_index_path(dst))
    inputs = [inp.path, *inp.files, *(Path(p) for p in protect)]
    for out in outs:
        for other in inputs:
            if out.exists() and other.exists() and os.path.samefile(out, other) or \
                    out.resolve() == other.resolve():
                raise InspectError(f"{out}: refusing to overwrite the input file {other}",
                                   hint="write to a new file name")
    for p in protect:
        if Path(p).resolve() in (o.resolve() for o in outs):
            raise InspectError(f"{p}: the report (-o) and OUT are the same file",
                               hint="write the report to another file name")
        if Path(p).resolve() in (inp.path.resolve(), *(f.resolve() for f in inp.files)):
            raise InspectError(f"{p}: refusing to overwrite the input file",
                               hint="write the report (-o) to a new file name")
    if not force:
        for out in outs:
            if out.exists():
                raise InspectError(f"{out} already exists", hint="pass --force to replace it")


def _target_meta(target: Mapping[str, Any]) -> dict[str, Any]:
    from torchinspect.io.diff import entry_meta
    from torchinspect.io.meta import TensorMeta

    out = {}
    for k, v in target.items():
        if isinstance(v, TensorMeta):
            out[k] = v
        else:
            m = entry_meta(k, v)
            if m is not None:
                out[k] = m
    return out


# ------------------------------------------------------------------ keys


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


def _plan_extras(inp: LoadedInput, kind: OutputKind, keep_container: bool,
                 result: ConvertResult) -> None:
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
        if keep_container:
            continue
        why = "training state; --keep-extra keeps it" if k in TRAINING_KEYS else \
            "not weights; --keep-extra keeps it"
        result.dropped[k] = f"{describe_value(v)} ({why})"


_EXTRA_META_PREFIX = "torchinspect.extra_state."


def _plan_objects(entries: list[_Entry], kind: OutputKind, result: ConvertResult) -> None:
    """Non-tensor state_dict entries (extra state, quantized packing) in each output format."""
    objects = [e for e in entries if not e.src.is_tensor]
    quantized = [e for e in entries if e.src.dtype.startswith(("qint", "quint")) or e.src.kind == "packed"]
    if quantized and kind is not OutputKind.pt:
        raise InspectError(
            f"{len(quantized)} quantized entr(ies) (torch.ao, e.g. {quantized[0].name!r}, "
            f"{quantized[0].src.dtype}) cannot be stored in {kind}",
            hint="write a .pt file (quantized tensors keep their scale/zero_point there)")
    if kind is not OutputKind.safetensors:
        return
    import json

    for e in objects:
        if e.src.kind == "extra_state":
            try:
                text = json.dumps(_plain(e.src.value))
            except (TypeError, ValueError):
                raise InspectError(
                    f"{e.name}: module extra state of type {type(e.src.value).__name__} is not a "
                    "tensor or plain data; safetensors cannot hold it",
                    hint="write a .pt file to keep it (load_state_dict(strict=True) needs it)") from None
            result.metadata[_EXTRA_META_PREFIX + e.name] = text
    if result.extra_state:
        stored = [e.name for e in objects if e.src.kind == "extra_state"]
        if stored:
            result.notes.append(f"{len(stored)} module extra state(s) are plain data, kept as JSON in "
                                f"__metadata__ under '{_EXTRA_META_PREFIX}<key>' (restore them with "
                                "set_extra_state; a .pt output keeps them as state_dict entries)")


def _plain(v: Any) -> Any:
    from torchinspect.io.torchzip import PlainNamespace

    if isinstance(v, PlainNamespace):
        return dict(v)
    if isinstance(v, bytes):
        raise TypeError("bytes")
    return v


# ------------------------------------------------------------------ writing


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _data(entry: _Entry, files: FilePool,
          overflow: dict[str, tuple[int, int]] | None = None) -> Iterator[bytes | memoryview]:
    """The output bytes of one tensor, chunk by chunk (cast on the fly; values that become
    inf or 0 in the cast are counted into ``overflow[name]``)."""
    if entry.dtype == entry.src.dtype:
        yield from entry.src.chunks(files)
        return
    import torch

    src, dst = _torch_dtype(entry.src.dtype), _torch_dtype(entry.dtype)
    to_inf = to_zero = 0
    for chunk in entry.src.chunks(files):
        a = torch.frombuffer(bytearray(chunk), dtype=src)
        t = a.to(dst)
        if overflow is not None:
            to_inf += int((torch.isinf(t) & torch.isfinite(a)).sum())
            to_zero += int(((t == 0) & (a != 0)).sum())
        yield memoryview(t.view(torch.uint8).numpy())
    if overflow is not None and (to_inf or to_zero):
        overflow[entry.name] = (to_inf, to_zero)


def _check_overflow(result: ConvertResult, cast_to: str | None, allow: bool) -> None:
    if not result.overflow:
        return
    inf = sum(a for a, _ in result.overflow.values())
    zero = sum(b for _, b in result.overflow.values())
    worst = max(result.overflow, key=lambda k: result.overflow[k])
    flag = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(cast_to or "", cast_to)
    text = (f"--dtype {flag}: {inf:,} value(s) overflow to inf and {zero:,} underflow to 0 "
            f"in {len(result.overflow)} tensor(s) (e.g. {worst!r}: {result.overflow[worst][0]:,} "
            f"to inf, {result.overflow[worst][1]:,} to 0)")
    if inf and not allow:  # underflow of tiny values is reported, not refused
        better = "bf16 keeps float32's range" if cast_to == "float16" else "keep fp32"
        raise InspectError(text, hint=f"{better}: try --dtype bf16, or pass --allow-overflow to "
                           "write it anyway; OUT was not written", status=ExitStatus.CHECK_FAILED)
    result.notes.append(text + (" (--allow-overflow)" if inf else ""))


def _pwrite_all(fd: int, chunks: Iterator[bytes | memoryview], pos: int) -> int:
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        while view.nbytes:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n
    return pos


def _write_safetensors(tmp: Path, entries: list[_Entry], files: FilePool,
                       metadata: dict[str, str], result: ConvertResult) -> None:
    tensors = [e for e in entries if e.src.is_tensor]
    header, offsets = encode_header([(e.name, e.dtype, e.src.shape, e.nbytes) for e in tensors],
                                    metadata)
    out = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(out, header)
        base = len(header)
        for e, (begin, end) in zip(tensors, offsets, strict=True):
            if _pwrite_all(out, _data(e, files, result.overflow), base + begin) != base + end:
                raise RuntimeError(f"wrote the wrong number of bytes for {e.name!r}")
    finally:
        os.close(out)


def _index_path(dst: Path) -> Path:
    return dst.with_name(dst.name + ".index.json")


def _shard_name(dst: Path, i: int, n: int) -> str:
    return f"{dst.stem}-{i:05d}-of-{n:05d}{dst.suffix}"


def _write_sharded(dst: Path, entries: list[_Entry], files: FilePool, result: ConvertResult,
                   shard_size: int, force: bool, cast_to: str | None, allow_overflow: bool,
                   tmeta: dict[str, Any] | None, target_name: str | None, allow_partial: bool) -> None:
    """Hugging Face layout: ``NAME-0000i-of-0000N.safetensors`` (``"format": "pt"``) and
    ``NAME.safetensors.index.json`` (``metadata.total_size``, ``weight_map``). Each shard is
    written and verified under a temporary name; the index is written last."""
    import json

    from torchinspect.io.writers import plan_shards

    tensors = [e for e in entries if e.src.is_tensor]
    by_name = {e.name: e for e in tensors}
    plan = plan_shards({e.name: e.nbytes for e in tensors}, shard_size)  # the shared greedy split
    groups = [[by_name[k] for k in shard] for shard in plan.shards] or [[]]
    n = len(groups)
    names = [_shard_name(dst, i + 1, n) for i in range(n)]
    index = _index_path(dst)
    for name in names:
        out = dst.with_name(name)
        if out.exists() and not force:
            raise InspectError(f"{out} already exists", hint="pass --force to replace it")
    meta = {**result.metadata, "format": "pt"}
    weight_map: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        tmps = []
        for name, group in zip(names, groups, strict=True):
            tmp = stack.enter_context(atomic_path(dst.with_name(name), force=True,
                                                  protect=tuple(f for f in files_of(entries))))
            _write_safetensors(tmp, group, files, meta, result)
            _check_overflow(result, cast_to, allow_overflow)
            _verify(tmp, OutputKind.safetensors, group, files, None, False)
            weight_map.update({e.name: name for e in group})
            tmps.append(tmp)
        total = sum(e.nbytes for e in tensors)
        index_text = json.dumps({"metadata": {"total_size": total, **{
            k: v for k, v in result.metadata.items()}}, "weight_map": dict(sorted(weight_map.items()))},
            indent=2) + "\n"
        itmp = stack.enter_context(atomic_path(index, force=True))
        itmp.write_text(index_text, encoding="utf-8")
        if tmeta is not None:
            result.arch_check = _check_target(itmp, OutputKind.safetensors, tmeta,
                                              target_name or "the target", None, allow_partial,
                                              shard_dir=itmp.parent, shard_tmps=dict(zip(names, tmps, strict=True)),
                                              folded=result.folded)
        result.file_size_after = sum(t.stat().st_size for t in tmps) + len(index_text)
    result.verified = "exact after cast" if any(e.dtype != e.src.dtype for e in tensors) else "bit-exact"
    result.shards = names
    result.notes.append(f"{n} shard(s) of at most {shard_size:,} bytes; index {index.name}")


def files_of(entries: list[_Entry]) -> set[Path]:
    return {e.src.path for e in entries if e.src.path is not None}


def _write_dcp_folder(dst: Path, entries: list[_Entry], files: FilePool, result: ConvertResult,
                      force: bool, cast_to: str | None, allow_overflow: bool,
                      tmeta: dict[str, Any] | None, target_name: str | None,
                      allow_partial: bool) -> None:
    """A torch.distributed.checkpoint folder (``torch_save_to_dcp``'s layout), written into a
    temporary folder with ``dcp.save(no_dist=True)`` and renamed into place."""
    import shutil
    import tempfile
    import warnings

    import torch.distributed.checkpoint as dcp

    dst = Path(str(dst).rstrip("/" + os.sep))
    if dst.exists() and not dst.is_dir():
        raise InspectError(f"{dst} exists and is not a folder", hint="choose another OUT")
    if dst.exists() and any(dst.iterdir()) and not force:
        raise InspectError(f"{dst} already exists", hint="pass --force to replace it")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.is_dir():
        raise InspectError(f"{dst}: folder {parent} does not exist", hint="create it first")
    import torch

    # placeholders with the right shape/dtype (untouched: no RAM) for DCP's planning; each
    # tensor's bytes are read when DCP's writer asks for it (_StreamingSavePlanner)
    sd: dict[str, Any] = {}
    by_name: dict[str, _Entry] = {}
    for e in entries:
        if not e.src.is_tensor:
            sd[e.name] = e.src.value
            continue
        sd[e.name] = torch.empty(e.src.shape, dtype=_torch_dtype(e.dtype))
        by_name[e.name] = e
    planner = _streaming_save_planner(by_name, files, result.overflow)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(tmp), single_file_per_rank=False),
                     planner=planner,
                     no_dist=True)
        _check_overflow(result, cast_to, allow_overflow)
        from torchinspect.io.layouts import Layout, open_dcp

        back = open_dcp(Layout("dcp", tmp), key=None)
        got = {t.name: t for t in back.tensors}
        for e in entries:
            if e.src.is_tensor and (e.name not in got or got[e.name].shape != e.src.shape):
                raise InspectError(f"verification failed for {e.name!r} in the DCP folder",
                                   hint="report this; OUT was not written", status=ExitStatus.INTERNAL)
        if tmeta is not None:
            result.arch_check = _compare_target({t.name: t for t in back.tensors}, tmeta,
                                                target_name or "the target", allow_partial,
                                                result.folded)
        if dst.exists():
            old = dst.with_name(f".{dst.name}.old")
            os.replace(dst, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.file_size_after = sum(p.stat().st_size for p in dst.iterdir())
    result.verified = "keys and shapes (DCP metadata)"


def _streaming_save_planner(by_name: dict[str, _Entry], files: FilePool,
                            overflow: dict[str, tuple[int, int]]) -> Any:
    """A DCP save planner whose tensors are read from IN (cast on the fly) only when the
    writer asks for them, one at a time: peak memory is one tensor, not the checkpoint."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    class _StreamingSavePlanner(DefaultSavePlanner):
        def lookup_object(self, index: Any) -> Any:
            e = by_name.get(index.fqn)
            if e is None:
                return super().lookup_object(index)
            if not e.nbytes:
                return torch.empty(e.src.shape, dtype=_torch_dtype(e.dtype))
            buf = bytearray(e.nbytes)
            pos = 0
            for chunk in _data(e, files, overflow):
                view = memoryview(chunk).cast("B")
                buf[pos:pos + view.nbytes] = view
                pos += view.nbytes
            t = torch.frombuffer(buf, dtype=_torch_dtype(e.dtype)).reshape(e.src.shape)
            if index.offset is not None and any(index.offset):
                raise RuntimeError(f"unexpected chunk offset for {index.fqn!r}")
            return t

    return _StreamingSavePlanner()


def _needs_materialized(entries: list[_Entry]) -> bool:
    """Quantized tensors, packed params or extra state holding tensors: torch.save them whole."""
    for e in entries:
        if e.src.kind == "packed" or e.src.dtype.startswith(("qint", "quint")):
            return True
        if e.src.kind == "extra_state" and not _is_plain(e.src.value):
            return True
    return False


def _is_plain(v: Any) -> bool:
    from torchinspect.io.torchzip import PlainNamespace

    if isinstance(v, (str, int, float, bool, bytes, type(None))):
        return True
    if isinstance(v, PlainNamespace):
        return False
    if isinstance(v, dict):
        return all(_is_plain(k) and _is_plain(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return all(_is_plain(x) for x in v)
    return False


def _write_pt_streaming(tmp: Path, entries: list[_Entry], files: FilePool,
                        result: ConvertResult) -> None:
    """torch.save a data-less skeleton (skip_data), then fill each storage from the input.

    The skeleton's ``data/<key>`` records have the right sizes but CRC-32 0; each record's
    CRC is computed while its bytes stream through and then written into the zip headers
    (central directory and data descriptor), so zipfile/``unzip -t`` accept the file.
    Plain-data extra state goes into the skeleton as it is.
    """
    import torch
    from torch.serialization import skip_data

    from torchinspect.io.torchzip import read_torch_zip_structure
    from torchinspect.io.zipcrc import CrcStream, ZipPatchError, set_stored_crcs

    skeleton: dict[str, Any] = {}
    by_tie: dict[str, Any] = {}
    for e in entries:
        if not e.src.is_tensor:
            skeleton[e.name] = e.src.value
            continue
        t = by_tie.get(e.src.tie)
        if t is None or t.dtype != _torch_dtype(e.dtype):
            t = torch.empty(e.src.shape, dtype=_torch_dtype(e.dtype))  # untouched: no RAM used
            by_tie[e.src.tie] = t
        skeleton[e.name] = t
    with skip_data():
        torch.save(skeleton, tmp)
    del skeleton, by_tie
    obj, archive = read_torch_zip_structure(tmp)
    records: dict[str, tuple[int, int]] = {}  # member name -> (crc32, bytes written)
    out = os.open(tmp, os.O_RDWR)
    try:
        for e in entries:
            if not e.src.is_tensor:
                continue
            key = obj[e.name].storage.key
            member = f"{archive.prefix}data/{key}"
            if member in records:
                continue
            stream = CrcStream(_data(e, files, result.overflow))
            _pwrite_all(out, stream, archive.storage_offset(key))
            records[member] = (stream.crc, stream.nbytes)
        set_stored_crcs(out, records)
    except ZipPatchError as exc:
        raise InspectError(f"could not finish the .pt zip archive ({exc})",
                           hint="report this; OUT was not written", status=ExitStatus.INTERNAL) from None
    finally:
        os.close(out)
    _check_zip_crcs(tmp, records)


def _check_source_crcs(src: Path) -> None:
    """Every record of a torch.save zip against its CRC-32 (one read of the file; torch.load
    never checks them, so a bit flipped on disk would be converted and then "verified" against
    the damaged bytes). Records with a CRC of 0 (written in place by other tools) are skipped."""
    import zipfile

    try:
        with zipfile.ZipFile(src) as zf:
            for info in zf.infolist():
                if info.CRC == 0 or info.is_dir():
                    continue
                with zf.open(info) as fh:
                    while fh.read(1 << 24):
                        pass
    except zipfile.BadZipFile as exc:
        raise InspectError(f"{src}: damaged: {exc} (the file changed after it was saved)",
                           hint="convert an intact copy; torch.load would read the damaged bytes "
                           "without noticing") from None


def _check_zip_crcs(tmp: Path, records: dict[str, tuple[int, int]]) -> None:
    """Headers only: every record's CRC-32 is the streamed one, in the central directory
    and in its local header/data descriptor (the bytes themselves are compared in _verify)."""
    import zipfile

    from torchinspect.io.zipcrc import crc_mismatches

    with zipfile.ZipFile(tmp) as zf:
        wrong = [n for n, (crc, size) in records.items()
                 if zf.getinfo(n).CRC != crc or zf.getinfo(n).file_size != size]
    wrong += crc_mismatches(tmp)
    if wrong:
        raise InspectError(f"verification failed: zip CRC-32 not set for {wrong[0]!r}",
                           hint="report this; OUT was not written", status=ExitStatus.INTERNAL)


def _write_pt_materialized(tmp: Path, entries: list[_Entry], files: FilePool, inp: LoadedInput,
                           keep_container: bool, result: ConvertResult) -> None:
    """torch.save of the loaded values: --keep-extra (the container as loaded, with the
    converted state_dict at its key), or quantized / tensor-holding extra-state entries."""
    import torch

    from torchinspect.io.diff import _value

    if keep_container and inp.container_key and "/" in inp.container_key:
        raise InspectError(f"--keep-extra with a nested container key {inp.container_key!r}",
                           hint="drop --keep-extra, or choose the inner dict with --key")
    sd: dict[str, Any] = {}
    for e in entries:
        v = _value(e.src, files)
        if e.src.is_tensor and e.dtype != e.src.dtype:
            chunks = list(_data(e, files, result.overflow))
            v = torch.frombuffer(bytearray(b"".join(bytes(c) for c in chunks)),
                                 dtype=_torch_dtype(e.dtype)).reshape(e.src.shape) \
                if e.nbytes else v.to(_torch_dtype(e.dtype))
        sd[e.name] = v
    obj = {inp.container_key or "state_dict": sd, **inp.extras} if keep_container else sd
    with warnings_off():
        torch.save(obj, tmp)


@contextlib.contextmanager
def warnings_off() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------ verification


def _fail(what: str) -> InspectError:
    return InspectError(f"verification failed: {what}", hint="report this; OUT was not written",
                        status=ExitStatus.INTERNAL)


def _verify(tmp: Path, kind: OutputKind, entries: list[_Entry], files: FilePool,
            inp: LoadedInput | None, keep_container: bool) -> str:
    """Reload OUT and compare every entry with the (cast) input: tensor bytes, and the
    values of extra state / quantized entries."""
    out_key = (inp.container_key or "state_dict").split("/")[0] if keep_container and inp else None
    if kind is OutputKind.pt:
        import torch

        try:
            with warnings_off():
                torch.load(tmp, weights_only=True, map_location="cpu", mmap=True)
        except Exception as exc:  # noqa: BLE001 - any failure means the output is unusable
            raise _fail(f"the written file does not load with weights_only=True "
                        f"({first_line(exc, limit=200)})") from None
    else:
        from safetensors import safe_open

        with safe_open(str(tmp), framework="pt") as f:
            if set(f.keys()) != {e.name for e in entries if e.src.is_tensor}:
                raise _fail("safetensors keys differ")
    reread = open_input(tmp, key=out_key, fmt=detect_format(tmp))
    got = {t.name: t for t in reread.tensors}
    with FilePool() as out_files:
        for e in entries:
            if kind is OutputKind.safetensors and not e.src.is_tensor:
                continue
            t = got.get(e.name)
            if t is None or t.shape != e.src.shape or t.dtype != e.dtype or t.kind != e.src.kind:
                raise _fail(f"{e.name!r}: missing or wrong shape/dtype")
            if not e.src.is_tensor or e.dtype.startswith(("qint", "quint")):
                if not _same_object(_value_of(e, files), _value_of_src(t, out_files)):
                    raise _fail(f"{e.name!r} differs after reload")
                continue
            if not _same_bytes(_data(e, files), t, out_files):
                raise _fail(f"{e.name!r} differs after reload")
    return "exact after cast" if any(e.dtype != e.src.dtype for e in entries) else "bit-exact"


def _value_of(e: _Entry, files: FilePool) -> Any:
    from torchinspect.io.diff import _value

    return _value(e.src, files)


def _value_of_src(t: TensorSource, files: FilePool) -> Any:
    from torchinspect.io.diff import _value

    return _value(t, files)


def _same_object(a: Any, b: Any) -> bool:
    """Equality for extra state / quantized values (tensors compared exactly, bits and params)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_quantized:
            same_q = a.qscheme() == b.qscheme() and (
                (a.q_scale() == b.q_scale() and a.q_zero_point() == b.q_zero_point())
                if a.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric)
                else torch.equal(a.q_per_channel_scales(), b.q_per_channel_scales()))
            return same_q and torch.equal(a.int_repr(), b.int_repr())
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and \
            all(_same_object(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_object(a[k], b[k]) for k in a)
    return bool(a == b)


def _same_bytes(expected: Iterator[bytes | memoryview], actual: TensorSource, files: FilePool) -> bool:
    pos = 0
    for chunk in expected:
        view = memoryview(chunk).cast("B")
        if actual.read(files, pos, view.nbytes) != view:
            return False
        pos += view.nbytes
    return pos == actual.nbytes


def _check_target(tmp: Path, kind: OutputKind, target: dict[str, Any], name: str,
                  key: str | None, allow_partial: bool, shard_dir: Path | None = None,
                  shard_tmps: dict[str, Path] | None = None, folded: list[str] | None = None) -> str:
    """Does the written file load into the target by PyTorch's rules (io/diff.py)?"""
    from torchinspect.io.meta import read_checkpoint_meta

    if shard_tmps:
        from torchinspect.io.meta import TensorMeta
        from torchinspect.io.safetensors import read_safetensors_header

        got: dict[str, Any] = {}
        for p in shard_tmps.values():
            for n, e in read_safetensors_header(p).entries.items():
                got[n] = TensorMeta(e.shape, e.dtype, "cpu", e.nbytes, f"{p}:{e.begin}")
    else:
        got = read_checkpoint_meta(tmp, key=key, fmt=detect_format(tmp)).tensors
    if kind is OutputKind.safetensors:  # plain extra state went to __metadata__
        from torchinspect.io.meta import TensorMeta

        for k, t in target.items():
            if t.kind == "extra_state" and k not in got:
                got[k] = TensorMeta((), "extra_state", "cpu", 0, None, "extra_state")
    return _compare_target(got, target, name, allow_partial, folded)


def _compare_target(got: Mapping[str, Any], target: dict[str, Any], name: str,
                    allow_partial: bool, folded: list[str] | None = None) -> str:
    """The load verdict of OUT into the target (diff's rules); the target's
    ``num_batches_tracked`` entries that OUT lacks are appended to ``folded``."""
    from torchinspect.io.diff import DiffSide, Verdict, diff_state_dicts
    from torchinspect.io.meta import TensorMeta

    metas = {k: v if isinstance(v, TensorMeta) else TensorMeta(v.shape, v.dtype, v.device, v.nbytes,
                                                               None, v.kind) for k, v in got.items()}
    res = diff_state_dicts(DiffSide(name, "model", dict(target)), DiffSide("OUT", "checkpoint", metas))
    if folded is not None:
        folded.extend(k for k in res.folded if k in target)
    v = res.verdict
    if v is Verdict.strict:
        return f"loads into {name} with strict=True"
    if v is not Verdict.incompatible and allow_partial:
        return (f"partial: {len(res.matched)} of {res.target_total} tensors of {name} get a value "
                f"(strict=False; {len(res.missing)} missing, {len(res.unexpected)} unexpected; "
                "--allow-partial)")
    detail = []
    if res.shape_mismatches:
        m = res.shape_mismatches[0]
        detail.append(f"{len(res.shape_mismatches)} shape mismatch(es), e.g. {m.key}: "
                      f"{tuple(m.b.shape)} into {tuple(m.a.shape)}")
    if res.missing:
        detail.append(f"{len(res.missing)} missing (e.g. {res.missing[0]})")
    if res.unexpected:
        detail.append(f"{len(res.unexpected)} unexpected (e.g. {res.unexpected[0]})")
    if not res.matched:
        detail.append("no key matches")
    partial_ok = not res.shape_mismatches and res.matched
    raise InspectError(
        f"the converted weights do not load into {name} with strict=True: {'; '.join(detail)}",
        hint=("pass --allow-partial to write the partial state_dict anyway; " if partial_ok else "")
        + f"`inspect diff IN --arch {name}` shows every mismatch (OUT was not written)",
        status=ExitStatus.CHECK_FAILED,
    )
