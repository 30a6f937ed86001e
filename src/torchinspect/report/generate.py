"""``--generate N`` -> Report: the memory of a generate call (``inspect memory``), its latency
predicted and measured (``inspect bench``), and the --fit search over batch or context."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import KeyValues, Report, Shown, Table, Text, fmt_bytes, nbytes

if TYPE_CHECKING:
    from torchinspect.latency.generate import GenerateLatency
    from torchinspect.memory.generate import GenerateFit, GenerateMemory

MEMORY_SCHEMA = 1
LATENCY_SCHEMA = 1
_CATEGORIES = ("weights", "kv cache", "activations", "workspace", "buffers", "input")
_LABEL = {"kv cache": "KV cache"}


def _call(batch: int, prompt: int, new: int) -> str:
    seqs = "1 prompt" if batch == 1 else f"{batch:,} prompts"
    return f"generate {new:,} new tokens after {seqs} of {prompt:,} tokens"


def memory_header(r: GenerateMemory) -> list[str]:
    on = r.device + (f" ({r.gpu})" if r.gpu else "")
    return [f"{r.model}  input {r.input}",
            f"{_call(r.batch, r.prompt, r.new_tokens)}; predicted for {on}, dtype "
            f"{r.dtype or 'as built'}, {r.cache} cache",
            f"params {r.params:,} ({fmt_bytes(r.weights_bytes)}), buffers "
            f"{fmt_bytes(r.buffer_bytes)}, input {fmt_bytes(r.input_bytes)}"]


def _end_text(r: GenerateMemory) -> str:
    """``612.00 MB (8 x 2,176 positions)``; sliding windows named where they keep fewer."""
    positions = r.prompt + r.new_tokens - 1 if r.decoder != "seq2seq" else r.new_tokens
    text = f"{fmt_bytes(r.kv_cache_end_bytes)} ({r.batch:,} x {positions:,} positions"
    full = r.kv_bytes_per_token * r.batch * positions
    if r.decoder == "seq2seq":
        return text + ", and the prompt's cross-attention)"
    if r.cache != "static" and r.kv_cache_end_bytes < 0.99 * full:
        return text + "; sliding windows keep fewer)"
    return text + ")"


def memory_items(r: GenerateMemory) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = [("Peak allocated", nbytes(r.peak)), ("Where", r.where)]
    if r.kv_cache_bytes > r.kv_cache_end_bytes * 1.001:
        items.append(("KV cache, largest", Shown(r.kv_cache_bytes, f"{fmt_bytes(r.kv_cache_bytes)}"
                                                 " (after the prefill: views of larger "
                                                 "tensors)")))
    items += [("KV cache at the end", Shown(r.kv_cache_end_bytes, _end_text(r))),
              ("KV per token", Shown(r.kv_bytes_per_token, f"{fmt_bytes(r.kv_bytes_per_token)} "
                                     "per sequence")),
              ("Prefill peak", nbytes(r.prefill_peak)), ("Decode peak", nbytes(r.decode_peak))]
    return items


def phase_table(r: GenerateMemory) -> Table:
    """A row per phase: resident before the call, the prefill's peak, the decode steps'."""
    cats = [c for c in _CATEGORIES if any(p.breakdown.get(c, 0) for p in r.phases)]
    resident = {"weights": r.weights_bytes, "buffers": r.buffer_bytes, "input": r.input_bytes}
    rows: list[list[Any]] = [["resident", nbytes(r.resident),
                              *(nbytes(resident.get(c, 0)) for c in cats)]]
    for p in r.phases:
        rows.append([p.phase, nbytes(p.peak), *(nbytes(p.breakdown.get(c, 0)) for c in cats)])
    footer = ["resident: before generate starts; prefill: the prompt through the model and "
              "the first token; decode: the steps after it (each adds a token)"]
    footer += [f"{p.phase}: peak at {p.module}" for p in r.phases if p.module]
    return Table("Generation: the peak of each phase and what is allocated then",
                 ["Phase", "Peak", *(_LABEL.get(c, c.capitalize()) for c in cats)], rows,
                 align=["left", *["right"] * (len(cats) + 1)], footer=footer, primary=True,
                 optional=[c.capitalize() for c in ("buffers", "input", "workspace")])


def generate_memory_report(r: GenerateMemory, fit: GenerateFit | None = None,
                           gpu_text: str = "") -> Report:
    sections: list[Any] = [Text(memory_header(r)),
                           KeyValues("Generation (predicted)", memory_items(r)), phase_table(r)]
    data = r.to_dict()
    if fit is not None:
        sections += fit_sections(fit, r, gpu_text)
        data["fit"] = fit.to_dict()
    sections.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return Report("memory-generate", data, sections, version=MEMORY_SCHEMA)


def fit_sections(f: GenerateFit, r: GenerateMemory, gpu_text: str) -> list[Any]:
    """The value found, the probes at it and one above, and what the least needs."""
    what = "batch" if f.what == "batch" else "prompt"
    fixed = (f"a {f.fixed:,}-token prompt" if f.what == "batch" else
             f"batch {f.fixed:,}") + f" and {r.new_tokens:,} new tokens"
    items: list[tuple[str, Any]] = [("Budget", Shown(f.budget, fmt_bytes(f.budget)
                                                     + (f" ({gpu_text})" if gpu_text else "")))]
    if f.reserve:
        items.append(("Planned over a peak", f"{100 * f.reserve:g}% (blocks the allocator "
                      "keeps cached)"))
    if f.found is None:
        least = f.smallest()
        need = fmt_bytes(least * (1 + f.reserve)) if least is not None else "-"
        items.append((f"Largest {what}", f"none: {what} 1 needs {need}"))
    else:
        items.append((f"Largest {what}", Shown(f.found, f"{f.found:,} (at {fixed})")))
    if f.capped:
        items.append(("Note", "the search stopped at its limit"))
    items.append(("Predictions made", len(f.probes)))
    rows = []
    found = f.found if f.found is not None else 0
    for value in (found, found + 1):
        peak = next((p for v, p in reversed(f.probes) if v == value), None)
        if peak is None or value < 1:
            continue
        left = f.budget - int(peak * (1 + f.reserve))
        rows.append([value, nbytes(peak), Shown(left, ("" if left >= 0 else "-")
                                                + fmt_bytes(abs(left))),
                     "yes" if left >= 0 else "no"])
    return [KeyValues(f"Largest {what} that fits (searched on the predicted peaks)", items),
            Table(f"The {what} found and the one above", [what.capitalize(), "Peak", "Left",
                                                           "Fits"], rows,
                  align=["right", "right", "right", "left"])]


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def _rate(x: float | None) -> str:
    return "-" if not x else f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def latency_header(p: GenerateLatency) -> list[str]:
    return [f"{p.model} on {p.gpu_label}: PREDICTED, not measured (input {p.inputs})",
            f"{_call(p.batch, p.prompt, p.new_tokens)}, {p.dtype}; table: {p.source}",
            f"host: {p.host.op_us:.2f} µs/op, {p.host.module_us:.2f} µs/module call measured "
            f"on this CPU ({p.host.cpu}) x host factor {p.host_factor:.2f} x generate scale "
            f"{p.host_scale.scale:.2f}"]


def latency_table(p: GenerateLatency, measured: dict[str, Any] | None = None) -> Table:
    """Time to first token, eager decode, graph decode and the whole call; with a measurement,
    measured and error beside each."""
    graph = p.decode_graph_ms_per_token
    rows: list[list[Any]] = [
        ["time to first token", Shown(p.prefill_ms, _ms(p.prefill_ms)), "-", p.prefill.binds],
        ["decode, eager generate", Shown(p.decode_ms_per_token, _ms(p.decode_ms_per_token)),
         Shown(p.tokens_per_s, _rate(p.tokens_per_s)), p.decode.binds],
        ["decode, CUDA graph", Shown(graph, _ms(graph)) if graph is not None else
         Shown("", "not capturable"), Shown(p.graph_tokens_per_s or "",
                                            _rate(p.graph_tokens_per_s)), "gpu" if graph else "-"],
        ["whole call, eager", Shown(p.total_ms, _ms(p.total_ms)), "-", "-"]]
    columns = ["", "ms" if measured is None else "predicted ms", "tokens/s", "binds"]
    if measured is not None:
        values = [measured.get("prefill_ms"), measured.get("decode_ms_per_token"),
                  measured.get("graph_decode_ms_per_token"), measured.get(
                      f"generate_{p.new_tokens}_ms")]
        for row, value in zip(rows, values, strict=True):
            pred = row[1].value if isinstance(row[1].value, float) else None
            row.insert(2, Shown(value if value is not None else "", _ms(value)))
            row.insert(3, Shown(round(pred / value - 1, 6), f"{100 * (pred / value - 1):+.0f}%")
                       if pred and value else Shown("", "-"))
        columns[2:2] = ["measured ms", "error"]
    footer = ["ms per new token for the decode rows (one step for the whole batch); "
              "tokens/s: new tokens a second across the batch",
              "binds: the slower of the host (dispatching ops, generate's own work) and the GPU"]
    if graph is None and p.graph_reason:
        footer.append(f"not capturable: {p.graph_reason}")
    return Table("Generation" + (" (predicted)" if measured is None else
                                 ": predicted against measured"), columns, rows,
                 align=["left", *["right"] * (len(columns) - 2), "left"], footer=footer,
                 primary=True)


def generate_latency_report(p: GenerateLatency, measured: dict[str, Any] | None = None,
                            device: str | None = None) -> Report:
    sections: list[Any] = [Text(latency_header(p)), latency_table(p, measured)]
    data: dict[str, Any] = {"predicted": p.to_dict()}
    if measured is not None:
        data["measured"] = {"device": device, **measured}
        sections.append(Text([f"measured on {device}: prefill CUDA events, decode from the "
                              "wall time of generate (median of the runs), graph decode a "
                              "static-cache step replayed"]))
    if p.notes:
        sections.append(Text([f"note: {n}" for n in p.notes], style="yellow"))
    return Report("bench-generate", data, sections, version=LATENCY_SCHEMA)
