"""Time the safe .pt2 reader against torch.export.load (issue 29: at most 1.2x).

Exports a few models with torch.export.save into a temp folder, then times, interleaved
(A B A B ... so drift hits both), ``torch.export.load(path)`` and
``torchinspect.io.pt2.load_exported_program(path)``; each sample is one full load of the
file (the page cache is warm for both). Reports the median of N samples and the ratio.

    .venv/bin/python benchmarks/pt2_read.py [--reps 15] [--out benchmarks/results/pt2-read-cpu.json]
    .venv/bin/python benchmarks/pt2_read.py --render benchmarks/results/pt2-read-cpu.json

``--render`` prints the markdown table of RESULTS-pt2.md from the committed JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _models() -> dict[str, tuple[object, tuple, object]]:
    import torch
    import torchvision

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(x)

    batch = torch.export.Dim("batch", min=2, max=512)
    return {
        "mlp-8x256 (dynamic batch)": (Mlp(), (torch.randn(4, 256),), ({0: batch},)),
        "resnet18": (torchvision.models.resnet18(), (torch.randn(1, 3, 224, 224),), None),
        "vit_b_16": (torchvision.models.vit_b_16(), (torch.randn(1, 3, 224, 224),), None),
    }


def measure(reps: int) -> dict:
    import torch

    from torchinspect.io.pt2 import load_exported_program

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, args, dyn) in _models().items():
            path = Path(tmp) / "m.pt2"
            torch.export.save(torch.export.export(model.eval(), args, dynamic_shapes=dyn), path)
            load_exported_program(str(path)), torch.export.load(path)  # warm imports and caches
            ours, theirs = [], []
            for _ in range(reps):
                t = time.perf_counter()
                torch.export.load(path)
                theirs.append(time.perf_counter() - t)
                t = time.perf_counter()
                load_exported_program(str(path))
                ours.append(time.perf_counter() - t)
            rows.append({"model": name, "bytes": path.stat().st_size,
                         "torch_export_load_s": statistics.median(theirs),
                         "safe_reader_s": statistics.median(ours),
                         "samples": reps})
            print(f"{name:28s} torch {rows[-1]['torch_export_load_s']:.4f} s  "
                  f"safe {rows[-1]['safe_reader_s']:.4f} s", flush=True)
    return {"machine": f"{platform.node() or 'unknown'}: {os.cpu_count()} CPUs, "
                       f"{platform.processor() or platform.machine()}",
            "python": platform.python_version(), "torch": torch.__version__, "rows": rows}


def render(data: dict) -> str:
    lines = [f"Machine: {data['machine']}; Python {data['python']}, torch {data['torch']}. "
             f"Median of {data['rows'][0]['samples']} interleaved loads each.", "",
             "| model | .pt2 size | torch.export.load | safe reader | ratio |",
             "|---|---:|---:|---:|---:|"]
    for r in data["rows"]:
        ratio = r["safe_reader_s"] / r["torch_export_load_s"]
        lines.append(f"| {r['model']} | {r['bytes'] / 1e6:.1f} MB | {r['torch_export_load_s'] * 1e3:.1f} ms "
                     f"| {r['safe_reader_s'] * 1e3:.1f} ms | {ratio:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--render", type=Path)
    a = ap.parse_args()
    if a.render:
        print(render(json.loads(a.render.read_text())))
        return
    data = measure(a.reps)
    if a.out:
        a.out.write_text(json.dumps(data, indent=1) + "\n")
    print(render(data))


if __name__ == "__main__":
    main()
