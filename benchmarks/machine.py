"""What every benchmark's raw data says about where it ran (benchmarks/results/*.json).

``describe()`` names the machine without identifying it: CPU model and core count, memory,
GPUs, torch/Python versions, and the load average at the start (a loaded machine is said so in
the data: wall times are then upper bounds). ``save(name, data)`` writes one results file with
that block, the command that made it and the date; ``benchmarks/report.py`` renders the
RESULTS pages from these files only.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
LOADED = 1.5  # load average per core above which timings are marked as taken on a busy machine


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 ** 2, 1)
    except OSError:
        pass
    return None


def describe() -> dict[str, Any]:
    import torch

    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    return {
        "cpu": _cpu_model(), "cores": cores, "memory_gb": _memory_gb(), "gpus": gpus,
        "torch": torch.__version__, "python": platform.python_version(),
        "load_average": None if load is None else round(load, 1),
        "loaded": load is not None and load / cores > LOADED,
    }


def save(name: str, data: Any, *, machine: dict[str, Any] | None = None) -> Path:
    """``benchmarks/results/NAME.json``: ``{"machine", "command", "date", "data"}``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {"machine": machine or describe(),
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
              "date": datetime.date.today().isoformat(), "data": data}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())
