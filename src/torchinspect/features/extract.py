"""``extract_features``: run a model over inputs and store chosen layers' outputs.

The phases, each in its own module:

1. ``plan``: options checked, the model built (random init from a
   fixed seed), the weights' identity, the ordered inputs and the settings;
2. ``resume``: rank 0 locks the folder, recovers what an earlier
   run left and checks that a resume adds rows of the same model with the same settings;
3. ``runner``: the loop over this rank's pending inputs;
4. ``store``: rank 0 merges every rank's shards into the manifest.

One process or many: under ``torchrun`` each rank takes a contiguous slice of the sorted
list of pending inputs (see ranks.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchinspect import __version__
from torchinspect.arguments import as_list
from torchinspect.errors import ExitStatus, InspectError
from torchinspect.features import resume, store
from torchinspect.features.layers import LayerCapture
from torchinspect.features.plan import (
    DTYPE_NAMES,
    MAX_IMAGE_BYTES,
    ExtractPlan,
    ExtractSetup,
    FeatureOptions,
    build_model,
    check_device,
    check_options,
    plan_inputs,
)
from torchinspect.features.ranks import init_ranks, slowest
from torchinspect.features.runner import Progress, Runner, channels_last
from torchinspect.sources.case import ModelLike, ModelOptions
from torchinspect.trace.engine import model_kept

__all__ = ["FeatureResult", "extract_features", "run_features"]


@dataclass
class FeatureResult:
    """What one run wrote (rank 0: the whole folder; other ranks: their own part)."""

    output: str
    manifest: str
    model: str
    layers: dict[str, dict[str, Any]]  # tensor name -> {"shape": per-row shape, "dtype"}
    method: str  # hooks or fx
    device: str
    world_size: int
    rows: int  # rows in the folder
    new_rows: int  # rows this run added
    skipped: int  # rows already in the folder (inputs this run did not compute again)
    failed: list[dict[str, str]]  # {"id", "error"} of unreadable inputs (all runs)
    new_failed: int  # inputs this run could not read
    shards: list[str]
    bytes: int
    seconds: float
    forward_seconds: float | None  # time inside the model's forward (CPU runs)
    preprocess: dict[str, Any]
    file_format: str
    save_dtype: str
    weights: dict[str, Any] = field(default_factory=dict)  # as the manifest records them
    skip_unreadable: bool = False
    ignored_files: list[str] = field(default_factory=list)  # in input folders: not inputs
    notes: list[str] = field(default_factory=list)
    # start-up (model build, input listing, workers, first batch decoded) vs the loop from
    # the first batch to the last row written; the slowest rank's under torchrun. CUDA image
    # runs warm the model up (kernels, cuDNN plans) during the start-up, while the first
    # batches are read and decoded: warmup_seconds of it
    startup_seconds: float | None = None
    loop_seconds: float | None = None
    warmup_seconds: float | None = None

    @property
    def rows_per_s(self) -> float:
        return self.new_rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def status(self) -> ExitStatus:
        """1 when inputs of this run could not be read (0 with ``skip_unreadable``)."""
        return ExitStatus.CHECK_FAILED if self.new_failed and not self.skip_unreadable else ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows_per_s"] = round(self.rows_per_s, 2) if self.new_rows else None
        return d


def extract_features(
    model: ModelLike,
    inputs: Sequence[str] | str | os.PathLike[str] = (),
    *,
    layers: Sequence[str] | str,
    output: str | os.PathLike[str],
    options: ModelOptions | None = None,
    example: Any = None,
    device: str = "cpu",
    batch_size: int | None = None,
    workers: int | None = None,
    dtype: str = "fp32",
    save_dtype: str | None = None,
    pool: str | None = None,
    file_format: str = "safetensors",
    shard_size: str | int = "1GB",
    preprocess: str = "image",
    resize: int | None = None,
    crop: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    restart: bool = False,
    gpu_decode: bool = True,
    skip_unreadable: bool = False,
    max_image_size: str | int = MAX_IMAGE_BYTES,
    progress: Callable[[Progress], None] | None = None,
) -> FeatureResult:
    """Save the outputs of ``layers`` for every input into the folder ``output``.

    ``model``: a MODEL text (``resnet18``, ``zoo:NAME``, ``file.py:Name``), a ModelCase or
    an ``nn.Module``. ``inputs``: image files, folders, ``.pt``/``.npy``/``.safetensors``
    files; none: one random batch from the model's example (or ``example``). Rerunning
    with the same ``output`` adds the inputs not there yet, after checking the model's
    weights and the settings are the same (``restart=True`` discards the earlier rows).
    ``batch_size``: inputs per forward (None: 64, in smaller forwards when a forward of 64
    would take more than half the available memory). ``skip_unreadable``: unreadable inputs are listed,
    not a failure. Raises KeyboardInterrupt after flushing what was done when interrupted.
    """
    opts = FeatureOptions(
        layers=[n.strip() for spec in as_list(layers) for n in str(spec).split(",") if n.strip()],
        output=Path(output), options=options, example=example, device=device,
        batch_size=batch_size, workers=workers, dtype=dtype, save_dtype=save_dtype, pool=pool,
        file_format=file_format, shard_size=shard_size, preprocess=preprocess, resize=resize,
        crop=crop, mean=tuple(mean) if mean else None, std=tuple(std) if std else None,
        restart=restart, gpu_decode=gpu_decode, skip_unreadable=skip_unreadable,
        max_image_size=max_image_size, progress=progress)
    return run_features(model, inputs, opts)


def run_features(model: ModelLike, inputs: Sequence[str] | str | os.PathLike[str],
                 opts: FeatureOptions) -> FeatureResult:
    """:func:`extract_features` with its options in one :class:`FeatureOptions` (what the
    CLI fills)."""
    t0 = time.perf_counter()
    compute, save, pool_, shard_bytes, max_image = check_options(opts)
    ranks = init_ranks(check_device(opts.device))
    setup = ExtractSetup(opts, ranks, ranks.device, compute, save, pool_, shard_bytes, max_image)
    try:
        with _locked(setup):
            built = build_model(setup, model)
            planned = plan_inputs(setup, built, model, [os.fspath(i) for i in as_list(inputs)])
            plan = ExtractPlan(**vars(setup), model=built, inputs=planned)
            manifest = _recovered(plan)
            return _extract(plan, manifest, t0)
    finally:
        ranks.close()


@contextlib.contextmanager
def _locked(plan: ExtractSetup) -> Iterator[None]:
    """Rank 0 holds the output folder's lock for the whole run; every rank learns at once
    when it could not be taken."""
    error: InspectError | None = None
    with contextlib.ExitStack() as stack:
        if plan.ranks.rank == 0:
            try:
                resume.refuse_foreign(plan.out_dir)
                with store.writing(plan.out_dir):
                    plan.out_dir.mkdir(parents=True, exist_ok=True)
                stack.enter_context(resume.FolderLock(plan.out_dir))
            except InspectError as exc:
                error = exc
        _shared_error(plan, error)
        yield


def _shared_error(plan: ExtractSetup, error: InspectError | None) -> None:
    """Raise ``error`` here, and rank 0's error on every other rank (no rank waits forever
    at a barrier for a rank that gave up)."""
    message = plan.ranks.first_error(str(error) if error else None)
    if error is not None:
        raise error
    if message is not None:
        raise InspectError(f"rank 0 stopped: {message}", hint="see rank 0's error")


def _recovered(plan: ExtractPlan) -> dict[str, Any]:
    """Rank 0 makes the folder consistent; then every rank reads its manifest."""
    manifest: dict[str, Any] = {}
    error = None
    if plan.ranks.rank == 0:
        try:
            manifest = resume.recover(plan.out_dir, plan.inputs.settings, restart=plan.opts.restart,
                                      fmt=plan.opts.file_format, shard_bytes=plan.shard_bytes)
        except InspectError as exc:
            error = exc
    _shared_error(plan, error)
    if plan.ranks.rank != 0:
        manifest = store.read_json(plan.out_dir / store.MANIFEST) or {}
    return manifest


def _extract(plan: ExtractPlan, manifest: dict[str, Any], t0: float) -> FeatureResult:
    """This rank's pending inputs through the model, then the one manifest."""
    ranks = plan.ranks
    rows_there = {e["id"] for e in manifest.get("inputs", [])}  # failures are tried again
    pending = [(pos, it) for pos, it in enumerate(plan.inputs.items) if it.id not in rows_there]
    mine = pending[ranks.rank * len(pending) // ranks.world:(ranks.rank + 1) * len(pending) // ranks.world]
    sink = store.RankWriter(plan.out_dir, run=store.next_run(manifest), rank=ranks.rank,
                            fmt=plan.opts.file_format, shard_bytes=plan.shard_bytes,
                            metadata={"model": plan.model.name})
    if channels_last(plan):
        plan.model.net = plan.model.net.to(memory_format=torch.channels_last)
    # a caller's module: what its forward assigns (attributes, buffers) is put back
    kept = model_kept(plan.model.net) if plan.model.callers else contextlib.nullcontext()
    with kept, LayerCapture(plan.model.net, plan.opts.layers) as cap:
        runner = Runner(plan, cap, sink, mine, t0)
        try:
            runner.run()
        except KeyboardInterrupt:
            sink.flush()  # what was done is kept; the folder resumes from there
            if ranks.world == 1:
                store.finish(plan.out_dir, plan.inputs.order, _run_info(plan, runner, cap.method, t0),
                             complete=False, extra=_versions())
            raise
        sink.flush()
    timing = _timing(plan, runner, t0)
    ranks.barrier()
    if ranks.rank == 0:
        info = {**_run_info(plan, runner, cap.method, t0), **timing}
        store.finish(plan.out_dir, plan.inputs.order, info, complete=True, extra=_versions())
    ranks.barrier()
    return _result(plan, runner, cap.method, len(rows_there & set(plan.inputs.order)), timing, t0)


def _result(plan: ExtractPlan, runner: Runner, method: str, skipped: int,
            timing: dict[str, float | None], t0: float) -> FeatureResult:
    manifest = store.read_json(plan.out_dir / store.MANIFEST) or {}
    runs = manifest.get("runs", [])
    return FeatureResult(
        output=str(plan.out_dir), manifest=str(plan.out_dir / store.MANIFEST), model=plan.model.name,
        layers=manifest.get("tensors") or runner.tensors, method=method, device=plan.device,
        world_size=plan.ranks.world, rows=int(manifest.get("rows", 0)),
        new_rows=int(runs[-1].get("rows", 0)) if runs else 0,
        skipped=skipped, failed=list(manifest.get("failed", [])),
        new_failed=int(runs[-1].get("failed", 0)) if runs else runner.failed,
        shards=sorted({f for s in manifest.get("shards", []) for f in s["files"].values()}),
        bytes=sum(int(s.get("bytes", 0)) for s in manifest.get("shards", [])),
        seconds=time.perf_counter() - t0,
        forward_seconds=runner.forward_seconds if plan.device == "cpu" else None,
        preprocess=plan.inputs.settings["preprocess"], file_format=plan.opts.file_format,
        save_dtype=DTYPE_NAMES[plan.save], weights=plan.inputs.settings["weights"],
        skip_unreadable=plan.opts.skip_unreadable, ignored_files=list(plan.inputs.ignored),
        notes=list(plan.model.notes), **timing)


def _timing(plan: ExtractPlan, runner: Runner, t0: float) -> dict[str, float | None]:
    """Start-up, warm-up (part of the start-up) and loop seconds of this run (the slowest
    rank's when there are several)."""
    first, end = runner.first_batch, runner.loop_end
    mine = (None if first is None else first - t0,
            None if first is None or end is None else end - first, runner.warmup)
    startup, loop, warmup = slowest(plan.ranks, mine)
    return {"startup_seconds": startup, "loop_seconds": loop, "warmup_seconds": warmup}


def _versions() -> dict[str, Any]:
    import torchvision

    return {"versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                         "torchinspect": __version__}}


def _run_info(plan: ExtractPlan, runner: Runner, method: str, t0: float) -> dict[str, Any]:
    return {"world_size": plan.ranks.world, "device": plan.device.split(":")[0], "method": method,
            "dtype": DTYPE_NAMES[plan.compute], "batch": plan.batch,
            "skip_unreadable": plan.opts.skip_unreadable,
            "seconds": round(time.perf_counter() - t0, 3)}
