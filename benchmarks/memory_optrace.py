"""Op by op: what the CUDA caching allocator did against what the prediction replays.

For small synthetic models that exercise the paths where CUDA takes another kernel than the
CPU fake run (the TransformerEncoder and MultiheadAttention fast paths, bf16 autocast
backward, cuDNN RNNs with batch_first and dropout, transposed convolutions, BatchNorm,
interpolation, embedding_bag), record per aten op the allocated bytes before it, its peak
and what is allocated after it:

    # on the GPU: measured per op (a dispatch mode around verify.measure), the phase peaks
    # of a clean run, and the calibrated prediction of today's code
    PYTHONPATH=src python benchmarks/memory_optrace.py gpu --out DIR
    # anywhere: the prediction's per-op replay (the GPU's calibration cache for cuDNN) and
    # the first ops where the two differ
    PYTHONPATH=src python benchmarks/memory_optrace.py compare DIR [--case NAME]
    # the table (measured, calibrated error before and after); RESULTS-memory.md renders it
    # with benchmarks/pages_memory.py (make bench-report)
    PYTHONPATH=src python benchmarks/memory_optrace.py report \
        benchmarks/results/memory-optrace-h100 --before benchmarks/results/memory-optrace-h100-before

The GPU's op list is what runs below autograd (the same level the prediction's tracker sees).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MODES = {"inference": {"train": False}, "adamw-fp32": {}, "adamw-bf16amp": {"amp": "bf16"}}


# -- the cases (small: each runs in seconds)

def _loop(n: int, d: int) -> Any:
    from torch import nn

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x: Any) -> Any:
            for _ in range(n):
                x = self.lin(x)
            return x
    return Loop()


def _mha(need_weights: bool) -> Any:
    from torch import nn

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(256, 8, batch_first=True)
            self.out = nn.Linear(256, 16)

        def forward(self, x: Any) -> Any:
            y, _ = self.attn(x, x, x, need_weights=need_weights)
            return self.out(y)
    return Attn()


def _convbn(channels_last: bool) -> Any:
    from torch import nn

    m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.BatchNorm2d(64), nn.ReLU())
    return m.to(memory_format=__import__("torch").channels_last) if channels_last else m


def _interp(mode: str) -> Any:
    from torch import nn

    kw = {"align_corners": False} if mode != "nearest" else {}
    return nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.Upsample(scale_factor=2, mode=mode, **kw),
                         nn.Conv2d(32, 8, 3, padding=1))


def _bag(mode: str) -> Any:
    from torch import nn

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = nn.EmbeddingBag(20000, 256, mode=mode)
            self.out = nn.Linear(256, 8)

        def forward(self, x: Any) -> Any:
            return self.out(self.bag(x))
    return Bag()


def _tiny_unet() -> Any:
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
            self.mid = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU())
            self.up = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.out = nn.Conv2d(64, 2, 1)

        def forward(self, x: Any) -> Any:
            skip = self.down(x)
            y = self.up(self.mid(nn.functional.max_pool2d(skip, 2)))
            return self.out(torch.cat([y, skip], 1))
    return Tiny()


def _convt() -> Any:
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ConvTranspose2d(64, 32, 2, stride=2),
                         nn.ReLU(), nn.Conv2d(32, 2, 1))


def _encoder(d: int, heads: int, layers: int) -> Any:
    from torch import nn

    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def _rnn(kind: str, size: int, hidden: int, layers: int, bidir: bool, bf: bool,
         dropout: float = 0.0) -> Any:
    sys.path.insert(0, str(Path(__file__).parent))
    from memory_heldout import rnn_net

    return rnn_net(kind, size, hidden, layers, bidir, bf, dropout)


F32, I64 = "float32", "int64"
CASES: dict[str, tuple[Any, tuple[tuple[tuple[int, ...], str], ...], tuple[str, ...]]] = {
    # name: (factory, input specs, modes)
    "encoder": (lambda: _encoder(256, 8, 2), (((8, 128, 256), F32),), tuple(MODES)),
    "mha-weights": (lambda: _mha(True), (((8, 128, 256), F32),), ("inference",)),
    "mha-noweights": (lambda: _mha(False), (((8, 128, 256), F32),), ("inference",)),
    "loop20": (lambda: _loop(20, 1024), (((8, 512, 1024), F32),), ("adamw-fp32", "adamw-bf16amp")),
    "linear1": (lambda: _loop(1, 1024), (((8, 512, 1024), F32),), ("adamw-bf16amp",)),
    "rnn-tanh-bf": (lambda: _rnn("rnn", 64, 512, 2, False, True), (((16, 400, 64), F32),),
                    tuple(MODES)),
    "rnn-tanh-sf": (lambda: _rnn("rnn", 64, 512, 2, False, False), (((400, 16, 64), F32),),
                    ("adamw-fp32",)),
    "gru-bf-drop": (lambda: _rnn("gru", 128, 256, 2, False, True, 0.2), (((16, 100, 128), F32),),
                    tuple(MODES)),
    "lstm-bf-drop": (lambda: _rnn("lstm", 128, 256, 2, True, True, 0.2), (((16, 100, 128), F32),),
                     ("adamw-fp32", "adamw-bf16amp")),
    "tiny-unet": (_tiny_unet, (((8, 3, 128, 128), F32),), tuple(MODES)),
    "convt": (_convt, (((8, 3, 128, 128), F32),), ("adamw-fp32", "adamw-bf16amp")),
    "convbn": (lambda: _convbn(False), (((16, 3, 128, 128), F32),), tuple(MODES)),
    "convbn-cl": (lambda: _convbn(True), (((16, 3, 128, 128), F32),), ("adamw-fp32", "adamw-bf16amp")),
    "interp-bilinear": (lambda: _interp("bilinear"), (((8, 16, 96, 96), F32),), tuple(MODES)),
    "interp-nearest": (lambda: _interp("nearest"), (((8, 16, 96, 96), F32),), ("adamw-bf16amp",)),
    "bag-mean": (lambda: _bag("mean"), (((64, 50), I64),), tuple(MODES)),
    "bag-max": (lambda: _bag("max"), (((64, 50), I64),), ("adamw-fp32",)),
}


def make(name: str) -> Any:
    from torchinspect.inputs import ExampleInputs, TensorSpec
    from torchinspect.sources.case import make_case

    factory, specs, _ = CASES[name]
    case = make_case(factory(), ExampleInputs(tuple(
        TensorSpec(shape, dtype, None, 20000 if dtype == I64 else None) for shape, dtype in specs)))
    from dataclasses import replace

    return replace(case, name=name)


def config(mode: str) -> Any:
    from torchinspect.memory.step import StepConfig

    return StepConfig(**MODES[mode])


# -- on the GPU


def record_ops(case: Any, mode: str) -> list[list[Any]]:
    """Per aten op on the GPU: [name, allocated before, peak during, allocated after,
    allocations made, bytes of them]; phase marks as ["@phase:n"]."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from torchinspect.memory.predict import example_at
    from torchinspect.memory.verify import measure

    rows: list[list[Any]] = []

    def stats() -> tuple[int, int]:
        s = torch.cuda.memory_stats()
        return s["allocation.all.allocated"], s["allocated_bytes.all.allocated"]

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            before = torch.cuda.memory_allocated()
            n0, b0 = stats()
            torch.cuda.reset_peak_memory_stats()
            out = func(*args, **(kwargs or {}))
            n1, b1 = stats()
            rows.append([func.overloadpacket.__name__, before, torch.cuda.max_memory_allocated(),
                         torch.cuda.memory_allocated(), n1 - n0, b1 - b0])
            return out

    cfg = config(mode)
    with Rec():
        measure(case, example_at(case, None), cfg, "training" if cfg.train else "inference",
                on_mark=lambda phase: rows.append([f"@{phase}"]))
    return rows


def history(case: Any, mode: str, path: Path) -> None:
    """The allocator's own trace (sizes in order, no stacks) of the same run."""
    import pickle

    import torch

    from torchinspect.memory.predict import example_at
    from torchinspect.memory.verify import measure

    cfg = config(mode)
    marks: list[tuple[str, int]] = []
    torch.cuda.memory._record_memory_history(context=None, stacks="python", max_entries=400000)
    try:
        def mark(phase: str) -> None:
            marks.append((phase, torch.cuda.memory_stats()["allocation.all.allocated"]))
        measure(case, example_at(case, None), cfg, "training" if cfg.train else "inference",
                on_mark=mark)
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    trace = [(e["action"], e["size"], e["addr"]) for e in snap["device_traces"][0]]
    path.write_bytes(pickle.dumps({"marks": marks, "trace": trace}))


def gpu(out: Path, only: list[str] | None) -> None:
    import torch

    from torchinspect.memory.calibrate import machine
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import example_at, predict_case
    from torchinspect.memory.verify import measure

    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.json").write_text(json.dumps({
        **machine(), "dropout_state": torch._cudnn_init_dropout_state(
            0.2, True, 0, dtype=torch.uint8, device="cuda").numel()}))
    for name, (_, _, modes) in CASES.items():
        if only and name not in only:
            continue
        # one calibration cache per case: cases run in parallel processes
        os.environ["XDG_CACHE_HOME"] = str(out / "cache" / name)
        for mode in modes:
            t0 = time.perf_counter()
            row: dict[str, Any] = {"case": name, "mode": mode}
            try:
                case = make(name)
                cfg = config(mode)
                row["measured"] = measure(case, example_at(case, None), cfg,
                                          "training" if cfg.train else "inference")
                torch.cuda.empty_cache()
                r = predict_case(case, cfg, make_target("cuda", calibrate=True),
                                 inference=not cfg.train)
                run = r.training if cfg.train else r.inference
                row["calibrated"] = {f"{p.phase}:{p.step}": p.peak for p in run.phases}
                row["calibrated"]["peak"] = run.peak
                row["ops"] = record_ops(case, mode)
                torch.cuda.empty_cache()
                try:
                    history(case, mode, out / f"{name}.{mode}.hist.pkl")
                except Exception:
                    row["history-error"] = traceback.format_exc()[-1000:]
                torch.cuda.empty_cache()
            except Exception:
                row["error"] = traceback.format_exc()[-2000:]
            row["seconds"] = round(time.perf_counter() - t0, 1)
            (out / f"{name}.{mode}.json").write_text(json.dumps(row))
            m, c = row.get("measured", {}).get("peak"), row.get("calibrated", {}).get("peak")
            err = f"{100 * (c - m) / m:+.2f}%" if m and c else row.get("error", "")[-200:]
            print(f"{name} {mode}: measured {m} calibrated {c} {err} ({row['seconds']} s)",
                  flush=True)


# -- offline: the prediction's per-op replay, and the comparison


def predicted_ops(name: str, mode: str, entries: dict[str, int | None]) -> list[list[Any]]:
    """The prediction's per op rows (same columns as `record_ops`), replayed with the GPU's
    measured cuDNN workspaces."""
    from torchinspect.memory import predict, tracker
    from torchinspect.memory.allocator import CachingAllocator
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import example_at, track
    from torchinspect.memory.timeline import category
    from torchinspect.memory.workspace import Workspaces, shipped_table

    case = make(name)
    cfg = config(mode)
    marks: list[tuple[str, int]] = []  # op name, events so far (after it)
    original = tracker.StorageTracker.__torch_dispatch__
    logs: list[Any] = []

    def dispatch(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        depth = len(marks)
        out = original(self, func, types, args, kwargs)
        if func in tracker.EXPLICIT_COMPOSITES or tracker.is_composite(func):
            return out  # its parts were logged (and marked) already
        marks.append((func.overloadpacket.__name__, len(self.log.events)))
        del depth
        if not logs:
            logs.append(self.log)
        return out

    tracker.StorageTracker.__torch_dispatch__ = dispatch  # type: ignore[method-assign]
    try:
        target = make_target("cuda", "h100", calibrate=False)
        ws = Workspaces(shipped_table(), True, calibrated=entries)
        predict.track(case, example_at(case, None), cfg, target,
                      "training" if cfg.train else "inference", 10, ws)
    finally:
        tracker.StorageTracker.__torch_dispatch__ = original  # type: ignore[method-assign]
    del track
    log = logs[0]
    sizes = {s: ws.estimate(a.problem).point for s, a in log.allocs.items() if a.kind == "cudnn"}
    alloc = CachingAllocator()
    placed: dict[int, int] = {}
    rows: list[list[Any]] = []
    i = 0
    peak = 0
    count = nbytes = 0
    before = 0
    for name_, end in marks:
        while i < end:
            ev = log.events[i]
            i += 1
            if ev.serial == 0:
                rows.append([f"@{ev.op}"])
                continue
            a = log.allocs[ev.serial]
            if ev.alloc:
                n = sizes.get(ev.serial, a.nbytes)
                if category(a) is None or n == 0:
                    continue
                placed[ev.serial] = alloc.malloc(n)
                count += 1
                nbytes += alloc.size_of(placed[ev.serial])
                peak = max(peak, alloc.allocated)
            elif ev.serial in placed:
                alloc.free(placed.pop(ev.serial))
        rows.append([name_, before, peak, alloc.allocated, count, nbytes])
        before = peak = alloc.allocated
        count = nbytes = 0
    return rows


def compare(folder: Path, only: list[str] | None, show: int) -> None:
    import difflib

    entries: dict[str, int | None] = {}
    for cache in (folder / "cache").rglob("*.json"):
        entries.update(json.loads(cache.read_text())["entries"])
    for path in sorted(folder.glob("*.json")):
        if path.name == "machine.json":
            continue
        row = json.loads(path.read_text())
        if only and row["case"] not in only:
            continue
        if "error" in row:
            print(row["case"], row["mode"], "ERROR", row["error"][-300:])
            continue
        m, c = row["measured"], row["calibrated"]
        print(f"\n== {row['case']} {row['mode']}: measured {m['peak'] / 2**20:.2f} MiB, "
              f"calibrated {100 * (c['peak'] - m['peak']) / m['peak']:+.2f}%  phases: " + " ".join(
                  f"{k} {(c.get(k, 0) - v) / 2**20:+.2f}" for k, v in m.items() if k != "peak"))
        gpu_rows = row["ops"]
        pred = predicted_ops(row["case"], row["mode"], entries)
        a = [r[0] for r in gpu_rows]
        b = [r[0] for r in pred]
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        shown = 0
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    g, p = gpu_rows[i1 + k], pred[j1 + k]
                    if g[0].startswith("@"):
                        continue
                    dg, dp = g[3] - g[1], p[3] - p[1]
                    eg, ep = g[2] - g[3], p[2] - p[3]
                    if (abs(dg - dp) > 4096 or abs(eg - ep) > 4096) and shown < show:
                        shown += 1
                        print(f"  {g[0]:32s} gpu net {dg / 2**20:+8.3f} excess {eg / 2**20:7.3f}"
                              f" ({g[4]} allocs)| pred net {dp / 2**20:+8.3f} excess "
                              f"{ep / 2**20:7.3f} ({p[4]}) | level gpu {g[1] / 2**20:.1f} pred "
                              f"{p[1] / 2**20:.1f}")
            elif shown < show:
                shown += 1
                gs = [f"{r[0]}({(r[3] - r[1]) / 2**20:+.2f}/{(r[2] - r[3]) / 2**20:.2f})"
                      for r in gpu_rows[i1:i2] if len(r) > 1][:12]
                ps = [f"{r[0]}({(r[3] - r[1]) / 2**20:+.2f}/{(r[2] - r[3]) / 2**20:.2f})"
                      for r in pred[j1:j2] if len(r) > 1][:12]
                print(f"  {tag}: gpu {gs}\n        pred {ps}")


def report(after: Path, before: Path | None) -> str:
    """The table of RESULTS-memory.md: measured peak per case and mode, the calibrated
    prediction's error now (``after``) and, where given, in an earlier run (``before``)."""
    machine = json.loads((after / "machine.json").read_text())
    lines = [f"Measured on {machine['gpu']} (torch {machine['torch']}, cuDNN {machine['cudnn']}), "
             "each case in a fresh process; calibrated predictions in the same process. "
             f"Generated by `benchmarks/memory_optrace.py report` from `{after}`"
             + (f" and `{before}`" if before else "") + ".", "",
             "| case | mode | what it exercises | measured MiB | before | calibrated |",
             "|---|---|---|---:|---:|---:|"]
    errors = []
    for name, (_, _, modes) in CASES.items():
        for mode in modes:
            path = after / f"{name}.{mode}.json"
            if not path.exists():
                continue
            row = json.loads(path.read_text())
            if "error" in row:
                lines.append(f"| {name} | {mode} | {WHAT[name]} | error | | |")
                continue
            real, pred = row["measured"]["peak"], row["calibrated"]["peak"]
            errors.append(abs(pred - real) / real)
            old = "-"
            if before and (before / path.name).exists():
                b = json.loads((before / path.name).read_text())
                old = f"{100 * (b['calibrated']['peak'] - b['measured']['peak']) / b['measured']['peak']:+.1f}%"
            lines.append(f"| {name} | {mode} | {WHAT[name]} | {real / 2**20:,.1f} | {old} | "
                         f"{100 * (pred - real) / real:+.1f}% |")
    lines += ["", f"{sum(e <= 0.03 for e in errors)}/{len(errors)} peaks within 3% "
              f"(worst {100 * max(errors):.1f}%)."]
    return "\n".join(lines)


WHAT = {
    "encoder": "TransformerEncoder fast path; attention and bias-gradient reductions",
    "mha-weights": "MultiheadAttention fast path, need_weights=True",
    "mha-noweights": "MultiheadAttention fast path, fused SDPA",
    "loop20": "one Linear called 20 times (bias-gradient staging)",
    "linear1": "Linear under bf16 autocast (bias-gradient staging)",
    "rnn-tanh-bf": "tanh RNN, batch_first",
    "rnn-tanh-sf": "tanh RNN, time-major",
    "gru-bf-drop": "GRU, batch_first, dropout between layers",
    "lstm-bf-drop": "bidirectional LSTM, batch_first, dropout",
    "tiny-unet": "ConvTranspose2d whose gradient is a slice of a cat's",
    "convt": "ConvTranspose2d, expanded output gradient",
    "convbn": "Conv-BatchNorm (cuDNN batch norm)",
    "convbn-cl": "Conv-BatchNorm, channels_last",
    "interp-bilinear": "F.interpolate bilinear between convolutions",
    "interp-nearest": "F.interpolate nearest",
    "bag-mean": "EmbeddingBag mean",
    "bag-max": "EmbeddingBag max",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("gpu", "compare", "report"))
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--before", help="report: an earlier run's folder (its calibrated error)")
    ap.add_argument("--write", help="report: the page whose optrace block to replace")
    ap.add_argument("--out", default="optrace")
    ap.add_argument("--case", nargs="*")
    ap.add_argument("--show", type=int, default=40)
    a = ap.parse_args()
    if a.step == "gpu":
        gpu(Path(a.out), a.case)
    elif a.step == "report":
        text = report(Path(a.dir), Path(a.before) if a.before else None)
        if a.write:
            from memory_heldout import write_block

            write_block(Path(a.write), text, "optrace")
        else:
            print(text)
    else:
        compare(Path(a.dir), a.case, a.show)


if __name__ == "__main__":
    main()
