"""`make bench`: every benchmark in turn (accuracy table, summary speed, checkpoint speed).

Each script prints its own table; see benchmarks/RESULTS-*.md for recorded numbers.
The checkpoint benchmark writes ~6 GB of temporary files (deleted afterwards).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["accuracy_torchvision.py", "perf_summary.py", "bench_checkpoints.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"\n=== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
