"""From the tracker's log to the numbers: replay it through an allocator model, find the peak
of each phase and what was allocated then, and which modules' activations wait for backward."""

from __future__ import annotations

from typing import Any

from torchinspect.memory.allocator import CachingAllocator, SumOfRounded
from torchinspect.memory.result import CATEGORIES, PhasePeak, RunMemory
from torchinspect.memory.tracker import Alloc, Log

TIMELINE_POINTS = 1000
KV_CACHE = "kv cache"  # a category of generation only (memory/generate.py): not in CATEGORIES


def category(a: Alloc) -> str | None:
    """What an allocation is, as known after the run (None: not device memory)."""
    if a.kind == "host":
        return None
    if a.phase in ("weights", "buffers", "input", "workspace"):
        return a.phase
    if a.kind == "cudnn":
        return "workspace"
    if a.kind == "grad":
        return "gradients"
    if a.kind == "state":
        return "optimizer state"
    if a.kind == "cache":
        return KV_CACHE
    if a.phase in ("forward", "inference", "prefill", "decode"):
        return "activations"
    return "temporaries"


def make_allocator(device: str) -> Any:
    return CachingAllocator() if device == "cuda" else SumOfRounded(rounding=False)


def replay(log: Log, end: int, *, mode: str, device: str, root: str, top: int = 10,
           sizes: dict[int, int] | None = None) -> RunMemory:
    """Replay ``log.events[:end]``; the peak, each phase's peak and its makeup. ``sizes``:
    bytes of allocations logged without them (cuDNN workspaces), by serial."""
    sizes = sizes or {}
    allocator = make_allocator(device)
    highest, driver = 0, ""
    totals = dict.fromkeys(CATEGORIES, 0)
    placed: dict[int, tuple[int, str]] = {}  # serial -> (address, category)
    peaks: dict[tuple[str, int], PhasePeak] = {}
    phase, step = "setup", 0
    saved: list[tuple[str, int]] = []
    timeline: list[tuple[str, int, int]] = []
    for ev in log.events[:end]:
        if ev.serial == 0:  # a phase mark: the phase starts with what is allocated now
            phase, _, n = ev.op.partition(":")
            step = int(n)
            if phase == "backward" and step == 1:
                saved = _saved(log, placed)
            if phase != "end" and (phase, step) not in peaks:
                peaks[(phase, step)] = PhasePeak(phase, step, allocator.allocated, "", dict(totals))
            continue
        a = log.allocs[ev.serial]
        if ev.alloc:
            cat = category(a)
            nbytes = sizes.get(ev.serial, a.nbytes)
            if cat is None or nbytes == 0:
                continue
            addr = allocator.malloc(nbytes)
            placed[ev.serial] = (addr, cat)
            totals[cat] = totals.get(cat, 0) + allocator.size_of(addr)
            key = (phase, step)
            if phase != "setup" and (key not in peaks or allocator.allocated > peaks[key].peak):
                peaks[key] = PhasePeak(phase, step, allocator.allocated, _short(a.module, root),
                                       dict(totals))
            if allocator.allocated > highest and phase != "setup":
                highest = allocator.allocated
                driver = _driver(a, root)
        elif ev.serial in placed:
            addr, cat = placed.pop(ev.serial)
            totals[cat] -= allocator.size_of(addr)
            allocator.free(addr)
        timeline.append((phase, step, allocator.allocated))
    run = _run_memory(log, mode, list(peaks.values()), saved, timeline, root, top)
    run.peak_at = driver
    return run


def _driver(a: Alloc, root: str) -> str:
    """What the allocation at a peak is, when it is a cuDNN workspace."""
    if a.kind != "cudnn" or a.problem is None:
        return ""
    at = _short(a.module, root)
    return (f"{at}: " if at else "") + f"{a.problem.describe()} workspace"


def _run_memory(log: Log, mode: str, phases: list[PhasePeak], saved: list[tuple[str, int]],
                timeline: list[tuple[str, int, int]], root: str, top: int) -> RunMemory:
    best = max(phases, key=lambda p: p.peak)
    named = [(_short(m, root) or "(outside modules)", b) for m, b in saved]
    held = {c: max((p.breakdown.get(c, 0) for p in phases), default=0)
            for c in ("optimizer state", "gradients")}
    return RunMemory(mode, best.peak, best.phase, best.step, best.module, best.breakdown,
                     phases, named[:top], sum(b for _, b in saved), _downsample(timeline),
                     log.ops, held["optimizer state"], held["gradients"])


def _saved(log: Log, placed: dict[int, tuple[int, str]]) -> list[tuple[str, int]]:
    """Activations alive when the backward starts, by the module that allocated them."""
    by: dict[str, int] = {}
    for serial, (_, cat) in placed.items():
        if cat == "activations":
            a = log.allocs[serial]
            by[a.module] = by.get(a.module, 0) + a.nbytes
    return sorted(by.items(), key=lambda kv: -kv[1])


def _short(module: str, root: str) -> str:
    """``ResNet.layer1.0.conv1`` -> ``layer1.0.conv1``; the root itself keeps its class name."""
    if module.startswith(root + "."):
        return module[len(root) + 1:]
    return module


def _downsample(points: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """At most TIMELINE_POINTS points, each the highest of its slice (the peak is kept)."""
    if len(points) <= TIMELINE_POINTS:
        return points
    size = -(-len(points) // TIMELINE_POINTS)
    return [max(points[i:i + size], key=lambda p: p[2]) for i in range(0, len(points), size)]
