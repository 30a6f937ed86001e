"""How close `inspect memory`'s predicted peaks are to `torch.cuda.max_memory_allocated`.

For each model, in its own process (nothing allocated before it, as a fresh training script):
predict inference, an Adam fp32 training step and an AdamW bf16-autocast training step, twice —
on fake CPU tensors with CUDA's autocast lists (what a machine without a GPU computes) and on
fake CUDA tensors (where a GPU is present) — then run the same steps for real on the GPU and
read the peak of each phase (`reset_peak_memory_stats` at each phase start). Prints a table and
writes JSON. Target: every peak within 5%, median error at most 2%.

    PYTHONPATH=src:. python benchmarks/memory_accuracy.py [--json FILE] [--jobs N] [NAME ...]
    PYTHONPATH=src:. python benchmarks/memory_accuracy.py --predict-only NAME   # CPU check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

VISION = ("resnet50", "vit_b_16", "convnext_tiny", "efficientnet_b0", "mobilenet_v3_large",
          "swin_t", "fcn_resnet50")
MODELS = (*VISION, "bert-base", "gpt2", "llama-scaled", "lstm", "loop100")
MODES = {
    "inference": {"train": False},
    "adam-fp32": {"train": True, "optimizer": "adam"},
    "adamw-bf16amp": {"train": True, "optimizer": "adamw", "amp": "bf16"},
}


def build_case(name: str) -> Any:
    """A ModelCase for one benchmark model (no downloads: configs only)."""
    import torch
    from torch import nn

    from torchinspect.inputs import ExampleInputs, TensorSpec
    from torchinspect.sources.case import ModelOptions, make_case

    if name in VISION:
        return make_case(name, options=ModelOptions(inputs=["3,224,224"], batch=32))
    if name == "llama-scaled":
        args = ["d_model=1024", "n_layers=8", "n_heads=16", "n_kv_heads=4", "ffn_dim=2816",
                "vocab_size=32000"]
        return make_case("zoo:llama-tiny", options=ModelOptions(
            inputs=["long:1024"], batch=8, args=args))
    if name == "bert-base":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig(attn_implementation="sdpa"))
        ids = ExampleInputs((TensorSpec((8, 512), "int64", None, 30522),))
        return make_case(model, ids)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa"))
        ids = ExampleInputs((TensorSpec((8, 1024), "int64", None, 50257),))
        return make_case(model, ids)
    if name == "lstm":
        class LSTMNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(512, 1024, num_layers=2, batch_first=True)
                self.head = nn.Linear(1024, 10)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(self.lstm(x)[0][:, -1])

        return make_case(LSTMNet(), ExampleInputs((TensorSpec((32, 256, 512)),)))
    if name == "loop100":
        class Loop(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lin = nn.Linear(1024, 1024)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                for _ in range(100):
                    x = self.lin(x)
                return x

        return make_case(Loop(), ExampleInputs((TensorSpec((16, 512, 1024)),)))
    raise SystemExit(f"unknown model {name}")


def worker(name: str, measure: bool) -> list[dict[str, Any]]:
    """Predict (both fake devices) and measure every mode of one model; one row per mode."""
    import torch

    from torchinspect.gpus import target_gpu
    from torchinspect.memory.faking import Target
    from torchinspect.memory.gpu import cublas_workspace
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig

    case = build_case(name)
    gpu = target_gpu().name
    targets = {"cpu-fake": Target("cuda", gpu, cublas_workspace(gpu), "cpu")}
    if torch.cuda.is_available():
        targets["cuda-fake"] = Target("cuda", gpu, cublas_workspace(gpu), "cuda")
    rows = []
    for mode, kw in MODES.items():
        cfg = StepConfig(train=kw["train"], optimizer=kw.get("optimizer", "adamw"),
                         amp=kw.get("amp"))
        row: dict[str, Any] = {"model": name, "mode": mode}
        for label, target in targets.items():
            t0 = time.perf_counter()
            try:
                r = predict_case(case, cfg, target, inference=not cfg.train)
            except Exception as exc:  # one failing path is a row's note, not a lost model
                row[f"{label}-error"] = f"{type(exc).__name__}: {exc}"[:200]
                row[label] = None
                continue
            run = r.training if cfg.train else r.inference
            row[label] = run.peak
            row[f"{label}-s"] = round(time.perf_counter() - t0, 2)
            row[f"{label}-phases"] = {f"{p.phase}:{p.step}": p.peak for p in run.phases}
            row[f"{label}-where"] = run.where
        if measure:
            from torchinspect.memory.predict import example_at
            from torchinspect.memory.verify import measure as measure_case

            measured = measure_case(case, example_at(case, None), cfg,
                                    "training" if cfg.train else "inference")
            row["measured"] = measured["peak"]
            row["measured-phases"] = measured
        rows.append(row)
    return rows


def opdiff(name: str, mode: str) -> None:
    """Bytes allocated per (phase, op) on fake CPU vs fake CUDA tensors, where they differ."""
    from collections import Counter

    from torchinspect.gpus import target_gpu
    from torchinspect.memory import predict as p
    from torchinspect.memory.gpu import cublas_workspace
    from torchinspect.memory.step import StepConfig

    case = build_case(name)
    kw = MODES[mode]
    cfg = StepConfig(train=kw["train"], optimizer=kw.get("optimizer", "adamw"), amp=kw.get("amp"))
    gpu = target_gpu().name
    tallies = []
    for fake in ("cpu", "cuda"):
        target = p.Target("cuda", gpu, cublas_workspace(gpu), fake)
        logs: list = []
        original = p.replay

        def keep(log, end, _logs=logs, _original=original, **k):
            _logs.append((log, end))
            return _original(log, end, **k)

        p.replay = keep
        try:
            p.track(case, p.example_at(case, None), cfg, target,
                    "training" if cfg.train else "inference", 10)
        finally:
            p.replay = original
        log, end = logs[0]
        tally: Counter = Counter()
        phase = "setup:0"
        for ev in log.events[:end]:
            if ev.serial == 0:
                phase = ev.op
            elif ev.alloc and phase in ("forward:1", "backward:1", "inference:0"):
                tally[(phase, ev.op)] += log.allocs[ev.serial].nbytes
        tallies.append(tally)
    for key in sorted(set(tallies[0]) | set(tallies[1])):
        a, b = tallies[0][key], tallies[1][key]
        if a != b:
            print(f"{name} {mode} {key[0]:12} {key[1]:40} cpu {a / 2**20:10.1f} MiB  cuda {b / 2**20:10.1f} MiB")


def gpu_trace(name: str, mode: str, phase: str, top: int = 8) -> None:
    """What the GPU had allocated at the peak of ``phase`` that the phase itself allocated:
    the largest blocks and the C++/Python frames that allocated them."""
    import torch

    from torchinspect.memory.predict import example_at
    from torchinspect.memory.step import StepConfig
    from torchinspect.memory.verify import measure as measure_case

    case = build_case(name)
    kw = MODES[mode]
    cfg = StepConfig(train=kw["train"], optimizer=kw.get("optimizer", "adamw"), amp=kw.get("amp"))
    marks: dict[str, int] = {}
    torch.cuda.memory._record_memory_history(max_entries=500000, stacks="all")

    def mark(p: str) -> None:
        marks[p] = len(torch.cuda.memory._snapshot()["device_traces"][0])

    measure_case(case, example_at(case, None), cfg, "training" if cfg.train else "inference", mark)
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    order = sorted(marks.items(), key=lambda kv: kv[1])
    start = marks[phase]
    end = next((i for p, i in order if i > start), len(trace))
    live: dict[int, dict] = {}
    best, best_live = -1, {}
    total = 0
    for i, e in enumerate(trace[:end]):
        if e["action"] == "alloc":
            total += e["size"]
            if i >= start:
                live[e["addr"]] = e
        elif e["action"] == "free_requested":
            total -= e["size"]
            live.pop(e["addr"], None)
        if i >= start and total > best:
            best, best_live = total, dict(live)
    print(f"== {name} {mode} {phase}: peak {best / 2**20:.1f} MiB; largest blocks allocated in the phase and live then:")
    for e in sorted(best_live.values(), key=lambda e: -e["size"])[:top]:
        skip = ("unwind", "CapturedTraceback", "gather_with_cpp", "empty_generic", "empty_cuda",
                "empty_strided", "c10::", "std::", "at::_ops::", "c10d", "wrap_kernel",
                "make_boxed", "call_functor", "Dispatcher", "redispatch", "_call_impl",
                "_wrapped_call_impl", "TypedOperatorHandle")
        frames = [f["name"] for f in e.get("frames", []) if not any(k in f["name"] for k in skip)]
        print(f"  {e['size'] / 2**20:9.2f} MiB  " + " < ".join(fr[:70] for fr in frames[:5]))


def calibrate() -> dict[str, int]:
    """cuBLAS workspace bytes: allocated after one matmul, and after its backward."""
    import torch

    a = torch.randn(256, 256, device="cuda", requires_grad=True)
    base = torch.cuda.memory_allocated()
    b = a @ a
    fwd = torch.cuda.memory_allocated() - base - b.untyped_storage().nbytes()
    b.sum().backward()
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated() - base - b.untyped_storage().nbytes() - a.grad.untyped_storage().nbytes()
    return {"forward_thread": fwd, "after_backward": after,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def _pct(pred: int | None, real: int | None) -> str:
    if not pred or not real:
        return "-"
    return f"{100 * (pred - real) / real:+.1f}%"


def table(rows: list[dict[str, Any]]) -> str:
    mib = 2**20
    lines = ["| model | mode | measured MiB | predicted (no GPU) MiB | error | predicted (fake cuda) MiB | error | peak at |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r.get('mode', '-')} | error: {r['error'][:80]} | | | | | |")
            continue
        m = r.get("measured")
        if r.get("cpu-fake") is None:
            lines.append(f"| {r['model']} | {r['mode']} | {m / 2**20 if m else 0:,.0f} | error: "
                         f"{r.get('cpu-fake-error', '')[:80]} | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['mode']} | {m / mib if m else 0:,.0f} | {r['cpu-fake'] / mib:,.0f} | "
            f"{_pct(r['cpu-fake'], m)} | {(r.get('cuda-fake') or 0) / mib:,.0f} | "
            f"{_pct(r.get('cuda-fake'), m)} | {r['cpu-fake-where']} |")
    errs = [abs(r["cpu-fake"] - r["measured"]) / r["measured"] for r in rows
            if r.get("measured") and r.get("cpu-fake")]
    if errs:
        lines.append("")
        lines.append(f"no-GPU prediction: median |error| {100 * statistics.median(errs):.2f}%, "
                     f"max {100 * max(errs):.2f}%, within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")
    errs = [abs(r["cuda-fake"] - r["measured"]) / r["measured"] for r in rows
            if r.get("measured") and r.get("cuda-fake")]
    if errs:
        lines.append(f"fake-cuda prediction: median |error| {100 * statistics.median(errs):.2f}%, "
                     f"max {100 * max(errs):.2f}%, within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")
    return "\n".join(lines)


def run_one(name: str, measure: bool) -> list[dict[str, Any]]:
    cmd = [sys.executable, __file__, "--worker", name] + ([] if measure else ["--predict-only"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("ROWS "):
            return json.loads(line[5:])
    return [{"model": name, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--json")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--worker")
    ap.add_argument("--predict-only", action="store_true")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--measured", metavar="JSON", help="with --predict-only: take the GPU "
                    "measurements from an earlier run's --json (the predictions are recomputed)")
    ap.add_argument("--opdiff", nargs=2, action="append", metavar=("NAME", "MODE"))
    ap.add_argument("--trace", nargs=3, action="append", metavar=("NAME", "MODE", "PHASE"))
    a = ap.parse_args()
    if a.trace:
        for name, mode, phase in a.trace:
            try:
                gpu_trace(name, mode, phase)
            except Exception as exc:  # a debugging aid: report and go on
                print(f"== {name} {mode} {phase}: {type(exc).__name__}: {exc}")
        return 0
    if a.opdiff:
        for name, mode in a.opdiff:
            opdiff(name, mode)
        return 0
    if a.worker:
        print("ROWS " + json.dumps(worker(a.worker, not a.predict_only)), flush=True)
        return 0
    if a.calibrate:
        print(json.dumps(calibrate()))
        return 0
    names = a.names or list(MODELS)
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda n: run_one(n, not a.predict_only), names))
    rows = [r for rs in results for r in rs]
    if a.measured:  # the GPU's measurements of an earlier run; every prediction is made now
        with open(a.measured) as fh:
            earlier_file = json.load(fh)
        earlier = {(r["model"], r.get("mode")): r for r in earlier_file["rows"]}
        for r in rows:
            old = earlier.get((r["model"], r.get("mode")), {})
            for key in ("measured", "measured-phases"):
                if key in old:
                    r[key] = old[key]
                    r["measured-in"] = {"file": os.path.basename(a.measured),
                                        "machine": earlier_file.get("machine")}
    print(table(rows))
    if a.json:
        from machine import describe

        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "machine": describe()}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
