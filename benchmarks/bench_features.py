"""Throughput of `inspect features` (see benchmarks/RESULTS-features.md).

    python benchmarks/bench_features.py cpu            # resnet18 avgpool, 256 JPEGs 500x375
    python benchmarks/bench_features.py memory [--sizes 500 4000] [--shard-size 16MB]
        # peak host RSS of the CLI vs the number of images (must not grow with the folder)
    python benchmarks/bench_features.py gpu [--n 5000] [--profile] [--n-scale 20000]
        # resnet50 avgpool fp16: forward-only (NCHW, channels-last), PIL+DataLoader baseline,
        # each stage alone (--profile), ours on 1 GPU (end to end, start-up, loop), and the
        # CLI on 1 GPU vs every GPU through torchrun on the same folder (and a larger one)

JPEGs are generated into a temporary folder (smooth gradients + noise, quality 90:
~60-100 KB at 500x375, like ImageNet photos). Each mode saves its raw data with the machine
and versions to ``benchmarks/results/features-{cpu,gpu,memory}.json`` (``--note TEXT`` adds
a note on the conditions), rendered into RESULTS-features.md by ``benchmarks/report.py``.
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

    path, seed, (w, h) = args
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * rng.uniform(0.2, 0.6) + yy * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
                     for _ in range(3)], -1)
    img = np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(path, quality=90)


def make_jpegs(folder: Path, n: int, size: tuple[int, int] = (500, 375)) -> float:
    """``n`` photo-like JPEGs of ``size`` (width, height); returns their mean size in bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    with Pool(os.cpu_count()) as pool:
        pool.map(_one_jpeg, [(folder / f"{i:06d}.jpg", i, size) for i in range(n)], chunksize=16)
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
    return {"mode": "cpu", "model": "resnet18", "layer": "avgpool", "images": args.n,
            "avg_jpeg_kb": avg / 1000, "cpus": os.cpu_count(), "batch_size": args.batch_size,
            "workers": args.workers, "threads": torch.get_num_threads(), "runs": runs, "median_outside_pct":
            sorted(x["outside_pct"] for x in runs)[len(runs) // 2], "best": best}


def _forward_only(batch: int, channels_last: bool = False) -> float:
    import torch
    import torchvision

    m = torchvision.models.resnet50().cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    feats = {}
    m.avgpool.register_forward_hook(lambda mod, a, o: feats.__setitem__("x", o))
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


def _profile_stages(folder: Path, batch: int, n: int) -> dict:
    """Each stage of the CUDA image path alone, on the first ``n`` files (img/s)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    from torchinspect.features.gpu import GpuImages
    from torchinspect.features.inputs import (
        InputItem,
        RowDataset,
        collate_rows,
        make_preprocess,
        split_jpegs,
    )

    files = sorted(folder.iterdir())[:n]
    items = [InputItem(str(p), str(p), "image") for p in files]
    prep = make_preprocess("resnet50", None)
    res: dict = {"images": len(files)}
    workers = min(8, (os.cpu_count() or 2) - 1)
    loader = torch.utils.data.DataLoader(
        RowDataset(items, prep, raw_jpeg=True), num_workers=workers, collate_fn=collate_rows,
        batch_sampler=[list(range(i, min(i + batch, len(items)))) for i in range(0, len(items), batch)],
        prefetch_factor=4)
    t = time.perf_counter()
    batches = list(loader)
    res["read_bytes_dataloader_img_s"] = len(files) / (time.perf_counter() - t)
    datas = [split_jpegs(b) for b in batches]
    dev = torch.device("cuda")
    decode_jpeg(datas[0], mode=ImageReadMode.RGB, device=dev)  # nvjpeg init
    torch.cuda.synchronize()

    def timed(fn) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = [fn(d) for d in datas]
        torch.cuda.synchronize()
        del out
        return len(files) / (time.perf_counter() - t)

    res["decode_jpeg_batched_img_s"] = timed(lambda d: decode_jpeg(d, mode=ImageReadMode.RGB, device=dev))
    res["decode_jpeg_one_by_one_img_s"] = timed(
        lambda d: [decode_jpeg(x, mode=ImageReadMode.RGB, device=dev) for x in d])
    decoded = [decode_jpeg(d, mode=ImageReadMode.RGB, device=dev) for d in datas]
    gpu = GpuImages(prep, dev)

    def per_image(imgs):  # the previous pipeline: a resize/crop kernel chain per image
        return prep.normalize(torch.stack([prep.geometry(im) for im in imgs]))

    it = iter(decoded * 2)
    res["preprocess_per_image_img_s"] = timed(lambda d: per_image(next(it)))
    it = iter(decoded * 2)
    res["preprocess_batched_img_s"] = timed(lambda d: gpu.preprocess(next(it)))
    res["decode_plus_batched_preprocess_img_s"] = timed(lambda d: gpu.preprocess(gpu.decode(d, [""] * len(d), [])))
    return res


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


def _pil_baseline(folder: Path, batch: int) -> dict:
    """The standard pipeline: PIL decode + published transforms in DataLoader workers (every
    core but one), pinned memory, forward under autocast, features back to the host.
    ``img_s`` times the loop (worker start included) on a built model, like our loop rate;
    ``img_s_end_to_end`` adds the model build, like ``extract_features`` from a name."""
    import torch
    import torchvision

    files = sorted(folder.iterdir())
    torch.cuda.synchronize()
    b0 = time.perf_counter()
    m = torchvision.models.resnet50().cuda().eval()
    torch.cuda.synchronize()
    build = time.perf_counter() - b0
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
    loop = time.perf_counter() - t
    return {"img_s": n / loop, "img_s_end_to_end": n / (loop + build), "build_s": build,
            "loop_s": loop, "workers": os.cpu_count() - 1}


def _ours(r) -> dict:
    loop_rate = r.new_rows / r.loop_seconds if r.loop_seconds else None
    return {"img_s_end_to_end": r.rows_per_s, "seconds": r.seconds, "startup_seconds": r.startup_seconds,
            "warmup_seconds": r.warmup_seconds, "loop_seconds": r.loop_seconds, "img_s_loop": loop_rate}


def _cli_runs(folder: Path, n: int, tmp: Path, tag: str, batch: int) -> dict:
    import torch

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    cli = ["-m", "torchinspect", "features", "resnet50", str(folder), "-l", "avgpool",
           "--device", "cuda", "--dtype", "fp16", "--batch", str(batch), "--no-progress"]
    out: dict = {}
    for name, pre in ((f"cli_1gpu_{tag}", [sys.executable]),
                      (f"cli_{torch.cuda.device_count()}gpu_{tag}",
                       [sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", str(torch.cuda.device_count())])):
        t = time.perf_counter()
        p = subprocess.run([*pre, *cli, "-o", str(tmp / name)], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        man = json.loads((tmp / name / "manifest.json").read_text()) if p.returncode == 0 else {}
        run = (man.get("runs") or [{}])[-1]
        sec, loop = run.get("seconds"), run.get("loop_seconds")
        out[name] = {"rc": p.returncode, "images": n, "process_wall_s": round(wall, 3),
                     "extract_seconds": sec, "startup_seconds": run.get("startup_seconds"),
                     "warmup_seconds": run.get("warmup_seconds"),
                     "loop_seconds": loop, "img_s_extract": n / sec if sec else None,
                     "img_s_loop": n / loop if loop else None, "img_s_process": n / wall,
                     "stderr_tail": p.stderr[-600:] if p.returncode else ""}
    one, many = out[f"cli_1gpu_{tag}"], out[f"cli_{torch.cuda.device_count()}gpu_{tag}"]
    for key in ("img_s_process", "img_s_extract", "img_s_loop"):
        if one.get(key) and many.get(key):
            out[f"speedup_{tag}_{key}"] = many[key] / one[key]
    return out


def bench_gpu(args) -> dict:
    import torch

    from torchinspect.features import extract_features

    tmp = Path(tempfile.mkdtemp(prefix="bench-features-"))
    avg = make_jpegs(tmp / "imgs", args.n)
    out: dict = {"mode": "gpu", "model": "resnet50", "layer": "avgpool", "dtype": "fp16",
                 "batch_size": args.batch_size, "images": args.n, "avg_jpeg_kb": avg / 1000,
                 "cpus": os.cpu_count(),
                 "gpus": torch.cuda.device_count(), "device": torch.cuda.get_device_name(0),
                 "torch": torch.__version__}
    out["forward_only_img_s"] = _forward_only(args.batch_size)
    out["forward_only_channels_last_img_s"] = _forward_only(args.batch_size, channels_last=True)
    out["pil"] = _pil_baseline(tmp / "imgs", args.batch_size)
    if args.profile:
        out["stages"] = _profile_stages(tmp / "imgs", args.batch_size, min(args.n, 2560))
    # warm-up (cudnn, nvjpeg init) on a few files, then the measured runs (same process)
    extract_features("resnet50", [str(p) for p in sorted((tmp / "imgs").iterdir())[:512]],
                     layers=["avgpool"], output=tmp / "warm", device="cuda", dtype="fp16",
                     batch_size=args.batch_size)
    r = extract_features("resnet50", [str(tmp / "imgs")], layers=["avgpool"], output=tmp / "one",
                         device="cuda", dtype="fp16", batch_size=args.batch_size)
    out["ours_1gpu"] = _ours(r)
    r2 = extract_features("resnet50", [str(tmp / "imgs")], layers=["avgpool"], output=tmp / "cpudec",
                          device="cuda", dtype="fp16", batch_size=args.batch_size, gpu_decode=False)
    out["ours_1gpu_cpu_decode"] = _ours(r2)
    for k, pk in (("img_s_end_to_end", "img_s_end_to_end"), ("img_s_loop", "img_s")):
        v, pil = out["ours_1gpu"][k], out["pil"][pk]
        out[f"speedup_vs_pil_{k}"] = v / pil if v else None
        out[f"fraction_of_forward_only_{k}"] = v / out["forward_only_img_s"] if v else None
    if torch.cuda.device_count() >= 2 and not args.no_cli:
        out.update(_cli_runs(tmp / "imgs", args.n, tmp, "n", args.batch_size))
        if args.n_scale:
            make_jpegs(tmp / "big", args.n_scale)
            out.update(_cli_runs(tmp / "big", args.n_scale, tmp, "big", args.batch_size))
    return out


def bench_memory(args) -> dict:
    """Peak host RSS of the CLI vs the number of images, with a small --shard-size: the
    writer holds at most one shard of rows, so the peak must not grow with the folder.
    resnet18 ``layer1`` at 64x64 (64 KB per row in fp32), CPU, one process per run."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-features-mem-"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    runs = []
    for n in args.sizes:
        folder = tmp / f"imgs{n}"
        make_jpegs(folder, n, size=(128, 96))
        out = tmp / f"out{n}"
        code = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "torchinspect", "features",
                            "resnet18", str(folder), "-l", "layer1", "--resize", "64", "--crop", "64",
                            "--shard-size", args.shard_size, "--batch", "64", "--no-progress",
                            "-o", str(out)], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode:
            raise SystemExit(p.stderr[-2000:])
        peak_mb = int(p.stdout.strip().splitlines()[-1]) / 1024  # ru_maxrss is in KiB on Linux
        man = json.loads((out / "manifest.json").read_text())
        runs.append({"images": n, "peak_rss_mb": round(peak_mb, 1), "shards": len(man["shards"]),
                     "output_mb": round(sum(s["bytes"] for s in man["shards"]) / 1e6, 1),
                     "seconds": round(wall, 1)})
    growth = runs[-1]["peak_rss_mb"] / runs[0]["peak_rss_mb"] - 1
    return {"mode": "memory", "shard_size": args.shard_size, "runs": runs,
            "peak_growth_pct": round(100 * growth, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["cpu", "gpu", "memory"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 4000],
                    help="memory: folder sizes to compare")
    ap.add_argument("--shard-size", default="16MB", help="memory: --shard-size of the runs")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--note", action="append", default=[],
                    help="a note on the conditions, kept in the data (repeatable)")
    ap.add_argument("--profile", action="store_true", help="gpu: time each stage alone too")
    ap.add_argument("--n-scale", type=int, default=20000,
                    help="gpu: a second, larger folder for 1 vs N GPUs (0: skip)")
    ap.add_argument("--no-cli", action="store_true", help="gpu: skip the CLI/torchrun runs")
    args = ap.parse_args()
    if args.mode == "memory":
        res = bench_memory(args)
    elif args.mode == "cpu":
        args.n = args.n or 256
        args.batch_size = args.batch_size or 32
        res = bench_cpu(args)
    else:
        args.n = args.n or 5000
        args.batch_size = args.batch_size or 256
        res = bench_gpu(args)
    print(json.dumps(res, indent=2))
    from machine import save

    from torchinspect.bench.environment import capture_environment

    device = "cuda" if args.mode == "gpu" else "cpu"
    save(f"features-{args.mode}", {**res, "environment": capture_environment(device),
                                   "niceness": os.nice(0), "notes": args.note})


if __name__ == "__main__":
    main()
