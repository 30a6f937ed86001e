"""``extract_features``: run a model over inputs and store chosen layers' outputs.

One process or many: under ``torchrun`` (``WORLD_SIZE`` > 1) each rank takes a contiguous
slice of the sorted list of pending inputs, writes its own shards, and after a barrier
rank 0 writes one manifest whose row order is the one a single process would give. NCCL
on CUDA, gloo on CPU. See store.py for how interrupted runs resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchinspect import device as devices
from torchinspect.arguments import as_list
from torchinspect.errors import ExitStatus, InspectError, first_line
from torchinspect.features import store
from torchinspect.features.gpu import BackgroundWriter, GpuImages
from torchinspect.features.inputs import (
    InputItem,
    Preprocess,
    RowDataset,
    collate_rows,
    collect_inputs,
    make_preprocess,
    split_jpegs,
)
from torchinspect.features.layers import LayerCapture, check_layer_names
from torchinspect.io.writers import parse_size
from torchinspect.shapes import dataclass_fields

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
          "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass
class Progress:
    rows: int  # rows done by this process in this run
    total: int  # rows this process has to do
    failed: int
    elapsed: float


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
    skipped: int  # inputs already in the folder
    failed: list[dict[str, str]]  # {"id", "error"} of unreadable inputs (all runs)
    new_failed: int
    shards: list[str]
    bytes: int
    seconds: float
    forward_seconds: float | None  # time inside the model's forward (CPU runs)
    preprocess: dict[str, Any]
    file_format: str
    save_dtype: str
    ignored_files: int = 0
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
        return ExitStatus.CHECK_FAILED if self.failed else ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        d["rows_per_s"] = round(self.rows_per_s, 2)
        return d


# ------------------------------------------------------------------ distributed


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owned: bool = False  # we initialized the process group
    device: str = "cpu"

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            if self.device.startswith("cuda"):
                dist.barrier(device_ids=[torch.device(self.device).index or 0])
            else:
                dist.barrier()

    def close(self) -> None:
        if self.owned:
            import torch.distributed as dist

            dist.destroy_process_group()


def _init_dist(device: str) -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(device=device)
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":  # one GPU per local rank
        device = f"cuda:{local}"
    owned = False
    if not dist.is_initialized():
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
            dist.init_process_group("nccl", device_id=torch.device(device))
        else:
            dist.init_process_group("gloo")
        owned = True
    return _Dist(dist.get_rank(), dist.get_world_size(), local, owned, device)


# ------------------------------------------------------------------ the model


def _callers(model: Any) -> Any:
    """The caller's own module, when ``model`` is one or a ModelCase holding one."""
    return model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)


def _resolve_model(model: Any, device: str, options: Any) -> tuple[Any, str, Any, list[str], bool]:
    """(real model on device, name, example, notes, owned) for a spec, a ModelCase or a
    module; ``owned``: built or copied here, so its memory format may be changed."""
    if isinstance(model, torch.nn.Module):
        from torchinspect.sources.materialize import has_lazy

        here = devices.model_device(model, default=device)
        if devices.has_meta_tensors(model):
            raise InspectError("the model's weights are on meta", hint="pass a model with real weights")
        # options.inputs: the example, as for a spec
        example = None
        if options is not None and getattr(options, "inputs", None):
            from torchinspect.sources.case import resolve_inputs

            example = resolve_inputs(list(options.inputs), None, batch=options.batch,
                                     no_batch=options.no_batch)
        if has_lazy(model):  # the first batch sizes the lazy modules: of a copy
            from torchinspect.sources.materialize import lazy_real_copy

            return lazy_real_copy(model).to(device), type(model).__name__, example, \
                ["lazy modules are sized on a copy (the model passed in stays lazy)"], False
        if torch.device(here) != torch.device(device):
            import copy

            return copy.deepcopy(model).to(device), type(model).__name__, example, \
                [f"the model was copied from {here} to {device}"], True
        return model, type(model).__name__, example, [], False
    if isinstance(model, str):
        from torchinspect.sources.case import make_case

        case = make_case(model, options=options, device=device, need_inputs=False)
        return case.real_model(device), case.name, case.example, list(case.notes), True
    case = model  # a ModelCase: its model may be the caller's own
    net = case.real_model(device)
    return net, case.name, case.example, list(case.notes), net is not case.model


def _example_info(example: Any) -> tuple[int | None, tuple[int, int] | None, Any]:
    """(sample rank, (H, W) of an image-like input, first positional spec/tensor)."""
    first = None
    if example is None:
        return None, None, None
    args = getattr(example, "args", None)
    if args is not None:
        first = args[0] if args else None
    elif isinstance(example, torch.Tensor):
        first = example
    elif isinstance(example, (tuple, list)) and example:
        first = example[0]
    shape = getattr(first, "shape", None)
    if shape is None:
        return None, None, first
    shape = tuple(shape)
    hw = (int(shape[-2]), int(shape[-1])) if len(shape) == 4 and shape[1] in (1, 3) else None
    return len(shape) - 1, hw, first


# ------------------------------------------------------------------ batches


def _segments(positions: list[int], batch_size: int) -> list[tuple[list[int], bool]]:
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
class _Ready:
    x: torch.Tensor | None
    ids: list[str]
    errors: list[tuple[str, str]]
    last_of_segment: bool
    event: Any = None


def _assemble(batch: dict[str, Any], items: list[InputItem], prep: Preprocess, device: str,
              last: bool, gpu: GpuImages | None = None) -> _Ready:
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
        return _Ready(whole, [items[i].id for i in index], errors, last)
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
        return _Ready(None, [], errors, last)
    shapes = {tuple(t.shape) for _, t in entries}
    if len(shapes) > 1:
        raise InspectError(f"inputs of one batch have different shapes ({', '.join(str(list(s)) for s in sorted(shapes))})",
                           hint="images are batched after preprocessing: pass --resize/--crop "
                           "(or use the default preprocessing), and tensors of one shape")
    x = torch.stack([t.float() for _, t in entries])
    return _Ready(x, [rid for rid, _ in entries], errors, last)


class _Prefetch:
    """Prepares batches in a thread on a side CUDA stream, so decoding the next batch
    overlaps the forward of this one. The thread (and with it the DataLoader workers)
    starts at once: the caller can warm the model up meanwhile. ``close()`` stops it."""

    _END = object()

    def __init__(self, source: Iterator[_Ready], device: str, depth: int = 4) -> None:
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

    def __iter__(self) -> Iterator[_Ready]:
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


def _warm_up(cap: LayerCapture, shapes: list[tuple[int, ...]], dev: str, autocast: Any,
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


def _postprocess(outs: dict[str, Any], pool: str | None, save: torch.dtype,
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


# ------------------------------------------------------------------ main entry


def _dtype(text: str, option: str) -> torch.dtype:
    key = str(text).lower()
    if key not in DTYPES:
        raise InspectError(f"{option} {text!r}: unknown dtype", hint="use fp32, fp16 or bf16")
    return DTYPES[key]


def default_workers(device: str, local_world: int = 1) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_rank = max(1, cpus // max(1, local_world))
    if device.startswith("cuda"):
        return min(8, max(1, per_rank - 1))
    return max(1, min(8, per_rank - 1))


def extract_features(
    model: Any,
    inputs: Sequence[str] = (),
    *,
    layers: Sequence[str],
    output: str | os.PathLike[str],
    options: Any = None,
    example: Any = None,
    device: str = "cpu",
    batch_size: int = 64,
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
    force: bool = False,
    gpu_decode: bool = True,
    progress: Callable[[Progress], None] | None = None,
) -> FeatureResult:
    """Save the outputs of ``layers`` for every input into the folder ``output``.

    ``model``: a MODEL text (``resnet18``, ``zoo:NAME``, ``file.py:Name``), a ModelCase or
    an ``nn.Module``. ``inputs``: image files, folders, ``.pt``/``.npy``/``.safetensors``
    files; none: one random batch from the model's example (or ``example``). Rerunning
    with the same ``output`` skips inputs already there (``force=True`` starts over).
    Raises KeyboardInterrupt after flushing what was done when interrupted.
    """
    t0 = time.perf_counter()
    dev = devices.parse_device(device)
    if not devices.is_real(dev):
        dev = "cpu"
    if batch_size <= 0:
        raise InspectError(f"--batch-size {batch_size} must be positive", hint="e.g. --batch-size 64")
    if pool not in (None, "none", "gap"):
        raise InspectError(f"--pool {pool!r}: unknown pooling", hint="use gap (global average pool) or none")
    pool = None if pool == "none" else pool
    if file_format not in ("safetensors", "npy", "pt"):
        raise InspectError(f"--format {file_format!r}: unknown file format", hint="use safetensors, npy or pt")
    compute = _dtype(dtype, "--dtype")
    save = _dtype(save_dtype, "--save-dtype") if save_dtype else compute
    if file_format == "npy" and save == torch.bfloat16:
        raise InspectError("--format npy cannot hold bfloat16", hint="use --format safetensors or pt, or --save-dtype fp32")
    shard_bytes = parse_size(shard_size)
    # one text is one input / a comma-separated list of layers, as on the command line
    inputs = [os.fspath(i) for i in as_list(inputs)]
    layers = [n.strip() for spec in as_list(layers) for n in str(spec).split(",") if n.strip()]
    if not layers:
        raise InspectError("no layers given", hint="pass --layers NAME[,NAME...]; --list shows them")
    out_dir = Path(output)
    if out_dir.exists() and not out_dir.is_dir():
        raise InspectError(f"-o {out_dir}: exists and is not a folder", hint="features are written to a folder")
    devices.check_available(dev)

    dist = _init_dist(dev)
    dev = dist.device
    try:
        net, name, case_example, notes, owned = _resolve_model(model, dev, options)
        if dist.world > 1 and not isinstance(model, torch.nn.Module):
            _broadcast_weights(net)  # a random init differs per process: use rank 0's
        if example is not None:  # "3,224,224", shapes, tensors: as every other API takes them
            from torchinspect.sources.case import resolve_inputs

            example = resolve_inputs(example, None)
        else:
            example = case_example
        check_layer_names(net, layers)
        sample_rank, hw, first = _example_info(example)
        prep = make_preprocess(name if isinstance(model, str) else None, hw, mode=preprocess,
                               resize=resize, crop=crop,
                               mean=tuple(mean) if mean else None, std=tuple(std) if std else None)
        if inputs:
            items, ignored = collect_inputs(list(inputs), sample_rank=sample_rank, exclude=out_dir)
            if not items:
                out_real = os.path.realpath(out_dir)
                inside = [str(i) for i in inputs
                          if os.path.realpath(i) == out_real
                          or os.path.realpath(i).startswith(out_real + os.sep)]
                raise InspectError(
                    f"no images or tensor files found in {', '.join(map(str, inputs))}"
                    + (f" ({', '.join(inside)}: inside the output folder {out_dir}, which is "
                       "never read as input)" if inside else ""),
                    hint="put the inputs outside the output folder" if inside else
                    "folders are searched recursively for .jpg/.png/... and .pt/.npy/.safetensors")
        else:
            items, ignored = _random_items(example, first), 0
        # tensor files are fed as they are: the image preprocessing is recorded only when
        # some input is an image
        images = any(it.kind == "image" for it in items)
        settings = {"model": name, "layers": layers, "pool": pool,
                    "save_dtype": DTYPE_NAMES[save], "file_format": file_format,
                    "preprocess": prep.to_dict() if images else
                    {"mode": "tensors"} if inputs else {"mode": "random"}}
        settings = json.loads(json.dumps(settings))  # as the manifest holds them (lists)
        if dist.rank == 0:
            manifest = store.recover(out_dir, settings, force=force, fmt=file_format,
                                     shard_bytes=shard_bytes)
        dist.barrier()
        if dist.rank != 0:
            manifest = store.read_json(out_dir / store.MANIFEST) or {}
        run = store.next_run(manifest)
        done = store.done_ids(manifest)
        order = {it.id: pos for pos, it in enumerate(items)}
        pending = [(pos, it) for pos, it in enumerate(items) if it.id not in done]
        lo, hi = dist.rank * len(pending) // dist.world, (dist.rank + 1) * len(pending) // dist.world
        mine = pending[lo:hi]
        writer = store.RankWriter(out_dir, run=run, rank=dist.rank, fmt=file_format,
                                  shard_bytes=shard_bytes, metadata={"model": name})
        counters: dict[str, Any] = {"rows": 0, "failed": 0, "forward": 0.0, "first_batch": None,
                                    "loop_end": None}
        # NHWC convolutions (tensor cores without layout transposes) on a model built here;
        # a caller's module is never touched
        channels_last = (dev.startswith("cuda") and owned and bool(inputs)
                         and sample_rank == 3 and prep.mode == "image")
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
        # zeros of the image batch shapes through a model of ours while the first batches
        # are decoded (a caller's module only ever sees real inputs)
        warm_up = (dev.startswith("cuda") and owned and prep.mode == "image"
                   and bool(mine) and all(it.kind == "image" for _, it in mine))
        tensors_meta: dict[str, dict[str, Any]] = dict(manifest.get("tensors") or {})
        interrupted = False
        from torchinspect.trace.engine import model_kept

        # a caller's module: what its forward assigns (attributes, buffers) is put back
        kept = model_kept(net) if net is _callers(model) else contextlib.nullcontext()
        with kept, LayerCapture(net, layers) as cap:
            method = cap.method
            try:
                _run(cap, mine, items, prep, dev, batch_size, workers, compute, pool, save,
                     gpu_decode, writer, counters, tensors_meta, progress, first, t0,
                     dist.world, channels_last, warm_up)
            except KeyboardInterrupt:
                interrupted = True
            finally:
                writer.flush()
        if interrupted:
            if dist.world == 1:
                store.finish(out_dir, order, _run_info(dist, dev, counters, t0, method, compute,
                                                       tensors_meta), complete=False, extra=_versions())
            raise KeyboardInterrupt
        timing = _timing(dist, counters, t0)
        dist.barrier()
        if dist.rank == 0:
            info = {**_run_info(dist, dev, counters, t0, method, compute, tensors_meta), **timing}
            manifest = store.finish(out_dir, order, info, complete=True, extra=_versions())
        dist.barrier()
        manifest = store.read_json(out_dir / store.MANIFEST) or {}
        skipped = len(done & set(order))
        new_failed = counters["failed"]
        return FeatureResult(
            output=str(out_dir), manifest=str(out_dir / store.MANIFEST), model=name,
            layers=manifest.get("tensors") or tensors_meta, method=method, device=dev,
            world_size=dist.world, rows=int(manifest.get("rows", 0)),
            new_rows=_sum_rows(manifest),
            skipped=skipped, failed=list(manifest.get("failed", [])), new_failed=new_failed,
            shards=sorted({f for s in manifest.get("shards", []) for f in s["files"].values()}),
            bytes=sum(int(s.get("bytes", 0)) for s in manifest.get("shards", [])),
            seconds=time.perf_counter() - t0,
            forward_seconds=counters["forward"] if dev == "cpu" else None,
            preprocess=settings["preprocess"], file_format=file_format,
            save_dtype=DTYPE_NAMES[save], ignored_files=ignored, notes=notes,
            startup_seconds=timing["startup_seconds"], loop_seconds=timing["loop_seconds"],
            warmup_seconds=timing["warmup_seconds"])
    finally:
        dist.close()


def _broadcast_weights(net: torch.nn.Module) -> None:
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*net.parameters(), *net.buffers()]:
            dist.broadcast(t.data, src=0)


def _timing(dist: _Dist, counters: dict[str, Any], t0: float) -> dict[str, float | None]:
    """Start-up, warm-up (part of the start-up) and loop seconds of this run (the slowest
    rank's when there are several)."""
    first, end = counters.get("first_batch"), counters.get("loop_end")
    mine = (None if first is None else first - t0, None if first is None or end is None else end - first,
            counters.get("warmup"))
    every = [mine]
    if dist.world > 1:
        import torch.distributed as tdist

        every = [mine] * dist.world
        tdist.all_gather_object(every, mine)

    def slowest(k: int) -> float | None:
        vals = [v[k] for v in every if v[k] is not None]
        return round(max(vals), 4) if vals else None
    return {"startup_seconds": slowest(0), "loop_seconds": slowest(1), "warmup_seconds": slowest(2)}


def _sum_rows(manifest: dict[str, Any]) -> int:
    runs = manifest.get("runs", [])
    return int(runs[-1].get("rows", 0)) if runs else 0


def _versions() -> dict[str, Any]:
    import torchvision

    from torchinspect import __version__

    return {"versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                         "torchinspect": __version__}}


def _run_info(dist: _Dist, dev: str, counters: dict[str, Any], t0: float, method: str,
              compute: torch.dtype, tensors_meta: dict[str, Any]) -> dict[str, Any]:
    return {"world_size": dist.world, "device": dev.split(":")[0], "method": method,
            "dtype": DTYPE_NAMES[compute], "seconds": round(time.perf_counter() - t0, 3)}


def _random_items(example: Any, first: Any) -> list[InputItem]:
    if first is None:
        raise InspectError("no INPUTS and no example input to draw random rows from",
                           hint="pass images/tensor files, or --input 3,224,224 for a random batch")
    n = int(first.shape[0]) if len(tuple(first.shape)) > 0 else 1
    return [InputItem(f"random#{i}", None, "random", None, i) for i in range(n)]


def _run(cap: LayerCapture, mine: list[tuple[int, InputItem]], items: list[InputItem],
         prep: Preprocess, dev: str, batch_size: int, workers: int | None, compute: torch.dtype,
         pool: str | None, save: torch.dtype, gpu_decode: bool, sink: store.RankWriter,
         counters: dict[str, Any], tensors_meta: dict[str, Any],
         progress: Callable[[Progress], None] | None, first: Any, t0: float, world: int,
         channels_last: bool = False, warm_up: bool = False) -> None:
    cuda = dev.startswith("cuda")
    autocast = (torch.autocast(device_type="cuda" if cuda else "cpu", dtype=compute)
                if compute != torch.float32 else contextlib.nullcontext())
    total = len(mine)
    source: Iterator[_Ready]
    if mine and mine[0][1].kind == "random":
        x = _random_batch(first, dev)
        idx = [it.index or 0 for _, it in mine]
        source = iter([_Ready(x[idx], [it.id for _, it in mine], [], True)])
    else:
        sub = [it for _, it in mine]
        batches = _segments([pos for pos, _ in mine], batch_size)
        lasts = [last for _, last in batches]
        n_workers = default_workers(dev, world) if workers is None else workers
        raw_jpeg = cuda and gpu_decode
        loader = torch.utils.data.DataLoader(
            RowDataset(sub, prep, raw_jpeg=raw_jpeg),
            batch_sampler=[b for b, _ in batches], num_workers=n_workers,
            collate_fn=collate_rows, pin_memory=cuda and not raw_jpeg,
            prefetch_factor=4 if n_workers > 0 else None,
            persistent_workers=False)
        gpu = GpuImages(prep, dev) if raw_jpeg else None

        def prepared() -> Iterator[_Ready]:
            for k, batch in enumerate(loader):
                yield _assemble(batch, sub, prep, dev, lasts[k], gpu)

        if cuda:
            prefetch = _Prefetch(prepared(), dev)
            source = iter(prefetch)
            if warm_up and prep.crop is not None:  # image batches of a known (cropped) shape
                w0 = time.perf_counter()
                sizes = list(dict.fromkeys(len(b) for b, _ in batches))[:3]
                try:
                    _warm_up(cap, [(n, 3, *prep.crop) for n in sizes], dev, autocast, channels_last)
                except BaseException:
                    prefetch.close()
                    raise
                counters["warmup"] = time.perf_counter() - w0
        else:
            source = prepared()
    # on CUDA the D2H copy wait and the writing run on a thread: the next forward is
    # launched while this batch's features travel and are saved
    writer: Any = BackgroundWriter(sink, dev) if cuda else sink
    try:
        with torch.inference_mode(), autocast:
            for ready in source:
                if counters["first_batch"] is None:
                    counters["first_batch"] = time.perf_counter()
                for rid, err in ready.errors:
                    writer.fail(rid, err)
                    counters["failed"] += 1
                if ready.x is not None:
                    x = ready.x
                    if channels_last and x.ndim == 4:
                        x = x.contiguous(memory_format=torch.channels_last)
                    f0 = time.perf_counter()
                    try:
                        outs = cap(x)
                    except InspectError:
                        raise
                    except Exception as exc:
                        raise InspectError(f"the model's forward failed on a batch of shape "
                                           f"{list(ready.x.shape)}: {first_line(exc, typed=True)}",
                                           hint="check the preprocessing (--resize/--crop, --preprocess) "
                                           "against the input the model expects") from None
                    if not cuda:
                        counters["forward"] += time.perf_counter() - f0
                    feats = _postprocess(outs, pool, save, to_cpu=not cuda)
                    if not tensors_meta:
                        tensors_meta.update({k: {"shape": list(t.shape[1:]),
                                                 "dtype": str(t.dtype).removeprefix("torch.")}
                                             for k, t in feats.items()})
                    writer.add(ready.ids, feats)
                    counters["rows"] += len(ready.ids)
                if ready.last_of_segment:
                    writer.flush()
                if progress is not None:
                    progress(Progress(counters["rows"] + counters["failed"], total,
                                      counters["failed"], time.perf_counter() - t0))
    finally:
        if writer is not sink:
            writer.close()  # drains what was queued (also on Ctrl-C), then raises its error
        counters["loop_end"] = time.perf_counter()


def _random_batch(first: Any, dev: str) -> torch.Tensor:
    if isinstance(first, torch.Tensor):
        return first.to(dev)
    gen = torch.Generator().manual_seed(0)
    return first.make(dev, gen)
