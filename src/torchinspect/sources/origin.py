"""Where a model's weights come from, said by every command that runs real numbers.

:class:`WeightsOrigin` (``ModelCase.weights``): a file (``--weights``, a checkpoint with
``--arch``, a pickled/TorchScript/.pt2 model, hashed only on demand), the module passed in,
or random init under :data:`RANDOM_INIT_SEED`. :func:`seeded` is how a random init is made
reproducible (the caller's RNG state is put back). ``to_dict()`` is the ``weights`` field of
every command's JSON and of the features manifest; :func:`describe_weights` its one text.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from torchinspect import device as devices

RANDOM_INIT_SEED = 0  # a model built here without weights: the same weights every run
FILE_KINDS = ("pickle", "torchscript", "export")  # models whose weights are the MODEL file


class WeightsSource(StrEnum):
    random_init = "random-init"
    file = "file"
    module = "module"  # the module passed in from Python, as it is


@dataclass
class WeightsOrigin:
    """Where a case's weights come from; what every command that runs real numbers says.

    ``path``: the file (source ``file``). ``seed``: the seed of a random init. ``module``:
    the class of the module passed in. :meth:`sha256` hashes on demand (a file once, on the
    first call): only commands that run real numbers ask, so ``summary`` never reads a 2 GB
    file for it.
    """

    source: WeightsSource
    path: str | None = None
    seed: int | None = None
    module: str | None = None
    _file_digest: str | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def random_init(cls) -> WeightsOrigin:
        return cls(WeightsSource.random_init, seed=RANDOM_INIT_SEED)

    @property
    def is_random(self) -> bool:
        return self.source is WeightsSource.random_init

    def sha256(self, model: Any = None) -> str | None:
        """A file's sha256 (its bytes; a folder's files), else that of ``model``'s tensors
        when given (the real model these weights made), else None."""
        if self.source is WeightsSource.file and self.path is not None:
            if self._file_digest is None:
                self._file_digest = file_sha256(Path(self.path))
            return self._file_digest
        return state_sha256(model) if model is not None else None

    def to_dict(self, model: Any = None, *, digest: bool = True) -> dict[str, Any]:
        """``{"source": "random-init" | path | "module NAME", "sha256": ...}`` (and the seed):
        the ``weights`` field of every command's JSON and of the features manifest.
        ``digest=False`` leaves the sha256 out (None) without reading anything."""
        sha = self.sha256(model) if digest else None
        if self.source is WeightsSource.file:
            return {"source": self.path, "sha256": sha}
        if self.is_random:
            return {"source": "random-init", "seed": self.seed, "sha256": sha}
        return {"source": f"module {self.module}", "sha256": sha}

    def note(self, consequence: str) -> str | None:
        """For a random init, the note that says it: ``random init (seed 0): no weights were
        loaded, so <consequence> (pass --weights FILE)``; None for real weights."""
        if not self.is_random:
            return None
        return (f"random init (seed {self.seed}): no weights were loaded, so {consequence} "
                "(pass --weights FILE)")

    def describe(self, model: Any = None, *, digest: bool = True) -> str:
        """``random init (seed 0)``, ``w.pt (sha256 1a2b3c4d5e6f)``, ``weights of the module
        passed in (Net)``: the line the table output shows."""
        return describe_weights(self.to_dict(model, digest=digest))


def describe_weights(w: Mapping[str, Any] | None) -> str:
    """The text of a ``weights`` record (:meth:`WeightsOrigin.to_dict`, or a manifest's)."""
    if not w:
        return "weights not recorded"
    digest = f"sha256 {str(w.get('sha256'))[:12]}" if w.get("sha256") else ""
    source = str(w.get("source"))
    if source == "random-init":
        return f"random init (seed {w.get('seed')}" + (f", {digest})" if digest else ")")
    if source.startswith("module "):
        return (f"weights of the module passed in ({source.removeprefix('module ')}"
                + (f", {digest})" if digest else ")"))
    return source + (f" ({digest})" if digest else "")


def file_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder's files (sorted relative names and bytes)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def state_sha256(net: Any) -> str:
    """sha256 over the names, dtypes, shapes and bytes of a module's parameters and buffers."""
    import torch

    h = hashlib.sha256()
    for key, t in net.state_dict().items():
        if not isinstance(t, torch.Tensor):
            continue
        if torch.nn.parameter.is_lazy(t):  # sized by the first batch: the same for every run
            h.update(f"{key}:lazy\0".encode())
            continue
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)}\0".encode())
        data = t.detach().to("cpu").contiguous().reshape(-1)
        if data.numel():
            h.update(data.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@contextlib.contextmanager
def seeded(device: str = "cpu") -> Iterator[None]:
    """Torch's RNG seeded with :data:`RANDOM_INIT_SEED` inside (CPU, and ``device`` when it
    is a GPU); the caller's RNG state is put back after."""
    import torch

    cuda: list[int] = []
    if str(device).startswith("cuda"):
        devices.check_available(device)  # a clear error, before the GPU's RNG is read
        index = torch.device(device).index
        cuda = [torch.cuda.current_device() if index is None else index]
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(RANDOM_INIT_SEED)
        yield


def seeded_rebuild(rebuild: Callable[[str], Any]) -> Callable[[str], Any]:
    """``rebuild(device)`` run :func:`seeded` on that device."""
    def run(device: str) -> Any:
        with seeded(device):
            return rebuild(device)

    return run
