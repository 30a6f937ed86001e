"""RESULTS-latency.md, rendered from committed raw data only.

The data: ``results/latency-h100-v2/predictions.json``, written by ``latency_tables.py`` (the
predictions of every measured model of both sets, graph replay, eager and training step,
against the measurements of ``latency_measure.py`` on the H100; the composite-layer checks;
what the committed lists planned and the data lacks; every constant's provenance),
``results/latency-h100-v2/revisions.json`` (changes made after the validation set was first
predicted, with that prediction's figures), and ``results/latency/speed.json`` (``latency_speed.py``) or ``results/latency-predict-speed.json``
(``perf_predict.py``) when present. Registered in ``report.py``'s ``PAGES``.
"""

from __future__ import annotations

from typing import Any

import machine

PREDICTIONS = "latency-h100-v2/predictions"
REVISIONS = "latency-h100-v2/revisions"
SPEED = "latency-predict-speed"

TARGETS = {  # issue 40, validation set, CUDA-graph replay on the H100; training step
    "median_abs_error": 0.12, "within_30": 0.90, "batch1_signed": 0.10,
    "train_median": 0.15, "train_within_30": 0.90}


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.0f}%" if signed else f"{100 * x:.0f}%"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _name(model: str) -> str:
    return model.replace("benchmarks/latency_zoo.py:", "")


def _summary_row(label: str, s: dict[str, Any]) -> str:
    if not s.get("cases"):
        return f"| {label} | 0 | - | - | - | - | - |"
    return (f"| {label} | {s['cases']} ({s['models']} models) | {_pct(s['median_abs_error'])} | "
            f"{_pct(s['p90_abs_error'])} | {_pct(s['within_15'])} | {_pct(s['within_30'])} | "
            f"{_pct(s['median_signed_error'], signed=True)} |")


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def targets(summary: dict[str, Any], revised: dict[str, Any] | None = None) -> list[str]:
    """The issue's targets, judged on the validation set's data as first predicted
    (``revised``: the training summary with the cases a later change re-predicted)."""
    graph, one = summary["val"]["graph"], summary["val"]["graph_batch1"]
    train = summary["train"]["val"]
    lines = ["## Targets (issue 40, validation set)", "",
             "| target | value | verdict |", "|---|---|---|"]
    if graph.get("cases"):
        lines += [f"| graph replay: median error under 12% | {_pct(graph['median_abs_error'])} | "
                  f"{_met(graph['median_abs_error'] < TARGETS['median_abs_error'])} |",
                  f"| graph replay: 90% within 30% | {_pct(graph['within_30'])} within 30% | "
                  f"{_met(graph['within_30'] >= TARGETS['within_30'])} |"]
    if one.get("cases"):
        lines.append(f"| batch 1: median signed error within ±10% | "
                     f"{_pct(one['median_signed_error'], signed=True)} | "
                     f"{_met(abs(one['median_signed_error']) <= TARGETS['batch1_signed'])} |")
    if train.get("cases"):
        lines += [f"| training step: median error under 15% | {_pct(train['median_abs_error'])} | "
                  f"{_met(train['median_abs_error'] < TARGETS['train_median'])} |",
                  f"| training step: 90% within 30% | {_pct(train['within_30'])} within 30% | "
                  f"{_met(train['within_30'] >= TARGETS['train_within_30'])} |"]
    if revised and revised.get("cases"):
        lines += [f"| training step after the changes below (not held out): median under 15% | "
                  f"{_pct(revised['median_abs_error'])} | "
                  f"{_met(revised['median_abs_error'] < TARGETS['train_median'])} |",
                  f"| training step after the changes below (not held out): 90% within 30% | "
                  f"{_pct(revised['within_30'])} within 30% | "
                  f"{_met(revised['within_30'] >= TARGETS['train_within_30'])} |"]
    return lines + [""]


def _revisions(doc: dict[str, Any]) -> list[str]:
    """Changes made after the validation set was first predicted, and the cases they moved
    (re-predicted by ``latency_tables.py --revise``)."""
    if not doc.get("revisions"):
        return []
    lines = ["## Changes after the validation set was predicted", "", doc["about"], ""]
    for rev in doc["revisions"]:
        after = rev.get("after", {})
        now = {(r["model"], r["batch"]): r for r in after.get("train_rows", [])}
        lines += [f"- {rev['commit']}: {rev['change']}. Exposed by {rev['exposed_by']}; "
                  f"{rev['kind']}. Re-predicted by `{after.get('command', '-')}`.", "",
                  "| case | first predicted | after the change |", "|---|---|---|"]
        for r in rev["first"]["train_rows"]:
            cur = now.get((r["model"], r["batch"]), {})
            lines.append(f"| training step, {_name(r['model'])} batch {r['batch']} | "
                         f"{_pct(r['error'], signed=True)} | "
                         f"{_pct(cur.get('error'), signed=True)} |")
        lines.append("")
    return lines


def latency_page() -> tuple[str, list[str]]:
    from pagetext import machine_line

    record = machine.load(PREDICTIONS)
    d = record["data"]
    s = d["summary"]
    g = d["gpu"]
    t = d["table"]
    lines = [
        "# Latency prediction: results", "",
        f"Predictions made on the CPU of this record ({machine_line(record)}), against "
        f"measurements on one **{g['device']}** (torch {g['torch']}, cuDNN {g.get('cudnn')}, "
        f"measured from {g['measured']}; the GPU host's own dispatch probe: "
        f"{g['host_probe']['op_us']:.2f} µs per op, {g['host_probe']['module_us']:.2f} µs per "
        "module call).", "",
        "Measured side: `benchmarks/latency_measure.py`: torchinspect's own bench (`run_bench`, "
        "eval, `inference_mode`, cuDNN autotuning on, PyTorch's default TF32 settings) in CUDA-"
        "graph replay and eager, median of CUDA-event timings; training steps: fp32 weights, "
        "forward and loss under autocast bf16, AdamW (foreach), `cudnn.benchmark`, CUDA events "
        "at the phase boundaries, median of up to 12 steps after 3 warm-up steps. Predicted "
        "side: `benchmarks/latency_tables.py`, the table `src/torchinspect/latency/tables/"
        "h100.json` built from the op sweeps (never from the models) with its few development "
        "fits, every model traced on meta (training steps on fake tensors) on the CPU.", "",
        "The validation set (`latency_measure.py` VALIDATION) was chosen and committed before "
        "any of it was measured and is never tuned on: every fit below reads the development "
        "set only; the validation set is predicted once.", ""]
    revisions = machine.load(REVISIONS)["data"] \
        if (machine.RESULTS / f"{REVISIONS}.json").exists() else {}
    revised = [r["after"]["train_val_summary"] for r in revisions.get("revisions", [])
               if "after" in r]
    lines += targets(s, revised[-1] if revised else None)
    lines += _revisions(revisions)
    lines += ["## Summary", "",
              "| set and cases | cases | median abs error | 90th percentile | within 15% | "
              "within 30% | median signed error |", "|---|---|---|---|---|---|---|"]
    for name, label in (("val", "validation"), ("dev", "development")):
        lines += [_summary_row(f"{label}: graph replay, all", s[name]["graph"]),
                  _summary_row(f"{label}: graph replay, batch 1", s[name]["graph_batch1"]),
                  _summary_row(f"{label}: graph replay, large batch", s[name]["graph_large"]),
                  _summary_row(f"{label}: eager", s[name]["eager"]),
                  _summary_row(f"{label}: training step", s["train"][name])]
    lines += ["", "Eager binding side (host or GPU) predicted right: validation "
              f"{_pct(s['val']['binding_right'])} of {s['val']['binding_cases']} cases, "
              f"development {_pct(s['dev']['binding_right'])} of {s['dev']['binding_cases']}. "
              "The eager time is rougher than the graph replay: its host side is modelled from "
              "a probe of the CPU, and the GPU host's eager timings of one model move by up to "
              "2x between runs.", ""]
    lines += _constants(t) + _provenance(d["provenance"]) + _checks(d["checks"])
    lines += _cases(d["rows"]) + _train(d["train_rows"]) + _missing(d["missing"])
    files = [f"{PREDICTIONS}.json"] + ([f"{REVISIONS}.json"] if revisions else [])
    if (machine.RESULTS / f"{SPEED}.json").exists():
        lines += _speed(machine.load(SPEED))
        files.append(f"{SPEED}.json")
    return "\n".join(lines) + "\n", files


def _constants(t: dict[str, Any]) -> list[str]:
    return ["## The model's constants", "",
            f"Gap between kernels in a CUDA graph: {t['gap_us']:.3f} µs. Host factor "
            f"{t['host_factor']:.2f} and launch factor {t['launch_factor']:.2f} (development "
            "eager runs). In-model corrections (development graph replays; applied to the time "
            "above each op's floor): " + ", ".join(f"{k} x{v:.2f}" for k, v in t["scales"].items())
            + ". Training step (development training steps): "
            + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in t["train"].items()) + ".", ""]


def _provenance(items: list[dict[str, Any]]) -> list[str]:
    lines = ["## Provenance of every constant", "",
             "| constant | value | source | fitted on | from | how |", "|---|---|---|---|---|---|"]
    for p in items:
        lines.append(f"| {p['name']} | {p['value']} | {p['kind']} | {p.get('set', '-')} | "
                     f"{p['data']} | {p['how']} |")
    return lines + [""]


def _checks(checks: list[dict[str, Any]]) -> list[str]:
    if not checks:
        return []
    lines = ["## Whole layers of generic shapes, op by op", "",
             "Decoder layers and masked attention (sweep 3), encoder layers and MHA with "
             "PyTorch's fast path off (sweep 2): each call's ops priced on the curves, against "
             "the layer's measured in-graph time. The curves were built from single ops, not "
             "from these.", "",
             "| layer | shape | dtype | measured µs | predicted µs | error |",
             "|---|---|---|---|---|---|"]
    for c in checks:
        spec = c["spec"]
        shape = ", ".join(f"{k} {v}" for k, v in spec.items() if k not in ("kind", "sweep"))
        lines.append(f"| {spec['kind']} | {shape} | {c['dtype']} | {c['measured_us']:.1f} | "
                     f"{c['predicted_us']:.1f} | {_pct(c['error'], signed=True)} |")
    return lines + [""]


def _cases(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Every case (inference)", "",
             "| set | model | dtype | batch | graph ms | predicted | error | eager ms | "
             "predicted eager | binds (measured / predicted) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["set"] != "val", r["model"], r["dtype"], r["batch"])):
        lines.append(f"| {r['set']} | {_name(r['model'])} | {r['dtype']} | {r['batch']} | "
                     f"{_ms(r['graph_ms'])} | {_ms(r['predicted_gpu_ms'])} | "
                     f"{_pct(r.get('error'), signed=True)} | {_ms(r['eager_ms'])} | "
                     f"{_ms(r['predicted_eager_ms'])} | {r.get('measured_binds', '-')} / "
                     f"{r['predicted_binds']} |")
    return lines + [""]


def _train(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Every training step", "",
             "Phases as CUDA events at their boundaries measure them (ms, measured / predicted).",
             "", "| set | model | batch | step | predicted | error | forward | backward | "
             "optimizer |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["set"] != "val", r["model"], r["batch"])):
        if "error" not in r:
            lines.append(f"| {r['set']} | {_name(r['model'])} | {r['batch']} | "
                         f"{_ms(r['step_ms'])} | not predicted: {r.get('prediction_error', '')[:80]} "
                         "| - | - | - | - |")
            continue
        phases = " | ".join(f"{_ms(r[f'{p}_ms'])} / {_ms(r[f'predicted_{p}_ms'])}"
                            for p in ("forward", "backward", "optimizer"))
        lines.append(f"| {r['set']} | {_name(r['model'])} | {r['batch']} | {_ms(r['step_ms'])} | "
                     f"{_ms(r['predicted_step_ms'])} | {_pct(r['error'], signed=True)} | "
                     f"{phases} |")
    return lines + [""]


def _missing(missing: dict[str, list[str]]) -> list[str]:
    lines = ["## Not measured yet", "",
             "What the committed lists planned and the raw data does not hold. A GPU session "
             "on the same H100 kind appends it (each command measures only what its file "
             "lacks; about 17 device minutes with the generation and memory phases of "
             "`results/latency-h100-v2/README.md`):", "",
             "    python benchmarks/latency_measure.py benchmarks/results/latency-h100-v2 "
             "--phases models --sets val,dev-new --isolate --budget 300",
             "    python benchmarks/latency_measure.py benchmarks/results/latency-h100-v2 "
             "--phases train --sets val,dev-new,dev --isolate --budget 600", "",
             "then `python benchmarks/latency_tables.py` and `make bench-report` re-render this "
             "page. No GPU other than the H100 has a measured table: no H200 was measured "
             "(`latency_measure.py` on an H200 into a folder of its own would; "
             "`latency_tables.py` reads the H100's folders only today), so `--predict h200` is "
             "the datasheet-scaled H100 table, labelled so in its output.", ""]
    for kind, label in (("graph", "graph replay"), ("eager", "eager"), ("train", "training step")):
        items = missing.get(kind, [])
        lines.append(f"- {label}: " + ("none" if not items else f"{len(items)}: "
                                       + "; ".join(items)))
    return lines + [""]


def _speed(record: dict[str, Any]) -> list[str]:
    from pagetext import machine_line

    d = record["data"]
    lines = ["## Speed of the prediction", "", machine_line(record), "",
             "| command | wall s (median) | CPU s | runs |", "|---|---|---|---|"]
    for row in d["rows"]:
        lines.append(f"| `{row['command']}` | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                     f"{row['runs']} |")
    return lines + [""]
