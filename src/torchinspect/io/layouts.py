"""Checkpoints that are more than one file: Hugging Face shards, DCP folders, DeepSpeed ZeRO.

:func:`resolve_layout` turns what the user passed (a file, an ``*.index.json``, a folder)
into a :class:`Layout`; :func:`open_hf_sharded` and :func:`open_dcp` read them through the
same :class:`TensorSource` model as a single file. DeepSpeed ZeRO-3 files (0-size
placeholders) are detected and explained rather than reported as shape mismatches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, UnsafeCheckpointError
from torchinspect.io.dcpmeta import DcpChunk, DcpEntry, DcpMetadata, read_dcp_metadata
from torchinspect.io.entries import LoadedInput, TensorSource
from torchinspect.io.formats import CheckpointFormat, detect_format
from torchinspect.io.regular import member, read_regular
from torchinspect.io.state_dict import container_extras, find_state_dict
from torchinspect.io.torch_load import scan_pickle_globals
from torchinspect.io.torchzip import DTYPE_SIZES, NeedsTorch

_SHARD = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.(?P<ext>safetensors|bin)$")
_INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE_NAMES = ("model.safetensors", "pytorch_model.bin", "consolidated.safetensors")
DCP_METADATA = ".metadata"
#: Globals a DCP ``.metadata`` pickle may import; anything else needs --trust-pickle.
_DCP_ALLOWED_PREFIXES = ("torch.distributed.checkpoint.", "torch.Size", "torch.serialization._get_layout",
                         "pathlib.", "collections.OrderedDict", "builtins.")


@dataclass
class Layout:
    kind: str  # "file", "hf_sharded", "dcp"
    path: Path  # the file, the index, or the DCP folder
    format: CheckpointFormat | None = None
    notes: list[str] = field(default_factory=list)


def resolve_layout(path: Path) -> Layout:
    """What ``path`` is: one weights file, a sharded Hugging Face checkpoint, or a DCP folder."""
    if path.is_dir():
        return _folder_layout(path)
    if path.name.endswith(".index.json") and path.is_file():
        return Layout("hf_sharded", path)
    return Layout("file", path, detect_format(path), shard_notes(path))


def shard_notes(path: Path) -> list[str]:
    """A warning when ``path`` is one shard of a Hugging Face sharded checkpoint."""
    m = _SHARD.match(path.name)
    if not m or int(m["n"]) < 2:
        return []
    index = path.with_name(f"{m['stem']}.{m['ext']}.index.json")
    if m["ext"] == "bin" and not index.exists():
        index = path.with_name("pytorch_model.bin.index.json")
    where = index.name if index.exists() else "the *.index.json"
    return [f"shard {int(m['i'])} of {int(m['n'])}: this file holds part of the weights; pass "
            f"{where} or the folder to read the whole checkpoint"]


def _folder_layout(path: Path) -> Layout:
    if (path / DCP_METADATA).is_file():
        return Layout("dcp", path)
    for name in _INDEX_NAMES:
        if (path / name).is_file():
            return Layout("hf_sharded", member(path, name, what=str(path)))
    indexes = sorted(path.glob("*.index.json"))
    if len(indexes) == 1:
        return Layout("hf_sharded", member(path, indexes[0].name, what=str(path)))
    ds = deepspeed_folder_hint(path)
    if ds:
        raise InspectError(f"{path} is a DeepSpeed checkpoint folder", hint=ds)
    for name in _SINGLE_NAMES:
        if (path / name).is_file():
            return Layout("file", member(path, name, what=str(path)), detect_format(path / name))
    raise InspectError(f"{path} is a folder, not a checkpoint",
                       hint="pass the weights file inside it (.pt, .pth, .bin, .safetensors), a "
                       "*.index.json of a sharded checkpoint, or a torch.distributed.checkpoint "
                       "folder (with .metadata)")


# ------------------------------------------------------------------ Hugging Face shards


def read_hf_index(index: Path) -> dict[str, str]:
    """``weight_map`` of a Hugging Face index: tensor name -> shard file name."""
    try:
        data = json.loads(bytes(read_regular(index, limit=_MAX_INDEX_BYTES)).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InspectError(f"{index}: not a readable JSON index ({type(exc).__name__})",
                           hint="pass the model.safetensors.index.json written with the shards") from None
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in wm.items()):
        raise InspectError(f"{index}: no \"weight_map\" of tensor name -> shard file",
                           hint="pass the *.index.json of a Hugging Face sharded checkpoint")
    for shard in set(wm.values()):
        if "/" in shard or "\\" in shard or shard.startswith("."):
            raise InspectError(f"{index}: shard name {shard!r} points outside the folder",
                               hint="the index is corrupt; fetch it again")
    return wm


_MAX_INDEX_BYTES = 64 << 20  # an index of a million tensor names is ~60 MB: more is not an index


def open_hf_sharded(layout: Layout, open_input: Callable[..., LoadedInput], *, key: str | None,
                    trust_pickle: bool, need_bytes: bool) -> LoadedInput:
    """Each shard through ``open_input`` (io/tensors.py's single-file reader), in index order."""
    index = layout.path
    wm = read_hf_index(index)
    by_shard: dict[str, list[str]] = {}
    for name, shard in wm.items():
        by_shard.setdefault(shard, []).append(name)
    tensors = []
    metadata: dict[str, str] = {}
    files = []
    size = index.stat().st_size
    for shard in sorted(by_shard):
        spath = member(index.parent, shard, what=str(index))  # inside the folder (io/regular.py)
        if not spath.is_file():
            raise InspectError(f"{index}: shard {shard} is missing ({len(by_shard[shard])} tensors)",
                               hint="download every shard listed in the index")
        inp = open_input(spath, key=key, trust_pickle=trust_pickle, need_bytes=need_bytes,
                         fmt=detect_format(spath))
        got = {t.name: t for t in inp.tensors}
        absent = [n for n in by_shard[shard] if n not in got]
        if absent:
            raise InspectError(f"{index}: {len(absent)} tensor(s) listed for {shard} are not in it "
                               f"(e.g. {absent[0]!r})", hint="the shards and the index do not match; "
                               "fetch them again")
        for n in by_shard[shard]:
            t = got[n]
            t.tie = f"{shard}|{t.tie}"
            tensors.append(t)
        metadata.update(inp.metadata)
        files.append(spath)
        size += inp.file_size
    streamed = all(t.path is not None for t in tensors)
    notes = [f"sharded checkpoint: {len(by_shard)} shard(s) listed in {index.name}"]
    return LoadedInput(index, CheckpointFormat.hf_sharded, tensors, None, {}, metadata, streamed,
                       [t.name for t in tensors], size, notes, files)


# ------------------------------------------------------------------ torch.distributed.checkpoint


def _dcp_metadata(folder: Path, trust_pickle: bool) -> Any:
    """Entries of the ``.metadata``: the restricted pure-Python reader (io/dcpmeta.py, no
    torch import) is the only reader of an untrusted folder: what it does not know is refused.
    Only with ``--trust-pickle`` does DCP's own reader (a plain ``pickle.load``) get a second
    look, after checking that the pickle imports only DCP's metadata classes."""
    try:
        return read_dcp_metadata(folder / DCP_METADATA)
    except NeedsTorch as exc:
        if not trust_pickle:  # no second reader: what ours does not know is refused
            raise UnsafeCheckpointError(str(folder / DCP_METADATA), [str(exc)]) from None
    except OSError as exc:
        raise InspectError(f"{folder}: cannot read the DCP .metadata ({exc.strerror})",
                           hint="the checkpoint folder is incomplete or corrupt") from None
    raw = (folder / DCP_METADATA).read_bytes()
    bad = [g for g in scan_pickle_globals(raw, max_pickles=1)
           if not g.startswith(_DCP_ALLOWED_PREFIXES) and not _is_torch_dtype(g)]
    if bad and not trust_pickle:
        raise UnsafeCheckpointError(str(folder / DCP_METADATA), bad)
    import warnings

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            md = FileSystemReader(str(folder)).read_metadata()
    except Exception as exc:  # noqa: BLE001 - any failure: a corrupt metadata file
        raise InspectError(f"{folder}: cannot read the DCP .metadata ({type(exc).__name__})",
                           hint="the checkpoint folder is incomplete or corrupt") from None
    entries = [DcpEntry(fqn, True, tuple(item.size), str(item.properties.dtype).removeprefix("torch."),
                        len(item.chunks)) if isinstance(item, TensorStorageMetadata) else DcpEntry(fqn, False)
               for fqn, item in md.state_dict_metadata.items()]
    planner = md.planner_data if isinstance(md.planner_data, dict) else {}
    return DcpMetadata(entries, {k: tuple(str(p) for p in v) for k, v in planner.items()
                                 if isinstance(v, (tuple, list)) and v})


def _is_torch_dtype(name: str) -> bool:
    return name.startswith("torch.") and name[6:] in DTYPE_SIZES


@dataclass(frozen=True)
class DcpBytes:
    """A non-tensor DCP entry (torch.save'd bytes); never unpickled here."""

    fqn: str

    def describe_entry(self) -> str:
        return "DCP bytes entry (not read)"


@dataclass(frozen=True)
class DcpRef:
    fqn: str
    shape: tuple[int, ...]
    dtype: str
    chunks: int


def open_dcp(layout: Layout, *, key: str | None, trust_pickle: bool = False) -> LoadedInput:
    """A DCP folder: keys/shapes/dtypes from ``.metadata``; each tensor loaded on demand."""
    folder = layout.path
    md = _dcp_metadata(folder, trust_pickle)
    planner = md.planner_data
    nested: dict[str, Any] = {}
    refs: dict[str, DcpRef] = {}
    for item in md.entries:
        fqn = item.fqn
        if item.is_tensor:
            value: Any = DcpRef(fqn, item.shape, item.dtype, item.chunks)
            refs[fqn] = value
        else:
            value = DcpBytes(fqn)
        path = planner.get(fqn, (fqn,))
        cur = nested
        for part in path[:-1]:
            nxt = cur.setdefault(str(part), {})
            if not isinstance(nxt, dict):
                break
            cur = nxt
        else:
            cur[str(path[-1])] = value
    sd, used = find_state_dict(nested, key, is_tensor=lambda x: isinstance(x, DcpRef),
                               source=str(folder))
    full_fqn = {id(r): r.fqn for r in refs.values()}
    tensors = []
    sharded = 0
    for name, ref in sd.items():
        if not isinstance(ref, DcpRef):
            continue
        nbytes = DTYPE_SIZES.get(ref.dtype, 1)
        for d in ref.shape:
            nbytes *= d
        sharded += ref.chunks > 1
        fqn = full_fqn[id(ref)]
        chunks = md.chunks.get(fqn)
        if chunks is None and not trust_pickle:  # only metadata read by DCP itself lacks them
            raise InspectError(f"{folder / DCP_METADATA}: no storage record for {fqn!r}",
                               hint="the checkpoint folder is corrupt")
        loader = _dcp_trusted_loader(folder, fqn, ref) if chunks is None else \
            _dcp_loader(folder, fqn, ref, chunks)
        tensors.append(TensorSource(name, ref.shape, ref.dtype, nbytes, "cpu", f"dcp:{fqn}",
                                    loader=loader))
    notes = [f"torch.distributed.checkpoint folder ({len(md.entries)} entries)"]
    if sharded:
        notes.append(f"{sharded} tensor(s) saved in several chunks (sharded across ranks); "
                     "they are reassembled on read")
    flat = [t.name for t in tensors if "_flat_param" in t.name or "flat_param" in t.name.split(".")[-1]]
    if flat:
        notes.append(f"{len(flat)} FSDP flat parameter(s) (e.g. {flat[0]!r}): a flattened layout; "
                     "only the model that saved it can unflatten them (save with "
                     "get_model_state_dict / SHARDED_STATE_DICT instead)")
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    return LoadedInput(folder, CheckpointFormat.dcp, tensors, used, container_extras(nested, used, sd), {}, False,
                       list(nested), size, notes, sorted(folder.glob("*.distcp")))


#: bytes a torch.save of one tensor piece may add to the piece's data (its zip records)
_PIECE_OVERHEAD = 1 << 20


def _dcp_loader(folder: Path, fqn: str, ref: DcpRef, chunks: list[DcpChunk]) -> Any:
    """Load one tensor from the pieces the validated metadata names, read by this tool: each
    piece's file must be a regular file directly inside the folder (no link, no ``..``, no
    device or FIFO), its byte range inside the file and no larger than the piece needs; the
    bytes are unpickled with ``torch.load(weights_only=True)``. DCP's reader never runs."""
    def load() -> Any:
        import torch

        t = torch.empty(ref.shape, dtype=getattr(torch, ref.dtype))
        covered = 0
        for c in chunks:
            where = f"{folder / DCP_METADATA}: {fqn!r}"
            if c.transformed:
                raise InspectError(f"{where} is stored through a DCP storage extension "
                                   "(compression or another transform), which this tool does not "
                                   "read", hint="save it again without storage extensions")
            if len(c.offsets) != len(ref.shape) or len(c.sizes) != len(ref.shape) or any(
                    o + s > d for o, s, d in zip(c.offsets, c.sizes, ref.shape, strict=True)):
                raise InspectError(f"{where}: a piece at {c.offsets} of size {c.sizes} lies outside "
                                   f"the tensor's shape {ref.shape}",
                                   hint="the checkpoint folder is corrupt")
            piece = _read_piece(folder, c, ref.dtype, where)
            if tuple(piece.shape) != c.sizes or piece.dtype != t.dtype:
                raise InspectError(f"{where}: a piece holds {piece.dtype} of shape "
                                   f"{tuple(piece.shape)}, the metadata says {ref.dtype} {c.sizes}",
                                   hint="the checkpoint folder is corrupt")
            view = t
            for dim, (o, s) in enumerate(zip(c.offsets, c.sizes, strict=True)):
                view = view.narrow(dim, o, s)
            view.copy_(piece)
            covered += piece.numel()
        if covered < t.numel():
            raise InspectError(f"{folder / DCP_METADATA}: {fqn!r}: its pieces cover {covered:,} of "
                               f"{t.numel():,} elements", hint="the checkpoint folder is incomplete")
        return t

    return load


def _read_piece(folder: Path, c: DcpChunk, dtype: str, where: str) -> Any:
    import io
    import os

    import torch

    from torchinspect.io.regular import open_regular

    rel = c.relative_path
    if not rel or rel.startswith(("/", "\\")) or "\\" in rel or any(
            p in ("", ".", "..") for p in rel.split("/")) or ":" in rel:
        raise InspectError(f"{where}: its data file {rel!r} is not a plain name inside the folder",
                           hint="the folder was built to read files outside it; do not load it")
    path = folder / rel
    if path.resolve().parent != folder.resolve() and folder.resolve() not in path.resolve().parents:
        raise InspectError(f"{where}: its data file {rel!r} leaves the folder",
                           hint="the folder was built to read files outside it; do not load it")
    elements = 1
    for s in c.sizes:
        elements *= s
    cap = elements * DTYPE_SIZES.get(dtype, 16) + _PIECE_OVERHEAD
    if c.length > cap:
        raise InspectError(f"{where}: a piece claims {c.length:,} bytes of {rel}, more than its "
                           f"{elements:,} elements need", hint="the checkpoint folder is corrupt")
    fd = open_regular(path, what=f"{folder.name}/{rel}", follow=False)
    try:
        size = os.fstat(fd).st_size
        if c.offset + c.length > size:
            raise InspectError(f"{where}: bytes {c.offset:,}-{c.offset + c.length:,} of {rel} lie "
                               f"past its end ({size:,} bytes)", hint="the checkpoint folder is "
                               "truncated or corrupt")
        data = os.pread(fd, c.length, c.offset)
    finally:
        os.close(fd)
    try:
        piece = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a refusal or damage: one line either way
        raise InspectError(f"{where}: a piece in {rel} is not a weights-only tensor "
                           f"({type(exc).__name__})", hint="the checkpoint folder is corrupt, or "
                           "was not written by torch.distributed.checkpoint") from None
    if not isinstance(piece, torch.Tensor):
        raise InspectError(f"{where}: a piece in {rel} holds a {type(piece).__name__}, not a tensor",
                           hint="the checkpoint folder is corrupt")
    return piece


def _dcp_trusted_loader(folder: Path, fqn: str, ref: DcpRef) -> Any:
    """DCP's own reader: only for metadata read by DCP itself, i.e. with --trust-pickle."""
    def load() -> Any:
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

        t = torch.empty(ref.shape, dtype=getattr(torch, ref.dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load({fqn: t}, storage_reader=dcp.FileSystemReader(str(folder)),
                     planner=DefaultLoadPlanner(allow_partial_load=True), no_dist=True)
        return t

    return load


# ------------------------------------------------------------------ DeepSpeed


def deepspeed_folder_hint(path: Path) -> str | None:
    """The consolidation hint when ``path`` is a DeepSpeed checkpoint folder, else None."""
    states = list(path.glob("mp_rank_*_model_states.pt")) + list(path.glob("*/mp_rank_*_model_states.pt"))
    zero = list(path.glob("*zero_pp_rank_*")) + list(path.glob("*/*zero_pp_rank_*"))
    if not states and not zero:
        return None
    return _consolidate_hint(path if not (path / "latest").is_file() else path)


def _consolidate_hint(folder: Path) -> str:
    return (f"consolidate it with DeepSpeed's zero_to_fp32.py: `python {folder}/zero_to_fp32.py "
            f"{folder} OUT_DIR --safe_serialization` (or deepspeed.utils.zero_to_fp32."
            "get_fp32_state_dict_from_zero_checkpoint), then inspect OUT_DIR")


def deepspeed_error(inp: LoadedInput, obj: Any) -> InspectError | None:
    """A DeepSpeed ZeRO-3 ``mp_rank_*_model_states.pt``: the module holds 0-size placeholders,
    the weights live in the ``zero_pp_rank_*`` optimizer shards."""
    is_ds = isinstance(obj, dict) and ("ds_version" in obj or "param_shapes" in obj) \
        or bool(re.match(r"mp_rank_\d+_model_states\.pt$", inp.path.name))
    if not is_ds or not inp.tensors:
        if is_ds:
            inp.notes.append("DeepSpeed model states file")
        return None
    empty = [t for t in inp.tensors if t.is_tensor and t.nbytes == 0 and t.shape and 0 in t.shape]
    if len(empty) * 2 < len([t for t in inp.tensors if t.is_tensor]):
        inp.notes.append("DeepSpeed model states file (ZeRO stage 0-2: full weights inside)")
        return None
    return InspectError(
        f"{inp.path} is a DeepSpeed ZeRO-3 checkpoint: {len(empty)} of {len(inp.tensors)} "
        "parameters are 0-size placeholders; the weights are partitioned across the "
        "zero_pp_rank_* optimizer shards",
        hint=_consolidate_hint(inp.path.parent),
    )
