"""Build a GPU's latency table from the committed op measurements, then predict the models.

Inputs: the raw data of ``benchmarks/latency_data.py`` (two campaigns on one H100 type).

1. **Curves** (``build_curves``): every measured op is replayed on meta through the
   predictor's own recorder (``record_call``) for its FLOPs, bytes and class; its efficiency
   is its roofline time over what the call costs inside a CUDA graph (``in_graph_us``); per
   class and dtype the points are binned by log10(roofline µs), quarter decades, median of
   each bin. Where a call ran more than one op (a convolution and its bias add), the others'
   prices from a first pass are taken off first. The small-kernel floors (sweep 4) extend
   every class down to one thread block; below that a curve keeps its time (the floor).
2. **The recurrent step curve** (``rnn_curve``): cuDNN LSTM/GRU calls of sweep 3, less their
   input GEMMs and state set-up, per step kernel against the step kernel's roofline.
3. **Fast-path factors**: PyTorch's fused encoder layer and MHA (sweep 2) against the price
   of the ops the meta trace records for them.
4. **Kernel gap**: the gap a graph leaves between kernels (sweep 4). **Host factor**: the
   median over the DEVELOPMENT set's eager runs of measured host enqueue time / (dispatched
   ops x op_us + module calls x module_us), with each campaign's own host probe.
5. **Training constants** (``latency/train.py``): fitted on the DEVELOPMENT set's training
   steps only (``train_constants``).

Then every model of both sets is predicted (``predict_models``; graph replay, eager and the
training step) and the predictions are written as raw data:
``benchmarks/results/latency-h100-v2/predictions.json``, which ``pages_latency.py`` renders
into ``benchmarks/RESULTS-latency.md`` and ``tests/test_latency_replay.py`` replays.

Usage: ``python benchmarks/latency_tables.py [--gpu h100] [--dev-only] [--models A,B]``.
``--dev-only`` builds the table and predicts the development set alone and writes nothing (the
validation set is predicted once, at the end, by a run without it). Set
``LATENCY_TRACE_CACHE=/tmp/x.pkl`` to reuse the meta traces between runs (development aid).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import latency_data as data

ROOT = data.ROOT
OUT = data.V2 / "predictions.json"
TABLE_DIR = ROOT / "src" / "torchinspect" / "latency" / "tables"
os.chdir(ROOT)  # the raw data names the zoo models by their path from the checkout root

COMPOSITE = ("encoder_layer", "mha", "decoder_layer", "mha_masked")  # whole layers
RNN = ("rnn",)


def roofline(op: Any, gpu: Any, dtype: str) -> float:
    from torchinspect.latency.roofline import roofline_on

    return roofline_on(op, gpu, dtype, None)


def _replayed(rows: list[dict[str, Any]], kinds: tuple[str, ...] | None = None,
              skip: tuple[str, ...] = (), cache: dict[Any, Any] | None = None
              ) -> list[tuple[dict[str, Any], Any]]:
    """(row, ops with kernels of its meta replay) for the op rows of ``kinds``."""
    import latency_ops

    from torchinspect.latency.ops import record_call

    out = []
    for row in rows:
        kind = row["spec"]["kind"]
        if (kinds is not None and kind not in kinds) or kind in skip:
            continue
        key = ("op", json.dumps(row["spec"], sort_keys=True), row["dtype"])
        if cache is None or key not in cache:
            trace = record_call(latency_ops.build(row["spec"], "meta", row["dtype"]),
                                dtype=row["dtype"])
            if cache is not None:
                cache[key] = trace
        trace = cache[key] if cache is not None else trace
        ops = [op for op in trace.ops if op.kernels]
        if ops:
            out.append((row, ops))
    return out


def _bin(points: dict[str, list[tuple[float, float]]]) -> dict[str, list[list[float]]]:
    curves: dict[str, list[list[float]]] = {}
    for key, pts in sorted(points.items()):
        bins: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for x, e in pts:
            bins[math.floor(x * 4)].append((x, e))
        curve = []
        for b in sorted(bins):
            xs, es = zip(*bins[b], strict=True)
            curve.append([round(statistics.median(xs), 4),
                          round(min(statistics.median(es), 3.0), 4)])
        curves[key] = curve
    return curves


def _table(gpu_name: str, curves: dict[str, list[list[float]]], gap: float) -> Any:
    from torchinspect.latency.calibrated import TABLE_FORMAT, parse_table

    return parse_table({"format": TABLE_FORMAT, "gpu": gpu_name, "device_name": "", "source": "",
                        "torch": "", "gap_us": gap, "host_factor": 1.0, "curves": curves},
                       "table being built")


def build_curves(replayed: list[tuple[dict[str, Any], Any]], gpu: Any, gap: float) -> dict[str, list[list[float]]]:
    """Two passes: single-op calls first; then, with the first pass's curves, the calls
    that ran more than one op, their other ops' prices taken off (see the module doc)."""
    from torchinspect.latency.calibrated import LatencyGpu
    from torchinspect.latency.roofline import price

    def collect(first: dict[str, list[list[float]]] | None) -> dict[str, list[tuple[float, float]]]:
        points: dict[str, list[tuple[float, float]]] = defaultdict(list)
        table = _table(gpu.spec.name, first, gap) if first is not None else None
        for row, ops in replayed:
            dtype = row["dtype"]
            heavy = [op for op in ops if op.kind not in ("eltwise", "copy")] or ops
            main = max(heavy, key=lambda op: roofline(op, gpu, dtype))
            others = [op for op in ops if op is not main]
            if others and table is None:
                continue
            rest = sum(price(op, LatencyGpu(gpu.spec, table), dtype, None, table).us
                       for op in others) if others else 0.0
            us = row["in_graph_us"]
            own = max(us - rest, 0.2 * us)
            roof = roofline(main, gpu, dtype)
            keys = {f"{main.sub}/{dtype}", f"{main.kind}/{dtype}"}
            if row["spec"].get("backend"):
                keys = {f"{main.kind}.{row['spec']['backend']}/{dtype}"}
            for key in keys:
                points[key].append((math.log10(max(roof, 1e-4)), roof / own))
        return points

    return _bin(collect(_bin(collect(None))))


def rnn_curve(replayed: list[tuple[dict[str, Any], Any]], gpu: Any, table: Any) -> dict[str, list[list[float]]]:
    """cuDNN's step kernels: per call, the in-graph time less its input GEMMs and state set-up
    (priced on the op curves), per step kernel, against the step kernel's roofline."""
    from torchinspect.latency.calibrated import LatencyGpu
    from torchinspect.latency.roofline import price

    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    on = LatencyGpu(gpu.spec, table)
    for row, ops in replayed:
        dtype = row["dtype"]
        steps = [op for op in ops if op.kind == "rnn"]
        if len(steps) != 1:
            continue
        rest = sum(price(op, on, dtype, None, table).us for op in ops if op.kind != "rnn")
        n = steps[0].kernels
        per = max(row["in_graph_us"] - rest, 0.2 * row["in_graph_us"]) / n
        roof = roofline(steps[0], gpu, dtype) / n
        points[f"rnn.step/{dtype}"].append((math.log10(max(roof, 1e-4)), roof / per))
    return _bin(points)


def fastpath_curves(replayed: list[tuple[dict[str, Any], Any]], gpu: Any, table: Any) -> dict[str, list[list[float]]]:
    """PyTorch's fast path against the ops the trace sees (the slow path's): per layer kind
    and dtype, measured in-graph µs / the table's price of those ops (no in-model scales),
    against log10 of that price, binned like the op curves."""
    from torchinspect.latency.calibrated import LatencyGpu
    from torchinspect.latency.roofline import price

    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    on = LatencyGpu(gpu.spec, table)
    for row, ops in replayed:
        spec = row["spec"]
        if spec["kind"] not in ("encoder_layer", "mha") or not spec.get("fast"):
            continue
        total = sum(price(op, on, row["dtype"], None, table, scaled=False).us for op in ops)
        name = "encoder" if spec["kind"] == "encoder_layer" else "mha"
        points[f"fastpath.{name}/{row['dtype']}"].append(
            (math.log10(total), row["in_graph_us"] / total))
    return _bin(points)


def layer_checks(replayed: list[tuple[dict[str, Any], Any]], gpu: Any, table: Any) -> list[dict[str, Any]]:
    """Whole layers of generic shapes (sweep 3: decoder layers, masked attention; sweep 2: the
    slow path of encoder layers and MHA) predicted op by op against their measured in-graph
    time: a check of the op curves on composites they were not built from."""
    from torchinspect.latency.calibrated import LatencyGpu
    from torchinspect.latency.roofline import price_ops

    out = []
    on = LatencyGpu(gpu.spec, table)
    for row, ops in replayed:
        spec = row["spec"]
        if spec.get("fast"):
            continue
        predicted = sum(t.us for t in price_ops(ops, on, row["dtype"], None, table))
        measured = row["in_graph_us"]
        out.append({"spec": spec, "dtype": row["dtype"], "measured_us": round(measured, 2),
                    "predicted_us": round(predicted, 2), "error": predicted / measured - 1,
                    "kernels": (row.get("profile") or {}).get("kernels_per_call")})
    return out


def kernel_counts(replayed: list[tuple[dict[str, Any], Any]]) -> dict[str, float]:
    """Kernels one call of each class launches (profiled sweeps, and the counts of sweeps 1
    and 2): the median over calls whose meta replay is that one op alone."""
    counts: dict[str, list[int]] = defaultdict(list)
    for row, ops in replayed:
        n = (row.get("profile") or {}).get("kernels_per_call") or row.get("kernels")
        if len(ops) != 1 or not n or row["spec"].get("backend"):
            continue
        for key in {f"{ops[0].sub}/{row['dtype']}", f"{ops[0].kind}/{row['dtype']}"}:
            counts[key].append(int(n))
    return {k: float(statistics.median(v)) for k, v in sorted(counts.items())}


# ---- the models ---------------------------------------------------------------------------

def model_case(row: dict[str, Any]) -> Any:
    from torchinspect.sources.case import ModelOptions, make_case

    opts = ModelOptions(inputs=[row["input"]] if row.get("input") else None,
                        args=row.get("args") or None, device="meta")
    return make_case(row["model"], options=opts, device="meta")


class Traces:
    """Meta traces of (model, dtype, batch), made once (``LATENCY_TRACE_CACHE``: kept in a
    pickle between runs of this script, a development aid)."""

    def __init__(self) -> None:
        self.path = os.environ.get("LATENCY_TRACE_CACHE")
        self.items: dict[tuple[str, str, int], Any] = {}
        if self.path and os.path.exists(self.path):
            with open(self.path, "rb") as f:
                self.items = pickle.load(f)  # noqa: S301 - a file this script wrote itself
        self.cases: dict[str, Any] = {}

    def get(self, row: dict[str, Any], dtype: str, batch: int) -> Any:
        from torchinspect.inputs import rebatch
        from torchinspect.latency.ops import record_ops

        key = (row["model"], dtype, batch)
        if key not in self.items:
            if row["model"] not in self.cases:
                self.cases[row["model"]] = model_case(row)
            case = self.cases[row["model"]]
            self.items[key] = record_ops(case.model, rebatch(case.example, batch), dtype=dtype)
        return self.items[key]

    def save(self) -> None:
        if self.path:
            with open(self.path, "wb") as f:
                pickle.dump(self.items, f)


def host_probe(source: str) -> dict[str, float]:
    """The host probe of the campaign that measured a model (its own GPU host)."""
    folder = data.V1 if source.startswith("latency/") else data.V2
    lines = data.read_jsonl(folder / "probes.jsonl")
    probe = next((r["host"] for r in reversed(lines) if "host" in r), None)
    return probe or data.probes()[1]["host"]


def fit_host_factors(models: list[dict[str, Any]], traces: Traces, gpu: Any) -> tuple[float, float]:
    """(host factor, launch factor) on the development set's eager runs: measured host
    enqueue time ~ host factor x (dispatched ops x op_us + module calls x module_us) + launch
    factor x kernels x op_us, with each campaign's own probe; least squares on the relative
    error, both factors at least 0."""
    import numpy as np

    from torchinspect.latency.predict import price_trace

    rows, target = [], []
    for row in models:
        if row["set"] != "dev":
            continue
        probe = host_probe(row["source"])
        for case in row["cases"]:
            if not case.get("host_enqueue_ms"):
                continue
            t = traces.get(row, case["dtype"], case["batch"])
            base = t.dispatched * probe["op_us"] + t.module_calls * probe["module_us"]
            from torchinspect.latency.eager import HostModel
            from torchinspect.latency.host import HostCost

            p = price_trace(t, gpu, case["dtype"], case["batch"],
                            HostModel(HostCost(probe["op_us"], probe["module_us"], ""), 1.0))
            us = case["host_enqueue_ms"] * 1e3
            rows.append([base / us, p.kernels * probe["op_us"] / us])
            target.append(1.0)
    a, b = np.array(rows), np.array(target)
    x = np.clip(np.linalg.lstsq(a, b, rcond=None)[0], 0.0, None)
    return round(float(x[0]), 4), round(float(x[1]), 4)


def fit_scales(models: list[dict[str, Any]], traces: Traces, gpu: Any) -> dict[str, float]:
    """Per op group, the factor by which kernels inside a model differ from the same kernels
    measured alone (a model's weights and activations are cold in L2, a sweep's repeated
    call finds them warm; other algorithm choices): fitted on the DEVELOPMENT set's graph
    replays (every dtype and batch), robust least squares on the relative error (a soft-L1
    loss: a few models far off do not pull the rest), each factor within [0.5, 2]."""
    import numpy as np

    from torchinspect.latency.calibrated import LatencyGpu
    from torchinspect.latency.roofline import GROUPS, group, price_ops

    rows, target = [], []
    for row in models:
        if row["set"] != "dev":
            continue
        for case in row["cases"]:
            if not case["graph_ms"]:
                continue
            t = traces.get(row, case["dtype"], case["batch"])
            x = dict.fromkeys(GROUPS, 0.0)
            fixed = 0.0
            unscaled = LatencyGpu(gpu.spec, _table(gpu.spec.name, gpu.table.curves,
                                                   gpu.table.gap_us))
            for op, tm in zip(t.ops, price_ops(t.ops, unscaled, case["dtype"], None,
                                               unscaled.table), strict=True):
                if op.kind in ("rnn", "other") or op.kernels == 0 or op.fastpath \
                        or not tm.calibrated:
                    fixed += tm.us
                else:  # the scale applies above the floor (roofline.price)
                    fixed += tm.floor_us
                    x[group(op.kind, op.sub)] += tm.us - tm.floor_us
            us = case["graph_ms"] * 1e3
            rows.append([x[g] / us for g in GROUPS])
            target.append(1.0 - fixed / us)
    a, b = np.array(rows), np.array(target)
    used = [i for i, _ in enumerate(GROUPS) if a[:, i].any()]
    x = np.ones(len(used))
    for _ in range(50):  # iteratively reweighted least squares: soft-L1, scale 0.1
        r = a[:, used] @ x - b
        w = 1.0 / np.sqrt(1.0 + (r / 0.1) ** 2)
        x = np.clip(np.linalg.lstsq(a[:, used] * w[:, None], b * w, rcond=None)[0], 0.5, 2.0)
    scales = dict.fromkeys(GROUPS, 1.0)
    for i, v in zip(used, x, strict=True):
        scales[GROUPS[i]] = round(float(v), 4)
    return scales


def predict_models(models: list[dict[str, Any]], traces: Traces, gpu: Any,
                   factor: float, launch: float) -> list[dict[str, Any]]:
    """Every measured (model, dtype, batch) predicted: graph replay against the measured
    replay, the eager time and its binding side against the eager run."""
    from torchinspect.latency.eager import HostModel
    from torchinspect.latency.host import HostCost
    from torchinspect.latency.predict import price_trace

    out = []
    for row in models:
        probe = host_probe(row["source"])
        host = HostModel(HostCost(probe["op_us"], probe["module_us"], probe["cpu"]), factor,
                         launch)
        for case in row["cases"]:
            t = traces.get(row, case["dtype"], case["batch"])
            p = price_trace(t, gpu, case["dtype"], case["batch"], host)
            rec: dict[str, Any] = {
                "set": row["set"], "model": row["model"], "dtype": case["dtype"],
                "batch": case["batch"], "source": row["source"],
                "graph_ms": case["graph_ms"], "predicted_gpu_ms": round(p.gpu_ms, 5),
                "kernels": p.kernels, "predicted_host_ms": round(p.host_ms, 5),
                "predicted_eager_ms": round(p.eager_ms, 5), "predicted_binds": p.binds,
                "eager_ms": case["eager_ms"], "host_enqueue_ms": case["host_enqueue_ms"]}
            if case["graph_ms"]:
                rec["error"] = p.gpu_ms / case["graph_ms"] - 1
                if case["host_enqueue_ms"]:
                    rec["measured_binds"] = ("host" if case["host_enqueue_ms"] >= case["graph_ms"]
                                             else "gpu")
            if case["eager_ms"]:
                rec["eager_error"] = p.eager_ms / case["eager_ms"] - 1
            prof = row["profile"].get(f"{case['dtype']}/{case['batch']}")
            if prof:
                rec["profiled_kernels"] = prof.get("kernels")
                rec["profiled_kernel_ms"] = round(prof.get("kernel_us", 0.0) / 1e3, 5)
            out.append(rec)
    return out


# ---- training steps -------------------------------------------------------------------------

TRAIN = {"amp": "bf16", "optimizer": "adamw"}  # what train.jsonl measured (fp32 weights)


def step_trace(traces: Traces, row: dict[str, Any], batch: int) -> Any:
    """The recorded training step of a model at a batch (kept with the traces)."""
    from torchinspect.inputs import rebatch
    from torchinspect.latency.train import record_step

    key = ("train", row["model"], batch)
    if key not in traces.items:
        if row["model"] not in traces.cases:
            traces.cases[row["model"]] = model_case(row)
        case = traces.cases[row["model"]]
        try:
            traces.items[key] = record_step(case, rebatch(case.example, batch), gpu="h100",
                                            weights=None, amp=TRAIN["amp"],
                                            optimizer=TRAIN["optimizer"])
        except Exception as exc:  # noqa: BLE001 - a model the step cannot run on fake tensors
            traces.items[key] = f"{type(exc).__name__}: {exc}"[:300]
    return traces.items[key]


def fit_train_factors(rows: list[dict[str, Any]], traces: Traces, gpu: Any) -> dict[str, float]:
    """The host factor of each phase of a training step, fitted on the DEVELOPMENT set's
    measured steps: over the phases whose measured time is at least twice their predicted
    GPU time (the host binds them), the median of measured ms over the host base (this
    campaign's probe: dispatched ops x op_us, plus module calls x module_us in the forward
    and one op_us per parameter tensor in the optimizer)."""
    from torchinspect.latency.eager import HostModel
    from torchinspect.latency.host import HostCost
    from torchinspect.latency.train import PHASES, price_step

    probe = host_probe("latency-h100-v2/")
    host = HostModel(HostCost(probe["op_us"], probe["module_us"], probe["cpu"]), 1.0,
                     gpu.table.launch_factor)
    ratios: dict[str, list[float]] = {p: [] for p in PHASES}
    backward: list[float] = []
    for row in rows:
        if row["set"] != "dev":
            continue
        for res in row["results"]:
            trace = step_trace(traces, row, res["batch"])
            if isinstance(trace, str):
                continue
            ones = dict.fromkeys(PHASES, 1.0)
            p = price_step(trace, gpu, host, res["batch"], ones)
            for phase in PHASES:
                measured = res[f"{phase}_ms"]
                if measured >= 2 * p.gpu_ms[phase] and p.host_ms[phase] > 0:
                    ratios[phase].append(measured / p.host_ms[phase])
            if res["backward_ms"] <= 1.25 * p.gpu_ms["backward"]:  # the GPU binds
                backward.append(res["backward_ms"] / p.gpu_ms["backward"])
    out = {f"host_factor_{p}": round(statistics.median(v), 4) for p, v in ratios.items() if v}
    if backward:
        out["gpu_scale_backward"] = round(statistics.median(backward), 4)
    return out


def predict_train_rows(rows: list[dict[str, Any]], traces: Traces, gpu: Any,
                       factors: dict[str, float]) -> list[dict[str, Any]]:
    """Every measured training step predicted (what ``inspect bench --predict --train``
    says), against the measured phases."""
    from torchinspect.latency.eager import HostModel
    from torchinspect.latency.host import HostCost
    from torchinspect.latency.train import PHASES, price_step

    probe = host_probe("latency-h100-v2/")
    host = HostModel(HostCost(probe["op_us"], probe["module_us"], probe["cpu"]), 1.0,
                     gpu.table.launch_factor)
    per_phase = {p: factors.get(f"host_factor_{p}", 1.0) for p in PHASES}
    out = []
    for row in rows:
        for res in row["results"]:
            trace = step_trace(traces, row, res["batch"])
            rec: dict[str, Any] = {"set": row["set"], "model": row["model"],
                                   "batch": res["batch"], "step_ms": res["step_ms"],
                                   **{f"{p}_ms": res[f"{p}_ms"] for p in PHASES}}
            if isinstance(trace, str):
                rec["prediction_error"] = trace
                out.append(rec)
                continue
            p = price_step(trace, gpu, host, res["batch"], per_phase)
            rec.update({"predicted_step_ms": round(p.step_ms, 4),
                        **{f"predicted_{ph}_ms": round(getattr(p, f"{ph}_ms"), 4)
                           for ph in PHASES},
                        "predicted_gpu_ms": {k: round(v, 4) for k, v in p.gpu_ms.items()},
                        "predicted_host_ms": {k: round(v, 4) for k, v in p.host_ms.items()},
                        "error": p.step_ms / res["step_ms"] - 1})
            out.append(rec)
    return out


def summary(rows: list[dict[str, Any]], key: str = "error") -> dict[str, Any]:
    """Median and 90th percentile of |error|, within 15 and 30%, the median signed error."""
    errs = [r[key] for r in rows if r.get(key) is not None]
    if not errs:
        return {"cases": 0}
    mags = sorted(abs(e) for e in errs)
    p90 = mags[min(len(mags) - 1, math.ceil(0.9 * len(mags)) - 1)]
    return {"cases": len(errs), "models": len({r["model"] for r in rows if r.get(key) is not None}),
            "median_abs_error": round(statistics.median(mags), 4), "p90_abs_error": round(p90, 4),
            "within_15": round(sum(e <= 0.15 for e in mags) / len(mags), 4),
            "within_30": round(sum(e <= 0.30 for e in mags) / len(mags), 4),
            "median_signed_error": round(statistics.median(errs), 4)}


def summaries(rows: list[dict[str, Any]], large: dict[str, int]) -> dict[str, Any]:
    """Per set: all cases, batch 1, the large batches; graph replay and eager."""
    out: dict[str, Any] = {}
    for set_name in ("dev", "val"):
        mine = [r for r in rows if r["set"] == set_name]
        one = [r for r in mine if r["batch"] == 1]
        big = [r for r in mine if r["batch"] != 1]
        binds = [r for r in mine if "measured_binds" in r]
        out[set_name] = {"graph": summary(mine), "graph_batch1": summary(one),
                         "graph_large": summary(big), "eager": summary(mine, "eager_error"),
                         "binding_right": round(sum(r["measured_binds"] == r["predicted_binds"]
                                                    for r in binds) / len(binds), 4)
                         if binds else None, "binding_cases": len(binds)}
    del large
    return out


def build(gpu_name: str, cache: dict[Any, Any] | None = None
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The table (as JSON) and the composite-layer checks, from the op measurements."""
    from torchinspect.gpus import find_gpu
    from torchinspect.latency.calibrated import TABLE_FORMAT, LatencyGpu

    spec = find_gpu(gpu_name)
    bare = LatencyGpu(spec, None)
    rows = data.op_rows()
    overhead, gap = data.replay_overhead_us(rows), data.kernel_gap_us(rows)
    first = data.first_campaign_overhead_us(rows)
    ops = _replayed(rows, skip=COMPOSITE + RNN, cache=cache)
    curves = build_curves(ops, bare, gap)
    table = _table(spec.name, curves, gap)
    curves.update(rnn_curve(_replayed(rows, RNN, cache=cache), bare, table))
    table = _table(spec.name, curves, gap)
    layers = _replayed(rows, COMPOSITE, cache=cache)
    curves.update(fastpath_curves(layers, bare, table))
    table = _table(spec.name, curves, gap)
    checks = layer_checks(layers, bare, table)
    env, probe = data.probes()
    counts = kernel_counts(ops)
    out = {"format": TABLE_FORMAT, "gpu": spec.name, "device_name": env["gpu"],
           "biased_conv_overhead_us": data.biased_conv_overhead_us(rows),
           "source": "benchmarks/results/latency, benchmarks/results/latency-h100-v2 "
                     "(latency_measure.py; built by latency_tables.py)",
           "torch": env["torch"], "measured": env["started"], "gap_us": gap,
           "replay_overhead_us": {"latency-h100-v2": overhead, "latency": first}, "host_factor": 1.0, "host_probe": probe["host"],
           "curves": curves, "kernels": counts}
    return out, checks


def provenance(table: dict[str, Any], sources: dict[str, str]) -> list[dict[str, Any]]:
    """Every constant of the latency model with where it comes from: measured (which raw
    data), fitted (on which set), a datasheet, or PyTorch's source."""
    from torchinspect.gpus import CATALOGUE
    from torchinspect.latency.host import LOADED, NOISY
    from torchinspect.latency.roofline import (
        FOREACH_BLOCKS,
        FOREACH_CHUNK,
        FOREACH_TENSORS,
        floor_of,
    )

    spec = CATALOGUE[table["gpu"]]
    out: list[dict[str, Any]] = [
        {"name": "efficiency curves", "value": f"{len(table['curves'])} curves",
         "kind": "measured", "data": sources["ops"],
         "how": "per op class and dtype: roofline time / in-graph time of each measured call, "
                "binned by quarter decades of roofline time (median)"},
        {"name": "kernel gap in a CUDA graph", "value": f"{table['gap_us']:.3f} µs",
         "kind": "measured", "data": sources["floors"],
         "how": "median idle time between calls of single-kernel small ops (sweep 4)"},
        {"name": "replay overhead (events around one replay)",
         "value": ", ".join(f"{k}: {v:.2f} µs" for k, v in table["replay_overhead_us"].items()),
         "kind": "measured", "data": sources["ops"],
         "how": "taken off the first campaign's per-call times (profiled sweeps 3 and 4 against "
                "their replays; the first campaign against the ops both measured)"},
        {"name": "random-bias convolutions of sweep 1", "value":
            f"{table['biased_conv_overhead_us']:.1f} µs per replay", "kind": "measured",
         "data": sources["ops"], "how": "the same convolution with and without the in-call "
                                        "random bias (sweeps 1 and 4)"}]
    for key in ("eltwise/bf16", "copy/bf16", "norm.layer/bf16", "norm.batch/bf16",
                "reduction/bf16", "matmul/bf16", "conv.kxk/bf16", "conv.1x1/bf16",
                "attention/bf16", "pool/bf16", "gather/bf16", "rnn.step/bf16"):
        curve = table["curves"].get(key)
        if curve:
            out.append({"name": f"small-kernel floor {key}",
                        "value": f"{floor_of([tuple(p) for p in curve]):.2f} µs",
                        "kind": "measured", "data": sources["floors"] if "rnn" not in key
                        else sources["sweep3"], "how": "the curve's smallest measured call"})
    for key, v in table.get("scales", {}).items():
        out.append({"name": f"in-model correction: {key}", "value": f"x{v:.3f}",
                    "kind": "fitted", "set": "development (graph replays)",
                    "data": sources["models"], "how": "robust least squares on the relative "
                    "error, on the time above each op's floor; bounded to [0.5, 2]"})
    out += [{"name": "host factor", "value": f"{table['host_factor']:.3f}", "kind": "fitted",
             "set": "development (eager runs)", "data": sources["models"],
             "how": "least squares of measured host enqueue time on the probe-scaled dispatch "
                    "and launch terms"},
            {"name": "launch factor", "value": f"{table['launch_factor']:.3f}", "kind": "fitted",
             "set": "development (eager runs)", "data": sources["models"],
             "how": "the same fit: host time per kernel launched, in probe op times"}]
    for key, v in table.get("train", {}).items():
        out.append({"name": f"training step: {key.replace('_', ' ')}", "value": f"{v:.3f}",
                    "kind": "fitted", "set": "development (training steps)",
                    "data": sources["train"],
                    "how": "median over host-bound phases (host factors) or GPU-bound "
                           "backward passes (GPU scale)"})
    out += [{"name": f"{spec.label}: peaks and bandwidth",
             "value": f"{spec.tensor_16 / 1e12:g} TFLOP/s 16-bit, {spec.bandwidth / 1e12:g} TB/s",
             "kind": "datasheet", "data": spec.source, "how": "torchinspect/gpus.py"},
            {"name": "foreach launch limits", "value": f"{FOREACH_TENSORS} tensors, "
             f"{FOREACH_CHUNK} elements per chunk, {FOREACH_BLOCKS} chunks per launch",
             "kind": "PyTorch source", "data": "aten/src/ATen/native/cuda/MultiTensorApply.cuh",
             "how": "launches of one _foreach_ op"},
            {"name": "disturbed host probe", "value": f"load > {LOADED:g} per core or trial "
             f"spread > {NOISY:.0%}", "kind": "policy", "data": "latency/host.py",
             "how": "measured again; labelled if it stays disturbed"}]
    return out


def missing(models: list[dict[str, Any]], train: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What the committed lists planned that the raw data does not hold yet."""
    plan = data.planned()
    measured = {m["model"]: m for m in models}
    trained = {t["model"]: t for t in train}
    out: dict[str, list[str]] = {"graph": [], "eager": [], "train": []}
    for set_name, entries in plan.items():
        for spec, _, _, large in entries:
            row = measured.get(spec)
            for batch in (1, large) if set_name == "val" or spec not in measured else ():
                case = next((c for c in (row or {}).get("cases", []) if c["batch"] == batch), None)
                if case is None or not case["graph_ms"]:
                    why = (row or {}).get("errors", {}).get(f"bf16/{batch}", "not measured")
                    out["graph"].append(f"{set_name} {spec} batch {batch}: {why[:90]}")
                if case is None or not case["eager_ms"]:
                    out["eager"].append(f"{set_name} {spec} batch {batch}: not measured")
            t = trained.get(spec)
            done = {r["batch"] for r in (t or {}).get("results", [])}
            for batch in (1, large):
                if batch not in done:
                    why = (t or {}).get("failed", {}).get(batch) or (t or {}).get("error") \
                        or "not measured"
                    out["train"].append(f"{set_name} {spec} batch {batch}: {str(why)[:90]}")
    return out


def main(argv: list[str] | None = None) -> None:
    from torchinspect.gpus import find_gpu
    from torchinspect.latency.calibrated import LatencyGpu, parse_table

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--dev-only", action="store_true",
                    help="build the table and predict the development set alone (the table is "
                    "written: it is built from op sweeps and development fits only)")
    ap.add_argument("--models", default="", help="comma-separated specs: only these models "
                    "(writes nothing)")
    ap.add_argument("--revise", default="", help="comma-separated specs: after a change made "
                    "once the validation set was predicted, re-predict these models' training "
                    "steps with the installed code and committed table (nothing fitted) into "
                    "the last revision of revisions.json; predictions.json is left as first "
                    "predicted")
    a = ap.parse_args(argv)
    if a.revise:
        revise(a.revise.split(","))
        return
    started = time.perf_counter()
    traces = Traces()
    table, checks = build(a.gpu, traces.items)
    models = data.model_rows()
    train = data.train_rows()
    if a.dev_only:
        models = [m for m in models if m["set"] == "dev"]
        train = [t for t in train if t["set"] == "dev"]
    if a.models:
        models = [m for m in models if m["model"] in a.models.split(",")]
        train = [t for t in train if t["model"] in a.models.split(",")]

    def gpu() -> Any:
        return LatencyGpu(find_gpu(a.gpu), parse_table(table, "new table"))

    # every fit below reads the development set only (each filters set == "dev")
    table["scales"] = fit_scales(models, traces, gpu())
    table["host_factor"], table["launch_factor"] = fit_host_factors(models, traces, gpu())
    table["train"] = fit_train_factors(train, traces, gpu())
    rows = predict_models(models, traces, gpu(), table["host_factor"], table["launch_factor"])
    train_rows = predict_train_rows(train, traces, gpu(), table["train"])
    traces.save()
    sets = summaries(rows, {})
    sets["train"] = {s: summary([t for t in train_rows if t["set"] == s]) for s in ("dev", "val")}
    sources = {"ops": "latency/tables.jsonl, latency-h100-v2/tables-sweep3.jsonl.gz, "
                      "latency-h100-v2/floors.jsonl", "floors": "latency-h100-v2/floors.jsonl",
               "sweep3": "latency-h100-v2/tables-sweep3.jsonl.gz",
               "models": "latency/models.jsonl, latency-h100-v2/models.jsonl",
               "train": "latency-h100-v2/train.jsonl"}
    table["provenance"] = provenance(table, sources)
    if not a.models:
        if not a.dev_only:
            table["validation"] = {"set": "validation", **sets["val"]["graph"],
                                   "binding_right": sets["val"]["binding_right"],
                                   "train": {**sets["train"]["val"],
                                             "page": "benchmarks/RESULTS-latency.md"},
                                   "page": "benchmarks/RESULTS-latency.md"}
        (TABLE_DIR / f"{a.gpu}.json").write_text(json.dumps(table, indent=1) + "\n",
                                                 encoding="utf-8")
    if a.dev_only or a.models:
        report_dev(rows, train_rows, checks, sets, table)
        print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        return
    import machine

    env, probe = data.probes()
    record = {"summary": sets, "rows": rows, "train_rows": train_rows, "checks": checks,
              "missing": missing(models, train), "provenance": table["provenance"],
              "gpu": {"name": a.gpu, "device": env["gpu"], "torch": env["torch"],
                      "cudnn": env.get("cudnn"), "measured": env["started"],
                      "host_probe": probe["host"]},
              "table": {k: table[k] for k in ("gap_us", "replay_overhead_us", "host_factor",
                                               "launch_factor", "scales", "train", "kernels")}}
    machine.save("latency-h100-v2/predictions", record)
    print(json.dumps({s: sets[s] for s in ("dev", "val", "train")}, indent=1))
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)


def revise(models: list[str]) -> None:
    """The training steps of ``models`` re-predicted now, and the validation set's training
    summary with them in place of their first predictions, as the ``after`` of the last
    entry of ``revisions.json`` (whose ``first`` holds what was first published)."""
    from torchinspect.latency import latency_gpu

    gpu = latency_gpu("h100")
    after = predict_train_rows([t for t in data.train_rows() if t["model"] in models],
                               Traces(), gpu, dict(gpu.table.train))
    path = data.V2 / "revisions.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    first = json.loads(OUT.read_text(encoding="utf-8"))["data"]["train_rows"]
    new = {(r["model"], r["batch"]): r for r in after}
    rows = [new.get((r["model"], r["batch"]), r) for r in first if r["set"] == "val"]
    keep = ("model", "batch", "step_ms", "predicted_step_ms", "predicted_backward_ms", "error")
    record["data"]["revisions"][-1]["after"] = {
        "train_rows": [{k: r[k] for k in keep if k in r} for r in after],
        "train_val_summary": summary(rows),
        "command": " ".join(["latency_tables.py", *sys.argv[1:]])}
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record["data"]["revisions"][-1]["after"], indent=1))


def report_dev(rows: list[dict[str, Any]], train_rows: list[dict[str, Any]],
               checks: list[dict[str, Any]], sets: dict[str, Any], table: dict[str, Any]) -> None:
    """What ``--dev-only`` prints: every case's error, the layer checks, the summaries."""
    for r in rows:
        if r.get("error") is not None:
            print(f"{r['model'][-28:]:28s} {r['dtype']} {r['batch']:4d} "
                  f"{100 * r['error']:+5.0f}%  kernels {r['kernels']:5d} / "
                  f"{r.get('profiled_kernels', '-')}")
    for t in train_rows:
        print(f"train {t['model'][-24:]:24s} b{t['batch']:<4d} "
              + (f"{100 * t['error']:+5.0f}%  " + " ".join(
                  f"{t[f'predicted_{p}_ms']:.2f}/{t[f'{p}_ms']:.2f}"
                  for p in ("forward", "backward", "optimizer"))
                 if "error" in t else t.get("prediction_error", "")))
    for c in checks:
        print(f"check {c['spec']['kind']:14s} b{c['spec']['b']:<3d} {c['dtype']} "
              f"{100 * c['error']:+5.0f}%  ({c['measured_us']} us, {c['kernels']} kernels)")
    print(json.dumps({"dev": sets["dev"], "train_dev": sets["train"]["dev"],
                      "train_factors": table["train"], "scales": table.get("scales"),
                      "host": [table["host_factor"], table["launch_factor"]]}, indent=1))


if __name__ == "__main__":
    main()
