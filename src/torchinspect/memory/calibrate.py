"""Calibration: each distinct cuDNN problem of a prediction run alone on this GPU.

`measure_problem` builds random tensors of the problem's shapes on the GPU, runs the one
call (a convolution, its backward with the same output mask, a cuDNN RNN forward or
backward) twice, and records the workspace: the peak allocated during the call minus what
is allocated after it (its outputs stay alive). One op at a time, so a batch whose whole
model would not fit is still measured, and ``--fit`` needs no model run per batch.

Results are cached in the user's cache (:mod:`torchinspect.cache`: ``~/.cache/torchinspect``,
private, read as an untrusted file), one entry per GPU name, cuDNN version and torch version;
an entry that does not parse, holds a value out of range, or names another GPU or version is
ignored with a note and measured again. An op that runs out of
memory is cached as ``null`` and reported (the table or the range is used for it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchinspect import cache
from torchinspect.dtypes import SHORT
from torchinspect.memory.workspace import Problem, conv_output


def machine() -> dict[str, Any]:
    """The GPU, cuDNN and torch versions that key a cache file (CUDA present)."""
    import torch

    return {"gpu": torch.cuda.get_device_name(), "cudnn": torch.backends.cudnn.version(),
            "torch": torch.__version__}


CACHE_VERSION = 2  # 1: the file before torchinspect.cache (read no more: measured again)
#: the largest workspace a cache entry may claim: more than any GPU's memory is damage
MAX_WORKSPACE = 1 << 44


def cache_name(info: dict[str, Any]) -> str:
    """The cache entry of one GPU, cuDNN and torch version (a name, not a path)."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{info['gpu']}-cudnn{info['cudnn']}-torch{info['torch']}"
                  .lower()).strip("-")[:120]
    return f"cudnn-workspace-{slug}"


def cache_path(info: dict[str, Any], folder: Path | None = None) -> Path:
    """Where the entry of ``info`` lives (``folder``: the cache folder, default the user's)."""
    return (folder or cache.cache_root()) / f"{cache_name(info)}.json"


@dataclass
class Calibration:
    """Measured workspaces of this machine (None: the op ran out of memory)."""

    info: dict[str, Any]
    path: Path
    entries: dict[str, int | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dirty: bool = False

    def save(self) -> None:
        """Write the cache atomically (torchinspect.cache); a cache that cannot be written
        is a note, never an error (the measurements stand)."""
        if not self.dirty:
            return
        note = cache.write(self.path.stem, dict(sorted(self.entries.items())),
                           version=CACHE_VERSION, key=self.info, what="calibration cache",
                           root=self.path.parent)
        if note:
            self.notes.append(note)
        self.dirty = False


def _entries(data: Any) -> dict[str, int | None]:
    """The cached measurements, refused unless each maps a problem key to a byte count
    (a whole number from 0 to :data:`MAX_WORKSPACE`) or null (out of memory)."""
    if not isinstance(data, dict):
        raise ValueError("entries must map problem keys to byte counts")
    out: dict[str, int | None] = {}
    for k, v in data.items():
        if len(k) > 4096:
            raise ValueError("a problem key is over 4096 characters")
        out[k] = None if v is None else int(cache.number(v, f"entry {k[:40]!r}", low=0,
                                                         high=MAX_WORKSPACE, integer=True))
    return out


def load_cache(info: dict[str, Any], folder: Path | None = None) -> Calibration:
    """This machine's cache; a corrupt file or one of another machine is ignored (a note)."""
    path = cache_path(info, folder)
    cal = Calibration(info, path)
    found = cache.read(path.stem, version=CACHE_VERSION, key=info, check=_entries,
                       what="calibration cache", root=path.parent, describe=_name)
    if found.data is not None:
        cal.entries = found.data
    if found.note:
        cal.notes.append(found.note)
    return cal


def _name(info: Any) -> str:
    if not isinstance(info, dict):
        return "an unknown machine"
    return f"{info.get('gpu')} (cuDNN {info.get('cudnn')}, torch {info.get('torch')})"


def calibrate(problems: Iterable[Problem], cal: Calibration,
              progress: Callable[[int, int], None] | None = None) -> None:
    """Measure every problem the cache does not hold; the cache is saved afterwards."""
    todo = [p for p in dict.fromkeys(problems) if p.key not in cal.entries]
    for i, problem in enumerate(todo):
        if progress is not None:
            progress(i, len(todo))
        cal.entries[problem.key] = measure_problem(problem)
        cal.dirty = True
    if todo:
        cal.save()


def measure_problem(problem: Problem, repeats: int = 2) -> int | None:
    """The workspace bytes of one problem on this GPU (None: out of memory)."""
    import torch

    try:
        run = _conv(problem) if problem.op.startswith("conv") else _rnn(problem)
        worst = 0
        for _ in range(repeats):
            worst = max(worst, run() if problem.op == "rnn_bwd" else _excess(run))
        return worst
    except torch.OutOfMemoryError:
        return None
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _excess(run: Callable[[], Any]) -> int:
    """Peak allocated during ``run()`` minus what is allocated once it returned (its result
    alive)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    after = torch.cuda.memory_allocated()
    del out
    return max(0, peak - after)


def _tensor(shape: Any, dtype: Any, layout: str = "cf") -> Any:
    import torch

    t = torch.randn(*shape, dtype=dtype, device="cuda")
    if layout == "cl":
        t = t.contiguous(memory_format=torch.channels_last if t.dim() == 4
                         else torch.channels_last_3d)
    return t


def _conv(problem: Problem) -> Callable[[], Any]:
    import torch

    p = problem.params
    dt = getattr(torch, SHORT[p["dtype"]])
    x = _tensor(p["x"], dt, p["layout"])
    w = _tensor(p["w"], dt, p["layout"])
    args = (p["s"], p["p"], p["d"], p["t"], p["op"], p["g"])
    if problem.op == "conv_fwd":
        bias = torch.randn(conv_output(p)[1], dtype=dt, device="cuda") if p["b"] else None

        def fwd() -> Any:
            with torch.no_grad():
                return torch.ops.aten.convolution(x, w, bias, *args)
        return fwd
    grad = _tensor(conv_output(p), dt, p["layout"])
    bias_sizes = [conv_output(p)[1]] if p["b"] else None

    def bwd() -> Any:
        return torch.ops.aten.convolution_backward(grad, x, w, bias_sizes, *args, p["mask"])
    return bwd


def _rnn(problem: Problem) -> Callable[[], Any]:
    import torch

    p = problem.params
    dt = getattr(torch, SHORT[p["dtype"]])
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN,
           "rnn_relu": torch.nn.RNN}[p["kind"]]
    kw: dict[str, Any] = {"nonlinearity": "relu"} if p["kind"] == "rnn_relu" else {}
    if p.get("proj"):
        kw["proj_size"] = p["proj"]
    module = cls(p["input"], p["hidden"], num_layers=p["layers"], bias=p["bias"],
                 bidirectional=p["dirs"] == 2, batch_first=p["bf"], **kw).to(device="cuda",
                                                                             dtype=dt)
    module.train(p["train"])
    shape = (p["batch"], p["seq"]) if p["bf"] else (p["seq"], p["batch"])
    x = torch.randn(*shape, p["input"], dtype=dt, device="cuda",
                    requires_grad=problem.op == "rnn_bwd")
    if problem.op == "rnn_fwd":
        def fwd() -> Any:
            if p["train"]:
                return module(x)
            with torch.inference_mode():
                return module(x)
        return fwd
    params = list(module.parameters())

    def bwd() -> int:
        # a fresh graph each time, released by the backward as in training (retain_graph
        # would make cuDNN's backward clone its reserve); the workspace is the peak above what
        # was allocated before it and the gradients it returns
        out, _ = module(x)
        grad = torch.randn_like(out)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        grads = torch.autograd.grad(out, [x, *params], grad)
        torch.cuda.synchronize()
        storages = {g.untyped_storage()._cdata: g.untyped_storage().nbytes() for g in grads}
        kept = sum(-(-n // 512) * 512 for n in storages.values())
        return max(0, torch.cuda.max_memory_allocated() - before - kept)
    return bwd
