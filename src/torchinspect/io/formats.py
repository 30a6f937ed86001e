"""What kind of file is this? Checkpoint formats detected from magic bytes and zip contents.

Pure Python (no torch import): used by the metadata reader, which must stay cheap.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, not_regular
from torchinspect.io.regular import open_regular
from torchinspect.io.zipcheck import open_zip

# torch.save's legacy (non-zip) format starts with pickle protocol 2 + LONG1 of its magic number.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_LFS_MAGIC = b"version https://git-lfs"
SAFETENSORS_MAX_HEADER = 100_000_000  # 100 MB, the limit the safetensors library uses


class CheckpointFormat(StrEnum):
    """Formats :func:`detect_format` recognises."""

    torch_zip = "torch_zip"  # torch.save (zip archive with data.pkl), mmap-able
    torch_legacy = "torch_legacy"  # torch.save(..., _use_new_zipfile_serialization=False)
    pickle = "pickle"  # a plain pickle (pickle.dump), read as a legacy torch file
    safetensors = "safetensors"
    torchscript = "torchscript"  # torch.jit.save archive: a model, not weights
    export_pt2 = "export_pt2"  # torch.export.save archive: a model, not weights
    hf_sharded = "hf_sharded"  # Hugging Face *.index.json + shards (io/layouts.py)
    dcp = "dcp"  # torch.distributed.checkpoint folder (io/layouts.py)

    @property
    def is_model_archive(self) -> bool:
        return self in (CheckpointFormat.torchscript, CheckpointFormat.export_pt2)


def _check_file(path: Path) -> int:
    if not path.exists():
        raise InspectError(f"{path}: no such file", hint="check the path")
    if path.is_dir():
        raise InspectError(f"{path} is a folder, not a checkpoint file",
                           hint="pass the weights file inside it (.pt, .pth, .bin, .safetensors)")
    try:
        st = path.stat()
    except OSError as exc:
        raise InspectError(f"{path}: cannot read: {exc.strerror}", hint="check permissions") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero never end: never "empty"
        raise InspectError(not_regular(path, st.st_mode),
                           hint="name the checkpoint file itself (a FIFO, device or socket is "
                           "not read)")
    return st.st_size


def zip_prefix(names: list[str]) -> str | None:
    """The folder torch reads a torch.save zip from (``"sd/"`` for ``sd/data.pkl``), or None.

    torch takes the first entry's folder (``PyTorchStreamReader``); ``data.pkl`` must be in it.
    """
    first = names[0] if names else ""
    prefix = first.split("/", 1)[0] + "/" if "/" in first else None
    return prefix if prefix is not None and prefix + "data.pkl" in names else None


def classify_zip(path: Path) -> CheckpointFormat:
    """Tell a torch.save checkpoint from a TorchScript or torch.export archive.

    The archive is validated first (io/zipcheck.py: no duplicate names, headers that agree,
    no compression bomb), so every later reader of it sees the bytes torch would load.
    """
    names = open_zip(path).names
    if any(n.endswith("constants.pkl") and n.count("/") <= 1 for n in names):
        return CheckpointFormat.torchscript
    if any(n.endswith("archive_format") or "/models/" in n or n.startswith("models/")
           or "serialized_exported_program" in n for n in names):
        return CheckpointFormat.export_pt2
    if zip_prefix(names) is not None:
        return CheckpointFormat.torch_zip
    raise InspectError(
        f"{path}: a zip archive, but not one written by torch.save (no data.pkl)",
        hint="pass a .pt/.pth/.bin/.ckpt file from torch.save, or a .safetensors file",
    )


def _looks_like_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return head[8:9] == b"{" and n > 1


def detect_format(path: str | os.PathLike[str]) -> CheckpointFormat:
    """Detect a checkpoint's format from its bytes (not its extension).

    Returns a :class:`CheckpointFormat`. Raises :class:`InspectError` (one line naming the
    file and what to do) for a missing file, a folder, an empty file, a Git LFS pointer, an
    HTML page, a text file, a truncated zip, or bytes that are no known checkpoint format.
    A file named ``*.safetensors`` whose header is broken is still reported as safetensors,
    so the caller's header validation explains what is wrong.
    """
    path = Path(path)
    size = _check_file(path)
    if size == 0:
        raise InspectError(f"{path} is empty (0 bytes)",
                           hint="the download or save failed; fetch or save the file again")
    fd = open_regular(path)  # the opened file checked again: a swap since the stat is refused
    try:
        head = os.pread(fd, 512, 0)
    finally:
        os.close(fd)
    if head.startswith(_LFS_MAGIC):
        raise InspectError(
            f"{path} is a Git LFS pointer file, not the checkpoint itself",
            hint="run `git lfs pull` (or download the real file) and try again",
        )
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return classify_zip(path)
    if head.startswith(_LEGACY_MAGIC):
        return CheckpointFormat.torch_legacy
    if _looks_like_safetensors(head, size) or path.suffix == ".safetensors":
        return CheckpointFormat.safetensors
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return CheckpointFormat.pickle
    if head[:1] in (b"(", b"}", b"]") and b"." in head:  # protocol 0/1 pickles
        return CheckpointFormat.pickle
    lowered = head.lstrip().lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
        raise InspectError(
            f"{path} is an HTML/XML page, not a checkpoint",
            hint="the download saved a web page (login or redirect?); use the file's direct URL",
        )
    if head.startswith(b"\x93NUMPY"):
        raise InspectError(f"{path} is a NumPy .npy array, not a PyTorch checkpoint",
                           hint="load it with numpy and torch.save a state_dict")
    if head.startswith(b"\x89HDF"):
        raise InspectError(f"{path} is an HDF5 file (Keras?), not a PyTorch checkpoint",
                           hint="convert it to a PyTorch state_dict first")
    if head.startswith(b"GGUF"):
        raise InspectError(f"{path} is a GGUF file, not a PyTorch checkpoint",
                           hint="use the original .safetensors/.bin weights")
    if _is_text(head):
        try:
            json.loads(path.read_text(encoding="utf-8")) if size < 10_000_000 else None
            kind = "a JSON file"
        except (ValueError, UnicodeDecodeError):
            kind = "a text file"
        if path.suffix == ".py":
            raise InspectError(f"{path} is Python source, not a checkpoint",
                               hint=f"name the class or factory to build: {path}:ClassName")
        raise InspectError(f"{path} is {kind}, not a checkpoint",
                           hint="pass a .pt/.pth/.bin/.ckpt file from torch.save, or a .safetensors file")
    raise InspectError(
        f"{path}: unrecognised file format (not torch.save, safetensors, TorchScript or .pt2)",
        hint="pass a .pt/.pth/.bin/.ckpt file from torch.save, or a .safetensors file",
    )


def _is_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        try:  # the 512-byte window may cut a multi-byte character
            text = head[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return False
    return all(c.isprintable() or c in "\r\n\t\f" for c in text)


def model_archive_error(path: str | os.PathLike[str], fmt: CheckpointFormat) -> InspectError:
    """The error for a TorchScript/.pt2 archive given where a weights file was expected."""
    what = "a TorchScript archive (torch.jit.save)" if fmt is CheckpointFormat.torchscript \
        else "a torch.export program (.pt2)"
    return InspectError(
        f"{path} is {what}: a whole model, not a weights file",
        hint=f"pass it as the MODEL itself (e.g. `inspect summary {path}`), without --arch/--weights",
    )


def weights_file(path: str | os.PathLike[str]) -> tuple[Path, CheckpointFormat, int]:
    """``(path, format, size)`` of a file that must hold weights (not a model archive)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InspectError(f"expected a checkpoint path, got {type(path).__name__}",
                           hint="pass the file's path; a model's weights are model.state_dict()")
    path = Path(path)
    fmt = detect_format(path)
    if fmt.is_model_archive:
        raise model_archive_error(path, fmt)
    return path, fmt, path.stat().st_size


# ---- the checkpoint-format registry ---------------------------------------------------------
# One row per format: the suffixes a user names such files with, what it holds, how it is
# told apart (detect_format above, from the bytes), who reads it (the reader registered with
# @reads, in io/checkpoint.py) and which `inspect convert` output writes it. Every suffix
# list of the package (MODEL texts, diff's sides, convert's outputs, features' tensor inputs,
# output names) reads this table.


@dataclass(frozen=True)
class FormatInfo:
    format: CheckpointFormat
    suffixes: tuple[str, ...]  # the names users give it, the usual one first
    holds: str  # "weights", "model" (a whole program) or "layout" (an index/folder of files)
    sniff: str  # how detect_format tells it apart (the bytes, never the name)
    writer: str | None = None  # the `inspect convert` output kind that writes it


FORMAT_TABLE: tuple[FormatInfo, ...] = (
    FormatInfo(CheckpointFormat.torch_zip, (".pt", ".pth", ".bin", ".ckpt", ".tar"), "weights",
               "zip archive with <folder>/data.pkl", writer="pt"),
    FormatInfo(CheckpointFormat.torch_legacy, (), "weights", "torch.save's legacy magic number"),
    FormatInfo(CheckpointFormat.pickle, (".pkl",), "weights", "pickle protocol 0-5 opcodes"),
    FormatInfo(CheckpointFormat.safetensors, (".safetensors",), "weights",
               "8-byte header length then '{'", writer="safetensors"),
    FormatInfo(CheckpointFormat.torchscript, (".jit", ".zip"), "model",
               "zip archive with constants.pkl"),
    FormatInfo(CheckpointFormat.export_pt2, (".pt2",), "model",
               "zip archive with archive_format or models/"),
    FormatInfo(CheckpointFormat.hf_sharded, (".json",), "layout",
               "*.index.json with a weight_map (io/layouts.py)"),
    FormatInfo(CheckpointFormat.dcp, (".dcp",), "layout",
               "a folder with .metadata (io/layouts.py)", writer="dcp"),
)
FORMATS: dict[CheckpointFormat, FormatInfo] = {info.format: info for info in FORMAT_TABLE}


def suffixes(*, holds: tuple[str, ...] = ("weights", "model", "layout"),
             writer: str | None = None) -> tuple[str, ...]:
    """The suffixes of the formats that hold ``holds`` (and are written as ``writer``)."""
    return tuple(s for info in FORMAT_TABLE if info.holds in holds
                 and (writer is None or info.writer == writer) for s in info.suffixes)


def writer_for(path: str | os.PathLike[str]) -> str | None:
    """The `inspect convert` output kind a file named ``path`` is written as, or None."""
    suffix = Path(path).suffix
    return next((info.writer for info in FORMAT_TABLE
                 if info.writer is not None and suffix in info.suffixes), None)


_READERS: dict[CheckpointFormat, Callable[..., Any]] = {}


def reads(*formats: CheckpointFormat) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the reader of ``formats`` (one per format: a second is refused)."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for fmt in formats:
            if fmt in _READERS:
                raise ValueError(f"{fmt} already has a reader: {_READERS[fmt].__qualname__}")
            _READERS[fmt] = fn
        return fn
    return register


def reader_for(fmt: CheckpointFormat) -> Callable[..., Any]:
    """The registered reader of ``fmt`` (io/checkpoint.py registers the weights readers)."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise InspectError(f"no reader for {fmt} files", hint="report this: a format without a reader")
    return reader
