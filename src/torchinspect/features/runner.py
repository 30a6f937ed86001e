"""The loop of ``inspect features``: batches in, layer outputs out, rows to the writer.

:class:`Runner` owns the loop's state (rows done, failures, time in the forward, when the
first batch came and the loop ended): one object instead of a ``counters`` dict passed
through a 20-parameter function.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from torchinspect.errors import InspectError
from torchinspect.features import store
from torchinspect.features.batch_fit import BatchFit, fit_batch, per_row_bytes
from torchinspect.features.batches import (
    Prefetch,
    Ready,
    assemble,
    postprocess,
    random_batch,
    segments,
    warm_up,
)
from torchinspect.features.gpu import BackgroundWriter, GpuImages
from torchinspect.features.inputs import InputItem, RowDataset, collate_rows
from torchinspect.features.layers import LayerCapture
from torchinspect.features.plan import ExtractPlan


@dataclass
class Progress:
    rows: int  # rows done by this process in this run
    total: int  # rows this process has to do
    failed: int
    elapsed: float


def default_workers(device: str, local_world: int = 1) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_rank = max(1, cpus // max(1, local_world))
    if device.startswith("cuda"):
        return min(8, max(1, per_rank - 1))
    return max(1, min(8, per_rank - 1))


def channels_last(plan: ExtractPlan) -> bool:
    """NHWC convolutions (tensor cores without layout transposes): CUDA image runs of a
    model built here; a caller's module is never touched."""
    return (plan.device.startswith("cuda") and plan.model.owned and plan.model.sample_rank == 3
            and plan.inputs.prep.mode == "image" and any(it.kind != "random" for it in plan.inputs.items))


class Runner:
    """One rank's pass over its pending inputs (``mine``: (input position, item) pairs)."""

    def __init__(self, plan: ExtractPlan, cap: LayerCapture, sink: store.RankWriter,
                 mine: list[tuple[int, InputItem]], t0: float) -> None:
        self.plan, self.cap, self.sink, self.mine, self.t0 = plan, cap, sink, mine, t0
        self.cuda = plan.device.startswith("cuda")
        self.rows = 0
        self.failed = 0
        self.forward_seconds = 0.0
        self.first_batch: float | None = None
        self.loop_end: float | None = None
        self.warmup: float | None = None
        self.tensors: dict[str, dict[str, Any]] = {}
        self.fit: BatchFit | None = None  # rows per forward, once measured on the first batch
        self.channels_last = channels_last(plan)
        compute = plan.compute
        self.autocast = (torch.autocast(device_type="cuda" if self.cuda else "cpu", dtype=compute)
                         if compute != torch.float32 else contextlib.nullcontext())

    def run(self) -> None:
        """Every batch through the model; rows to the writer (a background thread on CUDA:
        the next forward is launched while this batch's features travel and are saved)."""
        source = self._source()
        writer: Any = BackgroundWriter(self.sink, self.plan.device) if self.cuda else self.sink
        progress: Callable[[Progress], None] | None = self.plan.opts.progress
        try:
            with torch.inference_mode(), self.autocast:
                for ready in source:
                    if self.first_batch is None:
                        self.first_batch = time.perf_counter()
                    self._batch(ready, writer)
                    if progress is not None:
                        progress(Progress(self.rows + self.failed, len(self.mine), self.failed,
                                          time.perf_counter() - self.t0))
        finally:
            if writer is not self.sink:
                writer.close()  # drains what was queued (also on Ctrl-C), then raises its error
            self.loop_end = time.perf_counter()

    def _batch(self, ready: Ready, writer: Any) -> None:
        for rid, err in ready.errors:
            writer.fail(rid, err)
            self.failed += 1
        if ready.x is not None:
            feats = self._features(ready.x)
            if not self.tensors:
                self.tensors = store.tensors_info(feats)
            writer.add(ready.ids, feats)
            self.rows += len(ready.ids)
        if ready.last_of_segment:
            writer.flush()

    def _features(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows of one batch, in forwards as large as the memory allows."""
        if self.fit is None and len(x) > 1:
            try:  # the first forward: the model's failure on this input is named as below
                per_row = per_row_bytes(self.cap, x[:1])
            except InspectError:
                raise
            except Exception as exc:
                raise _forward_failed(exc, list(x[:1].shape)) from None
            self.fit = fit_batch(per_row, self.plan.batch, self.plan.device,
                                 explicit=self.plan.opts.batch_size is not None)
            if self.fit.note:
                self.plan.model.notes.append(self.fit.note)
        step = self.fit.forward_rows if self.fit is not None else len(x)
        parts = [postprocess(self._forward(x[i:i + step]), self.plan.pool, self.plan.save,
                             to_cpu=not self.cuda) for i in range(0, len(x), step)]
        if len(parts) == 1:
            return parts[0]
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def _forward(self, x: torch.Tensor) -> dict[str, Any]:
        shape = list(x.shape)
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        f0 = time.perf_counter()
        try:
            outs = self.cap(x)
        except InspectError:
            raise
        except Exception as exc:
            raise _forward_failed(exc, shape) from None
        if not self.cuda:
            self.forward_seconds += time.perf_counter() - f0
        return outs

    # ------------------------------------------------------------------ batches in

    def _source(self) -> Iterator[Ready]:
        plan, mine = self.plan, self.mine
        if mine and mine[0][1].kind == "random":
            x = random_batch(plan.model.first, plan.device)
            idx = [it.index or 0 for _, it in mine]
            return iter([Ready(x[idx], [it.id for _, it in mine], [], True)])
        sub = [it for _, it in mine]
        batches = segments([pos for pos, _ in mine], plan.batch)
        lasts = [last for _, last in batches]
        workers = plan.opts.workers
        n_workers = default_workers(plan.device, plan.ranks.world) if workers is None else workers
        raw_jpeg = self.cuda and plan.opts.gpu_decode
        loader = torch.utils.data.DataLoader(
            RowDataset(sub, plan.inputs.prep, raw_jpeg=raw_jpeg, max_bytes=plan.max_image_bytes),
            batch_sampler=[b for b, _ in batches], num_workers=n_workers,
            collate_fn=collate_rows, pin_memory=self.cuda and not raw_jpeg,
            prefetch_factor=4 if n_workers > 0 else None, persistent_workers=False)
        gpu = GpuImages(plan.inputs.prep, plan.device) if raw_jpeg else None

        def prepared() -> Iterator[Ready]:
            for k, batch in enumerate(loader):
                yield assemble(batch, sub, plan.inputs.prep, plan.device, lasts[k], gpu)

        if not self.cuda:
            return prepared()
        prefetch = Prefetch(prepared(), plan.device)
        self._warm_up(prefetch, [len(b) for b, _ in batches])
        return iter(prefetch)

    def _warm_up(self, prefetch: Prefetch, sizes: list[int]) -> None:
        """Zeros of the image batch shapes through a model of ours while the first batches
        are decoded (a caller's module only ever sees real inputs)."""
        plan = self.plan
        if not (plan.model.owned and plan.inputs.prep.mode == "image" and plan.inputs.prep.crop is not None
                and self.mine and all(it.kind == "image" for _, it in self.mine)):
            return
        w0 = time.perf_counter()
        shapes: list[tuple[int, ...]] = [(n, 3, *plan.inputs.prep.crop)
                                         for n in list(dict.fromkeys(sizes))[:3]]
        try:
            warm_up(self.cap, shapes, plan.device, self.autocast, self.channels_last)
        except BaseException:
            prefetch.close()
            raise
        self.warmup = time.perf_counter() - w0


def _forward_failed(exc: Exception, shape: list[int]) -> InspectError:
    """The model's forward refused a batch: the input's shape, as the preprocessing made it."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return InspectError(f"the model's forward failed on a batch of shape {shape}: "
                        f"{type(exc).__name__}: {msg[:200]}",
                        hint="check the preprocessing (--resize/--crop, --preprocess) "
                        "against the input the model expects")
