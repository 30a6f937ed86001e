"""The CUDA image path of ``inspect features``: batched nvjpeg decoding, batched
preprocessing, and a background writer.

Per batch, the work on the GPU is a handful of kernels, not a chain per image:

* the JPEG bytes of a whole batch arrive as ONE uint8 tensor (concatenated in the
  DataLoader worker, so a batch crosses the process boundary as one shared-memory block)
  and are split into views here;
* ``torchvision.io.decode_jpeg(list, device=...)`` decodes them in one nvjpeg batch call
  (per-file fallback to nvjpeg alone, then to the CPU decoder, for what the batch call
  refuses: PNG is never sent here, CMYK/progressive/broken files are);
* images of one size (the common case: a photo folder) are stacked and resized + cropped in
  ONE call of the same torchvision functions the CPU path uses (so the arithmetic matches),
  and normalized with one fused multiply-subtract with device-resident constants.

:class:`BackgroundWriter` moves the device-to-host copy wait and the part/shard writing off
the thread that launches the forward: the features are copied into pinned memory with
``non_blocking=True``, an event is recorded, and a writer thread waits on it and writes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch

from torchinspect.features.inputs import Preprocess, decode_cpu


class GpuImages:
    """Decode and preprocess batches of JPEG bytes on one CUDA device."""

    def __init__(self, prep: Preprocess, device: str | torch.device) -> None:
        self.prep = prep
        self.device = torch.device(device)
        self.scale: torch.Tensor | None = None
        self.shift: torch.Tensor | None = None
        if prep.mode != "none" and prep.mean is not None and prep.std is not None:
            mean = torch.tensor(prep.mean, dtype=torch.float64)
            std = torch.tensor(prep.std, dtype=torch.float64)
            # (x / 255 - mean) / std == x * (1 / (255 std)) - mean / std
            self.scale = (1.0 / (255.0 * std)).float().view(1, -1, 1, 1).to(self.device)
            self.shift = (mean / std).float().view(1, -1, 1, 1).to(self.device)

    def normalize(self, batch: torch.Tensor) -> torch.Tensor:
        """uint8 (N, C, H, W) on the device -> float32, normalized like ``Preprocess``."""
        x = batch.float()
        if self.scale is None or self.shift is None:
            return x.div_(255)
        return x.mul_(self.scale).sub_(self.shift)

    def decode(self, datas: list[torch.Tensor], paths: list[str],
               errors: list[tuple[int, str]]) -> list[torch.Tensor | None]:
        """uint8 RGB (3, H, W) CUDA images; ``None`` (and an entry in ``errors``, with the
        index in ``datas``) for a file no decoder can read."""
        from torchvision.io import ImageReadMode, decode_jpeg

        # torchvision's nvjpeg decoder allocates its outputs on the caller's stream but
        # writes them from a private stream that does not wait for ours (pytorch/vision
        # PR 9606): let this stream's queued work (reading blocks freed by the previous
        # batch) finish first. Blocks only the decode thread, not the forward.
        torch.cuda.current_stream(self.device).synchronize()
        imgs: list[torch.Tensor | None]
        try:
            imgs = list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=self.device))
        except RuntimeError:  # one bad file fails the batch call: go file by file
            imgs = []
            for data in datas:
                try:
                    imgs.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
                except RuntimeError:
                    imgs.append(None)
        for k, img in enumerate(imgs):
            if img is None:
                try:
                    imgs[k] = decode_cpu(datas[k].numpy().tobytes(), paths[k]).to(self.device)
                except Exception as exc:
                    text = str(exc).strip().splitlines()
                    errors.append((k, text[0][:300] if text else type(exc).__name__))
        return imgs

    def preprocess(self, imgs: list[torch.Tensor]) -> list[torch.Tensor] | torch.Tensor:
        """Resize + crop + normalize. One (N, C, H, W) float tensor in input order when every
        image has the same size; else one float (C, H, W) view per image, batched by size."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, img in enumerate(imgs):
            groups.setdefault(tuple(img.shape), []).append(k)
        if len(groups) == 1:
            return self.normalize(self.prep.geometry(torch.stack(imgs)))
        rows: list[torch.Tensor | None] = [None] * len(imgs)
        for members in groups.values():
            done = self.normalize(self.prep.geometry(torch.stack([imgs[k] for k in members])))
            for j, k in enumerate(members):
                rows[k] = done[j]
        return [r for r in rows if r is not None]


class BackgroundWriter:
    """Runs a writer's ``add``/``fail``/``flush`` in order on a thread.

    ``add`` takes GPU features: they are copied to pinned host memory without blocking and
    written once the copy's event has completed, so the next forward is launched while the
    previous batch's features travel and are saved. Errors of the thread are raised in the
    caller at the next call or at :meth:`close`.
    """

    def __init__(self, writer: Any, device: str | torch.device, depth: int = 4) -> None:
        self.writer = writer
        self.device = torch.device(device)
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="torchinspect-writer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            if self._error is not None:
                continue  # drain without working after a failure
            try:
                job()
            except BaseException as exc:  # re-raised in the caller
                self._error = exc

    def _submit(self, job: Callable[[], None]) -> None:
        if self._error is not None:
            raise self._error
        self._q.put(job)

    def add(self, ids: list[str], feats: dict[str, torch.Tensor]) -> None:
        host = {}
        for k, t in feats.items():
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            buf.copy_(t.contiguous(), non_blocking=True)
            host[k] = buf
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))

        def job() -> None:
            event.synchronize()
            # pageable copies: the writer holds rows until a shard is full; pinned memory
            # goes back to the caching host allocator right away
            self.writer.add(ids, {k: v.clone() for k, v in host.items()})

        self._submit(job)

    def fail(self, item_id: str, error: str) -> None:
        self._submit(lambda: self.writer.fail(item_id, error))

    def flush(self) -> None:
        self._submit(self.writer.flush)

    def close(self) -> None:
        """Finish every queued job (also after an error or Ctrl-C), then re-raise an error."""
        self._q.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
