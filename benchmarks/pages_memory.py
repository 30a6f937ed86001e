"""RESULTS-memory.md and its summary for docs/concepts/memory.md, from the committed raw data.

Registered in report.py (``make bench-report``; ``report.py --check`` fails when a page
differs from what its data renders). Every figure is computed here from
``benchmarks/results/``:

* issue 40's sets (``memory_validation.py``): ``memory-validation-h100.jsonl`` (measured),
  ``memory-validation-predicted.jsonl`` (without a GPU), ``memory-validation-calibrated-h100.jsonl``
  (calibrated on the GPU, when measured);
* issue 22/32's sets (``memory_heldout.py``): ``memory-heldout-h100/`` (measured, calibrated
  in GPU run 6), ``memory-heldout-predicted/`` and ``memory-heldout-predicted-cv/`` (without
  a GPU, with today's model);
* the cuDNN RNN runs and the RNN workspace model's cross-validation, the op-by-op cases, the
  --fit probes and FSDP2;
* the memory model's constants (``torchinspect.memory.constants``).

A prediction without a GPU stores the range of its cuDNN workspaces (``ws_low``-``ws_high``);
the page widens it with the margins shipped today (data/peak_margins.json), so regenerated
margins re-render without new predictions. What is not measured yet is listed, with the
command that measures it; the page renders whatever the files hold.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 2 ** 20
MODES = ("inference", "adamw-fp32", "adamw-bf16amp")
KIND = {"inference": "inference", "adamw-fp32": "training", "adamw-bf16amp": "training-amp"}
MEASURED = "memory-validation-h100.jsonl"
PREDICTED = "memory-validation-predicted.jsonl"
CALIBRATED = "memory-validation-calibrated-h100.jsonl"
HELDOUT = ("memory-heldout-h100", "memory-heldout-predicted", "memory-heldout-predicted-cv")
RESUME = ("python benchmarks/memory_validation.py measure "
          "benchmarks/results/memory-validation-h100.jsonl --sets rnnproj,val --jobs 6",
          "python benchmarks/memory_validation.py calibrate "
          "benchmarks/results/memory-validation-calibrated-h100.jsonl "
          "--sets rnnproj,val,heldout-rnn --jobs 4")
ND_OWNERS = "cudnn-workspace-nd-models.json"  # cudnn_workspace_sweep.py problems-nd
ND_MEASURED = "cudnn-workspace-nd-h100.jsonl"
ND_RESUME = ("python benchmarks/cudnn_workspace_sweep.py problems-nd nd.json",
             "python benchmarks/cudnn_workspace_sweep.py measure nd.json "
             f"benchmarks/results/{ND_MEASURED} --deadline 420",
             "python benchmarks/cudnn_workspace_sweep.py build "
             f"benchmarks/results/cudnn-workspace-h100.jsonl.gz benchmarks/results/{ND_MEASURED}")


# -- loading -------------------------------------------------------------------------------

def _lines(name: str) -> list[dict[str, Any]]:
    path = RESULTS / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _margins() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped margins (kind -> Margin) and the file's header."""
    from torchinspect.memory.margins import MARGINS_FILE, margins_from_dict

    data = json.loads((HERE.parent / "src/torchinspect/memory/data" / MARGINS_FILE).read_text())
    return margins_from_dict(data), data


def _sets() -> dict[str, list[str]]:
    """Issue 40's sets as memory_validation.py defines them (the model names, in order)."""
    import sys

    sys.path.insert(0, str(HERE))
    import memory_validation

    return {name: list(models) for name, models in memory_validation.SETS.items()}


def _heldout_sets() -> dict[str, list[str]]:
    import sys

    sys.path.insert(0, str(HERE))
    import memory_heldout

    return {"dev": list(memory_heldout.DEV), "val": list(memory_heldout.VAL)}


def _widened(pred: dict[str, Any], mode: str, margins: dict[str, Any]) -> tuple[int, int]:
    """The range of a prediction without a GPU, widened with today's margins (a prediction
    that stored only its widened range keeps it)."""
    if "ws_low" not in pred:
        return pred.get("low", pred.get("peak_low")), pred.get("high", pred.get("peak_high"))
    low = pred["ws_low"] if pred["ws_low"] is not None else pred["peak"]
    high = pred["ws_high"] if pred["ws_high"] is not None else pred["peak"]
    margin = margins.get(KIND[mode])
    return margin.widen(low, high) if margin is not None else (low, high)


def issue40_rows(margins: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per set of memory_validation.py: one row per (model, mode), with what exists."""
    measured = {(r["model"], r["mode"]): r for r in _lines(MEASURED) if "measured" in r}
    predicted = {(r["model"], r["mode"]): r["predicted"] for r in _lines(PREDICTED)
                 if "predicted" in r and not r.get("dry_run")}
    calibrated = {(r["model"], r["mode"]): r["predicted"] for r in _lines(CALIBRATED)
                  if "predicted" in r and not r.get("dry_run")}
    out: dict[str, list[dict[str, Any]]] = {}
    for set_name, models in _sets().items():
        rows = []
        for model in models:
            for mode in MODES:
                m, p, c = (d.get((model, mode)) for d in (measured, predicted, calibrated))
                row: dict[str, Any] = {"model": model, "mode": mode,
                                       "real": m["measured"]["peak"] if m else None,
                                       "gpu": m.get("gpu") if m else None}
                if p is not None:
                    row.update(point=p["peak"], where=p.get("high_at") or p.get("where", ""),
                               hash=p.get("model_hash"))
                    row["low"], row["high"] = _widened(p, mode, margins)
                if c is not None:
                    row["cal"] = c["peak"]
                    row["cal_hash"] = c.get("model_hash")
                rows.append(row)
        out[set_name] = rows
    return out


def heldout_rows(margins: dict[str, Any], folder: str = HELDOUT[1]) -> dict[str, list[dict[str, Any]]]:
    """Issue 22/32's sets (memory_heldout.py): measured and calibrated in GPU run 6, an RNN
    model's calibrated peak from today's calibrated run where there is one; predicted without
    a GPU (``folder``)."""
    today = {(r["model"], r["mode"]): r["predicted"] for r in _lines(CALIBRATED)
             if "predicted" in r and not r.get("dry_run")}
    out: dict[str, list[dict[str, Any]]] = {}
    for set_name, models in _heldout_sets().items():
        rows = []
        for model in models:
            mpath, ppath = (RESULTS / HELDOUT[0] / f"{model}.json",
                            RESULTS / folder / f"{model}.json")
            if not mpath.exists() or not ppath.exists():
                continue
            mrow, prow = json.loads(mpath.read_text()), json.loads(ppath.read_text())
            for mode in MODES:
                real = mrow.get(mode, {}).get("measured", {}).get("peak")
                pred = prow.get(mode, {})
                if not real or "peak" not in pred:
                    continue
                cal = mrow.get(mode, {}).get("calibrated", {}).get("peak")
                fresh = today.get((model, mode))
                low, high = (_widened(pred, mode, margins) if folder == HELDOUT[1]
                             else (pred["peak_low"], pred["peak_high"]))
                rows.append({"model": model, "mode": mode, "real": real, "gpu": mrow["gpu"],
                             "cal": fresh["peak"] if fresh else cal, "cal_today": bool(fresh),
                             "point": pred["peak"], "low": low, "high": high,
                             "where": pred.get("high_at") or pred.get("where", "")})
        out[set_name] = rows
    return out


# -- figures -------------------------------------------------------------------------------

def _err(pred: int, real: int) -> float:
    return (pred - real) / real


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The target figures over the rows that have a measurement and a prediction."""
    both = [r for r in rows if r.get("real") and r.get("point") is not None]
    cal = [r for r in rows if r.get("real") and r.get("cal")]
    widths = [(r["high"] - r["low"]) / r["real"] for r in both]
    errs = [abs(_err(r["point"], r["real"])) for r in both]
    cal_errs = [abs(_err(r["cal"], r["real"])) for r in cal]
    return {
        "n": len(both), "rows": len(rows), "measured": sum(bool(r.get("real")) for r in rows),
        "inside": sum(r["low"] <= r["real"] <= r["high"] for r in both),
        "within5": sum(e <= 0.05 for e in errs),
        "median_err": statistics.median(errs) if errs else None,
        "median_width": statistics.median(widths) if widths else None,
        "widest": max(widths) if widths else None,
        "cal_n": len(cal), "cal3": sum(e <= 0.03 for e in cal_errs),
        "cal_worst": max(cal_errs) if cal_errs else None,
        "cal_median": statistics.median(cal_errs) if cal_errs else None,
    }


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _frac(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "-"


def target_line(f: dict[str, Any]) -> str:
    """Issue 40's memory targets on one set: yes/no per target."""
    def verdict(ok: bool | None) -> str:
        return "-" if ok is None else "yes" if ok else "**no**"

    n = f["n"]
    inside = verdict(f["inside"] == n if n else None)
    point = verdict(f["within5"] >= 0.9 * n if n else None)
    width = verdict(f["median_width"] < 0.10 if f["median_width"] is not None else None)
    cal = verdict(f["cal3"] == f["cal_n"] if f["cal_n"] else None)
    return (f"every peak inside [low, high]: {inside}; point within 5% for 90%: {point}; "
            f"median width under 10%: {width}; calibrated within 3% for every peak: {cal}")


def summary_table(sets: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = ["| set | peaks measured | without a GPU: inside [low, high] | point within 5% | "
             "median \\|error\\| | median width (widest) | calibrated within 3% (worst) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, f in sets:
        cal = (f"{_frac(f['cal3'], f['cal_n'])} ({_pct(f['cal_worst'])})" if f["cal_n"]
               else "not measured yet")
        lines.append(
            f"| {label} | {f['measured']}/{f['rows']} | {_frac(f['inside'], f['n'])} | "
            f"{_frac(f['within5'], f['n'])} | {_pct(f['median_err'], 2)} | "
            f"{_pct(f['median_width'])} ({_pct(f['widest'], 0)}) | {cal} |")
    return lines


def row_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | mode | measured MiB | calibrated | no GPU: point | range MiB | inside | "
             "upper end set by |", "|---|---|---:|---:|---:|---:|:-:|---|"]
    for r in rows:
        real = r.get("real")
        cal = f"{100 * _err(r['cal'], real):+.1f}%" if real and r.get("cal") else "-"
        if r.get("point") is None:
            lines.append(f"| {r['model']} | {r['mode']} | "
                         f"{f'{real / MIB:,.0f}' if real else 'not measured'} | {cal} | "
                         "not predicted | | | |")
            continue
        rng = f"{r['low'] / MIB:,.0f}-{r['high'] / MIB:,.0f}"
        if not real:
            lines.append(f"| {r['model']} | {r['mode']} | not measured | - | "
                         f"{r['point'] / MIB:,.0f} MiB | {rng} | | {r['where']} |")
            continue
        inside = "yes" if r["low"] <= real <= r["high"] else "NO"
        lines.append(f"| {r['model']} | {r['mode']} | {real / MIB:,.0f} | {cal} | "
                     f"{100 * _err(r['point'], real):+.1f}% | {rng} | {inside} | {r['where']} |")
    return lines


def missing(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What the files lack, per set: measurements, predictions, calibrated predictions."""
    lines = []
    for set_name, found in rows.items():
        if set_name == "heldout-rnn":
            continue
        for what, key in (("measured", "real"), ("predicted without a GPU", "point"),
                          ("calibrated", "cal")):
            lack: dict[str, list[str]] = {}
            for r in found:
                if r.get(key) is None:
                    lack.setdefault(r["model"], []).append(r["mode"])
            if lack:
                count = sum(len(v) for v in lack.values())
                names = [m if len(v) == len(MODES) else f"{m} ({', '.join(v)})"
                         for m, v in lack.items()]
                lines.append(f"- `{set_name}`, not {what} yet ({count} of {len(found)} peaks): "
                             + ", ".join(names))
    return lines


def nd_gap() -> list[str]:
    """The generic 1-D, 3-D and transposed convolutions of the workspace sweep, while their
    GPU run is missing: what the table lacks, and the commands that measure and add it."""
    owners = RESULTS / ND_OWNERS
    if (RESULTS / ND_MEASURED).exists() or not owners.exists():
        return []
    configs = json.loads(owners.read_text())
    problems = len({k for keys in configs.values() for k in keys})
    return [f"- the cuDNN workspace table, not measured yet: {problems:,} problems of "
            f"{len(configs)} generic 1-D, 3-D and transposed convolution configurations "
            "(`cudnn_workspace_sweep.py problems-nd`, listed in `results/" + ND_OWNERS + "`). "
            "The shipped table holds no such convolution: their workspaces are estimated from "
            "2-D problems (the rows below whose upper end a `conv1d`, `conv3d` or "
            "`conv_transpose` sets). The list, the measurement (GPU), the table rebuilt; then "
            "the sets are predicted again:", "",
            *[f"    PYTHONPATH=src {c}" for c in ND_RESUME], ""]


# -- the pages -----------------------------------------------------------------------------

def _issue40(margins: dict[str, Any], header: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    rows = issue40_rows(margins)
    held = heldout_rows(margins)
    cv = heldout_rows(margins, HELDOUT[2])
    dev = figures(rows["rnnproj"])
    val = figures(rows["val"])
    hashes = sorted({r["hash"] for rs in rows.values() for r in rs if r.get("hash")})
    cal_hashes = sorted({r["cal_hash"] for rs in rows.values() for r in rs if r.get("cal_hash")})
    sets = [("development: LSTMs with projections (`rnnproj`)", dev),
            ("**validation (new, never tuned on: `val`)**", val),
            ("development of issue 22/32", figures(held["dev"])),
            ("same, cross-validated (own table problems and errors left out)", figures(cv["dev"])),
            ("validation of issue 32 (seen before: re-predicted with this model)",
             figures(held["val"]))]
    gpus = sorted({r["gpu"] for rs in rows.values() for r in rs if r.get("gpu")})
    kinds = "; ".join(f"{k} {100 * m.low:+.2f}% to {100 * m.high:+.2f}% (n={m.n})"
                      for k, m in margins.items())
    lines = [
        f"Measured on {', '.join(gpus) or 'no GPU yet'} (torch 2.11, cuDNN 9.19), each (model, "
        "mode) in a fresh process (`memory_validation.py measure`); predicted without a GPU on "
        "the CPU-only machine with the shipped table (`memory_validation.py predict`, memory "
        f"model {', '.join(hashes) or '-'}); calibrated on the GPU (`memory_validation.py "
        f"calibrate`, memory model {', '.join(cal_hashes) or 'none yet'}). Ranges widened with "
        f"the shipped margins ({kinds}; {header['set']}).", "",
        *summary_table(sets), "",
        f"Issue 40's memory targets on the validation set (the peaks measured so far): "
        f"{target_line(val)}.", ""]
    gaps = missing(rows)
    if gaps:
        lines += ["Not in the files yet (the page renders what they hold; both commands "
                  "append only what their file lacks):", "", *gaps, "",
                  *[f"    PYTHONPATH=src {c}" for c in RESUME], ""]
    lines += nd_gap()
    lines += ["### Development: LSTMs with projections (`rnnproj`)", "",
              *row_table(rows["rnnproj"]), "",
              "### Validation (new, chosen before any measurement, never tuned on: `val`)", "",
              *row_table(rows["val"]), ""]
    return lines, {"dev": dev, "val": val, "sets": sets, "held": held, "cv": cv}


def _heldout_tables(found: dict[str, Any]) -> list[str]:
    held = found["held"]
    lines = []
    for key, label in (("dev", "Development set (issue 22's models and issue 32's misses)"),
                       ("val", "Validation set of issue 32 (seen before: its results were "
                               "read while the RNN path was reworked; re-predicted with "
                               "this model)")):
        rows = held[key]
        today = sum(r["cal_today"] for r in rows)
        lines += [f"### {label}: {len({r['model'] for r in rows})} models, {len(rows)} peaks",
                  "", "Calibrated: GPU run 6 (the code of that run)" + (
                      f", {today} RNN peaks calibrated again with this model" if today else "")
                  + "; without a GPU: this model.", "", *row_table(rows), ""]
    return lines


def _rnn_section() -> list[str]:
    """The cuDNN RNN runs through the memory model, and the workspace model's CV."""
    cv = json.loads((RESULTS / "cudnn-rnn-workspace-cv.json").read_text())
    lines = ["| op / cell | problems (configurations) | model: median \\|error\\| | p90 | "
             "within 5% | worst | nearest measured, scaled: median | within 5% | "
             "inside a range whose envelope left the configuration out |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, b in cv["data"]["by"].items():
        m, n = b["model"], b["nearest"]
        lines.append(f"| {key} | {m['n']} ({b['configurations']}) | {_pct(m['median'])} | "
                     f"{_pct(m['p90'])} | {_frac(m['within_5pct'], m['n'])} | "
                     f"{_pct(m['worst'], 0)} | {_pct(n['median'])} | "
                     f"{_frac(n['within_5pct'], n['n'])} | "
                     f"{_frac(b['inside_cv_envelope'], m['n'])} |")
    return lines


def _constants() -> list[str]:
    from torchinspect.memory.constants import DATA_TABLES, TABLE

    lines = ["| constant | value | provenance | source | measured on | fitted or checked on |",
             "|---|---:|---|---|---|---|"]
    for c in (*TABLE, *DATA_TABLES):
        value = "(file)" if c.unit == "table" else f"{c.value:,}" if isinstance(
            c.value, int) else f"{c.value:g}"
        lines.append(f"| `{c.name}` | {value} {'' if c.unit == 'table' else c.unit} | "
                     f"{c.provenance} | {c.source} | {'H100' if c.card else ''} | "
                     f"{c.fitted_on} |")
    return lines


def _fsdp() -> list[str]:
    data = json.loads((RESULTS / "memory-fsdp-h100x2.json").read_text())
    lines = ["| model | mode | unit | measured MiB (rank 0 / rank 1) | predicted MiB | error | "
             "peak at (predicted) |", "|---|---|---|---:|---:|---:|---|"]
    errors = []
    for row in data["rows"]:
        p = row.get("predicted")
        measured = [r["peak"] for r in row["ranks"]]
        if p is None:
            continue
        worst = max(measured)
        err = (p["predicted"] - worst) / worst
        errors.append(abs(err))
        lines.append(f"| {row['model']} | {row['mode']} | {p['unit']} | "
                     f"{' / '.join(f'{m / MIB:,.0f}' for m in measured)} | "
                     f"{p['predicted'] / MIB:,.0f} | {err:+.1%} | {p['where']} |")
        for phase, value in sorted(p["phases"].items()):
            got = [r.get(phase) for r in row["ranks"]]
            if all(g is not None for g in got):
                lines.append(f"|  | {phase} | | {' / '.join(f'{g / MIB:,.0f}' for g in got)} | "
                             f"{value / MIB:,.0f} | {(value - max(got)) / max(got):+.1%} | |")
    lines += ["", f"{data['device']}; {len(errors)} peaks: median |error| "
              f"{statistics.median(errors):.2%}, max {max(errors):.2%}, within 5%: "
              f"{sum(e <= 0.05 for e in errors)}/{len(errors)}."]
    return lines


def memory_page() -> tuple[str, list[str]]:
    import sys

    sys.path.insert(0, str(HERE))
    import fit_report
    import memory_optrace

    margins, header = _margins()
    issue40, found = _issue40(margins, header)
    optrace = memory_optrace.report(RESULTS / "memory-optrace-h100",
                                    RESULTS / "memory-optrace-h100-before")
    optrace = optrace.replace(str(RESULTS), "benchmarks/results")
    fit = fit_report.render(json.loads((RESULTS / "fit-resnet50-h100.json").read_text()),
                            json.loads((RESULTS / "fit-resnet50-predicted.json").read_text()))
    text = "\n".join([
        "# inspect memory: predicted vs measured peak GPU memory", "",
        INTRO, "",
        "## Issue 40: LSTMs with projections and a new validation set", "",
        ISSUE40_METHOD, "", *_machines(), *issue40,
        "## Issue 22/32: the development set and the earlier validation set", "",
        HELDOUT_METHOD, "", *_heldout_tables(found),
        "## cuDNN RNN: projections, weights, reserve, workspace", "", RNN_TEXT, "",
        *_rnn_section(), "",
        "## The memory model's constants", "", CONSTANTS_TEXT, "", *_constants(), "",
        "## CUDA kernels beyond their outputs, op by op (GPU run 6)", "", OPTRACE_TEXT, "",
        optrace, "", OPTRACE_AFTER, "",
        "## `--fit 80GB` against the GPU (GPU run 4)", "", FIT_TEXT, "", fit, "",
        "## FSDP2 over 2 GPUs (`--fsdp 2`)", "", FSDP_TEXT, "", *_fsdp(), "", FSDP_AFTER, "",
        "## Other checks", "", OTHER_TEXT, ""])
    files = [MEASURED, PREDICTED, *([CALIBRATED] if (RESULTS / CALIBRATED).exists() else []),
             *HELDOUT, "cudnn-rnn-workspace-cv.json", "memory-optrace-h100",
             "fit-resnet50-h100.json", "memory-fsdp-h100x2.json"]
    return text, files


def _machines() -> list[str]:
    """The machine lines of issue 40's files (the run header of each file's first record)."""
    from pagetext import machine_line

    lines = []
    for name in (MEASURED, PREDICTED, CALIBRATED):
        runs = [r["run"] for r in _lines(name) if "run" in r]
        if runs:
            lines += [f"`results/{name}`. {machine_line(runs[0])}", ""]
    return lines


def memory_summary() -> tuple[str, list[str]]:
    """The summary in docs/concepts/memory.md: the targets per set, the margins."""
    margins, header = _margins()
    _, found = _issue40(margins, header)
    text = "\n".join([
        "Generated from the committed raw data (the per-peak tables, the machine and the "
        "method: [Measured results: memory](../results/memory.md)).", "",
        *summary_table(found["sets"]), "",
        f"Issue 40's memory targets on the new validation set (the peaks measured so far): "
        f"{target_line(found['val'])}.", ""])
    return text, [MEASURED, PREDICTED, *HELDOUT]


INTRO = """`inspect memory` predicts the peak of `torch.cuda.max_memory_allocated()` of an inference
and of a training step (docs/concepts/memory.md). This page compares predictions with the
GPU on development sets (what the predictor was tuned on) and validation sets (chosen before
any measurement and never tuned on), without a GPU (the shipped cuDNN workspace table; a
`peak_low`-`peak_high` range) and calibrated on the GPU (every cuDNN workspace measured op
by op). Every number here is computed by `benchmarks/pages_memory.py` from the raw data in
`benchmarks/results/` (`make bench-report`)."""

ISSUE40_METHOD = """`benchmarks/memory_validation.py`: two sets, chosen and committed before any measurement:
`rnnproj` (development: four models around an `nn.LSTM` with `proj_size`: three layers
batch-first, two layers bidirectional, one layer time-major, two layers with dropout) and
`val` (validation: 15 models no memory set used, 1-D convolutions dilated, depthwise and
transposed, 2-D and 3-D transposed convolutions, a 3-D CNN, RNNs with and without
projections, a causal `nn.TransformerDecoder`, GPT-NeoX and T5 from configs, a ViT and a
CNN). Each model in three modes: inference (fp32, eval, `inference_mode`), AdamW fp32, AdamW
with bf16 autocast (fp32 master weights); loss = sum of the first floating output; two
steps; the peak is the largest phase peak of `verify.measure`. The validation set was
predicted once, with the final model, before its figures were looked at."""

HELDOUT_METHOD = """`benchmarks/memory_heldout.py`: issue 22's twelve models and the misses issue 32 names
(development), and 17 models fixed before measuring for issue 32 (validation). Measured and
calibrated in GPU run 6 (NVIDIA H100 80GB HBM3, each model in a fresh process); predicted
again without a GPU with this model. The issue-32 validation set has been seen (its RNN rows
were read while the RNN path was reworked, `rnn-tanh-2` earlier): its figures are not a
held-out measure any more. The cross-validated development line replays each development
model with its own torchvision problems and RNN configurations left out of the workspace
table and its own errors left out of the margins."""

RNN_TEXT = """`benchmarks/cudnn_rnn_memory.py` measured on the same H100: LSTM, GRU and RNN, 1-3
layers (`results/cudnn-rnn-h100.jsonl`, 120 cases), and LSTMs with `proj_size` 100-512 beside
the same LSTMs without it, 1-4 layers, uni- and bidirectional, fp32 and bf16
(`results/cudnn-rnn-proj-h100.jsonl`, 120 cases; `nn.GRU` refuses `proj_size`): the reserve
and the flat weight layout read from the autograd node, the forward and backward peaks.
`tests/test_memory_rnn.py` runs every case through the memory model (fake tensors, the
allocator's replay) without a GPU: the reserve matches to the byte, the flat weights' names,
shapes and buffers match PyTorch's layout on the GPU, what the forward keeps and the
backward leaves match within the allocator's block rounding (1.1 MiB), and the backward
workspace each measured backward peak implies is the training forward's within 2 MiB.

An RNN configuration nobody measured gets its workspace from a linear model in its shapes
(`src/torchinspect/memory/rnn_workspace.py`, fitted on the table's RNN entries), where it
took the nearest measured problem scaled by size before. Each configuration of the table
left out in turn (`cudnn_workspace_sweep.py rnn-check`, `results/cudnn-rnn-workspace-cv.json`):"""

CONSTANTS_TEXT = """Every number of the model, with where it comes from (`src/torchinspect/memory/constants.py`;
`tests/test_memory_constants.py` fails when a module keeps a number of its own): read from
PyTorch's or a library's source, measured on the H100 (the raw data named), or fitted on a
development set."""

OPTRACE_TEXT = """`benchmarks/memory_optrace.py gpu` runs small models that each exercise one path where CUDA
takes another kernel than the CPU fake run (or allocates inside a kernel), each in a fresh
process on the GPU: the three phases measured, the calibrated prediction, and two recordings
of the same step (per aten op the allocated bytes before, at its peak and after it; the
allocator's own trace). `memory_optrace.py compare DIR` replays the prediction op by op beside
the GPU's; that is how each cause in docs/concepts/memory.md ("CUDA's own paths") was found.
`before`: the calibrated prediction of the code before that change (run 4)."""

OPTRACE_AFTER = """One case is not synthetic: `rnn-tanh-bf` is the issue-32 validation set's `rnn-tanh-2`
(same layers, shape and batch). The RNN rows were calibrated with the code of GPU run 6,
before the backward was modelled as cuDNN's two calls (data, then weights once the gradient
copy is freed): that run's 1-2% over-predictions of RNN training peaks are the double-counted
copy."""

FIT_TEXT = """`benchmarks/fit_check.py resnet50 3,224,224 80GB` on the GPU: allocator capped at 80e9
bytes (`set_per_process_memory_fraction`), doubling then bisection, each probe two AdamW fp32
steps (`memory.verify.measure`). `benchmarks/fit_report.py` predicts every probed batch
without a GPU and runs `inspect memory --fit`'s own search on the predictions. The GPU's cap
applies to *reserved* memory, the prediction is of allocated memory, so the GPU runs out a
little before the predicted peak reaches the budget."""

FSDP_TEXT = """`benchmarks/memory_fsdp.py` predicts the per-GPU peak of FSDP2 training (`fully_shard` on
each unit, then the root; FSDP2's defaults) and measures it under `torchrun --nproc-per-node
2` (method: docs/concepts/memory-fsdp.md): 2 x NVIDIA H100 80GB HBM3 of one host, NCCL,
torch 2.11.0+cu130; predictions on the CPU-only machine (`results/memory-fsdp-predicted.json`).
The batch is the batch per GPU: GPT-2 small 8x1024, the scaled llama 8x1024, resnet50
32x3x224x224; Adam fp32, and AdamW with bf16 autocast."""

FSDP_AFTER = """A second run with the models in reverse order (`memory-fsdp-h100x2-reversed.json`) gave the
same peaks within 3 MiB. An earlier harness measured all models in one process without
`gc.collect()` between them (FSDP2's hooks form reference cycles): the harness now collects
first and records the memory allocated before each measurement (0 on both ranks)."""

OTHER_TEXT = """- `pytest -m cuda` (GPU run 6): `results/cuda-tests-h100-session8.txt`; issue 40's CUDA
  test of the LSTM-projection models: `.venv/bin/pytest tests/test_memory_rnn.py -m cuda -q`.
- `--checkpointing` on a CLI-built model (GPU run 3): `results/memory-checkpointing-verify-h100.txt`.
- Prediction time and the zoo:llama-70b step: `benchmarks/perf_predict.py`,
  `results/memory-predict-perf.json`; the memory line's cost in `inspect summary`:
  [the trace page](trace.md)."""


def fit() -> str:
    """The --fit block of docs/concepts/memory.md (``fit_report.py``'s table): --fit on
    predictions against --fit on the GPU."""
    import sys

    sys.path.insert(0, str(HERE))
    from fit_report import render

    measured = json.loads((RESULTS / "fit-resnet50-h100.json").read_text())
    predicted = json.loads((RESULTS / "fit-resnet50-predicted.json").read_text())
    return render(measured, predicted)
