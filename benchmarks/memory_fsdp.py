"""How close `inspect memory --fsdp 2` is to the per-GPU peak of FSDP2 training on 2 GPUs.

Prediction (any machine, no GPU): FSDP2 on fake tensors as rank 0 of a fake 2-rank process
group (`torchinspect.memory.fsdp`). Measurement (under torchrun, one process per GPU): the same
sharded copy (`fsdp.sharded_copy`: empty parameters on the GPU, `fully_shard` on each unit,
then on the root), inputs moved to the GPU, cuBLAS
workspaces and the cache released, then the same step functions as the prediction (two
training steps: zero_grad, forward, sum of the first floating output, backward,
optimizer.step), `reset_peak_memory_stats` at each phase start and `max_memory_allocated` at
its end, on every rank. The batch given is the batch per GPU.

    # on the CPU machine: predictions to a JSON file
    PYTHONPATH=src:. python benchmarks/memory_fsdp.py --predict-only --json predicted.json
    # on 2 GPUs: measure, print both
    PYTHONPATH=src:. torchrun --nproc-per-node 2 benchmarks/memory_fsdp.py --predicted predicted.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.memory_accuracy import build_case

MODELS = ("gpt2", "llama-scaled", "resnet50")
MODES = {
    "adam-fp32": {"optimizer": "adam"},
    "adamw-bf16amp": {"optimizer": "adamw", "amp": "bf16"},
}
WORLD = 2


def config(mode: str, world: int) -> Any:
    from torchinspect.memory.step import StepConfig

    return StepConfig(train=True, fsdp=world, **MODES[mode])


def predict(names: list[str], world: int) -> list[dict[str, Any]]:
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.fsdp import choose_unit
    from torchinspect.memory.predict import predict_case

    rows = []
    for name in names:
        case = build_case(name)
        for mode in MODES:
            cfg = config(mode, world)
            t0 = time.perf_counter()
            r = predict_case(case, cfg, make_target("cuda", "h100"), inference=False)
            run = r.training
            rows.append({"model": name, "mode": mode, "unit": choose_unit(case, cfg),
                         "predicted": run.peak, "where": run.where,
                         "phases": {f"{p.phase}:{p.step}": p.peak for p in run.phases},
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(f"predicted {name} {mode}: {run.peak / 2**20:,.0f} MiB at {run.where} "
                  f"({rows[-1]['seconds']} s)", flush=True)
    return rows


def measure(name: str, mode: str, mesh: Any) -> dict[str, int]:
    """Peak allocated bytes of this rank per phase (forward:1 ... optimizer:2) and overall."""
    import torch

    from torchinspect.memory import step as steps
    from torchinspect.memory.fsdp import choose_unit, make_optimizer, sharded_copy
    from torchinspect.memory.verify import cuda_inputs

    gc.collect()  # FSDP's hooks make reference cycles: free the previous model's memory now
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    case = build_case(name)
    cfg = config(mode, mesh.size())
    model, _ = sharded_copy(case.model, mesh, choose_unit(case, cfg), "cuda", cfg.dtype)
    args, kwargs = cuda_inputs(case.require_example(), None)
    model.train(True)
    optimizer = make_optimizer(cfg.optimizer, model, cfg.foreach)
    autocast = (lambda: torch.autocast("cuda", dtype=steps.DTYPES[cfg.amp])) if cfg.amp else None
    peaks: dict[str, int] = {}
    current = ["setup:0"]

    def on_phase(phase: str, n: int) -> None:
        torch.cuda.synchronize()
        peaks[current[0]] = max(peaks.get(current[0], 0), torch.cuda.max_memory_allocated())
        current[0] = f"{phase}:{n}"
        torch.cuda.reset_peak_memory_stats()

    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    for n in (1, 2):
        steps.train_step(model, {}, args, kwargs, optimizer=optimizer, loss=cfg.loss,
                         autocast=autocast or _null, name=name,
                         on_phase=lambda p, n=n: on_phase(p, n))
    on_phase("end", 0)
    peaks.pop("setup:0", None)
    peaks.pop("end:0", None)
    peaks["peak"] = max(peaks.values())
    peaks["before"] = before
    del model, optimizer, args, kwargs
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    return peaks


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def run_distributed(names: list[str], predicted: list[dict[str, Any]], out: str | None) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    rows = []
    for name in names:
        for mode in MODES:
            mine = measure(name, mode, mesh)
            every: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(every, mine)
            rows.append({"model": name, "mode": mode, "ranks": every})
    if rank == 0:
        report(rows, predicted, torch.cuda.get_device_name(), out)
    dist.barrier()
    dist.destroy_process_group()


def report(rows: list[dict[str, Any]], predicted: list[dict[str, Any]], device: str,
           out: str | None) -> None:
    pred = {(p["model"], p["mode"]): p for p in predicted}
    print(f"\n{device}, {len(rows[0]['ranks'])} ranks, torch.distributed.fsdp.fully_shard; "
          "per-GPU peak of torch.cuda.max_memory_allocated")
    print("| model | mode | unit | measured MiB (rank 0 / rank 1) | predicted MiB | error | "
          "peak at (predicted) |")
    print("|---|---|---|---:|---:|---:|---|")
    errors = []
    for row in rows:
        p = pred.get((row["model"], row["mode"]))
        measured = [r["peak"] for r in row["ranks"]]
        if any(r["before"] for r in row["ranks"]):
            print(f"({row['model']} {row['mode']}: allocated before it started: "
                  f"{[r['before'] for r in row['ranks']]} bytes)")
        worst = max(measured)
        row["predicted"] = p
        if p is None:
            print(f"| {row['model']} | {row['mode']} | | "
                  f"{' / '.join(f'{m / 2**20:,.0f}' for m in measured)} | - | - | |")
            continue
        err = (p["predicted"] - worst) / worst
        errors.append(abs(err))
        print(f"| {row['model']} | {row['mode']} | {p['unit']} | "
              f"{' / '.join(f'{m / 2**20:,.0f}' for m in measured)} | "
              f"{p['predicted'] / 2**20:,.0f} | {err:+.1%} | {p['where']} |")
        for phase, value in sorted(p["phases"].items()):
            got = [r.get(phase) for r in row["ranks"]]
            if all(g is not None for g in got):
                print(f"|  | {phase} | | {' / '.join(f'{g / 2**20:,.0f}' for g in got)} | "
                      f"{value / 2**20:,.0f} | {(value - max(got)) / max(got):+.1%} | |")
    if errors:
        print(f"\nmedian |error| {statistics.median(errors):.2%}, max {max(errors):.2%}, "
              f"within 5%: {sum(e <= 0.05 for e in errors)}/{len(errors)}")
    if out:
        with open(out, "w") as f:
            json.dump({"device": device, "rows": rows}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(MODELS))
    ap.add_argument("--predict-only", action="store_true", help="predict (no GPU), print, save")
    ap.add_argument("--predicted", help="JSON of predictions (--predict-only --json) to compare")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--world", type=int, default=WORLD, help="ranks predicted (--predict-only)")
    a = ap.parse_args()
    if a.predict_only:
        rows = predict(a.names, a.world)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    predicted = json.load(open(a.predicted)) if a.predicted else []
    run_distributed(a.names, predicted, a.json)


if __name__ == "__main__":
    sys.exit(main())
