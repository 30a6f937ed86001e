"""Measure what the latency prediction is calibrated and validated on, on one GPU.

Phases (each appends JSON lines to its file as it goes, so a cut-off run keeps its data;
every line of the phases marked * carries the run header of benchmarks/machine.py, and a
rerun into the same folder skips what that folder holds already):

* ``probes``  the per-kernel time of tiny kernels under CUDA-graph replay and eager, and
  this host's dispatch cost (torchinspect.latency.host.probe_host);
* ``tables``  every op of benchmarks/latency_ops.py in bf16/fp16/fp32, timed as CUDA-graph
  replays of ``reps`` back-to-back calls (CUDA events; per-call time = replay / reps); with
  ``--sweep N`` only that sweep's ops, each also profiled for the kernels one call launches
  (from sweep 3 on: every kernel's duration, launch shape and occupancy and the gaps between
  kernels in graph replay, benchmarks/latency_kernels.py; dtype-major order, fp16 last)*;
* ``floors``  sweep 4 of latency_ops.py (small-kernel floors: per op kind, sizes from one
  thread block to a few waves), profiled the same way (``floors.jsonl``)*;
* ``kernels`` the kernels one call of each sweep-1 op at batch 1 launches (torch.profiler);
* ``models``  the chosen sets (``--sets``) through torchinspect's own bench (``run_bench``,
  eager and ``cuda_graphs=True``, batch 1 and each model's large batch, ``--dtypes``
  (default bf16), PyTorch's default TF32 settings, cuDNN autotuning on), plus one profiled
  eager forward per model and batch (kernels launched, their summed GPU time)*;
* ``replays`` (issue 40 follow-up) one forward of each ``REPLAY_MODELS`` entry captured in a
  CUDA graph and profiled kernel by kernel (``latency_kernels.measure_op``: every kernel's
  duration and launch shape, the gaps between kernels) beside the eager forward's kernels
  (``replays.jsonl``)*: where a Hugging Face encoder's graph replay spends the time its eager
  kernels do not account for (development models only);
* ``train``   one training step per model and batch (``train.jsonl``)*: fp32 weights, AdamW
  (PyTorch's default implementation for CUDA tensors: foreach), forward and loss under
  autocast bf16, ``cudnn.benchmark`` on, the loss the sum of the first floating output;
  warm-up steps, then up to ``TRAIN_STEPS`` steps: CUDA events around the forward (+loss),
  the backward and the optimizer step (and ``zero_grad(set_to_none=True)`` before the
  forward), median of the steps for each phase and for the whole step, and the host wall
  time per step over the timed steps (synchronized at both ends).

Sets (``--sets``): ``dev`` (DEVELOPMENT, the models of earlier sessions), ``dev-new``
(DEVELOPMENT_NEW) and ``val`` (VALIDATION, never tuned on).

Usage on a GPU host: ``python benchmarks/latency_measure.py OUTDIR [--budget S] [--phases
probes,tables,floors,kernels,models,train] [--sweep N] [--sets val,dev-new,dev]
[--models A,B]``; ``--dry-run`` runs a few items of each phase on the CPU (no timing worth
keeping).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency_kernels  # noqa: E402
import latency_ops  # noqa: E402
from machine import run_header  # noqa: E402

ZOO = "benchmarks/latency_zoo.py"  # relative: the run starts in the checkout root

# (set, spec, --input or None, --arg list, large batch). The validation set is never used for
# fitting. Issue 40 (session 9): every model of the earlier development and validation sets
# is development now (their inference was measured in benchmarks/results/latency/models.jsonl,
# bf16 and fp32 at batch 1 and 32); new development models of the kinds sweep 3 adds; and a
# new validation set of 22 models no earlier set used, chosen and committed before any of it
# was measured (benchmarks/results/latency-h100-v2/ holds its data).
DEVELOPMENT: list[tuple[str, str, str | None, list[str], int]] = [
    ("dev", "resnet50", None, [], 32),
    ("dev", "resnet18", None, [], 32),
    ("dev", "vit_b_16", None, [], 32),
    ("dev", "efficientnet_b0", None, [], 32),
    ("dev", "swin_t", None, [], 32),
    ("dev", "convnext_tiny", None, [], 32),
    ("dev", "mobilenet_v2", None, [], 32),
    ("dev", "hf:gpt2", None, [], 32),
    ("dev", "hf:bert", None, [], 32),
    ("dev", "r3d_18", "3,16,112,112", [], 32),
    ("dev", f"{ZOO}:GRUNet", None, [], 32),
    ("dev", "vit_b_32", None, [], 32),
    ("dev", "regnet_y_1_6gf", None, [], 32),
    ("dev", "mobilenet_v3_large", None, [], 32),
    ("dev", "zoo:gpt-tiny", None, [], 32),
    ("dev", "zoo:lstm-classifier", None, [], 32),
    ("dev", f"{ZOO}:TextEncoder", None, [], 32),
    ("dev", "hf:llama", None, ["num_hidden_layers=4"], 32),
    ("dev", "wide_resnet50_2", None, [], 32),
    ("dev", "shufflenet_v2_x1_0", None, [], 32),
    ("dev", "googlenet", None, [], 32),
    ("dev", "vgg16", None, [], 32),
    ("dev", "maxvit_t", None, [], 32),
    ("dev", "hf:distilbert", None, [], 32),
    ("dev", "densenet121", None, [], 32),
    ("dev", "mnasnet1_0", None, [], 32),
    ("dev", "resnext50_32x4d", None, [], 32),
    ("dev", "squeezenet1_1", None, [], 32),
    ("dev", "r2plus1d_18", "3,16,112,112", [], 32),
    ("dev", f"{ZOO}:FastEncoder", None, [], 32),
    ("dev", "mc3_18", "3,16,112,112", [], 32),
]
#: development models added with sweep 3 (issue 40): the new kinds, and a small CNN
DEVELOPMENT_NEW: list[tuple[str, str, str | None, list[str], int]] = [
    ("dev", f"{ZOO}:UNetTransposed", None, [], 16),
    ("dev", f"{ZOO}:TCNSmall", None, [], 32),
    ("dev", f"{ZOO}:Seq2SeqTransformer", None, [], 32),
    ("dev", f"{ZOO}:BiLSTMProj", None, [], 32),
    ("dev", f"{ZOO}:SmallConvNet", None, [], 256),
    ("dev", "regnet_y_400mf", None, [], 32),
    ("dev", "hf:bart", None, [], 16),
]
#: the validation set of issue 40: never measured before this list was committed, never tuned on
VALIDATION: list[tuple[str, str, str | None, list[str], int]] = [
    ("val", f"{ZOO}:DCGANGenerator", None, [], 64),
    ("val", f"{ZOO}:Vocoder1d", None, [], 16),
    ("val", f"{ZOO}:DilatedConv1dStack", None, [], 8),
    ("val", f"{ZOO}:SeparableConv1dNet", None, [], 16),
    ("val", f"{ZOO}:GroupedConvNet", None, [], 24),
    ("val", f"{ZOO}:CausalDecoder", None, [], 32),
    ("val", f"{ZOO}:ProjLSTM", None, [], 32),
    ("val", f"{ZOO}:CifarResNet20", None, [], 128),
    ("val", "mobilenet_v3_small", None, [], 32),
    ("val", "shufflenet_v2_x0_5", None, [], 64),
    ("val", "squeezenet1_0", None, [], 32),
    ("val", "resnet34", None, [], 32),
    ("val", "regnet_x_800mf", None, [], 24),
    ("val", "efficientnet_v2_s", None, [], 16),
    ("val", "inception_v3", None, [], 32),
    ("val", "alexnet", None, [], 64),
    ("val", "timm:deit_tiny_patch16_224", None, [], 64),
    ("val", "timm:convnextv2_atto", None, [], 32),
    ("val", "timm:mobilevit_xxs", None, [], 32),
    ("val", "hf:roberta", None, [], 32),
    ("val", "hf:t5", None, [], 16),
    ("val", "hf:whisper", None, [], 8),
    ("val", "hf:mistral", None, ["num_hidden_layers=4"], 16),
]
MODELS = DEVELOPMENT + DEVELOPMENT_NEW + VALIDATION
#: the ``replays`` phase: development models whose graph replay is far above their eager
#: kernels' sum (Hugging Face encoders), and a CNN for comparison
REPLAY_MODELS = [("hf:bert", None, [], 1), ("hf:distilbert", None, [], 1),
                 ("hf:gpt2", None, [], 1), ("resnet50", None, [], 1)]
SETS = {"dev": DEVELOPMENT, "dev-new": DEVELOPMENT_NEW, "val": VALIDATION}
BATCHES = (1, 32)
MODEL_DTYPES = ("bf16",)
TRAIN_WARMUP = 3
TRAIN_STEPS = 12
TRAIN_MAX_S = 1.0  # timed steps stop after this many seconds (at least 5 steps)
HEADER: dict[str, Any] = {}  # the run header, set once in main()


def _write(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_replay(fn: Any, device: str, target_s: float = 2e-4) -> dict[str, float]:
    """Per-call microseconds of ``fn`` as CUDA-graph replays of ``reps`` calls (CPU: wall)."""
    for _ in range(3):  # warm-up; cuDNN autotuning happens here
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    _sync(device)
    est = max((time.perf_counter() - t0) / 3, 1e-6)
    reps = int(min(max(target_s / est, 1), 50))
    if not device.startswith("cuda"):
        return {"us": est * 1e6, "reps": 1, "replays": 3}
    graph = latency_kernels.capture(fn, reps)  # the one capture and replay timing of the campaign
    try:
        return latency_kernels.replay_us(graph, reps)
    finally:
        del graph


def probes(device: str, out: Path) -> None:
    from torchinspect.latency.host import probe_host

    x = torch.zeros(1, device=device)
    row: dict[str, Any] = {"run": HEADER, "host": probe_host().to_dict()}
    if device.startswith("cuda"):
        with torch.inference_mode():
            for n in (1, 200):
                def tiny(n: int = n) -> None:
                    for _ in range(n):
                        x.add_(1)
                r = time_replay(tiny, device, target_s=1e-3)
                row[f"graph_tiny_kernel_us_x{n}"] = r["us"] / n
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                x.add_(1)
            enq = time.perf_counter() - t0
            torch.cuda.synchronize()
            row["eager_enqueue_us"] = enq / 2000 * 1e6
            row["eager_tiny_kernel_us"] = (time.perf_counter() - t0) / 2000 * 1e6
    _write(out, row)


def kernels_of(fn: Any, device: str) -> dict[str, Any]:
    """Kernels one call launches (torch.profiler): count, and the names of the first few."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(device)
    names = [e.name for e in prof.events() if getattr(e, "device_type", None) is not None
             and str(e.device_type).endswith("CUDA")]
    return {"kernels": len(names), "kernel_names": [n[:80] for n in names[:8]]}


def _small(spec: dict[str, Any]) -> bool:
    """Sweep-1 specs at batch 1 (or 1-8 rows): whose kernel counts set the batch-1 floors."""
    return spec.get("n") == 1 or spec.get("m") in (1, 8) or spec.get("b") == 1 \
        or spec.get("rows") in (1, 32, 197) or spec.get("numel") == 1 << 10


def _spec_key(spec: dict[str, Any], dtype: str) -> str:
    return json.dumps([spec, dtype], sort_keys=True)


def _done_specs(out: Path) -> set[str]:
    """Specs (with dtype) a file holds a measurement of (resume: skip them)."""
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {_spec_key(r["spec"], r["dtype"]) for r in rows if "spec" in r and "error" not in r}


def tables(device: str, out: Path, deadline: float, limit: int | None,
           sweep: int | None = None) -> None:
    specs = latency_ops.SPECS if limit is None else latency_ops.SPECS[::max(len(latency_ops.SPECS) // limit, 1)]
    if sweep is not None:
        specs = [s for s in specs if s.get("sweep", 1) == sweep]
    if sweep is not None and sweep >= 3:
        return profiled(device, out, deadline, specs)
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for spec in specs:
            for dtype in latency_ops.dtypes_for(spec):
                if time.monotonic() > deadline:
                    _write(out, {"stopped": "deadline"})
                    return
                try:
                    fn = latency_ops.build(spec, device, dtype)
                    r = time_replay(fn, device)
                    if sweep is not None:
                        r.update(kernels_of(fn, device))
                    _write(out, {"spec": spec, "dtype": dtype, **r})
                except Exception as exc:  # noqa: BLE001 - one op must not end the sweep
                    _write(out, {"spec": spec, "dtype": dtype, "error": repr(exc)[:300]})
                    if device.startswith("cuda"):
                        torch.cuda.empty_cache()


def profiled(device: str, out: Path, deadline: float, specs: list[dict[str, Any]]) -> None:
    """Sweeps 3 and 4: each op timed in graph replay and profiled kernel by kernel
    (latency_kernels.measure_op), dtype by dtype (bf16 first, fp16 last: a deadline cuts
    the dtype that matters least), skipping what ``out`` holds."""
    done = _done_specs(out)
    order = ("bf16", "fp32", "fp16")
    todo = [(spec, dtype) for dtype in order for spec in specs
            if dtype in latency_ops.dtypes_for(spec) and _spec_key(spec, dtype) not in done]
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for spec, dtype in todo:
            if time.monotonic() > deadline:
                _write(out, {"run": HEADER, "stopped": "deadline"})
                return
            row: dict[str, Any] = {"run": HEADER, "spec": spec, "dtype": dtype}
            try:
                fn = latency_ops.build(spec, device, dtype)
                row.update(latency_kernels.measure_op(fn, device))
            except Exception as exc:  # noqa: BLE001 - one op must not end the sweep
                row["error"] = repr(exc)[:300]
            _write(out, row)
            del row
            if device.startswith("cuda"):
                torch.cuda.empty_cache()


def kernel_counts(device: str, out: Path, deadline: float) -> None:
    """Kernels per call of the sweep-1 ops at batch 1 (their times are in tables.jsonl)."""
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        for spec in latency_ops.SPECS:
            if spec.get("sweep", 1) != 1 or not _small(spec):
                continue
            for dtype in ("bf16", "fp32"):
                if time.monotonic() > deadline:
                    _write(out, {"stopped": "deadline"})
                    return
                try:
                    fn = latency_ops.build(spec, device, dtype)
                    _write(out, {"spec": spec, "dtype": dtype, **kernels_of(fn, device)})
                except Exception as exc:  # noqa: BLE001 - one op must not end the sweep
                    _write(out, {"spec": spec, "dtype": dtype, "error": repr(exc)[:300]})


def _profile(case: Any, device: str, dtype: str, batch: int) -> dict[str, Any]:
    """Kernels one eager forward launches and their summed GPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    from torchinspect.inputs import rebatch
    from torchinspect.sources.case import materialize

    dt = latency_ops.DTYPES[dtype]
    model = case.real_model(device).to(dt).eval()
    args, kwargs = materialize(rebatch(case.example, batch), device)
    def cast(t: Any) -> Any:
        return t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    args = tuple(cast(a) for a in args)
    kwargs = {k: cast(v) for k, v in kwargs.items()}
    with torch.inference_mode():
        for _ in range(3):
            model(*args, **kwargs)
        _sync(device)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            model(*args, **kwargs)
            _sync(device)
    kernels = [e for e in prof.events() if getattr(e, "device_type", None) is not None
               and str(e.device_type).endswith("CUDA")]
    names: dict[str, int] = {}
    for e in kernels:
        names[e.name[:60]] = names.get(e.name[:60], 0) + 1
    by_op: dict[str, int] = {}
    for e in prof.key_averages():
        if e.key.startswith("aten::"):
            by_op[e.key] = int(e.count)
    del model
    return {"kernels": len(kernels),
            "kernel_us": sum(float(getattr(e, "device_time", 0.0) or 0.0) for e in kernels),
            "aten_calls": by_op,
            "kernel_names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:25])}


def _done_models(out: Path) -> set[str]:
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {r["model"] for r in rows if "model" in r and "error" not in r}


def _chosen(sets: list[str], only: list[str] | None, limit: int | None) -> list[Any]:
    chosen = [m for name in sets for m in SETS[name]]
    if only:
        chosen = [m for m in chosen if m[1] in only]
    return chosen if limit is None else chosen[:limit]


def _case(spec: str, inputs: str | None, args: list[str]) -> Any:
    from torchinspect.sources.case import ModelOptions, make_case

    opts = ModelOptions(inputs=[inputs] if inputs else None, args=args or None, device="meta")
    return make_case(spec, options=opts, device="meta")


def models(device: str, out: Path, deadline: float, chosen: list[Any],
           dtypes: tuple[str, ...]) -> None:
    from torchinspect.bench.run import BenchOptions, run_bench
    from torchinspect.bench.timing import TimingConfig

    cuda = device.startswith("cuda")
    timing = TimingConfig(warmup_s=0.15, warmup_iters=5, min_time=0.2, max_time=0.5,
                          min_iters=10, target_cov=0.01)
    done = _done_models(out)
    for set_name, spec, inputs, args, large in chosen:
        if spec in done:
            continue
        if time.monotonic() > deadline:
            _write(out, {"run": HEADER, "stopped": "deadline"})
            return
        batches = (1, large) if cuda else (1, 2)
        row: dict[str, Any] = {"run": HEADER, "set": set_name, "model": spec, "input": inputs,
                               "args": args, "batches": list(batches)}
        t0 = time.monotonic()
        try:
            case = _case(spec, inputs, args)
            for graphs in ((False, True) if cuda else (False,)):
                res = run_bench(case, BenchOptions(
                    device=device, batches=batches, dtypes=dtypes, cuda_graphs=graphs,
                    timing=timing))
                row["graphs" if graphs else "eager"] = [
                    {"dtype": c.dtype, "batch": c.batch, "status": c.status, "error": c.error,
                     "median_ms": c.timing.stats.median * 1e3 if c.timing else None,
                     "host_enqueue_ms": (c.timing.host_stats.median * 1e3
                                         if c.timing and c.timing.host_stats else None)}
                    for c in res.configs]
                row.setdefault("environment", {k: res.environment.get(k) for k in
                                               ("gpu", "torch", "cuda", "cudnn", "cpu")})
            row["profile"] = {}
            for batch in batches:  # kernels launched can differ at the large batch
                if time.monotonic() < deadline:
                    row["profile"][f"bf16/{batch}"] = _profile(case, device, "bf16", batch)
        except Exception as exc:  # noqa: BLE001 - one model must not end the sweep
            row["error"] = repr(exc)[:400]
            row["traceback"] = traceback.format_exc()[-1500:]
        row["seconds"] = round(time.monotonic() - t0, 2)
        _write(out, row)
        print(f"models: {spec} {row['seconds']} s {row.get('error', '')[:80]}", flush=True)
        if cuda:
            torch.cuda.empty_cache()


def replays(device: str, out: Path, deadline: float, limit: int | None) -> None:
    """The ``replays`` phase (see the module docstring), bf16, resumable."""
    from torchinspect.inputs import rebatch
    from torchinspect.sources.case import materialize

    done = _done_models(out)
    chosen = REPLAY_MODELS if limit is None else REPLAY_MODELS[:limit]
    torch.backends.cudnn.benchmark = True
    for spec, inputs, args, batch in chosen:
        if spec in done:
            continue
        if time.monotonic() > deadline:
            _write(out, {"run": HEADER, "stopped": "deadline"})
            return
        row: dict[str, Any] = {"run": HEADER, "model": spec, "batch": batch, "dtype": "bf16"}
        try:
            case = _case(spec, inputs, args)
            model = case.real_model(device).to(torch.bfloat16).eval()
            a, kw = materialize(rebatch(case.example, batch), device)
            a = tuple(t.to(torch.bfloat16) if isinstance(t, torch.Tensor)
                      and t.is_floating_point() else t for t in a)
            with torch.inference_mode():
                def forward(model: Any = model, a: Any = a, kw: Any = kw) -> Any:
                    return model(*a, **kw)

                row["graph"] = latency_kernels.measure_op(forward, device, max_reps=1,
                                                          profile_calls=2)
                row["eager"] = _profile(case, device, "bf16", batch)
        except Exception as exc:  # noqa: BLE001 - one model must not end the phase
            row["error"] = repr(exc)[:400]
        _write(out, row)
        print(f"replays: {spec} {row.get('error', '')[:80]}", flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def train_step_times(case: Any, device: str, batch: int) -> dict[str, Any]:
    """One training step's phases (see the module docstring), eager."""
    from torchinspect.inputs import rebatch
    from torchinspect.memory.step import first_floating
    from torchinspect.sources.case import materialize

    cuda = device.startswith("cuda")
    model = case.real_model(device).float().train()
    args, kwargs = materialize(rebatch(case.example, batch), device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    autocast = torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16)

    def event() -> Any:
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(a: Any, b: Any) -> float:
        return a.elapsed_time(b) if cuda else (b - a) * 1e3

    def step() -> tuple[Any, ...]:
        opt.zero_grad(set_to_none=True)
        e0 = event()
        with autocast:
            loss = first_floating(model(*args, **kwargs), case.name).float().sum()
        e1 = event()
        loss.backward()
        e2 = event()
        opt.step()
        e3 = event()
        return e0, e1, e2, e3

    for _ in range(TRAIN_WARMUP):  # cuDNN autotuning, optimizer state, allocator
        step()
    _sync(device)
    marks = []
    t0 = time.perf_counter()
    while len(marks) < TRAIN_STEPS and (len(marks) < 5 or time.perf_counter() - t0 < TRAIN_MAX_S):
        marks.append(step())
    _sync(device)
    wall = (time.perf_counter() - t0) / len(marks) * 1e3
    phases = {"forward_ms": [ms(m[0], m[1]) for m in marks],
              "backward_ms": [ms(m[1], m[2]) for m in marks],
              "optimizer_ms": [ms(m[2], m[3]) for m in marks],
              "step_ms": [ms(m[0], m[3]) for m in marks]}
    row: dict[str, Any] = {k: statistics.median(v) for k, v in phases.items()}
    row.update({"runs": {k: [round(x, 4) for x in v] for k, v in phases.items()},
                "steps": len(marks), "wall_ms_per_step": wall,
                "params": sum(p.numel() for p in params), "param_tensors": len(params),
                "optimizer": "AdamW (default: foreach)"})
    if cuda:
        row["peak_allocated"] = torch.cuda.max_memory_allocated()
    return row


def train(device: str, out: Path, deadline: float, chosen: list[Any]) -> None:
    cuda = device.startswith("cuda")
    torch.backends.cudnn.benchmark = True
    done = _done_models(out)
    for set_name, spec, inputs, args, large in chosen:
        if spec in done:
            continue
        if time.monotonic() > deadline:
            _write(out, {"run": HEADER, "stopped": "deadline"})
            return
        row: dict[str, Any] = {"run": HEADER, "set": set_name, "model": spec, "input": inputs,
                               "args": args, "amp": "bf16", "weights": "fp32",
                               "cudnn_benchmark": True, "results": []}
        t0 = time.monotonic()
        try:
            case = _case(spec, inputs, args)
            for batch in ((1, large) if cuda else (1, 2)):
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                try:
                    row["results"].append({"batch": batch,
                                           **train_step_times(case, device, batch)})
                except Exception as exc:  # noqa: BLE001 - OOM, or the model refuses the batch
                    row["results"].append({"batch": batch,
                                           "error": f"{type(exc).__name__}: {exc}"[:300]})
                if cuda:
                    torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - one model must not end the sweep
            row["error"] = repr(exc)[:400]
            row["traceback"] = traceback.format_exc()[-1500:]
        row["seconds"] = round(time.monotonic() - t0, 2)
        _write(out, row)
        steps = ", ".join(f"b{r['batch']} {r.get('step_ms', float('nan')):.2f} ms"
                          for r in row["results"])
        print(f"train: {spec} {steps} ({row['seconds']} s) {row.get('error', '')[:80]}",
              flush=True)
        if cuda:
            torch.cuda.empty_cache()


def isolate(a: argparse.Namespace, end: float) -> None:
    """``--isolate``: this script again for each model and phase (models, train), one child
    each, in order, until ``end``; the children skip what the folder holds."""
    import subprocess

    sets = a.sets.split(",")
    chosen = _chosen(sets, [m for m in a.models.split(",") if m] or None,
                     3 if a.dry_run and not a.models else None)
    for ph in [ph for ph in a.phases.split(",") if ph in ("models", "train")]:
        for entry in chosen:
            left = end - time.monotonic()
            if left <= 0:
                return
            cmd = [sys.executable, __file__, a.out, "--phases", ph, "--sets", ",".join(sets),
                   "--models", entry[1], "--budget", str(round(left)), "--dtypes", a.dtypes]
            subprocess.run(cmd + ["--dry-run"] * a.dry_run, check=False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--budget", type=float, default=520.0, help="seconds for the whole run")
    p.add_argument("--tables-budget", type=float, default=150.0)
    p.add_argument("--floors-budget", type=float, default=60.0)
    p.add_argument("--models-budget", type=float, default=None,
                   help="seconds for the models phase (default: what the budget leaves)")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--phases", default="probes,tables,kernels,models")
    p.add_argument("--sweep", type=int, default=None, help="only the op specs of this sweep")
    p.add_argument("--sets", default="dev,dev-new,val", help="models and train: these sets")
    p.add_argument("--models", default="", help="comma-separated specs: only these models")
    p.add_argument("--dtypes", default=",".join(MODEL_DTYPES), help="models phase dtypes")
    p.add_argument("--kernels-budget", type=float, default=40.0)
    p.add_argument("--isolate", action="store_true",
                   help="models and train: each model in a child process of its own (a failed "
                   "CUDA-graph capture can leave the process's CUDA generator unusable)")
    a = p.parse_args()
    start = time.monotonic()
    end = start + a.budget
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if a.dry_run else "cuda"
    limit = 3 if a.dry_run and not a.models else None
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)"
    HEADER.update(run_header(), device=name, cudnn=torch.backends.cudnn.version())
    _write(out / "probes.jsonl", {"gpu": name, "torch": torch.__version__,
                                  "cudnn": torch.backends.cudnn.version(), "run": HEADER,
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    phases = a.phases.split(",")
    chosen = _chosen(a.sets.split(","), [m for m in a.models.split(",") if m] or None, limit)
    if "probes" in phases:
        probes(device, out / "probes.jsonl")
        print(f"probes done {time.monotonic() - start:.0f}s", flush=True)
    if "floors" in phases:
        specs = [s for s in latency_ops.SPECS if s.get("sweep") == 4]
        profiled(device, out / "floors.jsonl", min(time.monotonic() + a.floors_budget, end),
                 specs if limit is None else specs[::max(len(specs) // limit, 1)])
        print(f"floors done {time.monotonic() - start:.0f}s", flush=True)
    if "tables" in phases:
        name = f"tables-sweep{a.sweep}.jsonl" if a.sweep and a.sweep >= 3 else "tables.jsonl"
        tables(device, out / name, min(time.monotonic() + a.tables_budget, end), limit,
               a.sweep)
        print(f"tables done {time.monotonic() - start:.0f}s", flush=True)
    if "kernels" in phases:
        kernel_counts(device, out / "kernels.jsonl",
                      min(time.monotonic() + a.kernels_budget, end))
        print(f"kernels done {time.monotonic() - start:.0f}s", flush=True)
    if "replays" in phases:
        replays(device, out / "replays.jsonl", end, limit)
        print(f"replays done {time.monotonic() - start:.0f}s", flush=True)
    if a.isolate:
        isolate(a, end)
        return
    order = [ph for ph in phases if ph in ("models", "train")]
    for ph in order:
        if ph == "models":
            stop = end if a.models_budget is None else min(time.monotonic() + a.models_budget, end)
            models(device, out / "models.jsonl", stop, chosen, tuple(a.dtypes.split(",")))
        else:
            train(device, out / "train.jsonl", end, chosen)
        print(f"{ph} done {time.monotonic() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
