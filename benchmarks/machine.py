"""What every benchmark's raw data says about where it ran (benchmarks/results/*.json).

``describe()`` names the machine without identifying it: CPU model and core count, memory,
GPUs, torch/Python versions, and the load average at the start (a loaded machine is said so in
the data: wall times are then upper bounds). ``save(name, data)`` writes one results file with
that block, the command that made it and the date; ``benchmarks/report.py`` renders the
RESULTS pages from these files only. Sweeps that append one record per model to a JSONL file
(resumable, so one file may hold several runs) give every record the same block
(``run_header``) and read them back with ``load_jsonl``.

Peak memory of a child process is its own ``VmHWM`` (/proc/self/status, read inside the child:
``PEAK_RSS``, ``run_cli``), never the ``ru_maxrss`` that ``os.wait4`` returns: Linux carries
``ru_maxrss`` over fork and exec, so a child started by a parent that imported torch (or made a
checkpoint) reports at least the parent's peak.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
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


def versions(*packages: str) -> dict[str, str]:
    """Installed versions of torchinspect, torch and ``packages`` (absent ones as "-")."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torchinspect", "torch", *packages):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "-"
    return found


def run_header(*packages: str) -> dict[str, Any]:
    """What each record of one sweep run carries: machine, command, date and versions."""
    return {"machine": describe(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "date": datetime.date.today().isoformat(), "versions": versions(*packages)}


#: Python source defining ``peak_rss()``: this process's own high-water RSS in bytes
PEAK_RSS = r"""
def peak_rss():
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

#: the `inspect` console entry in this process with the arguments after ``-c``; the entry ends
#: with os._exit, so its exit code, peak RSS and CPU time are written just before that. A
#: thread samples RssAnon and RssFile every 10 ms: VmHWM also counts the pages of files the
#: command maps (torch.load(mmap=True) of a checkpoint: page cache the kernel can drop),
#: RssAnon is the memory the command itself holds.
CLI_CHILD = PEAK_RSS + r"""
import json, os, sys, threading, time
peaks = {"RssAnon": 0, "RssFile": 0}
def sample():
    while True:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    key = line.split(":")[0]
                    if key in peaks:
                        peaks[key] = max(peaks[key], int(line.split()[1]) * 1024)
        except OSError:
            return
        time.sleep(0.01)
threading.Thread(target=sample, daemon=True).start()
real_exit = os._exit
def record_and_exit(code):
    with open(os.environ["BENCH_CLI_RESULT"], "w") as fh:
        json.dump({"exit": code, "peak_rss": peak_rss(), "peak_anon": peaks["RssAnon"],
                   "peak_file": peaks["RssFile"], "cpu_seconds": time.process_time()}, fh)
    real_exit(code)
os._exit = record_and_exit
from torchinspect.cli.app import main
sys.argv = ["inspect", *sys.argv[1:]]
main()
"""


def run_cli(args: list[str]) -> dict[str, Any]:
    """``inspect ARGS`` in a fresh process: wall seconds (from here, interpreter start and imports
    included), the child's CPU seconds, its own peak RSS in bytes (and the sampled peaks of
    its anonymous and file-backed parts), exit code and stdout/stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CLI_CHILD, *args], capture_output=True,
                              text=True, check=False,
                              env={**os.environ, "BENCH_CLI_RESULT": str(result)})
        wall = time.perf_counter() - t0
        data = json.loads(result.read_text()) if result.exists() else {
            "exit": proc.returncode, "peak_rss": None, "cpu_seconds": None}
    return {"seconds": round(wall, 3), **data, "stdout": proc.stdout, "stderr": proc.stderr}


def load_jsonl(name: str) -> list[dict[str, Any]]:
    """``benchmarks/results/NAME.jsonl``: one record per line (each naming its run's machine)."""
    text = (RESULTS / f"{name}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())
