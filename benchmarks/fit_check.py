"""``--fit`` against the GPU: the largest batch whose real training step fits a budget.

The allocator is capped at the budget (``set_per_process_memory_fraction``), then the batch
is doubled from 1 and bisected, as ``inspect memory --fit`` searches on predictions (and
``bench --max-batch`` on the GPU); each probe runs ``memory.verify.measure`` (two training
steps, the same step functions as the prediction).

    PYTHONPATH=src:. python benchmarks/fit_check.py resnet50 3,224,224 80GB [--inference]
"""

from __future__ import annotations

import gc
import json
import sys
import time

import torch

from torchinspect.io.writers import parse_size
from torchinspect.memory.fit import largest_fitting
from torchinspect.memory.predict import example_at
from torchinspect.memory.step import StepConfig
from torchinspect.memory.verify import measure
from torchinspect.sources.case import make_case


def main() -> None:
    spec, inputs, budget_text = sys.argv[1:4]
    mode = "inference" if "--inference" in sys.argv else "training"
    budget = parse_size(budget_text, option="--fit")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total))
    case = make_case(spec, inputs)
    cfg = StepConfig(train=mode == "training")
    probes = []

    def peak(batch: int) -> int:
        t0 = time.perf_counter()
        try:
            value = measure(case, example_at(case, batch), cfg, mode)["peak"]
        except torch.OutOfMemoryError:
            value = budget + 1
        gc.collect()
        torch.cuda.empty_cache()
        probes.append({"batch": batch, "peak": value, "s": round(time.perf_counter() - t0, 2)})
        print(json.dumps(probes[-1]), file=sys.stderr, flush=True)
        return value

    largest, _ = largest_fitting(peak, budget, 1 << 16)
    print(json.dumps({"model": spec, "mode": mode, "budget": budget, "total": total,
                      "measured_largest": largest, "probes": probes,
                      "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
