"""Predictions of text generation for the measured decoders (issue 43): raw data for
RESULTS-generate.md, from this CPU.

For every (model, batch, prompt) that ``results/generate-h100.jsonl`` holds for the chosen
sets (and not yet in OUT), the tool predicts what ``generate_measure.py`` measured, for the
H100, bf16, built from the same spec:

* memory (``memory/generate.py``): the peak of ``generate`` of 129 tokens, the resident part
  (weights, buffers, the prompt) and the workspaces the tool knows (cuBLAS), so the page
  scores ``resident + workspace + peak_above_before`` measured against the predicted peak
  (the measured ``peak`` itself carries what earlier cases left allocated);
* latency (``latency/generate.py``) with the measuring host's dispatch cost
  (``latency-h100-v2/probes.jsonl``): the prefill as measured (a plain forward over the
  prompt, every position's logits) and eager decode per token, each as GPU and host time
  with the host time unscaled (the page applies the package's generate host scale, so the
  scale fitted on the development set after its predictions holds for both sets), and the
  static-cache step under a CUDA graph, or why it cannot be captured.

One JSON line per case, appended as it goes, with the run header (transformers' version:
predict with the measuring host's, 5.17.0, which built those models; see below). A rerun
predicts only the cases OUT lacks, so new measurements are predicted by running it again.
The validation set is predicted once, at the end, and never tuned on.

``--fit-host`` fits the generate host scale (``src/torchinspect/latency/data/
generate-host.json``): the median of measured over unscaled predicted eager decode on the
**development** set in OUT (refused for any other set).

    pip install --no-deps --target .tf517 transformers==5.17.0 huggingface-hub==1.33.0 \\
        httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0
    PYTHONPATH=.tf517 python benchmarks/generate_predict.py \\
        benchmarks/results/generate-predicted-h100.jsonl --sets dev [--fit-host]
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "results" / "generate-h100.jsonl"
PROBES = HERE / "results" / "latency-h100-v2" / "probes.jsonl"
HOST_TABLE = HERE.parent / "src" / "torchinspect" / "latency" / "data" / "generate-host.json"
GPU = "h100"
DTYPE = "bf16"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measured_cases(sets: list[str]) -> list[dict[str, Any]]:
    """The measured rows (no error) of the chosen sets, in file order."""
    return [r for r in read_jsonl(MEASURED)
            if r.get("model") and "error" not in r and r.get("set") in sets]


def measuring_host() -> Any:
    """The dispatch cost probed on the measuring host (the probes line of the campaign)."""
    from torchinspect.latency.host import HostCost

    for r in read_jsonl(PROBES):
        if "host" in r:
            h = r["host"]
            return HostCost(float(h["op_us"]), float(h["module_us"]), str(h["cpu"]))
    raise SystemExit(f"{PROBES}: no probes line with the host's dispatch cost")


def predict(row: dict[str, Any], host: Any) -> dict[str, Any]:
    """Memory and latency predictions for one measured case."""
    from torchinspect.latency import latency_gpu
    from torchinspect.latency.eager import host_model
    from torchinspect.latency.generate import HostScale, LatencyConfig
    from torchinspect.latency.generate import predict_case as predict_latency
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.generate import GenerateConfig
    from torchinspect.memory.generate import predict_case as predict_memory
    from torchinspect.sources.case import ModelOptions, make_case

    new = int(row.get("new_tokens") or 129)
    batch, prompt = int(row["batch"]), int(row["prompt"])
    case = make_case(row["spec"], options=ModelOptions(
        args=row["args"], device="meta", inputs=[f"long:{batch},{prompt}"], no_batch=True),
        device="meta")
    t0 = time.perf_counter()
    mem = predict_memory(case, GenerateConfig(new, DTYPE), make_target("cuda", GPU, fast=True))
    t1 = time.perf_counter()
    lat = predict_latency(case, LatencyConfig(new, DTYPE, prefill="forward"), latency_gpu(GPU),
                          host_model(host), scale=HostScale(1.0, "unscaled: the page applies it"))
    t2 = time.perf_counter()
    return {
        "peak": mem.peak, "resident": mem.resident, "workspace": mem.workspace_bytes,
        "above": mem.peak - mem.resident - mem.workspace_bytes,
        "prefill_peak": mem.prefill_peak, "decode_peak": mem.decode_peak,
        "kv_cache_bytes": mem.kv_cache_bytes, "kv_bytes_per_token": mem.kv_bytes_per_token,
        "memory_where": mem.where, "memory_notes": mem.notes,
        "steps_traced": mem.steps_traced, "steps_written": mem.steps_written,
        # host times unscaled: the page applies the generate host scale of the package
        "prefill_gpu_ms": lat.prefill.gpu_ms, "prefill_host_ms": lat.prefill.host_ms,
        "decode_gpu_ms": lat.decode.gpu_ms, "decode_host_ms": lat.decode.host_ms,
        "graph_decode_ms_per_token": lat.decode_graph_ms_per_token,
        "graph_reason": lat.graph_reason,
        "memory_seconds": round(t1 - t0, 2), "latency_seconds": round(t2 - t1, 2)}


def fit_host(out: Path) -> None:
    """The generate host scale from the development set's predictions in ``out``."""
    measured = {(r["model"], r["batch"], r["prompt"]): r for r in measured_cases(["dev"])}
    ratios = []
    for p in read_jsonl(out):
        key = (p.get("model"), p.get("batch"), p.get("prompt"))
        if p.get("set") != "dev" or key not in measured or "error" in p:
            continue
        ratios.append(measured[key]["decode_ms_per_token"] / p["decode_host_ms"])
    if len(ratios) < 8:
        raise SystemExit(f"--fit-host: {len(ratios)} development cases predicted in {out}; "
                         "predict the development set first (--sets dev)")
    scale = round(st.median(ratios), 4)
    HOST_TABLE.write_text(json.dumps({
        "format": 1, "host_scale": scale,
        "fitted_on": f"median of measured / predicted eager decode over {len(ratios)} "
                     "development cases of benchmarks/generate_measure.py (H100 host)",
        "spread": [round(min(ratios), 4), round(max(ratios), 4)],
        "source": f"benchmarks/generate_predict.py --fit-host from {out.name}"}, indent=1) + "\n")
    print(f"wrote {HOST_TABLE}: host scale {scale} ({len(ratios)} cases, "
          f"{min(ratios):.3f}-{max(ratios):.3f})")


def main() -> None:
    from machine import run_header

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--sets", default="dev")
    ap.add_argument("--fit-host", action="store_true",
                    help="fit the generate host scale on the development set (after predicting)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be predicted")
    a = ap.parse_args()
    out = Path(a.out)
    sets = [s for s in a.sets.split(",") if s]
    if a.fit_host and sets != ["dev"]:
        raise SystemExit("--fit-host fits on the development set only: --sets dev")
    done = {(r["model"], r["batch"], r["prompt"]) for r in read_jsonl(out) if "error" not in r}
    todo = [r for r in measured_cases(sets) if (r["model"], r["batch"], r["prompt"]) not in done]
    print(f"{len(todo)} cases to predict ({len(done)} already in {out.name})", flush=True)
    if a.dry_run:
        for r in todo:
            print(f"  {r['set']} {r['model']} b{r['batch']} p{r['prompt']}")
        return
    header = run_header("transformers")
    host = measuring_host()
    out.parent.mkdir(parents=True, exist_ok=True)
    for row in todo:
        record: dict[str, Any] = {"run": header, "set": row["set"], "model": row["model"],
                                  "batch": row["batch"], "prompt": row["prompt"],
                                  "measured_transformers": row["run"]["versions"].get(
                                      "transformers")}
        try:
            record.update(predict(row, host))
        except Exception as exc:  # noqa: BLE001 - one model's failure is recorded, not fatal
            record["error"] = f"{type(exc).__name__}: {exc}"[:400]
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{row['set']} {row['model']} b{row['batch']} p{row['prompt']}: "
              f"{record.get('peak', record.get('error'))}", flush=True)
    if a.fit_host:
        fit_host(out)


if __name__ == "__main__":
    main()
