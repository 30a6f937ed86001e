"""Throughput of `inspect features` (see benchmarks/RESULTS-features.md).

    python benchmarks/bench_features.py cpu            # resnet18 avgpool, 256 JPEGs 500x375
    python benchmarks/bench_features.py gpu [--n 5000] # resnet50 avgpool fp16: forward-only,
                                                       # PIL+DataLoader baseline, ours on 1 GPU,
                                                       # ours on every GPU through torchrun

JPEGs are generated into a temporary folder (smooth gradients + noise, quality 90:
~60-100 KB at 500x375, like ImageNet photos).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]


def _one_jpeg(args):
    import numpy as np
    from PIL import Image

    path, seed = args
    rng = np.random.default_rng(seed)
    h, w = 375, 500
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * rng.uniform(0.2, 0.6) + yy * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
                     for _ in range(3)], -1)
    img = np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(path, quality=90)


def make_jpegs(folder: Path, n: int) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    with Pool(os.cpu_count()) as pool:
        pool.map(_one_jpeg, [(folder / f"{i:05d}.jpg", i) for i in range(n)], chunksize=16)
    sizes = [p.stat().st_size for p in folder.iterdir()]
    return sum(sizes) / len(sizes)


def bench_cpu(args) -> dict:
    import torch

    from torchinspect.features import extract_features

    tmp = Path(tempfile.mkdtemp(prefix="bench-features-"))
    avg = make_jpegs(tmp / "imgs", args.n)
    torch.set_num_threads(os.cpu_count() or 1)
    runs = []
    for rep in range(args.repeat):
        r = extract_features("resnet18", [str(tmp / "imgs")], layers=["avgpool"], output=tmp / f"out{rep}",
                             device="cpu", batch_size=args.batch_size, workers=args.workers)
        runs.append({"seconds": r.seconds, "forward_seconds": r.forward_seconds,
                     "outside_pct": 100 * (1 - r.forward_seconds / r.seconds), "rows_per_s": r.rows_per_s})
    best = min(runs, key=lambda x: x["outside_pct"])
    return {"mode": "cpu", "images": args.n, "avg_jpeg_kb": avg / 1000, "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "runs": runs, "median_outside_pct":
            sorted(x["outside_pct"] for x in runs)[len(runs) // 2], "best": best}


def _forward_only(batch: int) -> float:
    import torch
    import torchvision

    m = torchvision.models.resnet50().cuda().eval()
    feats = {}
    m.avgpool.register_forward_hook(lambda mod, a, o: feats.__setitem__("x", o))
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    with torch.inference_mode(), torch.autocast("cuda", torch.float16):
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        iters = 20
        for _ in range(iters):
            m(x)
            feats["x"].float().cpu()
        torch.cuda.synchronize()
    return batch * iters / (time.perf_counter() - t)


class _PilSet:
    def __init__(self, files):
        import torchvision

        self.files = files
        self.t = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.transforms()

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.files[i]) as im:
            return self.t(im.convert("RGB"))


def _pil_baseline(folder: Path, batch: int) -> float:
    import torch
    import torchvision

    files = sorted(folder.iterdir())
    m = torchvision.models.resnet50().cuda().eval()
    loader = torch.utils.data.DataLoader(_PilSet(files), batch_size=batch, num_workers=os.cpu_count() - 1,
                                         pin_memory=True, prefetch_factor=4)
    feats = {}
    m.avgpool.register_forward_hook(lambda mod, a, o: feats.__setitem__("x", o))
    t = time.perf_counter()
    n = 0
    with torch.inference_mode(), torch.autocast("cuda", torch.float16):
        for x in loader:
            m(x.cuda(non_blocking=True))
            feats["x"].cpu()
            n += len(x)
    return n / (time.perf_counter() - t)


def bench_gpu(args) -> dict:
    import torch

    from torchinspect.features import extract_features

    tmp = Path(tempfile.mkdtemp(prefix="bench-features-"))
    avg = make_jpegs(tmp / "imgs", args.n)
    out: dict = {"mode": "gpu", "images": args.n, "avg_jpeg_kb": avg / 1000, "cpus": os.cpu_count(),
                 "gpus": torch.cuda.device_count(), "device": torch.cuda.get_device_name(0)}
    out["forward_only_img_s"] = _forward_only(args.batch_size)
    out["pil_dataloader_img_s"] = _pil_baseline(tmp / "imgs", args.batch_size)
    # warm-up (cudnn autotune, nvjpeg init) on a few files, then the measured run
    extract_features("resnet50", [str(p) for p in sorted((tmp / "imgs").iterdir())[:512]],
                     layers=["avgpool"], output=tmp / "warm", device="cuda", dtype="fp16",
                     batch_size=args.batch_size)
    r = extract_features("resnet50", [str(tmp / "imgs")], layers=["avgpool"], output=tmp / "one",
                         device="cuda", dtype="fp16", batch_size=args.batch_size)
    out["ours_1gpu_img_s"] = r.rows_per_s
    out["ours_1gpu_seconds"] = r.seconds
    r2 = extract_features("resnet50", [str(tmp / "imgs")], layers=["avgpool"], output=tmp / "cpudec",
                          device="cuda", dtype="fp16", batch_size=args.batch_size, gpu_decode=False)
    out["ours_1gpu_cpu_decode_img_s"] = r2.rows_per_s
    out["speedup_vs_pil"] = out["ours_1gpu_img_s"] / out["pil_dataloader_img_s"]
    out["fraction_of_forward_only"] = out["ours_1gpu_img_s"] / out["forward_only_img_s"]
    if torch.cuda.device_count() >= 2:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        cli = ["-m", "torchinspect", "features", "resnet50", str(tmp / "imgs"), "-l", "avgpool",
               "--device", "cuda", "--dtype", "fp16", "--batch-size", str(args.batch_size), "--no-progress"]
        for name, pre in (("cli_1gpu", [sys.executable]),
                          ("cli_2gpu", [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                        "--nproc-per-node", str(torch.cuda.device_count())])):
            t = time.perf_counter()
            p = subprocess.run([*pre, *cli, "-o", str(tmp / name)], env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            man = json.loads((tmp / name / "manifest.json").read_text()) if p.returncode == 0 else {}
            run = (man.get("runs") or [{}])[-1]
            out[name] = {"rc": p.returncode, "process_wall_s": wall, "extract_seconds": run.get("seconds"),
                         "img_s": args.n / run["seconds"] if run.get("seconds") else None,
                         "stderr_tail": p.stderr[-600:] if p.returncode else ""}
        a, b = out["cli_1gpu"].get("img_s"), out["cli_2gpu"].get("img_s")
        out["two_gpu_speedup"] = b / a if a and b else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["cpu", "gpu"])
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.mode == "cpu":
        args.n = args.n or 256
        args.batch_size = args.batch_size or 32
        res = bench_cpu(args)
    else:
        args.n = args.n or 5000
        args.batch_size = args.batch_size or 256
        res = bench_gpu(args)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
