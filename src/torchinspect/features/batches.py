"""Batches of ``inspect features``: which inputs go together, how a loaded batch becomes
the model's input on the device (GPU JPEG decoding included), the CUDA prefetch thread,
the warm-up on zeros, and captured outputs turned into rows to store."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from torchinspect.errors import InspectError
from torchinspect.features.gpu import GpuImages
from torchinspect.features.inputs import InputItem, Preprocess, split_jpegs
from torchinspect.features.layers import LayerCapture
from torchinspect.shapes import dataclass_fields


def segments(positions: list[int], batch_size: int) -> list[tuple[list[int], bool]]:
    """Batches of dataset indices that never straddle a gap in input positions; the flag
    marks the last batch of a contiguous run (a shard ends there)."""
    out: list[tuple[list[int], bool]] = []
    start = 0
    n = len(positions)
    while start < n:
        end = start + 1
        while end < n and positions[end] == positions[end - 1] + 1:
            end += 1
        for b in range(start, end, batch_size):
            out.append((list(range(b, min(b + batch_size, end))), b + batch_size >= end))
        start = end
    return out


@dataclass
class Ready:
    x: torch.Tensor | None
    ids: list[str]
    errors: list[tuple[str, str]]
    last_of_segment: bool
    event: Any = None


def assemble(batch: dict[str, Any], items: list[InputItem], prep: Preprocess, device: str,
              last: bool, gpu: GpuImages | None = None) -> Ready:
    """A loaded batch -> normalized model input on ``device`` (GPU-decoding JPEG bytes)."""
    dev = torch.device(device)
    errors: list[tuple[str, str]] = []
    kinds, index, values = batch["kind"], batch["index"], batch["values"]
    jpeg_pos = [pos for pos, k in enumerate(kinds) if k == "jpeg"]
    decoded: dict[int, torch.Tensor] = {}
    whole: torch.Tensor | None = None  # every row of the batch, in order, in one tensor
    if jpeg_pos:
        if gpu is None:
            gpu = GpuImages(prep, dev)
        bad: list[tuple[int, str]] = []
        imgs = gpu.decode(split_jpegs(batch), [items[index[p]].path or "" for p in jpeg_pos], bad)
        bad_at = {k for k, _ in bad}
        for k, msg in bad:
            errors.append((items[index[jpeg_pos[k]]].id, msg))
        good = [(p, img) for k, (p, img) in enumerate(zip(jpeg_pos, imgs, strict=True))
                if k not in bad_at and img is not None]
        if good:
            done = gpu.preprocess([img for _, img in good])
            if isinstance(done, torch.Tensor) and len(good) == len(kinds):
                whole = done
            else:
                decoded = {p: done[j] for j, (p, _) in enumerate(good)}
    if whole is not None:
        return Ready(whole, [items[i].id for i in index], errors, last)
    entries: list[tuple[str, torch.Tensor]] = []  # (id, tensor) in input order
    stacked = batch["images"]
    img_pos = 0
    images_float: torch.Tensor | None = None
    if stacked is not None:
        if dev.type == "cuda" and not stacked.is_pinned():
            stacked = stacked.pin_memory()
        images_float = (gpu.normalize if gpu is not None else prep.normalize)(stacked.to(dev, non_blocking=True))
    for pos, (i, kind, value) in enumerate(zip(index, kinds, values, strict=True)):
        rid = items[i].id
        if kind == "error":
            errors.append((rid, value))
        elif kind == "image":
            if images_float is not None:
                entries.append((rid, images_float[img_pos]))
                img_pos += 1
            else:
                entries.append((rid, prep.normalize(value.to(dev).unsqueeze(0))[0]))
        elif kind == "jpeg":
            if pos in decoded:
                entries.append((rid, decoded[pos]))
        else:
            entries.append((rid, value.to(dev, non_blocking=True)))
    if not entries:
        return Ready(None, [], errors, last)
    shapes = {tuple(t.shape) for _, t in entries}
    if len(shapes) > 1:
        raise InspectError(f"inputs of one batch have different shapes ({', '.join(str(list(s)) for s in sorted(shapes))})",
                           hint="images are batched after preprocessing: pass --resize/--crop "
                           "(or use the default preprocessing), and tensors of one shape")
    x = torch.stack([t.float() for _, t in entries])
    return Ready(x, [rid for rid, _ in entries], errors, last)


class Prefetch:
    """Prepares batches in a thread on a side CUDA stream, so decoding the next batch
    overlaps the forward of this one. The thread (and with it the DataLoader workers)
    starts at once: the caller can warm the model up meanwhile. ``close()`` stops it."""

    _END = object()

    def __init__(self, source: Iterator[Ready], device: str, depth: int = 4) -> None:
        self.q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.dev = torch.device(device)
        self.stream = torch.cuda.Stream(self.dev)
        self.source = source
        # the side stream does not order itself after the default stream: wait for what
        # was queued there (weights, constants) before the first kernel
        self.stream.wait_stream(torch.cuda.current_stream(self.dev))
        self.thread = threading.Thread(target=self._work, name="torchinspect-decode", daemon=True)
        self.thread.start()

    def _put(self, obj: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.q.put(obj, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        try:
            with torch.cuda.device(self.dev), torch.cuda.stream(self.stream):
                for ready in self.source:
                    ev = torch.cuda.Event()
                    ev.record(self.stream)
                    ready.event = ev
                    if not self._put(ready):
                        return
            self._put(self._END)
        except BaseException as exc:  # re-raised in the consumer
            self._put(exc)

    def __iter__(self) -> Iterator[Ready]:
        try:
            while True:
                got = self.q.get()
                if got is self._END:
                    return
                if isinstance(got, BaseException):
                    raise got
                if got.event is not None:
                    torch.cuda.current_stream(self.dev).wait_event(got.event)
                if got.x is not None:
                    got.x.record_stream(torch.cuda.current_stream(self.dev))
                yield got
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def warm_up(cap: LayerCapture, shapes: list[tuple[int, ...]], dev: str, autocast: Any,
             channels_last: bool) -> None:
    """Forwards on zeros of each batch shape the run will use (while the first batches are
    read and decoded): CUDA loads its kernels lazily and cuDNN plans per shape, which would
    otherwise stall the first real batch of each shape. A failure is left to the real batch."""
    with torch.inference_mode(), autocast:
        for shape in shapes:
            x = torch.zeros(shape, device=dev)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            try:
                cap(x)
            except Exception:  # noqa: BLE001 - the real batch reports it properly
                return
    torch.cuda.synchronize(dev)


def _flatten(name: str, out: Any) -> dict[str, torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return {name: out}
    if isinstance(out, (tuple, list)):
        got: dict[str, torch.Tensor] = {}
        for i, v in enumerate(out):
            got.update(_flatten(f"{name}.{i}", v))
        return got
    if isinstance(out, dict):
        got = {}
        for k, v in out.items():
            got.update(_flatten(f"{name}.{k}", v))
        return got
    fields = dataclass_fields(out)  # a layer may return a dataclass: its tensor fields
    if fields is not None:
        return _flatten(name, fields)
    return {}


def postprocess(outs: dict[str, Any], pool: str | None, save: torch.dtype,
                 to_cpu: bool = True) -> dict[str, torch.Tensor]:
    """Captured outputs -> {tensor name: rows} in the storage dtype (on the CPU, or left on
    the device for :class:`BackgroundWriter` when ``to_cpu`` is false)."""
    feats: dict[str, torch.Tensor] = {}
    for name, out in outs.items():
        for key, t in _flatten(name, out).items():
            if pool == "gap" and t.ndim > 2:
                t = t.float().mean(dim=tuple(range(2, t.ndim)))
            t = t.to(dtype=save).contiguous()
            feats[key] = t.to("cpu") if to_cpu else t
    if not feats:
        raise InspectError(f"layer {', '.join(outs)} gave no tensor output",
                           hint="pick layers whose output is a tensor")
    return feats



def random_batch(first: Any, dev: str) -> torch.Tensor:
    if isinstance(first, torch.Tensor):
        return first.to(dev)
    gen = torch.Generator().manual_seed(0)
    return first.make(dev, gen)

