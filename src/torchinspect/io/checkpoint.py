"""Load a weights file into torch objects, safely; and the public checkpoint API.

Two readers, two jobs:

* this module (``read_checkpoint``, ``read_state_dict``) *loads* a whole weights
  file into torch tensors, for commands that put the weights into a model
  (``summary --weights``, ``--arch``, features, export, ...);
* io/tensors.py (``open_input``, and
  ``read_checkpoint_meta`` over it) *describes* a checkpoint entry by entry without
  loading it, and streams tensor bytes from the file: ``diff`` and ``convert``.

Both apply the same validity rules before anything is read: io/zipcheck.py for zip
archives, io/safetensors.py for safetensors headers (docs/concepts/safety.md).

Every ``.pt/.pth/.bin/.ckpt`` load goes through ``torch.load(weights_only=True,
map_location="cpu")`` (mmap for zip archives); ``.safetensors`` through safetensors after
our own header validation. A weights-only refusal raises ``UnsafeCheckpointError``
naming the offending globals; there is no automatic unsafe retry. TorchScript and
``torch.export`` archives are models, not weights: ``read_checkpoint`` refuses them
with a hint, and ``detect_format`` lets a model source route them.

Public API (all importable from here)::

    detect_format(path) -> CheckpointFormat
    read_checkpoint(path, *, trust_pickle=False, mmap=True) -> Checkpoint
    read_state_dict(path, *, key=None, trust_pickle=False) -> (state_dict, Checkpoint, key_used)
    extract_state_dict(obj, key=None) -> (state_dict, key_used)
    strip_prefixes(state_dict, prefixes=("module.", "_orig_mod.")) -> (state_dict, stripped)
    find_prefix_remaps(model_keys, checkpoint_keys) -> [PrefixRemap(strip, add, matched, total)]
    read_checkpoint_meta(path, *, key=None) -> CheckpointMeta(tensors={name: TensorMeta}, ...)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect.errors import InspectError, UnsafeCheckpointError
from torchinspect.io.formats import (
    CheckpointFormat,
    detect_format,
    reader_for,
    reads,
    weights_file,
)
from torchinspect.io.meta import CheckpointMeta, TensorMeta, read_checkpoint_meta
from torchinspect.io.safetensors import load_safetensors
from torchinspect.io.state_dict import (
    CONTAINER_KEYS,
    TRAINING_KEYS,
    PrefixRemap,
    container_extras,
    extract_state_dict,
    find_prefix_remaps,
    strip_prefixes,
)
from torchinspect.io.torch_load import torch_load

__all__ = [
    "CONTAINER_KEYS", "TRAINING_KEYS", "Checkpoint", "CheckpointFormat", "CheckpointMeta",
    "InspectError", "PrefixRemap", "TensorMeta", "UnsafeCheckpointError", "container_extras",
    "detect_format", "extract_state_dict", "find_prefix_remaps", "read_checkpoint",
    "read_checkpoint_meta", "read_state_dict", "strip_prefixes",
]


@dataclass
class Checkpoint:
    """A loaded checkpoint file.

    ``obj`` is what the file holds: a state_dict or container dict (tensors on CPU; for a
    zip archive read with ``mmap=True`` they are memory-mapped, so untouched data costs no
    RAM), or an ``nn.Module`` when ``trust_pickle`` allowed a full pickle. ``metadata`` is
    safetensors' ``__metadata__`` (empty for torch files).
    """

    path: Path
    format: CheckpointFormat
    obj: Any
    metadata: dict[str, str] = field(default_factory=dict)
    file_size: int = 0


def read_checkpoint(path: str | os.PathLike[str], *, trust_pickle: bool = False,
                    mmap: bool = True) -> Checkpoint:
    """Load a weights file safely onto CPU.

    * torch.save zip archives: ``torch.load(weights_only=True, map_location="cpu",
      mmap=mmap)``; legacy (non-zip) files and plain pickles without mmap.
    * ``.safetensors``: header validated first (length past the end, over 100 MB, not
      JSON, bad/overlapping offsets -> error), then ``safetensors.torch.load_file``.
    * GPU-saved storages are mapped to CPU; no CUDA is needed.

    Raises ``UnsafeCheckpointError`` when a weights-only load refuses the file (the
    offending globals listed; ``trust_pickle=True`` is the only way past it), and
    ``InspectError`` with a one-line message naming the file for empty, truncated,
    Git LFS pointer, text/HTML, TorchScript or ``.pt2`` files.
    """
    path, fmt, size = weights_file(path)
    obj, metadata = reader_for(fmt)(path, fmt, trust_pickle=trust_pickle, mmap=mmap)
    return Checkpoint(path, fmt, obj, metadata, size)


@reads(CheckpointFormat.safetensors)
def _read_safetensors(path: Path, fmt: CheckpointFormat, *, trust_pickle: bool,
                      mmap: bool) -> tuple[Any, dict[str, str]]:
    return load_safetensors(path)


@reads(CheckpointFormat.torch_zip, CheckpointFormat.torch_legacy, CheckpointFormat.pickle)
def _read_torch_save(path: Path, fmt: CheckpointFormat, *, trust_pickle: bool,
                     mmap: bool) -> tuple[Any, dict[str, str]]:
    return torch_load(path, fmt, trust_pickle=trust_pickle, mmap=mmap), {}


def read_state_dict(path: str | os.PathLike[str], *, key: str | None = None,
                    trust_pickle: bool = False,
                    mmap: bool = True) -> tuple[dict[str, Any], Checkpoint, str | None]:
    """``read_checkpoint`` + ``extract_state_dict``: ``(state_dict, checkpoint, key_used)``."""
    ckpt = read_checkpoint(path, trust_pickle=trust_pickle, mmap=mmap)
    sd, used = extract_state_dict(ckpt.obj, key, source=str(path))
    return sd, ckpt, used
