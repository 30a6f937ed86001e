"""Build a GPU's latency table, then validate the prediction, from committed raw data.

Inputs (written by ``benchmarks/latency_measure.py`` on the GPU):
``benchmarks/results/latency/{probes,tables,models}.jsonl``.

1. Curves: every measured op is replayed on meta through the predictor's own recorder
   (``record_call``) for its FLOPs, bytes and class; its efficiency is roofline time /
   measured time; per class and dtype the points are binned by log10(roofline µs) (quarter
   decades) and the median of each bin kept.
2. Per-kernel time under graph replay: the tiny-kernel probe. Host factor: the median over
   the DEVELOPMENT set's eager runs of measured host enqueue time / (dispatched ops x op_us
   + module calls x module_us), with the GPU host's own probe.
3. Validation: every model of both sets predicted with that table and the GPU host's probe;
   errors against ``inspect bench --cuda-graphs`` (graph replay) and the eager binding side
   (measured: host enqueue time >= graph replay time means the host binds).

Writes ``src/torchinspect/latency/tables/h100.json`` (with the validation summary),
``benchmarks/results/latency/predictions.json`` and ``benchmarks/RESULTS-latency.md`` (the
docs include it). Usage: ``python benchmarks/latency_tables.py [--gpu h100]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "benchmarks" / "results" / "latency"
sys.path.insert(0, str(ROOT / "benchmarks"))
os.chdir(ROOT)  # the raw data names the zoo models by their path from the checkout root


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _measured_points(rows: list[dict[str, Any]], gpu: Any) -> list[tuple[str, str, list[Any], float]]:
    """(main op's class, dtype, [(op, roofline price)], measured µs) for every measured op."""
    import latency_ops

    from torchinspect.latency.ops import record_call
    from torchinspect.latency.roofline import price

    out = []
    for row in rows:
        if "spec" not in row or "us" not in row or row["spec"]["kind"] in COMPOSITE:
            continue
        dtype = row["dtype"]
        trace = record_call(latency_ops.build(row["spec"], "meta", dtype), dtype=dtype)
        priced = [(op, price(op, gpu, dtype, None, None)) for op in trace.ops if op.kernels]
        if priced:
            out.append((dtype, priced, row["us"], row["spec"].get("backend")))
    return out


COMPOSITE = ("encoder_layer", "mha")  # whole layers: the fast-path factors, not op curves


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


def build_curves(rows: list[dict[str, Any]],
                 gpu: Any) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """Two passes: single-kernel measurements first; where a measurement ran more than one
    kernel (a convolution and its bias add, the random bias made in the call), the others'
    predicted times (from the first pass) are taken off before the main op's efficiency.
    Attention run with a forced kernel (sweep 2) makes its own curve (``attention.math``
    ...), not the default's. Floors: per curve, the fastest time measured for one op."""
    from torchinspect.latency.calibrated import GpuTable
    from torchinspect.latency.roofline import price

    measured = _measured_points(rows, gpu)

    def collect(first: dict[str, list[list[float]]] | None) -> dict[str, list[tuple[float, float]]]:
        points: dict[str, list[tuple[float, float]]] = defaultdict(list)
        table = GpuTable("", "", "", "", 0.0, 1.0, {k: [tuple(p) for p in v] for k, v in first.items()}) \
            if first is not None else None
        for dtype, priced, us, backend in measured:
            heavy = [p for p in priced if p[0].kind not in ("eltwise", "copy")] or priced
            main_op, main = max(heavy, key=lambda p: p[1].roofline_us)
            others = [op for op, _ in priced if op is not main_op]
            if others and table is None:
                continue
            rest = sum(price(op, gpu, dtype, None, table).us for op in others)
            own = us - rest
            if own <= 0.2 * us:
                own = 0.2 * us
            eff = main.roofline_us / own
            keys = {f"{main_op.sub}/{dtype}", f"{main_op.kind}/{dtype}"}
            if backend:
                keys = {f"{main_op.kind}.{backend}/{dtype}"}
            for key in keys:
                points[key].append((math.log10(max(main.roofline_us, 1e-4)), eff))
        return points

    first = _bin(collect(None))
    return _bin(collect(first))


def kernel_counts(rows: list[dict[str, Any]], gpu: Any) -> dict[str, float]:
    """Kernels one op of each class launches (torch.profiler, sweep 2 and kernels.jsonl):
    the median over measured calls whose meta replay is that one op alone."""
    import latency_ops

    from torchinspect.latency.ops import record_call

    counts: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        spec = row.get("spec", {})
        if "kernels" not in row or spec.get("kind") in COMPOSITE or spec.get("backend"):
            continue
        dtype = row["dtype"]
        ops = [op for op in record_call(latency_ops.build(spec, "meta", dtype), dtype=dtype).ops
               if op.kernels]
        if len(ops) != 1:  # a bias add or a random bias made in the call: not one op's count
            continue
        for key in {f"{ops[0].sub}/{dtype}", f"{ops[0].kind}/{dtype}"}:
            counts[key].append(int(row["kernels"]))
    return {k: float(statistics.median(v)) for k, v in sorted(counts.items())}


def fastpath_curves(rows: list[dict[str, Any]], gpu: Any) -> dict[str, list[list[float]]]:
    """PyTorch's fast path against the ops the trace sees (the slow path's): per layer kind
    and dtype, measured fast-path µs / the table's price of those ops (no in-model scales),
    against log10 of that price, binned like the op curves."""
    import latency_ops

    from torchinspect.latency.ops import record_call
    from torchinspect.latency.roofline import price

    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        spec = row.get("spec", {})
        if spec.get("kind") not in COMPOSITE or not spec.get("fast") or "us" not in row:
            continue
        dtype = row["dtype"]
        trace = record_call(latency_ops.build(spec, "meta", dtype), dtype=dtype)
        total = sum(price(op, gpu, dtype, None, gpu.table, scaled=False).us for op in trace.ops)
        name = "encoder" if spec["kind"] == "encoder_layer" else "mha"
        points[f"fastpath.{name}/{dtype}"].append((math.log10(total), row["us"] / total))
    return _bin(points)


def model_case(row: dict[str, Any]) -> Any:
    from torchinspect.sources.case import ModelOptions, make_case

    opts = ModelOptions(inputs=[row["input"]] if row.get("input") else None,
                        args=row.get("args") or None, device="meta")
    return make_case(row["model"], options=opts, device="meta")


def traces(models: list[dict[str, Any]]) -> dict[tuple[str, str, int], Any]:
    from torchinspect.inputs import rebatch
    from torchinspect.latency.ops import record_ops

    out = {}
    for row in models:
        if "model" not in row or row.get("error"):
            continue
        case = model_case(row)
        for batch in (1, 32):
            for dtype in ("bf16", "fp32"):
                out[(row["model"], dtype, batch)] = record_ops(
                    case.model, rebatch(case.example, batch), dtype=dtype)
        print(f"traced {row['model']}", file=sys.stderr, flush=True)
    return out


def measured(row: dict[str, Any], mode: str, dtype: str, batch: int) -> dict[str, Any] | None:
    return next((c for c in row.get(mode, []) if c["dtype"] == dtype and c["batch"] == batch
                 and c["status"] == "ok"), None)


def fit_host_factor(models: list[dict[str, Any]], tr: dict[Any, Any], host: dict[str, float]) -> float:
    ratios = []
    for row in models:
        if row.get("set") != "dev" or "eager" not in row:
            continue
        for dtype in ("bf16", "fp32"):
            for batch in (1, 32):
                eager = measured(row, "eager", dtype, batch)
                t = tr.get((row["model"], dtype, batch))
                if not eager or not eager.get("host_enqueue_ms") or t is None:
                    continue
                base = t.dispatched * host["op_us"] + t.module_calls * host["module_us"]
                ratios.append(eager["host_enqueue_ms"] * 1e3 / base)
    return round(statistics.median(ratios), 4)


def fit_scales(models: list[dict[str, Any]], tr: dict[Any, Any], gpu: Any) -> dict[str, float]:
    """Per op group, the factor by which in-model times differ from the op tables (an op in a
    model runs after its producer, its input often in L2; a table op runs alone): least
    squares on the DEVELOPMENT set's graph replays, relative errors, bounded to [0.25, 2]."""
    import numpy as np
    from scipy.optimize import lsq_linear

    from torchinspect.latency.roofline import GROUPS, group, price_ops

    rows, target = [], []
    for row in models:
        if row.get("set") != "dev" or "graphs" not in row:
            continue
        for dtype in ("bf16", "fp32"):
            for batch in (1, 32):
                graph = measured(row, "graphs", dtype, batch)
                t = tr.get((row["model"], dtype, batch))
                if graph is None or t is None:
                    continue
                x = dict.fromkeys(GROUPS, 0.0)
                fixed = 0.0
                for op, tm in zip(t.ops, price_ops(t.ops, gpu, dtype, None, gpu.table),
                                  strict=True):
                    if op.sub == "matmul.rnn" or op.kernels == 0 or op.kind == "other" \
                            or op.fastpath:
                        fixed += tm.us
                    else:
                        x[group(op.kind, op.sub)] += tm.us
                ms = graph["median_ms"] * 1e3
                rows.append([x[g] / ms for g in GROUPS])
                target.append(1.0 - fixed / ms)
    a = np.array(rows)
    used = [i for i, g in enumerate(GROUPS) if a[:, i].any()]  # a group no dev model runs: 1
    fit = lsq_linear(a[:, used], np.array(target), bounds=(0.25, 2.0))
    scales = dict.fromkeys(GROUPS, 1.0)
    for i, v in zip(used, fit.x, strict=True):
        scales[GROUPS[i]] = round(float(v), 4)
    return scales


def validate(models: list[dict[str, Any]], tr: dict[Any, Any], gpu: Any,
             host: Any) -> list[dict[str, Any]]:
    from torchinspect.latency.predict import price_trace

    out = []
    for row in models:
        if "model" not in row or row.get("error"):
            continue
        for dtype in ("bf16", "fp32"):
            for batch in (1, 32):
                graph = measured(row, "graphs", dtype, batch)
                eager = measured(row, "eager", dtype, batch)
                t = tr.get((row["model"], dtype, batch))
                if graph is None or t is None:
                    continue
                p = price_trace(t, gpu, dtype, batch, host)
                rec: dict[str, Any] = {
                    "set": row["set"], "model": row["model"], "dtype": dtype, "batch": batch,
                    "graph_ms": graph["median_ms"], "predicted_gpu_ms": p.gpu_ms,
                    "error": p.gpu_ms / graph["median_ms"] - 1, "kernels": p.kernels,
                    "predicted_host_ms": p.host_ms, "predicted_eager_ms": p.eager_ms,
                    "predicted_binds": p.binds}
                if eager is not None and eager.get("host_enqueue_ms"):
                    rec["eager_ms"] = eager["median_ms"]
                    rec["host_enqueue_ms"] = eager["host_enqueue_ms"]
                    rec["measured_binds"] = ("host" if eager["host_enqueue_ms"] >= graph["median_ms"]
                                             else "gpu")
                prof = row.get("profile", {}).get(f"bf16/{batch}")
                if prof and dtype == "bf16":
                    rec["profiled_kernels"] = prof["kernels"]
                out.append(rec)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errs = sorted(abs(r["error"]) for r in rows)
    binds = [r for r in rows if "measured_binds" in r]
    right = sum(r["measured_binds"] == r["predicted_binds"] for r in binds)
    p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)] if errs else None
    eager = sorted(abs(r["predicted_eager_ms"] / r["eager_ms"] - 1) for r in rows if "eager_ms" in r)
    return {"cases": len(rows), "models": len({r["model"] for r in rows}),
            "eager_median_abs_error": round(statistics.median(eager), 4) if eager else None,
            "median_abs_error": round(statistics.median(errs), 4) if errs else None,
            "p90_abs_error": round(p90, 4) if p90 is not None else None,
            "within_15": round(sum(e <= 0.15 for e in errs) / len(errs), 4) if errs else None,
            "within_30": round(sum(e <= 0.30 for e in errs) / len(errs), 4) if errs else None,
            "binding_right": round(right / len(binds), 4) if binds else None,
            "binding_cases": len(binds)}


def main() -> None:
    from torchinspect.gpus import find_gpu
    from torchinspect.latency.calibrated import TABLE_FORMAT, LatencyGpu, parse_table
    from torchinspect.latency.eager import HostModel
    from torchinspect.latency.host import HostCost

    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--dev-only", action="store_true",
                    help="trace and validate the development set alone; write nothing (for "
                         "work on the model without seeing the validation set)")
    a = ap.parse_args()
    probes = read_jsonl(RAW / "probes.jsonl")
    env, probe = probes[0], probes[1]
    spec = find_gpu(a.gpu)
    bare = LatencyGpu(spec, None)
    op_rows = read_jsonl(RAW / "tables.jsonl")
    curves = build_curves(op_rows, bare)
    counts = kernel_counts(op_rows + read_jsonl(RAW / "kernels.jsonl"), bare)
    models = read_jsonl(RAW / "models.jsonl")
    if a.dev_only:
        models = [m for m in models if m.get("set") == "dev"]
    cache = os.environ.get("LATENCY_TRACE_CACHE")  # development aid: reuse the meta traces
    if cache and os.path.exists(cache):
        import pickle

        with open(cache, "rb") as f:
            tr = pickle.load(f)  # noqa: S301 - a file this script wrote itself
    else:
        tr = traces(models)
        if cache:
            import pickle

            with open(cache, "wb") as f:
                pickle.dump(tr, f)
    factor = fit_host_factor(models, tr, probe["host"])
    table = {"format": TABLE_FORMAT, "gpu": a.gpu, "device_name": env["gpu"],
             "source": "benchmarks/results/latency (latency_measure.py)", "torch": env["torch"],
             "measured": env["started"], "kernel_us": round(probe["graph_tiny_kernel_us_x200"], 4),
             "host_factor": factor, "host_probe": probe["host"], "curves": curves,
             "kernels": counts if not os.environ.get("S34_NOKERNELS") else {}}
    gpu = LatencyGpu(spec, parse_table(table, "new table"))
    curves.update(fastpath_curves(op_rows, gpu))
    gpu = LatencyGpu(spec, parse_table(table, "new table"))
    table["scales"] = fit_scales(models, tr, gpu)
    gpu = LatencyGpu(spec, parse_table(table, "new table"))
    host = HostModel(HostCost(probe["host"]["op_us"], probe["host"]["module_us"],
                              probe["host"]["cpu"]), factor)  # the new table's own factor
    rows = validate(models, tr, gpu, host)
    if a.dev_only:
        for r in rows:
            print(f"{r['model'][-24:]:24s} {r['dtype']} {r['batch']:2d} {100 * r['error']:+5.0f}%")
        print(json.dumps({"dev": summary(rows), "scales": table["scales"]}, indent=1))
        return
    sets = {s: summary([r for r in rows if r["set"] == s]) for s in ("dev", "val")}
    table["validation"] = {"set": "validation", **sets["val"],
                           "page": "benchmarks/RESULTS-latency.md"}
    path = ROOT / "src/torchinspect/latency/tables" / f"{a.gpu}.json"
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    (RAW / "predictions.json").write_text(json.dumps({"summary": sets, "rows": rows}, indent=1)
                                          + "\n", encoding="utf-8")
    page = render(env, probe, table, sets, rows)
    (ROOT / "benchmarks" / "RESULTS-latency.md").write_text(page, encoding="utf-8")
    print(json.dumps(sets, indent=1))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def render(env: dict[str, Any], probe: dict[str, Any], table: dict[str, Any],
           sets: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Latency prediction: results",
        "",
        "Generated by `benchmarks/latency_tables.py` from the raw data in "
        "`benchmarks/results/latency/` (do not edit by hand).",
        "",
        f"Machine: {env['gpu']}, torch {env['torch']}, cuDNN {env['cudnn']}, host CPU "
        f"{probe['host']['cpu']} (measured {env['started']}). Measured side: torchinspect's "
        "own `run_bench` (what `inspect bench --device cuda [--cuda-graphs]` runs): eval, "
        "`inference_mode`, cuDNN autotuning on, PyTorch's default TF32 settings (fp32 "
        "convolutions TF32, fp32 matmuls IEEE), median of CUDA-event timings. Predicted side: "
        "`predict_latency` with the table built from the op measurements (never from the "
        "models), the GPU host's own host-cost probe, traced on meta on the CPU.",
        "",
        f"Per-kernel time under graph replay (tiny kernel): {table['kernel_us']:.2f} µs. "
        f"Host factor (fitted on the development set only): {table['host_factor']:.2f}. "
        "In-model corrections per op group (fitted on the development set only): "
        + ", ".join(f"{k} x{v:.2f}" for k, v in table["scales"].items()) + ".",
        "",
        "## Summary",
        "",
        "| set | models | cases | median abs error (graph replay) | 90th percentile | "
        "within 15% | within 30% | eager binding side right | median abs error (eager time) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    before = RAW / "predictions-before.json"
    earlier = json.loads(before.read_text(encoding="utf-8"))["summary"] if before.exists() else {}
    for name, label in (("val", "validation (never tuned on)"), ("dev", "development")):
        for when, summ in (("now", sets), ("before sweep 2", earlier)):
            if name not in summ:
                continue
            s = summ[name]
            lines.append(f"| {label}, {when} | {s['models']} | {s['cases']} | "
                         f"{_pct(s['median_abs_error'])} | {_pct(s['p90_abs_error'])} | "
                         f"{_pct(s['within_15'])} | {_pct(s['within_30'])} | "
                         f"{_pct(s['binding_right'])} ({s['binding_cases']} cases) | "
                         f"{_pct(s['eager_median_abs_error'])} |")
    lines += ["", "Targets (issue 34, validation set): median within 15%, 90% within 30%, "
              "binding side right for 90%. The eager time itself is rougher: the host side is "
              "modelled from a probe of the CPU, and the GPU host's eager timings move by up to "
              "2x between runs of the same model (densenet121 bf16 batch 1: 22 ms, fp32: 13 ms).",
              "",
              "\"Before sweep 2\": `predictions-before.json`, written by this script at the "
              "commit before sweep 2 (its development set had 9 models; sweep 2 added "
              "r2plus1d_18, mc3_18 and FastEncoder to it). The validation set and its "
              "measurements are the same in both rows; it was predicted once with the new "
              "table.", *sweep2_lines(table),
              "", "## Every case", "",
              "| set | model | dtype | batch | graph replay ms | predicted ms | error | "
              "eager ms | host enqueue ms | predicted host ms | binds (measured / predicted) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['model'].replace('benchmarks/', '')} | {r['dtype']} | {r['batch']} | "
            f"{r['graph_ms']:.3f} | {r['predicted_gpu_ms']:.3f} | {100 * r['error']:+.0f}% | "
            f"{r.get('eager_ms', float('nan')):.2f} | {r.get('host_enqueue_ms', float('nan')):.2f} | "
            f"{r['predicted_host_ms']:.2f} | {r.get('measured_binds', '-')} / {r['predicted_binds']} |")
    lines += ["", "Measured binding side: the host binds when its enqueue time for one eager "
              "forward is at least the graph-replay (GPU) time.", ""]
    speed = RAW / "speed.json"
    if speed.exists():
        lines += speed_lines(json.loads(speed.read_text(encoding="utf-8")))
    return "\n".join(lines)


def speed_lines(sp: dict[str, Any]) -> list[str]:
    m = sp["machine"]
    where = (f"{m['cpu']}, {m['cores']} cores, load average {m['load_average']} at the start"
             + (" (a loaded machine: wall times are upper bounds)" if m.get("loaded") else "")
             if isinstance(m, dict) else str(m))
    lines = ["## Speed of the prediction", "",
             f"`benchmarks/latency_speed.py` on {where}, Python {sp['python']}, torch "
             f"{sp['torch']}, median of {sp['runs']} interleaved whole-process runs:", "",
             "| command | wall s | CPU s |", "|---|---|---|"]
    for key, cmd in sp["commands"].items():
        lines.append(f"| `{cmd}` | {sp['wall_s'][key]:.2f} | {sp['cpu_s'][key]:.2f} |")
    if "imported" in sp:
        heavy = ", ".join(sp["imported"]) or "none of them"
        lines += ["", "Heavy modules the prediction imported (of TorchDynamo, sympy, triton, "
                  f"transformers, scipy): {heavy}. TorchDynamo stays out: the meta build and "
                  "the trace run with a `torch._dynamo` stand-in "
                  "(`src/torchinspect/privtorch.py`), and torchvision's roi_align import of "
                  "it is deferred."]
    lines += ["", "Wall time above CPU time is the machine's other load.", ""]
    return lines


def sweep2_lines(table: dict[str, Any]) -> list[str]:
    """What sweep 2 measured, from the table built here (kernels per op, fast-path factors)
    and the raw op rows (the attention kernel PyTorch chose)."""
    lines = ["", "## Sweep 2: kernels per op, attention kernels, the fast path", "",
             "Kernels one op launches on the GPU (torch.profiler, batch 1; median per op "
             "class; the predicted kernel count uses these):", "",
             "| op class | kernels |", "|---|---|"]
    lines += [f"| {k} | {v:g} |" for k, v in table.get("kernels", {}).items()]
    chosen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in read_jsonl(RAW / "tables.jsonl") + read_jsonl(RAW / "kernels.jsonl"):
        spec = row.get("spec", {})
        if spec.get("kind") == "sdpa" and not spec.get("backend") and row.get("kernel_names"):
            name = next((n for n in row["kernel_names"] if "Memset" not in n), "")
            kind = ("cuDNN" if "cudnn" in name else "memory-efficient" if "fmha" in name
                    or "Efficient" in name else "flash" if "flash" in name else name[:30])
            mask = {None: "none", False: "none", True: "padding (b, 1, 1, s)"}.get(
                spec.get("mask"), str(spec.get("mask")))
            chosen[(mask, row["dtype"])].add(kind)
    if chosen:
        lines += ["", "The attention kernel PyTorch picks by default (causal or not; the mask "
                  "additive):", "", "| mask | dtype | kernel |",
                  "|---|---|---|"]
        lines += [f"| {m} | {d} | {', '.join(sorted(k))} |" for (m, d), k in sorted(chosen.items())]
    fast = {k: v for k, v in table["curves"].items() if k.startswith("fastpath.")}
    if fast:
        lines += ["", "PyTorch's fast path (`_transformer_encoder_layer_fwd`, "
                  "`_native_multi_head_attention`) against the ops the meta trace records "
                  "(the slow path): measured fast-path time / the table's price of those ops, "
                  "by log10 of that price in µs:", "", "| curve | (log10 µs, factor) |",
                  "|---|---|"]
        lines += [f"| {k} | " + ", ".join(f"({x:.2f}, {e:.2f})" for x, e in v) + " |"
                  for k, v in fast.items()]
    return lines


if __name__ == "__main__":
    main()
