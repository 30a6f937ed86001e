"""RESULTS-features.md and its docs/results.md bullet, rendered from committed raw data only.

The data: ``bench_features.py`` in its three modes (``results/features-cpu.json``,
``features-gpu.json``, ``features-memory.json``). Each file present gets its section, a
measure a run did not take (1 vs 2 GPUs on a one-GPU machine) is said so, and so is a
target the data misses. Both renderers are registered in ``report.py``'s ``PAGES``.
"""

from __future__ import annotations

import statistics
from typing import Any

import machine
from pages_bench import conditions, have, para, wrap
from pagetext import bar

CPU, GPU, MEMORY = "features-cpu", "features-gpu", "features-memory"
OUTSIDE_BAR = 25.0  # %: CPU, time outside the model's forward
PIL_BAR = 5.0  # x: GPU, ours against the PIL + DataLoader pipeline
SCALE_BAR = 1.8  # x: 2 GPUs against one, on the same folder
GROWTH_BAR = 10.0  # %: memory, the largest folder's peak RSS against the smallest folder's


def _bar(ok: bool) -> str:
    return bar(ok)


def cpu_section(record: dict[str, Any]) -> str:
    d = record["data"]
    runs = d["runs"]
    lines = "\n".join(f"| {i} | {r['seconds']:.2f} | {r['forward_seconds']:.2f} | "
                      f"{r['outside_pct']:.1f}% | {r['rows_per_s']:.1f} |"
                      for i, r in enumerate(runs, 1))
    median = statistics.median(r["outside_pct"] for r in runs)
    under = sum(r["outside_pct"] < OUTSIDE_BAR for r in runs)
    workers = "the default number of" if d.get("workers") is None else str(d["workers"])
    return f"""## CPU: {d['model']} `{d['layer']}`, {d['images']:,} JPEGs (target: time outside the forward < {OUTSIDE_BAR:g}%)

{para(f"`python benchmarks/bench_features.py cpu`: {d['images']:,} JPEGs of "
       f"{d['avg_jpeg_kb']:.0f} KB on average, batch {d['batch_size']}, {d['threads']} intra-op "
       f"threads, {workers} DataLoader workers, each run one `extract_features` call in the same "
       "process.")}

{conditions(record)}

| run | total s | forward s | outside the forward | img/s |
|---|---:|---:|---:|---:|
{lines}

{para(TOTAL + f" Median outside the forward: {median:.1f}%, target met: "
       f"{_bar(median < OUTSIDE_BAR)} ({under} of {len(runs)} runs under {OUTSIDE_BAR:g}%).")}"""


TOTAL = """"Total" is the whole `extract_features` call (model build, input listing, DataLoader start,
decoding, preprocessing, writing parts, shards and the manifest); "forward" is the time inside
the model call."""


def cli_tags(d: dict[str, Any]) -> list[str]:
    """The folders the CLI ran on, 1 GPU against every GPU ("n": the main one, "big")."""
    return sorted({k.removeprefix("cli_1gpu_") for k in d if k.startswith("cli_1gpu_")})


def _scaling(d: dict[str, Any]) -> str:
    tags = cli_tags(d)
    if not tags:
        return (f"Not measured in this run: it had {d['gpus']} GPU. On a machine with two or "
                "more GPUs the script also runs the CLI on one GPU and on every GPU through "
                "torchrun, on the same folder and on a larger one; the target stays unchecked "
                "until such data is committed.")
    rows, verdicts = [], []
    for tag in tags:
        one = d[f"cli_1gpu_{tag}"]
        many_key = next(k for k in d if k.startswith("cli_") and k.endswith(f"gpu_{tag}")
                        and k != f"cli_1gpu_{tag}")
        for name, run in (("1 GPU", one), (f"torchrun x{many_key.split('_')[1][:-3]}", d[many_key])):
            if run.get("rc"):
                rows.append(f"| {run['images']:,} | {name} | failed (exit {run['rc']}) | | | | |")
                continue
            rows.append(f"| {run['images']:,} | {name} | {run['startup_seconds']:.2f} "
                        f"({run['warmup_seconds']:.2f}) | {run['loop_seconds']:.2f} | "
                        f"{run['img_s_loop']:,.0f} | {run['extract_seconds']:.2f} | "
                        f"{run['process_wall_s']:.1f} |")
        speed = d.get(f"speedup_{tag}_img_s_loop")
        if speed is not None:
            verdicts.append(f"{one['images']:,} images: {speed:.2f}x in the loop "
                            f"({_bar(speed >= SCALE_BAR)}), "
                            f"{d[f'speedup_{tag}_img_s_process']:.2f}x whole process")
    table = "\n".join(rows)
    return f"""| folder | run | start-up s (of it warm-up) | loop s | loop img/s | `extract` s | process wall s |
|---|---|---|---:|---:|---:|---:|
{table}

(Under torchrun, the slowest rank's start-up and loop.) Speed-up, target met: {'; '.join(verdicts)}.
A fresh process spends its start-up (imports, CUDA initialization, model build; under
torchrun also NCCL and the weight broadcast) before the first batch, with one GPU or many,
so the whole-process speed-up approaches the loop's only on folders that take far longer."""


def _stages(d: dict[str, Any]) -> str:
    s = d.get("stages")
    if not s:
        return ""
    return "\n\n" + para(f"Stages alone (`--profile`, {s['images']:,} images, img/s): reading bytes in the "
            f"DataLoader {s['read_bytes_dataloader_img_s']:,.0f}; nvjpeg batched decode "
            f"{s['decode_jpeg_batched_img_s']:,.0f} (one by one "
            f"{s['decode_jpeg_one_by_one_img_s']:,.0f}); resize/crop per image "
            f"{s['preprocess_per_image_img_s']:,.0f}, batched resize/crop/normalize "
            f"{s['preprocess_batched_img_s']:,.0f}; decode + batched preprocessing "
            f"{s['decode_plus_batched_preprocess_img_s']:,.0f}.")


def gpu_ratios(d: dict[str, Any]) -> tuple[float, float]:
    """Ours against PIL: (name to last row written vs model build + loop, loop vs loop)."""
    ours, pil = d["ours_1gpu"], d["pil"]
    return ours["img_s_end_to_end"] / pil["img_s_end_to_end"], ours["img_s_loop"] / pil["img_s"]


SAME_WAY = """Both pipelines are measured the same way, in one process after imports and a
warm-up run, on the same files, the model built from its name inside the timed span."""


def gpu_section(record: dict[str, Any]) -> str:
    d = record["data"]
    ours, pil, cpu_dec = d["ours_1gpu"], d["pil"], d["ours_1gpu_cpu_decode"]
    end, loop = gpu_ratios(d)
    fwd, fwd_cl = d["forward_only_img_s"], d["forward_only_channels_last_img_s"]
    return f"""## GPU: {d['model']} `{d['layer']}`, {d['dtype']}, {d['images']:,} JPEGs (target: at least {PIL_BAR:g}x the PIL pipeline)

{para(f"`python benchmarks/bench_features.py gpu --profile`: {d['images']:,} JPEGs of "
       f"{d['avg_jpeg_kb']:.0f} KB on average, batch {d['batch_size']}. " + SAME_WAY)}

{conditions(record)}

| pipeline | img/s | vs PIL |
|---|---:|---:|
| forward only, NCHW / channels-last (random input on the GPU, features to the host) | {fwd:,.0f} / {fwd_cl:,.0f} | |
| PIL + `DataLoader` ({pil['workers']} workers, pinned) + published transforms + forward, **model build + loop** | **{pil['img_s_end_to_end']:,.0f}** | 1.0x |
| the same, loop only (model already built; {pil['loop_s']:.2f} s) | {pil['img_s']:,.0f} | |
| `extract_features`, nvjpeg: **name to last row written** ({ours['startup_seconds']:.2f} s start-up, of it {ours['warmup_seconds']:.2f} s warm-up overlapped with the first decode, + {ours['loop_seconds']:.2f} s loop) | **{ours['img_s_end_to_end']:,.0f}** | **{end:.1f}x** |
| the same, loop only (against PIL's loop) | {ours['img_s_loop']:,.0f} | {loop:.1f}x |
| `--cpu-decode`: end to end / loop | {cpu_dec['img_s_end_to_end']:,.0f} / {cpu_dec['img_s_loop']:,.0f} | {cpu_dec['img_s_end_to_end'] / pil['img_s_end_to_end']:.1f}x / {cpu_dec['img_s_loop'] / pil['img_s']:.1f}x |

{para(f"Target ({PIL_BAR:g}x the PIL pipeline) met end to end: {_bar(end >= PIL_BAR)} "
       f"({end:.1f}x); in the loop: {_bar(loop >= PIL_BAR)} ({loop:.1f}x). The start-up is "
       f"{100 * ours['startup_seconds'] / ours['seconds']:.0f}% of our call on this folder; it hardly "
       "grows with the number of files, so the end-to-end ratio approaches the loop's on "
       f"larger folders. The loop runs at {100 * ours['img_s_loop'] / fwd:.0f}% of forward-only "
       f"NCHW ({100 * ours['img_s_loop'] / fwd_cl:.0f}% of channels-last).")}{_stages(d)}

### 1 vs 2 GPUs, CLI, fresh processes (target: 2 GPUs at least {SCALE_BAR:g}x one GPU on the same folder)

{_scaling(d)}"""


def memory_section(record: dict[str, Any]) -> str:
    d = record["data"]
    runs = d["runs"]
    lines = "\n".join(f"| {r['images']:,} | {d['shard_size']} | {r['shards']} | {r['output_mb']:,.0f} MB "
                      f"| {r['peak_rss_mb']:,.0f} MB | {r['seconds']:.0f} s |" for r in runs)
    growth = d["peak_growth_pct"]
    return f"""## Memory: peak host RSS against the number of images (target: does not grow)

`python benchmarks/bench_features.py memory`: the CLI on the CPU, resnet18 `layer1` at 64x64
(64 KB a row in fp32), one process per folder, peak RSS of the process tree. The writer
holds at most one shard of rows, so the peak should be the process (torch, the model, the
DataLoader) plus about twice `--shard-size`, whatever the number of images.

{conditions(record)}

| images | `--shard-size` | shards | output | peak RSS | wall |
|---:|---|---:|---:|---:|---:|
{lines}

{para(f"From {runs[0]['images']:,} to {runs[-1]['images']:,} images the peak changes by "
       f"{growth:+.1f}%; flat (within {GROWTH_BAR:g}%, this page's bar): "
       f"{_bar(abs(growth) <= GROWTH_BAR)}.")}"""


def features_page() -> tuple[str, list[str]]:
    files, parts = [], []
    for name, section in ((GPU, gpu_section), (CPU, cpu_section), (MEMORY, memory_section)):
        if have(name):
            files.append(f"{name}.json")
            parts.append(section(machine.load(name)))
        else:
            parts.append(f"## `{name}`\n\nNo data yet: run `benchmarks/bench_features.py "
                         f"{name.split('-')[1]}`.")
    body = "\n\n".join(parts)
    text = f"""# `inspect features` throughput

Method: `benchmarks/bench_features.py` generates photo-like JPEGs into a temporary folder
(smooth gradients and noise, PIL quality 90, 500x375 like ImageNet photos; 128x96 for the
memory runs) and extracts features with random weights (`weights=None`: throughput does not
depend on them). Each mode saves its raw data with the machine and versions; this page is
rendered from it.

{body}
"""
    return text, files


def features_summary() -> tuple[str, list[str]]:
    """The docs/results.md bullet for RESULTS-features.md."""
    files, parts = [], []
    if have(GPU):
        r = machine.load(GPU)
        files.append(f"{GPU}.json")
        d = r["data"]
        end, loop = gpu_ratios(d)
        scaled = [f"{d[f'speedup_{tag}_img_s_loop']:.2f}x in the loop on "
                  f"{d[f'cli_1gpu_{tag}']['images']:,} JPEGs" for tag in cli_tags(d)
                  if d.get(f"speedup_{tag}_img_s_loop") is not None]
        parts.append(
            f"On {d['device']} ({d['model']} `{d['layer']}` {d['dtype']}, {d['images']:,} JPEGs, "
            f"one run of `benchmarks/bench_features.py gpu`): {d['ours_1gpu']['img_s_end_to_end']:,.0f} "
            f"img/s from the model name to the last row written = {end:.1f}x a PIL + `DataLoader` "
            f"pipeline ({d['pil']['workers']} workers, model build included: "
            f"{d['pil']['img_s_end_to_end']:,.0f} img/s); loop {d['ours_1gpu']['img_s_loop']:,.0f} "
            f"img/s = {loop:.1f}x. Target {PIL_BAR:g}x met end to end: {_bar(end >= PIL_BAR)}, in "
            f"the loop: {_bar(loop >= PIL_BAR)}. Two GPUs against one: "
            + ("; ".join(scaled) if scaled else f"not measured (the run had {d['gpus']} GPU)") + ".")
    if have(CPU):
        r = machine.load(CPU)
        files.append(f"{CPU}.json")
        runs = r["data"]["runs"]
        median = statistics.median(x["outside_pct"] for x in runs)
        parts.append(f"CPU ({r['machine']['cores']} cores, load average "
                     f"{r['machine']['load_average']}): {r['data']['model']} spends {median:.1f}% of "
                     f"the call outside the forward (median of {len(runs)} runs; target < "
                     f"{OUTSIDE_BAR:g}%: {_bar(median < OUTSIDE_BAR)}).")
    if have(MEMORY):
        r = machine.load(MEMORY)
        files.append(f"{MEMORY}.json")
        runs = r["data"]["runs"]
        growth = r["data"]["peak_growth_pct"]
        parts.append(f"Peak RSS from {runs[0]['images']:,} to {runs[-1]['images']:,} images: "
                     f"{growth:+.1f}% (flat within {GROWTH_BAR:g}%: {_bar(abs(growth) <= GROWTH_BAR)}).")
    text = ("- **features** ([features throughput](results/features.md)). " + " ".join(parts))
    return wrap(text), files
