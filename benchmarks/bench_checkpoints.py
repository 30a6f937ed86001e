"""Speed and peak memory of `inspect diff` and `inspect convert` on 2 GB checkpoints.

    .venv/bin/python benchmarks/bench_checkpoints.py [--gb 2.0] [--keep DIR] [--only TEXT ...]

Writes two Llama-shaped float32 checkpoints of ~2 GB each (B: DataParallel container with a
"module." prefix and one changed head) in a temporary folder, runs each command in a fresh
process (the `inspect` entry point) and reports its wall time, CPU time and its own peak RSS
(``VmHWM``, read inside the child: ``machine.run_cli``; the ``ru_maxrss`` of ``os.wait4``
would report at least this parent's peak, which holds torch). The baseline is the peak RSS
of an interpreter that only imports torch and torchinspect's checkpoint code, so the page can
say what each command adds to it. The files are deleted afterwards. Targets (issue 4):
diff < 2 s and < 300 MB peak RSS; convert peak RSS <= 1.25x the checkpoint size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import PEAK_RSS, describe, run_cli, save

BASELINE = PEAK_RSS + """
import json, torch, torchinspect.checkpoints
now = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in open("/proc/self/status")
       if line.startswith(("RssAnon:", "RssFile:"))}
print(json.dumps({"peak_rss": peak_rss(), "anon": now["RssAnon"], "file": now["RssFile"]}))
"""


def make_checkpoints(folder: Path, gb: float) -> tuple[Path, Path, Path]:
    import torch

    d, ffn, vocab = 2048, 5632, 32000
    per_layer = 4 * d * d + 3 * d * ffn + 2 * d
    n_layers = max(1, int((gb * 1e9 / 4 - 2 * vocab * d) // per_layer))
    torch.manual_seed(0)
    sd: dict[str, torch.Tensor] = {"tok_embeddings.weight": torch.randn(vocab, d)}
    for i in range(n_layers):
        p = f"layers.{i}."
        for name in ("wq", "wk", "wv", "wo"):
            sd[p + f"attention.{name}.weight"] = torch.randn(d, d)
        sd[p + "feed_forward.w1.weight"] = torch.randn(ffn, d)
        sd[p + "feed_forward.w2.weight"] = torch.randn(d, ffn)
        sd[p + "feed_forward.w3.weight"] = torch.randn(ffn, d)
        sd[p + "attention_norm.weight"] = torch.ones(d)
        sd[p + "ffn_norm.weight"] = torch.ones(d)
    sd["norm.weight"] = torch.ones(d)
    sd["output.weight"] = torch.randn(vocab, d)
    a, b, st = folder / "a.pt", folder / "b.pt", folder / "a.safetensors"
    torch.save(sd, a)
    b_sd = {f"module.{k}": v for k, v in sd.items()}
    b_sd["module.output.weight"] = torch.randn(vocab + 8, d)
    torch.save({"state_dict": b_sd, "epoch": 3, "optimizer": {"state": {}, "param_groups": []}}, b)
    from safetensors.torch import save_file

    save_file(sd, st)
    # Hugging Face sharded layout (save_pretrained's greedy split, ~500 MB shards + index)
    hf = folder / "hf"
    hf.mkdir(exist_ok=True)
    groups: list[list[str]] = [[]]
    size = 0
    for k, v in sd.items():
        n = v.numel() * v.element_size()
        if groups[-1] and size + n > 500_000_000:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    weight_map = {}
    for i, keys in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({k: sd[k] for k in keys}, hf / name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, name))
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in sd.values())},
         "weight_map": weight_map}))
    # torch.distributed.checkpoint folder, one process (what torchtitan/FSDP save, unsharded)
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": sd}, checkpoint_id=str(folder / "dcp"), no_dist=True)
    return a, b, st


def make_legacy(folder: Path, gb: float) -> Path:
    """A's state_dict as a legacy (non-zip) torch.save file (``_use_new_zipfile_serialization=False``)."""
    import torch

    a = folder / "a.pt"
    if not a.exists():
        make_checkpoints(folder, gb)
    leg = folder / "legacy.pt"
    sd = torch.load(a, mmap=True, weights_only=True)
    torch.save(sd, leg, _use_new_zipfile_serialization=False)
    return leg


def run(args: list[str]) -> dict[str, float | int]:
    """``inspect ARGS`` in a new process: wall and CPU seconds, its own peak RSS, exit code."""
    r = run_cli(args)
    if r["exit"] not in (0, 1) or r["peak_rss"] is None:
        raise SystemExit(f"{args} failed ({r['exit']}): {r['stderr']}")
    return {"wall_s": r["seconds"], "cpu_s": round(r["cpu_seconds"], 3),
            "peak_rss_mb": r["peak_rss"] / 2 ** 20, "peak_anon_mb": r["peak_anon"] / 2 ** 20,
            "peak_file_mb": r["peak_file"] / 2 ** 20, "exit": r["exit"]}


def baseline() -> dict[str, float]:
    """Peak RSS (and its anonymous and file-backed parts at the end) of an interpreter that
    imports torch and torchinspect.checkpoints only, in MB."""
    out = subprocess.run([sys.executable, "-c", BASELINE], capture_output=True, text=True,
                         check=True).stdout
    return {k: v / 2 ** 20 for k, v in json.loads(out.splitlines()[-1]).items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--keep", type=Path, default=None, help="reuse/keep files in this folder")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="run only the cases whose label contains TEXT (repeatable)")
    ap.add_argument("--generate", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--generate-legacy", type=Path, default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.generate:
        make_checkpoints(ns.generate, ns.gb)
        return
    if ns.generate_legacy:
        make_legacy(ns.generate_legacy, ns.gb)
        return
    folder = ns.keep or Path(tempfile.mkdtemp(prefix="ti-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        a, b, st = folder / "a.pt", folder / "b.pt", folder / "a.safetensors"
        hf, dcp_dir = folder / "hf", folder / "dcp"
        if not (a.exists() and b.exists() and st.exists() and hf.exists() and dcp_dir.exists()):
            # (the legacy file is made from A below)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--gb", str(ns.gb), "--generate", str(folder)],
                           check=True)
            print(f"generated in {time.perf_counter() - t0:.1f}s")
        legacy = folder / "legacy.pt"
        if not legacy.exists():
            subprocess.run([sys.executable, __file__, "--gb", str(ns.gb), "--generate-legacy",
                            str(folder)], check=True)
        size = a.stat().st_size
        print(f"checkpoint A: {size / 1e9:.2f} GB, B: {b.stat().st_size / 1e9:.2f} GB, "
              f"safetensors: {st.stat().st_size / 1e9:.2f} GB")
        from importlib.metadata import version

        print(f"python {sys.version.split()[0]}, torch {version('torch')}")
        machine = describe()
        base = baseline()
        print(f"baseline (interpreter + torch + torchinspect.checkpoints): "
              f"{base['peak_rss']:.0f} MB (anon {base['anon']:.0f}, file-backed {base['file']:.0f})")
        rows = []
        cases = [
            ("diff a.pt b.pt", ["diff", a, b]),
            ("diff a.pt b.pt --auto-prefix -f json", ["diff", a, b, "--auto-prefix", "-f", "json"]),
            ("diff a.safetensors b.pt", ["diff", st, b]),
            ("convert b.pt -> .safetensors --auto-prefix", ["convert", b, folder / "o1.safetensors",
                                                           "--auto-prefix"]),
            ("convert b.pt -> .pt --auto-prefix", ["convert", b, folder / "o2.pt", "--auto-prefix"]),
            ("convert a.pt -> .safetensors --dtype bf16", ["convert", a, folder / "o3.safetensors",
                                                          "--dtype", "bf16"]),
            ("convert a.safetensors -> .pt", ["convert", st, folder / "o4.pt"]),
            ("diff hf/ (4 shards) b.pt", ["diff", hf, b]),
            ("diff hf/model.safetensors.index.json a.pt", ["diff", hf / "model.safetensors.index.json", a]),
            ("diff dcp/ a.pt", ["diff", dcp_dir, a]),
            ("convert dcp/ -> .safetensors", ["convert", dcp_dir, folder / "o5.safetensors"]),
            ("convert hf/ -> .pt", ["convert", hf, folder / "o6.pt"]),
            ("convert a.pt -> shards --shard-size 500MB", ["convert", a, folder / "o7.safetensors",
                                                          "--shard-size", "500MB"]),
            ("convert a.pt -> o8.dcp", ["convert", a, folder / "o8.dcp"]),
            ("diff legacy.pt a.pt", ["diff", legacy, a]),
            ("diff legacy.pt legacy.pt -f json", ["diff", legacy, legacy, "-f", "json"]),
            ("convert legacy.pt -> .safetensors", ["convert", legacy, folder / "o9.safetensors"]),
            ("convert legacy.pt -> .pt", ["convert", legacy, folder / "o10.pt"]),
        ]
        if ns.only:
            cases = [c for c in cases if any(text in c[0] for text in ns.only)]
        for label, args in cases:
            for out in folder.glob("o*"):
                shutil.rmtree(out) if out.is_dir() else out.unlink()
            row = {"case": label, **run([str(x) for x in args])}
            rows.append(row)
            rss = row["peak_rss_mb"]
            print(f"{label:45s} {row['wall_s']:7.2f} s  {rss:6.0f} MB peak RSS "
                  f"({rss * 2**20 / size:.2f}x A's size; anon {row['peak_anon_mb']:.0f} MB, "
                  f"file-backed {row['peak_file_mb']:.0f} MB)  exit {row['exit']}", flush=True)
        if not ns.only:
            save("checkpoints-perf", {"checkpoint_bytes": size, "gb": ns.gb, "baseline_mb": base,
                                      "rows": rows}, machine=machine)
    finally:
        if ns.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
