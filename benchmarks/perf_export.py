"""Whole-process timings of `inspect export` and `inspect graph` (both measured in one run).

1. `inspect export resnet18 -o r18.onnx` (dynamo export, exporter report, full checker,
   onnxruntime verification at batch 1 and 3 against PyTorch) against a hand-written script
   that imports torch/torchvision/onnx/onnxruntime, exports with dynamo=True, runs the
   checker and one onnxruntime session. Runs alternate; the bar is median ratio <= 1.2.
2. `inspect graph resnet50 -o r50.svg` (autograd graph, rendered by dot): wall time (< 10 s).

    .venv/bin/python benchmarks/perf_export.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COLUMNS": "160", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}

HAND_WRITTEN = """
import sys, torch, torchvision, onnx, onnxruntime as ort
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
prog = torch.onnx.export(model, (x,), dynamo=True,
                         dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
prog.save(sys.argv[1])
onnx.checker.check_model(sys.argv[1])
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
"""


CPU: list[float] = []  # CPU seconds (user + sys) of each timed child, in order


def timed(cmd: list[str]) -> float:
    """Wall seconds of one child process (its CPU seconds go to CPU)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["export", "graph"], default=None)
    a = ap.parse_args()
    from machine import describe, save

    machine = describe()  # the load before the runs
    runs = a.runs
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        ours, hand, ratios, graph, cpu_ratios = [], [], [], [], []
        for i in range(runs if a.only != "graph" else 0):
            out = Path(tmp) / f"ours{i}.onnx"
            h = timed([py, "-c", HAND_WRITTEN, str(Path(tmp) / f"hand{i}.onnx")])
            o = timed([py, "-m", "torchinspect", "export", "resnet18", "-o", str(out)])
            hand.append(h)
            ours.append(o)
            ratios.append(o / h)
            hc, oc = CPU[-2], CPU[-1]
            cpu_ratios.append(oc / hc)
            print(f"run {i + 1}: inspect export {o:.2f} s (cpu {oc:.2f} s), hand-written "
                  f"{h:.2f} s (cpu {hc:.2f} s), ratio {o / h:.3f} (cpu {oc / hc:.3f})", flush=True)
        for i in range(runs if a.only != "export" else 0):
            g = timed([py, "-m", "torchinspect", "graph", "resnet50", "-o",
                       str(Path(tmp) / f"r50_{i}.svg")])
            graph.append(g)
            print(f"run {i + 1}: inspect graph resnet50 -o r50.svg {g:.2f} s "
                  f"(cpu {CPU[-1]:.2f} s)", flush=True)
    if ours:
        report_export(ours, hand, ratios, cpu_ratios)
    if graph:
        print(f"graph resnet50 autograd svg: median {statistics.median(graph):.2f} s "
              f"(min {min(graph):.2f}, max {max(graph):.2f}; bar < 10 s)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2-core machine)")
    if a.only is None:
        save("export-perf", {"runs": runs, "export_s": ours, "hand_written_s": hand,
                             "ratios": ratios, "cpu_ratios": cpu_ratios, "graph_s": graph,
                             "load_average_end": round(os.getloadavg()[0], 1)}, machine=machine)


def report_export(ours: list[float], hand: list[float], ratios: list[float],
                  cpu_ratios: list[float]) -> None:
    print(f"\nexport resnet18 + verify: median {statistics.median(ours):.2f} s "
          f"(min {min(ours):.2f}, max {max(ours):.2f})")
    print(f"hand-written script:      median {statistics.median(hand):.2f} s "
          f"(min {min(hand):.2f}, max {max(hand):.2f})")
    print(f"ratio: median {statistics.median(ratios):.3f} (bar <= 1.2), "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")
    print(f"cpu-time ratio: median {statistics.median(cpu_ratios):.3f}")


if __name__ == "__main__":
    main()
