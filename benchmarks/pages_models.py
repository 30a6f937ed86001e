"""RESULTS-models.md and its docs/results.md bullet, from the sweeps' raw data.

``sweep_hf.py``, ``speed_hf.py`` and ``sweep_timm.py`` append one record per model to
``results/models-hf.jsonl``, ``models-hf-speed.jsonl`` and ``models-timm.jsonl``; each record
carries its run's machine, command, date and versions (``machine.run_header``). A file may hold
several (resumed) runs: the page names each run and how many models it measured, and says how
many of the scripts' listed models the data covers. Registered in ``report.py``'s ``PAGES``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from machine import load_jsonl

HF, SPEED, TIMM = "models-hf", "models-hf-speed", "models-timm"
FILES = [f"{HF}.jsonl", f"{SPEED}.jsonl", f"{TIMM}.jsonl"]
SPEED_TARGET_S = 3.0  # issue 13: a full-size config summarizes in under 3 s after imports
LLAMA70B_TARGET = (5.0, 1e9)  # issue 13: Llama-3-70B's config.json under 5 s and 1 GB


def runs_text(rows: list[dict[str, Any]]) -> str:
    """One line per run in the file: machine, load, versions, command, date, model count."""
    seen: dict[str, tuple[dict[str, Any], int]] = {}
    for row in rows:
        run = row["run"]
        key = repr(sorted((k, repr(v)) for k, v in run.items()))
        seen[key] = (run, seen.get(key, (run, 0))[1] + 1)
    lines = []
    for run, count in seen.values():
        m = run["machine"]
        gpus = ", ".join(m["gpus"]) or "no GPU"
        load = f"load average {m['load_average']} on {m['cores']} cores at the start"
        if m.get("loaded"):
            load += " (a busy shared machine: wall times are upper bounds)"
        versions = ", ".join(f"{k} {v}" for k, v in run["versions"].items())
        lines.append(f"- {count} model{'s' * (count != 1)}. Machine: {m['cpu']}, {m['cores']} cores, "
                     f"{m.get('memory_gb')} GB, {gpus}, Python {m['python']}; {versions}; "
                     f"{load}; `python benchmarks/{run['command']}` on {run['date']}.")
    return "\n".join(lines)


def listed(rows: list[dict[str, Any]]) -> int:
    return max(row["run"]["listed"] for row in rows)


def mb(n: int) -> str:
    return f"{n / 2 ** 20:,.0f} MB"


def yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


# ---- Hugging Face: full size on meta, shrunk configs against FlopCounterMode ------------------

def matches(row: dict[str, Any]) -> bool | None:
    sh = row["shrunk"]
    if sh is None or "error" in sh:
        return None
    return bool(sh["dense_ours"] == sh["dense_flop_counter"])


def hf_row(row: dict[str, Any]) -> str:
    full, sh = row["full"], row["shrunk"]
    if "error" in full:
        cells = [f"error: {full['error']}", "", "", "", ""]
    else:
        cells = [f"{full['params']:,}", f"{full['macs']:,}", full["device"],
                 f"{full['seconds']:.2f}", f"{full['cpu_seconds']:.2f}"]
    if sh is None:
        cells += ["", "", "", "(not shrunk)"]
    elif "error" in sh:
        cells += [f"error: {sh['error']}", "", "", "**no**"]
    else:
        cells += [f"{sh['macs']:,}", f"{sh['dense_ours']:,}", f"{sh['dense_flop_counter']:,}",
                  yes(bool(matches(row)))]
    return f"| {row['name']} | {row['kind']} | " + " | ".join(cells) + " |"


def hf_section(rows: list[dict[str, Any]]) -> str:
    built = [r for r in rows if "error" not in r["full"]]
    checked = [r for r in rows if r["shrunk"] is not None]
    agree = [r for r in checked if matches(r)]
    unshrunk = ", ".join(r["name"] for r in rows if r["shrunk"] is None)
    unshrunk = (f" ({unshrunk} not shrunk: the script leaves nested text and vision configs at "
                f"full size)") if unshrunk else ""
    kinds = ", ".join(sorted(Counter(r["kind"] for r in rows)))
    table = "\n".join(hf_row(r) for r in rows)
    return f"""## Hugging Face: full-size configs and FlopCounterMode (`benchmarks/sweep_hf.py`)

Method: per architecture, (1) `summarize("hf:ARCH", depth=1)` with transformers' default
(full-size) config, on meta (fake tensors, then the CPU, where meta cannot run); seconds are
the wall and CPU time of that call after importing transformers and the model's modeling
module; (2) the same model with a shrunk config built for real on CPU: our MACs
(`device="cpu"`) against `torch.utils.flop_counter.FlopCounterMode` on the same inputs.
FlopCounterMode has no formula for the CPU attention kernels nor `_grouped_mm` (MoE experts),
so "dense" leaves those two out on both sides; attention and grouped matmuls are checked
against their closed forms in `tests/test_models_wild.py` (and SDPA in `tests/test_flops.py`).

The data covers {len(rows)} of the {listed(rows)} architectures in the script's list:

{runs_text(rows)}

| arch | kind | full-size params | full-size MACs | ran on | seconds | CPU s | shrunk MACs | dense: ours | dense: FlopCounterMode | match |
|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|
{table}

Result: {len(built)}/{len(rows)} build and trace at full size; {len(agree)}/{len(checked)}
shrunk configs match FlopCounterMode exactly{unshrunk}. Kinds: {kinds}.
"""


# ---- speed of full-size configs, one fresh process each --------------------------------------

def speed_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"| {row['spec']} | error: {row['error']} | | | | | | |"
    imports = f"{row['import_seconds']:.2f}" if "import_seconds" in row else "(in the wall time)"
    params = f"{row['params']:,}" if "params" in row else ""
    macs = f"{row['macs']:,}" if "macs" in row else ""
    return (f"| {row['spec']} | {params} | {macs} | {row.get('device', '')} | "
            f"{row['seconds']:.2f} | {row['cpu_seconds']:.2f} | {imports} | "
            f"{mb(row['peak_rss'])} |")


def speed_result(rows: list[dict[str, Any]]) -> str:
    timed = [r for r in rows if "error" not in r and "import_seconds" in r]
    if not timed:
        return "Result: no model of the list was measured without an error."
    slow_wall = max(timed, key=lambda r: r["seconds"])
    slow_cpu = max(timed, key=lambda r: r["cpu_seconds"])
    imports = [r["import_seconds"] for r in timed]
    slowest = (f"{slow_wall['spec']} ({slow_wall['seconds']:.2f} s wall, "
               f"{slow_wall['cpu_seconds']:.2f} s CPU)" if slow_wall is slow_cpu else
               f"{slow_wall['spec']} ({slow_wall['seconds']:.2f} s wall) and {slow_cpu['spec']} "
               f"({slow_cpu['cpu_seconds']:.2f} s CPU)")
    text = (f"Result: slowest after imports {slowest}; under the "
            f"{SPEED_TARGET_S:.0f} s target: wall {yes(slow_wall['seconds'] < SPEED_TARGET_S)}, "
            f"CPU {yes(slow_cpu['cpu_seconds'] < SPEED_TARGET_S)}. Imports alone (torch, "
            f"torchinspect, transformers, the modeling module): median "
            f"{statistics.median(imports):.1f} s wall.")
    by_name = {r["name"]: r for r in rows if "error" not in r}
    seconds, rss = LLAMA70B_TARGET
    if "llama3-70b" in by_name:
        r = by_name["llama3-70b"]
        text += (f" Llama-3-70B: {r['seconds']:.2f} s wall ({r['cpu_seconds']:.2f} s CPU) after "
                 f"imports and {mb(r['peak_rss'])} peak RSS (target {seconds:.0f} s and "
                 f"{rss / 1e9:.0f} GB: wall {yes(r['seconds'] < seconds)}, CPU "
                 f"{yes(r['cpu_seconds'] < seconds)}, memory {yes(r['peak_rss'] < rss)}).")
    if "llama3-70b-cli" in by_name:
        r = by_name["llama3-70b-cli"]
        text += (f" The same folder through the console command, imports and rendering "
                 f"included: {r['seconds']:.1f} s wall, {r['cpu_seconds']:.1f} s CPU, "
                 f"{mb(r['peak_rss'])} peak RSS, exit {r['exit']}.")
    return text


def speed_section(rows: list[dict[str, Any]]) -> str:
    table = "\n".join(speed_row(r) for r in rows)
    return f"""## Speed: `summary` of full-size configs, one fresh process each (`benchmarks/speed_hf.py`)

Method: for each model a new Python process imports torch, torchinspect, transformers and the
model's modeling module (timed apart: "imports"), then times `summarize(spec, depth=1)`
(build on meta + trace + summary data, with the memory lines' inference prediction, a second
meta forward under the memory tracker, as by default; what `inspect summary` does minus
rendering) in wall and CPU seconds; peak RSS is the process's own high-water mark (`VmHWM`, imports included).
`hf:ARCH` are transformers' default configs; "Llama-3-70B config.json folder" is a folder
holding only the `config.json` of meta-llama/Meta-Llama-3-70B (written by the script), and
the last row runs `inspect summary FOLDER --depth 1` whole (wall time from the parent,
interpreter start and imports included). `speed_hf.py --profile DIR` writes a cProfile of
each timed call (cProfile slows the call down, so its times are not the table's).

The data covers {len(rows)} of the {listed(rows)} models in the script's list:

{runs_text(rows)}

| model | params | MACs | ran on | seconds after imports | CPU s | imports s | peak RSS |
|---|---:|---:|---|---:|---:|---:|---:|
{table}

{speed_result(rows)}

`.item()` in the forward (BART, DeBERTa-v2): transformers' own checks call `.item()` on meta
(BART: the causal-mask shortcut `_ignore_causal_mask_sdpa`; DeBERTa-v2:
`warn_if_padding_and_no_attention_mask`) and skip it when the tensors are FakeTensors. So
when the meta forward fails with a value request, the trace is retried under
`torch._subclasses.FakeTensorMode` (fake stand-ins for the meta parameters, no ShapeEnv: any
other `.item()` still raises), and only if that fails too does the CPU fallback run; the
output then says "traced with fake tensors". A module whose forward truly needs values (a
plain `.item()` in user code, detection models' NMS) still falls back to CPU
(tests/test_trace.py).
"""


# ---- timm: every listed architecture ---------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def timm_section(rows: list[dict[str, Any]]) -> str:
    ok = [r for r in rows if r["ok"]]
    failed = [r for r in rows if not r["ok"]]
    devices = Counter(r["device"] for r in ok)
    wall = [r["seconds"] for r in rows]
    cpu = [r["cpu_seconds"] for r in rows]
    slowest = sorted(rows, key=lambda r: -r["cpu_seconds"])[:5]
    largest = max(ok, key=lambda r: r["params"]) if ok else None
    fails = "\n".join(f"- `{r['name']}`: {r['error']}" for r in failed) or "- none"
    where = ", ".join(f"{n} on {d}" for d, n in sorted(devices.items()))
    slow = ", ".join(f"{r['name']} {r['cpu_seconds']:.1f} s" for r in slowest)
    big = (f"; the largest is {largest['name']} ({largest['params']:,} parameters, "
           f"{largest['macs']:,} MACs at {largest['input']})") if largest else ""
    return f"""## timm (`benchmarks/sweep_timm.py`)

Method: the names of `timm.list_models()` through `summarize("timm:NAME", depth=1)` in one
process (1 torch thread), each model at timm's default input size, in a fixed shuffled order
(seed 0) so that a partial run is a spread sample of the list; one record per model appended
to `benchmarks/results/models-timm.jsonl`, rerunning the script resumes where it stopped
(`--limit N`, `--max-seconds S`).

**The data covers {len(rows)} of the {listed(rows)} architectures of `timm.list_models()`**:

{runs_text(rows)}

| measure | value |
|---|---|
| summarized | {len(ok)} ok, {len(failed)} failed ({where}) |
| wall seconds per model (after imports) | median {statistics.median(wall):.2f}, p90 {pct(wall, 0.9):.2f}, max {max(wall):.2f} |
| CPU seconds per model | median {statistics.median(cpu):.2f}, p90 {pct(cpu, 0.9):.2f}, max {max(cpu):.2f} |
| total | {sum(wall) / 60:.0f} min wall, {sum(cpu) / 60:.0f} min CPU |

Slowest (CPU): {slow}{big}.

Failures:

{fails}
"""


def models_page() -> tuple[str, list[str]]:
    hf, speed, timm = load_jsonl(HF), load_jsonl(SPEED), load_jsonl(TIMM)
    text = f"""# Models in the wild: timm and Hugging Face sweeps (issue 13)

Configs only: no weights are downloaded (`weights=None` / `pretrained=False`, no network).
Each run below names its machine and its load; on a loaded machine the wall times are upper
bounds and the CPU times the steadier figure.

{hf_section(hf)}
{speed_section(speed)}
{timm_section(timm)}"""
    return text, FILES


def models_summary() -> tuple[str, list[str]]:
    """The "Models in the wild" bullet of docs/results.md (included with --8<--)."""
    hf, speed, timm = load_jsonl(HF), load_jsonl(SPEED), load_jsonl(TIMM)
    ok = [r for r in timm if r["ok"]]
    built = [r for r in hf if "error" not in r["full"]]
    checked = [r for r in hf if r["shrunk"] is not None]
    timed = [r for r in speed if "error" not in r and "import_seconds" in r]
    runs = {(r["run"]["machine"]["cores"], r["run"]["versions"].get("timm", ""))
            for r in timm}
    m = timm[0]["run"]
    covered = (f"all {len(timm)} architectures of `timm.list_models()` measured"
               if len(timm) >= listed(timm) else
               f"{len(timm)} of the {listed(timm)} architectures of `timm.list_models()` "
               f"measured (a spread sample)")
    by_name = {r["name"]: r for r in speed if "error" not in r}
    text = (f"- **Models in the wild** ({m['machine']['cores']}-core CPU, torch "
            f"{m['versions']['torch']}, timm {m['versions']['timm']}, transformers "
            f"{hf[0]['run']['versions'].get('transformers', '-')}"
            f"{'; several runs' if len(runs) > 1 else ''}): {covered}, {len(ok)} "
            f"summarize on meta with no error (median "
            f"{statistics.median(r['cpu_seconds'] for r in timm):.2f} s CPU each after imports); "
            f"{len(built)} of {len(hf)} transformers architectures build and trace at full size, "
            f"and {sum(bool(matches(r)) for r in checked)} of {len(checked)} shrunk configs "
            f"match `FlopCounterMode` exactly.")
    if timed:
        text += (f" Full-size default configs take "
                 f"{min(r['cpu_seconds'] for r in timed):.2f} to "
                 f"{max(r['cpu_seconds'] for r in timed):.2f} s CPU after imports "
                 f"(`benchmarks/speed_hf.py`)")
        if "llama3-70b" in by_name:
            r = by_name["llama3-70b"]
            text += (f"; Llama-3-70B's `config.json` summarizes on meta to {r['params']:,} "
                     f"parameters and {r['macs'] / 1e12:.2f}T MACs at `{r['input']}` in "
                     f"{r['cpu_seconds']:.1f} s CPU after imports, {mb(r['peak_rss'])} peak RSS")
        text += "."
    text += " Details: [timm and Hugging Face sweeps](results/models.md).\n"
    return text, FILES
