"""The one device policy: what a ``--device`` string means, whether it exists here, where a
model's tensors are, whether weights fit, and when a meta failure means "run for real".

Nothing else in torchinspect interprets a device string. Parsing is torch-free (the CLI
calls it at start-up); everything that needs torch imports it inside the function.

Device words:

* ``auto``  — trace on meta (no memory) and fall back to a real CPU run when meta cannot
  run the forward; commands that need real numbers (bench, features) read it as ``cpu``.
* ``meta``  — meta only, never fall back.
* ``cpu``, ``cuda``, ``cuda:N`` — a real run there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchinspect.errors import InspectError

DEVICE_WORDS = ("auto", "cpu", "cuda", "meta")
DEVICE_HINT = "use auto, cpu, cuda, cuda:N (e.g. cuda:1) or meta"

# Messages of a forward that failed because of meta tensors (not because of the input).
_META_SIGNS = ("meta", "item()", "data-dependent", "data dependent", "_local_scalar_dense",
               "DataDependent", "NotImplemented", "Cannot copy out", "nonzero", "tolist")


def parse_device(text: str, *, option: str = "--device") -> str:
    """Validate a device word; returns the canonical text (auto, cpu, cuda, cuda:N, meta)."""
    t = str(text).strip().lower()
    if t in DEVICE_WORDS:
        return t
    if t.startswith("cuda:") and t[5:].isdigit():
        return t
    raise InspectError(f"{option} {text!r} is not a device", hint=DEVICE_HINT)


def is_real(device: str) -> bool:
    """cpu / cuda / cuda:N (not auto or meta)."""
    return device not in ("auto", "meta")


def build_device(device: str) -> str:
    """Where to build a model for ``device``: meta for auto/meta, else the device itself."""
    return "meta" if not is_real(device) else device


def real_device(device: str) -> str:
    """The real device a run on ``device`` uses: cpu for auto/meta."""
    return "cpu" if not is_real(device) else device


def check_available(device: str) -> None:
    """A real device must exist here: cuda needs CUDA, cuda:N an N below the device count."""
    device = parse_device(device)
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise InspectError(f"--device {device}: CUDA is not available on this machine",
                           hint="use --device cpu, or the default (meta) for static analysis; "
                           "`inspect env` shows what torch sees")
    index = device.partition(":")[2]
    count = torch.cuda.device_count()
    if index and int(index) >= count:
        raise InspectError(f"--device {device}: this machine has {count} CUDA device(s)",
                           hint=f"use cuda:0 ... cuda:{count - 1}")


def same_device(a: str, b: str) -> bool:
    """``cuda`` and ``cuda:0`` name the same device (the current one is 0 here)."""
    def norm(d: str) -> str:
        return "cuda:0" if d == "cuda" else d

    return norm(a) == norm(b)


# ------------------------------------------------------------------ where tensors are


def _tensors(model: Any) -> Iterator[Any]:
    yield from model.parameters()
    yield from model.buffers()


def has_meta_tensors(model: Any) -> bool:
    return any(t.is_meta for t in _tensors(model))


def model_device(model: Any, default: str = "cpu") -> str:
    """Where the model's first tensor lives ("cpu", "cuda:0", "meta"); ``default`` if none."""
    for t in _tensors(model):
        return str(t.device)
    return default


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers, each tensor counted once (a lazy
    module's uninitialized ones have no size yet: 0)."""
    from torch.nn.parameter import is_lazy

    seen: set[int] = set()
    total = 0
    for t in _tensors(model):
        if id(t) not in seen and not is_lazy(t):
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def available_bytes(device: str) -> int | None:
    """Free memory on ``device`` (CPU: MemAvailable; CUDA: free device memory); None if unknown."""
    if device.startswith("cuda"):
        import torch

        index = int(device.partition(":")[2] or torch.cuda.current_device())
        return int(torch.cuda.mem_get_info(index)[0])
    if device == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def fmt_size(n: float) -> str:
    """Bytes in powers of 1000 (the same text the reports use)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def ensure_fits(name: str, need: int, device: str, *, hint: str | None = None) -> None:
    """Refuse up front, with both sizes, what would not fit on ``device``."""
    free = available_bytes(device)
    if free is not None and need > free:
        raise InspectError(
            f"{name} needs {fmt_size(need)} for its weights on {device}, but only "
            f"{fmt_size(free)} is available",
            hint=hint or "leave out --device (meta, the default, allocates nothing) for "
            "summary/params/flops",
        )


def fits_comfortably(need: int, device: str = "cpu") -> bool:
    """True when ``need`` bytes take at most half of what is free (unknown: True)."""
    free = available_bytes(device)
    return free is None or need <= free // 2


def looks_meta_related(exc: BaseException) -> bool:
    """Did a forward fail because it ran on meta (data-dependent ops, .item(), ...)?"""
    if isinstance(exc, NotImplementedError):
        return True
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in _META_SIGNS)
