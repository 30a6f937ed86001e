"""`inspect convert`, phase 3: prove the staged outputs hold what IN holds, before they
replace anything.

Tensors are compared with readers that share no code with the converter's own: IN through
``torch.load(weights_only=True, mmap=True)`` or safetensors' ``safe_open``, the output
through the same loaders a user would call. A record that the converter's parser read
differently from torch (a size lie, a damaged header) fails here instead of being written
and called "bit-exact". ``--arch`` checks that the output loads with strict=True.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torchinspect.checkpoints.diff import Verdict, diff_state_dicts
from torchinspect.checkpoints.plan import ConvertPlan, Entry, OutputKind, index_path
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.io.compare import DiffSide, tensor_value
from torchinspect.io.entries import FilePool, TensorSource
from torchinspect.io.formats import CheckpointFormat, detect_format
from torchinspect.io.layouts import Layout, open_dcp
from torchinspect.io.meta import TensorMeta, read_checkpoint_meta
from torchinspect.io.safetensors import read_safetensors_header
from torchinspect.io.tensors import open_input
from torchinspect.io.torch_load import torch_load
from torchinspect.io.writers import torch_dtype


def fail(what: str) -> InspectError:
    return InspectError(f"verification failed: {what}", hint="report this; OUT was not written",
                        status=ExitStatus.INTERNAL)


def verify(plan: ConvertPlan, files: FilePool) -> None:
    """Compare every staged output with IN; check it against --arch; record the sizes."""
    result = plan.result
    with SourceReader(plan) as reference:
        if plan.kind is OutputKind.dcp:
            _verify_dcp(plan, files, reference)
        for out, tmp in plan.staged.items():
            if plan.kind is not OutputKind.dcp and (out != index_path(plan.dst) or not plan.shards):
                _verify_file(plan, tmp, _entries_of(plan, out), files, reference)
    result.verified = "exact after cast" if plan.cast_any else "bit-exact"
    if plan.target is not None:
        result.arch_check = _check_target(plan)
    result.file_size_after = sum(_size(p) for p in plan.staged.values())
    if result.tied and plan.kind is OutputKind.safetensors:
        result.notes.append(f"{len(result.tied)} group(s) of tied tensors written as separate copies "
                            "(safetensors cannot alias); load_state_dict re-ties them via the model")


def _entries_of(plan: ConvertPlan, out: Path) -> list[Entry]:
    for name, group in plan.shards:
        if out.name == name:
            return group
    return plan.entries


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


# ------------------------------------------------------------------ independent readers


class SourceReader(contextlib.AbstractContextManager["SourceReader"]):
    """IN's tensors as torch or safetensors load them (not through the converter's parser)."""

    def __init__(self, plan: ConvertPlan) -> None:
        self.trust_pickle = plan.trust_pickle
        self.container_key = plan.inp.container_key
        self._opened: dict[Path, Any] = {}
        self._records: dict[Path, ZipRecords] = {}
        self._stack = contextlib.ExitStack()

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def tensor(self, src: TensorSource) -> Any:
        """The torch tensor of ``src``, or None where IN has no independent reader."""
        if src.tensor is not None:  # already loaded by torch itself
            return src.tensor
        if src.loader is not None:  # DCP: torch.distributed.checkpoint's reader
            return src.loader()
        if src.path is None:
            return None
        if src.path not in self._opened:
            self._opened[src.path] = self._open(src.path)
        opened = self._opened[src.path]
        if isinstance(opened, ZipRecords):
            return opened.tensor(src)
        records = self._records.get(src.path)
        if records is not None:  # torch.load(mmap=True) does not check record sizes
            records.check_size(src)
        if isinstance(opened, Mapping):
            return opened.get(src.name)
        return opened.get_tensor(src.name) if src.name in opened.keys() else None

    def _open(self, path: Path) -> Any:
        from safetensors import safe_open

        fmt = detect_format(path)
        if fmt is CheckpointFormat.safetensors:
            return self._stack.enter_context(safe_open(str(path), framework="pt"))
        if fmt is CheckpointFormat.torch_zip:
            self._records[path] = self._stack.enter_context(ZipRecords(path))
        try:
            obj = load_independently(path, trust_pickle=self.trust_pickle, what="IN")
        except InspectError:
            # torch's weights-only unpickler refuses some plain containers (a defaultdict
            # beside the weights); the records are then read by Python's zipfile, which
            # checks each record's size and CRC-32 against the zip directory
            if fmt is not CheckpointFormat.torch_zip:
                return {}
            return self._records[path]
        for part in (self.container_key or "").split("/"):
            if part and isinstance(obj, Mapping):
                obj = obj.get(part, {})
        return obj if isinstance(obj, Mapping) else {}


class ZipRecords(contextlib.AbstractContextManager["ZipRecords"]):
    """A torch.save zip's storage records through :mod:`zipfile` (not the converter's offset
    arithmetic): a view that reaches past its record is refused."""

    def __init__(self, path: Path) -> None:
        import zipfile

        self.path = path
        self._zip = zipfile.ZipFile(path)
        self._members = {n.rsplit("/data/", 1)[1]: n for n in self._zip.namelist() if "/data/" in n}

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def _member(self, src: TensorSource) -> tuple[str, int]:
        """The zip member of ``src``'s storage and the view's first byte in it; a view that
        reaches past the record's size (in the zip directory) is refused."""
        key, offset = src.tie.rsplit("|", 1)[-1].split(":")[:2]  # shards prefix "FILE|"
        member = self._members.get(key)
        if member is None:
            raise _damaged(self.path, f"no zip record data/{key} for {src.name!r}")
        start = int(offset) * torch_dtype(src.dtype).itemsize
        size = self._zip.getinfo(member).file_size
        if start + src.nbytes > size:
            raise _damaged(self.path, f"{src.name!r} needs {start + src.nbytes:,} bytes of record "
                           f"data/{key}, which holds {size:,}")
        return member, start

    def check_size(self, src: TensorSource) -> None:
        if src.nbytes:
            self._member(src)

    def tensor(self, src: TensorSource) -> Any:
        import torch

        if not src.nbytes:
            return torch.empty(src.shape, dtype=torch_dtype(src.dtype))
        member, start = self._member(src)
        with self._zip.open(member) as fh:  # zipfile checks the CRC-32 at the end
            data = fh.read()
        buf = bytearray(data[start:start + src.nbytes])
        return torch.frombuffer(buf, dtype=torch_dtype(src.dtype)).reshape(src.shape)


def _damaged(path: Path, what: str) -> InspectError:
    return InspectError(f"{path}: damaged: {what}",
                        hint="convert an intact copy; torch.load refuses this file; nothing was written")


def load_independently(path: Path, *, trust_pickle: bool = False, what: str) -> Any:
    """IN or OUT through io/torch_load.py's ``torch.load`` (weights_only unless trusted, mmap
    for zip files): torch's unpickler and zip reader, not the converter's parser."""
    fmt = detect_format(path)
    try:
        return torch_load(path, fmt, trust_pickle=trust_pickle)
    except InspectError as exc:
        if what == "OUT":
            raise fail(f"the written file does not load with weights_only=True "
                       f"({exc.message[:200]})") from None
        raise InspectError(f"{exc.message} (torch.load refuses what the converter's reader "
                           "accepted: the file is damaged, or its records do not hold what its "
                           "pickle claims)", hint=exc.hint or "convert an intact copy; nothing "
                           "was written", status=exc.status) from None


@contextlib.contextmanager
def _output_tensors(plan: ConvertPlan, tmp: Path) -> Iterator[Any]:
    """The staged output as a user would load it (a dict, or safetensors' handle)."""
    from safetensors import safe_open

    if plan.kind is OutputKind.safetensors:
        with safe_open(str(tmp), framework="pt") as fh:
            yield fh
        return
    obj = load_independently(tmp, what="OUT")
    yield obj[plan.out_key] if plan.out_key else obj


def _verify_file(plan: ConvertPlan, tmp: Path, entries: list[Entry], files: FilePool,
                 reference: SourceReader) -> None:
    """Every entry of one output file: tensors against IN's independent read; extra state
    and quantized entries as values, both sides through the converter's reader."""
    reread = open_input(tmp, key=plan.out_key, fmt=detect_format(tmp))
    got = {t.name: t for t in reread.tensors}
    with _output_tensors(plan, tmp) as out, FilePool() as out_files:
        if plan.kind is OutputKind.safetensors and set(out.keys()) != {e.name for e in entries
                                                                       if e.src.is_tensor}:
            raise fail("safetensors keys differ")
        for e in entries:
            if plan.kind is OutputKind.safetensors and not e.src.is_tensor:
                continue
            t = got.get(e.name)
            if t is None or t.shape != e.src.shape or t.dtype != e.dtype or t.kind != e.src.kind:
                raise fail(f"{e.name!r}: missing or wrong shape/dtype")
            if not e.src.is_tensor or e.quantized:
                same = same_object(tensor_value(e.src, files), tensor_value(t, out_files))
            else:
                same = _same_tensor_as_source(e, reference, _get(out, e.name), files, t, out_files)
            if not same:
                raise fail(f"{e.name!r} differs after reload")


def _get(out: Any, name: str) -> Any:
    return out.get_tensor(name) if hasattr(out, "get_tensor") else out[name]


def _same_tensor_as_source(e: Entry, reference: SourceReader, actual: Any, files: FilePool,
                           written: TensorSource, out_files: FilePool) -> bool:
    expected = reference.tensor(e.src)
    if expected is None:  # no independent reader for this input: its own bytes, re-read
        return _same_bytes(e.chunks(files), written, out_files)
    if tuple(expected.shape) != e.src.shape:
        raise InspectError(f"{e.src.path or reference.container_key}: {e.src.name!r} has shape "
                           f"{tuple(expected.shape)} for torch.load but {e.src.shape} in its "
                           "records; the file is damaged", hint="convert an intact copy; nothing "
                           "was written")
    if e.dtype != e.src.dtype:
        expected = expected.to(torch_dtype(e.dtype))
    return same_tensor(expected, actual)


def same_tensor(a: Any, b: Any) -> bool:
    """Bit for bit (NaN payloads and -0.0 included), same dtype and shape."""
    import torch

    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    if a.numel() == 0:
        return True
    x, y = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    try:
        return torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    except RuntimeError:  # a dtype without a byte view
        return torch.equal(x, y)


def _same_bytes(expected: Iterator[bytes | memoryview], actual: TensorSource, files: FilePool) -> bool:
    pos = 0
    for chunk in expected:
        view = memoryview(chunk).cast("B")
        if actual.read(files, pos, view.nbytes) != view:
            return False
        pos += view.nbytes
    return pos == actual.nbytes


def same_object(a: Any, b: Any) -> bool:
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
            all(same_object(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_object(a[k], b[k]) for k in a)
    return bool(a == b)


# ------------------------------------------------------------------ DCP and --arch


def _verify_dcp(plan: ConvertPlan, files: FilePool, reference: SourceReader) -> None:
    """Every tensor of the staged DCP folder, loaded by torch.distributed.checkpoint, against
    IN's independent read."""
    back = open_dcp(Layout("dcp", plan.staged[plan.dst]), key=None)
    got = {t.name: t for t in back.tensors}
    with FilePool() as out_files:
        for e in plan.tensors:
            t = got.get(e.name)
            if t is None or t.shape != e.src.shape or t.dtype != e.dtype:
                raise fail(f"{e.name!r}: missing or wrong shape/dtype in the DCP folder")
            if not _same_tensor_as_source(e, reference, t.loader() if t.loader else None, files,
                                          t, out_files):
                raise fail(f"{e.name!r} differs after reload")


def _written_meta(plan: ConvertPlan) -> dict[str, Any]:
    """Key -> TensorMeta of the staged output(s), as a loader sees them."""
    if plan.kind is OutputKind.dcp:
        return {t.name: t for t in open_dcp(Layout("dcp", plan.staged[plan.dst]), key=None).tensors}
    if plan.shards:
        got: dict[str, Any] = {}
        for name, _ in plan.shards:
            p = plan.staged[plan.dst.with_name(name)]
            for n, e in read_safetensors_header(p).entries.items():
                got[n] = TensorMeta(e.shape, e.dtype, "cpu", e.nbytes, f"{p}:{e.begin}")
        return got
    tmp = plan.staged[plan.dst]
    return dict(read_checkpoint_meta(tmp, key=plan.out_key, fmt=detect_format(tmp)).tensors)


def _check_target(plan: ConvertPlan) -> str:
    """Does the written output load into the target by PyTorch's rules (checkpoints/diff.py)?"""
    target = plan.target or {}
    got = _written_meta(plan)
    if plan.kind is OutputKind.safetensors:  # plain extra state went to __metadata__
        for k, t in target.items():
            if t.kind == "extra_state" and k not in got:
                got[k] = TensorMeta((), "extra_state", "cpu", 0, None, "extra_state")
    return compare_target(got, target, plan.target_name, plan.allow_partial, plan.result.folded)


def compare_target(got: Mapping[str, Any], target: dict[str, Any], name: str,
                   allow_partial: bool, folded: list[str] | None = None) -> str:
    """The load verdict of OUT into the target (diff's rules); the target's
    ``num_batches_tracked`` entries that OUT lacks are appended to ``folded``."""
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
    remap = (f"pass --auto-prefix ({res.remaps[0].describe()} matches {res.remaps[0].matched} of "
             f"{res.remaps[0].total} keys); ") if res.remaps else ""
    raise InspectError(
        f"the converted weights do not load into {name} with strict=True: {'; '.join(detail)}",
        hint=remap + ("pass --allow-partial to write the partial state_dict anyway; " if partial_ok else "")
        + f"`inspect diff IN --arch {name}` shows every mismatch (OUT was not written)",
        status=ExitStatus.CHECK_FAILED,
    )


def check_source(plan: ConvertPlan) -> None:
    """Every record of a torch.save zip against its CRC-32 (one read of the file; torch.load
    never checks them, so a bit flipped on disk would be converted and then "verified" against
    the damaged bytes). Records with a CRC of 0 (written in place by other tools) are skipped."""
    import zipfile

    if str(plan.inp.format) != "torch_zip":
        return
    try:
        with zipfile.ZipFile(plan.src) as zf:
            for info in zf.infolist():
                if info.CRC == 0 or info.is_dir():
                    continue
                with zf.open(info) as fh:
                    while fh.read(1 << 24):
                        pass
    except zipfile.BadZipFile as exc:
        raise InspectError(f"{plan.src}: damaged: {exc} (the file changed after it was saved)",
                           hint="convert an intact copy; torch.load would read the damaged bytes "
                           "without noticing") from None
