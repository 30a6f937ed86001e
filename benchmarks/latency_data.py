"""The committed raw data of the latency prediction, read one way by every script and test.

Two measurement campaigns on the same H100 type (torch 2.11, cuDNN 9.19), both written by
``benchmarks/latency_measure.py``:

* ``results/latency/`` (sessions 6-8): ``tables.jsonl`` (op sweeps 1 and 2), ``kernels.jsonl``,
  ``probes.jsonl``, ``models.jsonl`` (31 models, bf16 and fp32 at batch 1 and 32; every one
  of them is in the DEVELOPMENT set now, whatever the ``set`` field of a line says);
* ``results/latency-h100-v2/`` (session 9, issue 40): ``floors.jsonl`` (sweep 4),
  ``tables-sweep3.jsonl.gz`` (sweep 3), ``probes.jsonl``, ``models.jsonl`` (the new
  development models and the validation set, bf16 at batch 1 and each model's large batch),
  ``train.jsonl`` (training steps).

What each op measurement costs *inside a CUDA graph* (``in_graph_us``): where the kernels
were profiled (sweeps 3 and 4), the span of one call's kernels plus the gap to the next
call's first kernel; else (sweeps 1 and 2) the per-call replay time less the replay's own
overhead spread over its ``reps`` calls (``replay_overhead_us``, measured on the profiled
sweeps: events around one replay of a graph of ``reps`` calls, against the calls' spans; for
the first campaign, against the ops both campaigns measured: ``first_campaign_overhead_us``).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
V1 = RESULTS / "latency"
V2 = RESULTS / "latency-h100-v2"
sys.path.insert(0, str(ROOT / "benchmarks"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of ``path`` (``.gz`` read as gzip); a missing file is no lines."""
    if not path.exists():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def op_rows() -> list[dict[str, Any]]:
    """Every measured op (sweeps 1-4) with a time, each with ``source`` (its file) and
    ``in_graph_us`` (what one call costs inside a CUDA graph)."""
    out = []
    for path in (V1 / "tables.jsonl", V2 / "tables-sweep3.jsonl.gz", V2 / "floors.jsonl"):
        for row in read_jsonl(path):
            if "spec" in row and "us" in row and "error" not in row:
                out.append({**row, "source": str(path.relative_to(RESULTS))})
    first, second = first_campaign_overhead_us(out), replay_overhead_us(out)
    biased = biased_conv_overhead_us(out)
    for row in out:
        overhead = first if row["source"].startswith("latency/") else second
        row["in_graph_us"] = in_graph_us(row, biased if biased_in_call(row["spec"]) else overhead)
    return out


def biased_in_call(spec: dict[str, Any]) -> bool:
    """Sweep 1's 2-D convolutions with a bias made a fresh random bias in every call: a
    random-number kernel in the graph, and the graph's random-state set-up at every replay
    (``CUDAGraph.replay``'s generator prologue), which the meta replay cannot see."""
    return spec["kind"] == "conv2d" and spec.get("sweep", 1) == 1 and spec.get("bias", True)


def biased_conv_overhead_us(rows: list[dict[str, Any]]) -> float:
    """What a replay of those convolutions cost beyond the same convolution without the
    in-call bias (profiled in sweep 4): the median over the shapes both measured of
    (per-call time - in-graph time without it) x calls per graph; the bias add itself is
    left in (the meta replay prices it)."""
    unbiased = {json.dumps([{k: v for k, v in r["spec"].items()
                             if k not in ("sweep", "bias")}, r["dtype"]], sort_keys=True):
                r["profile"]["span_us"] + r["profile"]["gap_between_calls_us"]
                for r in rows if profiled(r) and r["spec"]["kind"] == "conv2d"}
    excess = []
    for r in rows:
        key = json.dumps([{k: v for k, v in r["spec"].items() if k not in ("sweep", "bias")},
                          r["dtype"]], sort_keys=True)
        if biased_in_call(r["spec"]) and key in unbiased:
            excess.append((r["us"] - unbiased[key]) * r["reps"])
    return round(statistics.median(excess), 3) if excess else replay_overhead_us(rows)


def kernel_rows() -> list[dict[str, Any]]:
    """The kernel counts of single calls (sweep 1's ``kernels.jsonl`` and sweep 2's rows)."""
    return [r for r in read_jsonl(V1 / "kernels.jsonl") + read_jsonl(V1 / "tables.jsonl")
            if "kernels" in r and "error" not in r]


def profiled(row: dict[str, Any]) -> bool:
    p = row.get("profile") or {}
    return p.get("span_us") is not None and p.get("gap_between_calls_us") is not None


def replay_overhead_us(rows: list[dict[str, Any]]) -> float:
    """One replay's own cost (launch, events) over its calls' kernels and gaps: the median
    over the profiled ops of (per-call replay time - in-graph time) x calls in the graph."""
    excess = [(r["us"] - r["profile"]["span_us"] - r["profile"]["gap_between_calls_us"])
              * r["reps"] for r in rows if profiled(r)]
    return round(statistics.median(excess), 3) if excess else 0.0


def _same_op(row: dict[str, Any]) -> str:
    spec = {k: v for k, v in row["spec"].items() if k != "sweep"}
    return json.dumps([spec, row["dtype"]], sort_keys=True)


def first_campaign_overhead_us(rows: list[dict[str, Any]]) -> float:
    """The replay overhead of the first campaign's timings (sweeps 1 and 2: no profile),
    from the ops both campaigns measured: the median over those pairs of (first campaign's
    per-call time - the profiled in-graph time) x the first campaign's calls per graph."""
    profiled_us = {_same_op(r): r["profile"]["span_us"] + r["profile"]["gap_between_calls_us"]
                   for r in rows if profiled(r)}
    excess = [(r["us"] - profiled_us[_same_op(r)]) * r["reps"] for r in rows
              if not profiled(r) and r["source"].startswith("latency/")
              and _same_op(r) in profiled_us]
    return round(statistics.median(excess), 3) if excess else replay_overhead_us(rows)


def in_graph_us(row: dict[str, Any], overhead: float) -> float:
    """What one call of the op costs inside a CUDA graph (see the module docstring);
    ``overhead``: the replay overhead of the row's campaign (``first_campaign_overhead_us``
    for the rows of ``results/latency/``)."""
    if profiled(row):
        return float(row["profile"]["span_us"] + row["profile"]["gap_between_calls_us"])
    return max(float(row["us"]) - overhead / max(int(row.get("reps", 1)), 1), 0.05)


def kernel_gap_us(rows: list[dict[str, Any]]) -> float:
    """The gap a CUDA graph leaves between consecutive kernels: the median, over the
    single-kernel small-op floors (sweep 4), of last-kernel-end to next-call-start."""
    gaps = [r["profile"]["gap_between_calls_us"] for r in rows
            if profiled(r) and r["spec"].get("sweep") == 4
            and r["profile"].get("kernels_per_call") == 1]
    return round(statistics.median(gaps), 4) if gaps else 0.0


def probes() -> tuple[dict[str, Any], dict[str, Any]]:
    """(environment header, host probe) of the campaign whose models are predicted: the
    latest probe line of ``latency-h100-v2`` (else the first campaign's)."""
    for folder in (V2, V1):
        lines = read_jsonl(folder / "probes.jsonl")
        env = next((r for r in lines if "gpu" in r and "torch" in r), None)
        probe = next((r for r in reversed(lines) if "host" in r), None)
        if env is not None and probe is not None:
            return env, probe
    raise SystemExit("no probes.jsonl with a host probe in benchmarks/results/latency*")


def _cases(row: dict[str, Any], mode: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(c["dtype"], c["batch"]): c for c in row.get(mode, []) or []
            if c.get("status") == "ok" and c.get("median_ms")}


def model_rows() -> list[dict[str, Any]]:
    """One entry per measured model: ``set`` (dev or val; every model of the first campaign
    is development now), spec, input, args, and per (dtype, batch) the graph-replay and eager
    medians with the host's enqueue time; models measured in both campaigns keep the later."""
    rows: dict[str, dict[str, Any]] = {}
    for folder, relabel in ((V1, "dev"), (V2, None)):
        for row in read_jsonl(folder / "models.jsonl"):
            if "model" not in row:
                continue
            graphs, eager = _cases(row, "graphs"), _cases(row, "eager")
            keys = sorted(set(graphs) | set(eager))
            if not keys:
                continue
            cases = []
            for dtype, batch in keys:
                g, e = graphs.get((dtype, batch)), eager.get((dtype, batch))
                cases.append({"dtype": dtype, "batch": batch,
                              "graph_ms": g["median_ms"] if g else None,
                              "eager_ms": e["median_ms"] if e else None,
                              "host_enqueue_ms": e.get("host_enqueue_ms") if e else None})
            rows[row["model"]] = {"set": relabel or row["set"], "model": row["model"],
                                  "input": row.get("input"), "args": row.get("args") or [],
                                  "cases": cases, "profile": row.get("profile") or {},
                                  "source": str((folder / "models.jsonl").relative_to(RESULTS)),
                                  "errors": {f"{c['dtype']}/{c['batch']}": c["error"]
                                             for c in row.get("graphs", []) or []
                                             if c.get("status") != "ok" and c.get("error")}}
    return list(rows.values())


def train_rows() -> list[dict[str, Any]]:
    """One entry per model with measured training steps (``train.jsonl``): per batch the
    medians of forward (+loss), backward, optimizer and the whole step, in ms."""
    out = []
    for row in read_jsonl(V2 / "train.jsonl"):
        if "model" not in row:
            continue
        ok = [r for r in row.get("results", []) if "step_ms" in r]
        out.append({"set": row["set"], "model": row["model"], "input": row.get("input"),
                    "args": row.get("args") or [], "amp": row.get("amp"),
                    "results": ok, "error": row.get("error"),
                    "failed": {r["batch"]: r["error"] for r in row.get("results", [])
                               if "error" in r}})
    return out


def planned() -> dict[str, list[tuple[str, str | None, list[str], int]]]:
    """The committed model lists (``latency_measure.py``): set -> (spec, input, args, large
    batch), chosen before any of it was measured."""
    import latency_measure

    out: dict[str, list[tuple[str, str | None, list[str], int]]] = {"dev": [], "val": []}
    for set_name, spec, inputs, args, large in latency_measure.MODELS:
        out[set_name].append((spec, inputs, list(args), large))
    return out
