"""Make a checkpoint load: CPU storages, unwrapped container, clean keys, chosen dtype.

The output is written tensor by tensor (one chunk in memory at a time) to a temporary file
next to OUT, reloaded and compared with the input (bit-exact, or exact after the requested
cast), optionally strict-loaded into ``--arch``, and only then moved into place. IN is never
overwritten; an existing OUT only with ``force``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.errors import ExitStatus, InspectError
from torchinspect.io.atomic import atomic_path
from torchinspect.io.safetensors import encode_header, scalar_metadata
from torchinspect.io.sources import LoadedInput, TensorSource, open_input
from torchinspect.io.state_dict import (
    DEFAULT_PREFIXES,
    TRAINING_KEYS,
    PrefixRemap,
    find_prefix_remaps,
    strip_prefixes,
)


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


CASTABLE = frozenset({"float16", "bfloat16", "float32", "float64"})
_PT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def output_kind(path: Path) -> OutputKind:
    if path.suffix == ".safetensors":
        return OutputKind.safetensors
    if path.suffix in _PT_SUFFIXES:
        return OutputKind.pt
    raise InspectError(f"{path}: unknown output format {path.suffix or '(no extension)'!r}",
                       hint="name OUT *.safetensors, or *.pt / *.pth for a torch.save state_dict")


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
        from torchinspect.io.torchzip import DTYPE_SIZES

        return self.src.nbytes // DTYPE_SIZES[self.src.dtype] * DTYPE_SIZES[self.dtype] \
            if self.src.nbytes else 0


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
        }


def convert_checkpoint(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    key: str | None = None,
    strip_prefix: Sequence[str] = (),
    rename: Sequence[str] = (),
    auto_prefix: bool = False,
    arch: str | None = None,
    arch_args: list[str] | None = None,
    keep_extra: bool = False,
    dtype: CastDtype | str | None = None,
    force: bool = False,
    trust_pickle: bool = False,
) -> ConvertResult:
    """Convert ``src`` into a CPU state_dict file ``dst`` (.pt/.pth or .safetensors).

    Key changes apply in order: container unwrap (``key``; EMA with ``key="model_ema"``),
    ``strip_prefix`` (each prefix removed from the keys that start with it), ``rename``
    (``REGEX=REPL`` applied with ``re.sub``), ``auto_prefix`` (the best remap onto ``arch``'s
    keys, or without ``arch`` the ``module.``/``_orig_mod.`` prefixes every key carries).
    ``dtype`` casts floating tensors (float16/bfloat16/float32/float64) only. Training state
    (optimizer, scheduler, ...) is dropped unless ``keep_extra`` (``.pt`` output then keeps
    the container); scalar entries (epoch, ...) go to a safetensors ``__metadata__``.
    Tied tensors stay shared in ``.pt`` and are written as copies in safetensors.

    The result is verified before it replaces ``dst``: reloaded (weights_only for .pt) and
    compared tensor by tensor, and with ``arch``, strict-loaded into that architecture.
    """
    src, dst = Path(src), Path(dst)
    kind = output_kind(dst)
    cast_to = CastDtype(dtype).torch_name if dtype else None
    renames = [parse_rename(r) for r in rename]
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise InspectError(f"{dst}: refusing to overwrite the input file", hint="write to a new file name")
    if dst.exists() and not force:
        raise InspectError(f"{dst} already exists", hint="pass --force to replace it")
    keep_container = keep_extra and kind is OutputKind.pt
    inp = open_input(src, key=key, trust_pickle=trust_pickle, need_objects=keep_container)
    result = ConvertResult(src, dst, str(inp.format), str(kind), inp.container_key, len(inp.tensors))
    result.file_size_before = src.stat().st_size
    result.devices_before = sorted({t.device for t in inp.tensors})
    result.tensor_bytes_before = sum(t.nbytes for t in inp.tensors)

    names = _rename_keys([t.name for t in inp.tensors], strip_prefix, renames, result)
    model = None
    if arch is not None:
        from torchinspect.sources import load_model

        model = load_model(arch, args=arch_args, device="meta").model
    if auto_prefix:
        names = _auto_prefix(names, model, result)
    dupes = [n for n, c in Counter(names).items() if c > 1]
    if dupes:
        raise InspectError(f"key changes map several tensors to the same key {dupes[0]!r}",
                           hint="check --strip-prefix/--rename/--auto-prefix")
    result.renamed = [(t.name, n) for t, n in zip(inp.tensors, names, strict=True) if t.name != n]
    entries = []
    for t, n in zip(inp.tensors, names, strict=True):
        out_dtype = cast_to if cast_to and t.dtype in CASTABLE else t.dtype
        if out_dtype != t.dtype:
            label = f"{t.dtype}->{out_dtype}"
            result.cast[label] = result.cast.get(label, 0) + 1
        entries.append(_Entry(n, t, out_dtype))
    result.tensor_bytes_after = sum(e.nbytes for e in entries)
    ties: dict[str, list[str]] = {}
    for e in entries:
        ties.setdefault(e.src.tie, []).append(e.name)
    result.tied = [g for g in ties.values() if len(g) > 1]
    _plan_extras(inp, kind, keep_container, result)

    fd = os.open(src, os.O_RDONLY) if inp.streamed else None
    try:
        with atomic_path(dst, force=force, protect=(src,)) as tmp:
            if kind is OutputKind.safetensors:
                _write_safetensors(tmp, entries, fd, result.metadata)
            elif keep_container:
                _write_pt_container(tmp, entries, inp)
            else:
                _write_pt_streaming(tmp, entries, fd)
            result.verified = _verify(tmp, kind, entries, fd, inp, keep_container)
            if model is not None:
                result.arch_check = _strict_load(tmp, kind, model, arch or "",
                                                 inp.container_key if keep_container else None)
            result.file_size_after = tmp.stat().st_size
    finally:
        if fd is not None:
            os.close(fd)
    if result.tied and kind is OutputKind.safetensors:
        result.notes.append(f"{len(result.tied)} group(s) of tied tensors written as separate copies "
                            "(safetensors cannot alias); load_state_dict re-ties them via the model")
    return result


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


def _auto_prefix(names: list[str], model: Any, result: ConvertResult) -> list[str]:
    if model is None:
        stripped, prefixes = strip_prefixes(dict.fromkeys(names), DEFAULT_PREFIXES)
        if prefixes:
            result.stripped.extend(f"{p} (all {len(names)} keys, --auto-prefix)" for p in prefixes)
            return list(stripped)
        result.notes.append("--auto-prefix: no module./_orig_mod. prefix on every key "
                            "(pass --arch to match prefixes against a model)")
        return names
    remaps = find_prefix_remaps(model.state_dict().keys(), names)
    if not remaps:
        result.notes.append("--auto-prefix: the keys already match the architecture as well as "
                            "any prefix remap would")
        return names
    result.applied_remap = remaps[0]
    return [remaps[0].apply(n) for n in names]


def _plan_extras(inp: LoadedInput, kind: OutputKind, keep_container: bool,
                 result: ConvertResult) -> None:
    from torchinspect.io.meta import _describe

    scalars = scalar_metadata(inp.extras)
    if kind is OutputKind.safetensors:
        result.metadata = {**inp.metadata, **scalars}
        for k, v in inp.extras.items():
            if k not in scalars:
                result.dropped[k] = f"{_describe(v)} (safetensors holds tensors and string metadata)"
        return
    if inp.metadata:
        result.notes.append(f"safetensors __metadata__ not carried into .pt: {sorted(inp.metadata)}")
    for k, v in inp.extras.items():
        if keep_container:
            continue
        why = "training state; --keep-extra keeps it" if k in TRAINING_KEYS else \
            "not weights; --keep-extra keeps it"
        result.dropped[k] = f"{_describe(v)} ({why})"


# ------------------------------------------------------------------ writing


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _data(entry: _Entry, fd: int | None) -> Iterator[bytes | memoryview]:
    """The output bytes of one tensor, chunk by chunk (cast on the fly)."""
    if entry.dtype == entry.src.dtype:
        yield from entry.src.chunks(fd)
        return
    import torch

    src, dst = _torch_dtype(entry.src.dtype), _torch_dtype(entry.dtype)
    for chunk in entry.src.chunks(fd):
        t = torch.frombuffer(bytearray(chunk), dtype=src).to(dst)
        yield memoryview(t.view(torch.uint8).numpy())


def _pwrite_all(fd: int, chunks: Iterator[bytes | memoryview], pos: int) -> int:
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        while view.nbytes:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n
    return pos


def _write_safetensors(tmp: Path, entries: list[_Entry], fd_in: int | None,
                       metadata: dict[str, str]) -> None:
    header, offsets = encode_header([(e.name, e.dtype, e.src.shape, e.nbytes) for e in entries],
                                    metadata)
    out = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(out, header)
        base = len(header)
        for e, (begin, end) in zip(entries, offsets, strict=True):
            if _pwrite_all(out, _data(e, fd_in), base + begin) != base + end:
                raise RuntimeError(f"wrote the wrong number of bytes for {e.name!r}")
    finally:
        os.close(out)


def _write_pt_streaming(tmp: Path, entries: list[_Entry], fd_in: int | None) -> None:
    """torch.save a data-less skeleton (skip_data), then fill each storage from the input.

    The skeleton's ``data/<key>`` records have the right sizes but CRC-32 0; each record's
    CRC is computed while its bytes stream through and then written into the zip headers
    (central directory and data descriptor), so zipfile/``unzip -t`` accept the file.
    """
    import torch
    from torch.serialization import skip_data

    from torchinspect.io.torchzip import read_torch_zip_structure
    from torchinspect.io.zipcrc import CrcStream, ZipPatchError, set_stored_crcs

    skeleton: dict[str, Any] = {}
    by_tie: dict[str, Any] = {}
    for e in entries:
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
            key = obj[e.name].storage.key
            member = f"{archive.prefix}data/{key}"
            if member in records:
                continue
            stream = CrcStream(_data(e, fd_in))
            _pwrite_all(out, stream, archive.storage_offset(key))
            records[member] = (stream.crc, stream.nbytes)
        set_stored_crcs(out, records)
    except ZipPatchError as exc:
        raise InspectError(f"could not finish the .pt zip archive ({exc})",
                           hint="report this; OUT was not written", status=ExitStatus.INTERNAL) from None
    finally:
        os.close(out)
    _check_zip_crcs(tmp, records)


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


def _write_pt_container(tmp: Path, entries: list[_Entry], inp: LoadedInput) -> None:
    """--keep-extra: the container as loaded, with the converted state_dict at its key."""
    import torch

    if inp.container_key and "/" in inp.container_key:
        raise InspectError(f"--keep-extra with a nested container key {inp.container_key!r}",
                           hint="drop --keep-extra, or choose the inner dict with --key")
    sd = {}
    for e in entries:
        t = e.src.tensor
        sd[e.name] = t.to(_torch_dtype(e.dtype)) if e.dtype != e.src.dtype else t
    torch.save({inp.container_key or "state_dict": sd, **inp.extras}, tmp)


# ------------------------------------------------------------------ verification


def _verify(tmp: Path, kind: OutputKind, entries: list[_Entry], fd_in: int | None,
            inp: LoadedInput, keep_container: bool) -> str:
    """Reload OUT and compare every tensor's bytes with the (cast) input."""
    out_key = (inp.container_key or "state_dict").split("/")[0] if keep_container else None
    if kind is OutputKind.pt:
        import torch

        try:
            torch.load(tmp, weights_only=True, map_location="meta")
        except Exception as exc:  # noqa: BLE001 - any failure means the output is unusable
            raise InspectError(f"verification failed: the written file does not load with "
                               f"weights_only=True ({str(exc).splitlines()[0][:200]})",
                               hint="report this; OUT was not written", status=ExitStatus.INTERNAL) from None
    else:
        from safetensors import safe_open

        with safe_open(str(tmp), framework="pt") as f:
            if set(f.keys()) != {e.name for e in entries}:
                raise InspectError("verification failed: safetensors keys differ",
                                   hint="report this; OUT was not written", status=ExitStatus.INTERNAL)
    reread = open_input(tmp, key=out_key)
    got = {t.name: t for t in reread.tensors}
    fd_out = os.open(tmp, os.O_RDONLY) if reread.streamed else None
    try:
        for e in entries:
            t = got.get(e.name)
            if t is None or t.shape != e.src.shape or t.dtype != e.dtype:
                raise InspectError(f"verification failed for {e.name!r}: missing or wrong shape/dtype",
                                   hint="report this; OUT was not written", status=ExitStatus.INTERNAL)
            if not _same_bytes(_data(e, fd_in), t, fd_out):
                raise InspectError(f"verification failed: {e.name!r} differs after reload",
                                   hint="report this; OUT was not written", status=ExitStatus.INTERNAL)
    finally:
        if fd_out is not None:
            os.close(fd_out)
    return "exact after cast" if any(e.dtype != e.src.dtype for e in entries) else "bit-exact"


def _same_bytes(expected: Iterator[bytes | memoryview], actual: TensorSource, fd: int | None) -> bool:
    pos = 0
    for chunk in expected:
        view = memoryview(chunk).cast("B")
        if actual.read(fd, pos, view.nbytes) != view:
            return False
        pos += view.nbytes
    return pos == actual.nbytes


def _strict_load(tmp: Path, kind: OutputKind, model: Any, arch: str, key: str | None) -> str:
    import torch

    from torchinspect.io.state_dict import extract_state_dict

    if kind is OutputKind.pt:
        obj = torch.load(tmp, weights_only=True, map_location="meta")
        sd, _ = extract_state_dict(obj, key)
    else:
        from torchinspect.io.safetensors import read_safetensors_header

        header = read_safetensors_header(tmp)
        sd = {n: torch.empty(e.shape, dtype=_torch_dtype(e.dtype), device="meta")
              for n, e in header.entries.items()}
    try:
        model.load_state_dict(sd, strict=True, assign=True)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise InspectError(
            f"the converted weights do not load into {arch} with strict=True: "
            f"{' '.join(lines[1:3])[:300] if len(lines) > 1 else lines[0][:300]}",
            hint=f"run `inspect diff {arch} OUT` to see every mismatch; OUT was not written",
            status=ExitStatus.CHECK_FAILED,
        ) from None
    return f"loads into {arch} with strict=True"
