"""`inspect report` -> Report: header, totals, charts, module graph, layer table, doctor
findings and bench timings of one model; several models -> one comparison page.

The html renderer (``report/page.py``) draws it; the other formats get the same sections as
tables. A part that could not be made shows as ``<part>: not available (...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.analysis.conventions import convention_notes
from torchinspect.report.base import (
    Chart,
    Figure,
    KeyValues,
    Report,
    Shown,
    Table,
    Text,
    fmt_si,
    fmt_value,
    nbytes,
    pct,
    si,
)
from torchinspect.report.memory_chart import memory_sections
from torchinspect.report.roofline_chart import roofline_sections
from torchinspect.report.serving_chart import serving_sections
from torchinspect.report.summary import summary_report, totals_section, trailer_sections
from torchinspect.sources.origin import describe_weights

if TYPE_CHECKING:
    from torchinspect.overview.collect import ModelOverview, Overview


def overview_report(ov: Overview) -> Report:
    if len(ov.models) == 1:
        sections = single_sections(ov, ov.models[0])
    else:
        sections = comparison_sections(ov)
    return Report("report", ov.to_dict(), sections)


def header_section(ov: Overview, m: ModelOverview | None) -> KeyValues:
    items: list[tuple[str, Any]] = []
    if m is not None:
        s = m.summary
        items += [("Model", m.spec if m.spec == m.name else f"{m.spec} ({m.name})"),
                  ("Input", s.input), ("Weights", describe_weights(m.weights)),
                  ("Traced", f"{'train' if s.train else 'eval'} mode on {s.device}"
                   + (f" ({s.fallback_reason})" if s.fallback_reason else ""))]
    else:
        items += [("Weights", "; ".join(f"{m.name}: {describe_weights(m.weights)}"
                                        for m in ov.models))]
    items += [(name, v or "-") for name, v in ov.versions.items()]
    if ov.bench_device:
        items.append(("Bench device", ov.bench_device))
    items.append(("Created", ov.created))
    return KeyValues("Model and versions" if m is not None else "Versions", items)


def single_sections(ov: Overview, m: ModelOverview) -> list[Any]:
    sections: list[Any] = [header_section(ov, m), totals_section(m.summary.totals),
                           Text(convention_notes())]
    sections += block_charts(m)
    sections.append(top_layers_chart(m))
    sections.append(treemap_chart(m))
    sections.append(graph_figure(m))
    sections += memory_sections(m.memory.result if m.memory else None, m.missing.get("memory"))
    if m.latency is not None or "latency" in m.missing:
        sections += roofline_sections(m.latency, m.missing.get("latency"))
    sections += serving_sections(m.serving, m.missing.get("serving"))
    sections.append(layers_table(m, "Layers"))
    sections += not_counted_sections(m, "FLOPs")
    sections += doctor_sections(m, "Doctor findings")
    if m.bench is not None or "bench" in m.missing:
        sections += bench_sections([m])
    sections += trailer_sections({}, m.summary.notes)
    return sections


def not_counted_sections(m: ModelOverview, title: str) -> list[Any]:
    """The FLOPs section: the total, MACs by op (as `inspect flops` shows them) and the ops
    without a MAC formula, next to the layer table whose MACs they are missing from."""
    t = m.summary.totals
    trace = m.summary.trace
    by_op = trace.macs_by_op if trace is not None else {}
    calls = trace.op_calls if trace is not None else {}
    total = t.macs or 1
    out: list[Any] = [Table(
        title, ["Op", "Calls", "MACs", "FLOPs", "% MACs"],
        [[op, calls.get(op, 0), si(n), si(2 * n), pct(100.0 * n / total)]
         for op, n in sorted(by_op.items(), key=lambda kv: -kv[1])],
        align=["left", "right", "right", "right", "right"],
        footer=[f"Total: {fmt_si(t.macs)} MACs ({t.macs:,}) = {fmt_si(t.flops)} FLOPs; "
                "by module in the layer table above.",
                *(line for sec in trailer_sections(m.summary.not_counted, [])
                  for line in sec.lines)])]
    return out


def comparison_sections(ov: Overview) -> list[Any]:
    ms = ov.models
    sections: list[Any] = [header_section(ov, None), totals_table(ms),
                           Text(convention_notes())]
    sections.append(Chart("Parameters by model", [m.name for m in ms],
                          [("params", [float(m.summary.totals.params) for m in ms])]))
    sections.append(Chart("MACs by model", [m.name for m in ms],
                          [("MACs", [float(m.summary.totals.macs) for m in ms])]))
    sections.append(Chart("Memory by model (parameters, activations)", [m.name for m in ms],
                          [("parameters", [float(m.summary.totals.param_bytes) for m in ms]),
                           ("activations", [float(m.summary.totals.activation_bytes) for m in ms])],
                          unit="B"))
    sections += type_charts(ms)
    sections += shared_block_charts(ms)
    if any(m.bench is not None or "bench" in m.missing for m in ms):
        sections += bench_sections(ms)
    for m in ms:
        sections.append(top_layers_chart(m, f"{m.name}: top layers by MACs"))
        sections.append(treemap_chart(m, f"{m.name}: params and MACs by module"))
        sections.append(graph_figure(m, f"{m.name}: module graph"))
        sections.append(layers_table(m, f"{m.name}: layers", primary=False))
        sections += not_counted_sections(m, f"{m.name}: FLOPs")
        sections += doctor_sections(m, f"{m.name}: doctor findings")
        sections += trailer_sections({}, m.summary.notes)
    return sections


def totals_table(ms: list[ModelOverview]) -> Table:
    rows = []
    for m in ms:
        t = m.summary.totals
        doctor = doctor_cell(m)
        rows.append([m.name, m.summary.input, t.params, si(t.macs), si(t.flops),
                     nbytes(t.param_bytes), nbytes(t.activation_bytes), nbytes(t.total_bytes),
                     doctor, best_throughput(m)])
    return Table("Totals side by side",
                 ["Model", "Input", "Params", "MACs", "FLOPs", "Param memory",
                  "Activation memory", "Total size (est.)", "Doctor findings", "Best throughput"],
                 rows, primary=True)


def doctor_cell(m: ModelOverview) -> str:
    """Findings by severity, or "none" with the checks that ran and those that did not."""
    if m.doctor is None:
        return "-"
    r = m.doctor.result
    found = ", ".join(f"{n} {k}" for k, n in r.counts().items() if n)
    not_run = sorted({*r.skipped, *m.doctor.left_out, *r.broken})
    text = found or f"none in {_codes(r.checked) or 'no checks'}"
    return text + (f" ({_codes(not_run)} not run)" if not_run else "")


def _codes(codes: list[str]) -> str:
    from torchinspect.analysis.doctor.rules import fold_codes

    return fold_codes(codes)


def block_charts(m: ModelOverview) -> list[Chart]:
    """Params and MACs per top-level block of one model."""
    blocks = m.blocks()
    shown = [f"{b.name} ({b.type})" for b in blocks]
    return [Chart("Parameters per top-level block", shown,
                  [(m.name, [float(b.params) for b in blocks])]),
            Chart("MACs per top-level block", shown, [(m.name, [float(b.macs) for b in blocks])])]


def shared_block_charts(ms: list[ModelOverview]) -> list[Any]:
    """Per-block bars of several models only for the top-level names they all have, and
    only where some model has a value: bars of unrelated blocks side by side say nothing."""
    per = [{b.name: b for b in m.blocks()} for m in ms]
    shared = [name for name in per[0] if all(name in p for p in per[1:])]
    out: list[Any] = []
    for attr, title in (("params", "Parameters"), ("macs", "MACs")):
        names = [n for n in shared if any(getattr(p[n], attr) for p in per)]
        if names:
            out.append(Chart(f"{title} per top-level block (blocks every model has)", names,
                             [(m.name, [float(getattr(p[n], attr)) for n in names])
                              for m, p in zip(ms, per, strict=True)]))
    if not out:
        out.append(Text(["No top-level block with params or MACs has the same name in every "
                         "model: compare them per module type above."],
                        title="Per top-level block"))
    return out


MAX_TYPES = 12  # bars per type chart; the rest are summed as "other types"


def type_charts(ms: list[ModelOverview]) -> list[Any]:
    """Params and MACs per module type family (Conv2d, Linear, attention, norm, ...), every
    model side by side: what models of different architectures share."""
    per = [m.by_type() for m in ms]
    totals = [(m.summary.totals.params or 1, m.summary.totals.macs or 1) for m in ms]
    share: dict[str, float] = {}
    for types, (params, macs) in zip(per, totals, strict=True):
        for name, t in types.items():
            share[name] = share.get(name, 0.0) + t.params / params + t.macs / macs
    names = sorted(share, key=share.__getitem__, reverse=True)
    shown, rest = names[:MAX_TYPES], names[MAX_TYPES:]

    def chart(title: str, attr: str) -> Chart:
        """Only the types some model has a value for (norm layers run no MACs)."""
        rows: list[tuple[str, list[float | None]]] = []
        for n in shown:
            vals = [float(getattr(types[n], attr)) if n in types else None for types in per]
            if any(vals):
                rows.append((n, vals))
        if rest:
            rows.append(("other types", [float(sum(getattr(types[n], attr) for n in rest
                                                   if n in types)) for types in per]))
        return Chart(title, [n for n, _ in rows],
                     [(m.name, [vals[k] for _, vals in rows]) for k, m in enumerate(ms)])

    grouped = {n: sorted({c for types in per if n in types for c in types[n].classes})
               for n in shown}
    members = [f"{n} = {', '.join(cs)}" for n, cs in grouped.items() if cs != [n]]
    if rest:
        members.append(f"other types = {', '.join(rest)}")
    note = ("Parameters count on the module that holds them, MACs on the module whose forward "
            "runs the op" + (f"; {'; '.join(members)}." if members else "."))
    return [chart("Parameters per module type", "params"), chart("MACs per module type", "macs"),
            Text([note])]


def top_layers_chart(m: ModelOverview, title: str | None = None) -> Chart:
    """Identical layers as one bar (``Conv2d 3×3 p1 256→256 @14×14 (×5)``): their MACs together."""
    top = m.top_layers()
    labels = [g.name + (f" (×{g.count})" if g.count > 1 else "") for g in top]
    return Chart(title or f"Top {len(top)} layers by MACs (identical layers as one bar)", labels,
                 [("MACs", [float(g.macs) for g in top])])


def treemap_chart(m: ModelOverview, title: str = "Parameters and MACs by module") -> Chart:
    """The top two levels of the module tree, sized by params and by MACs (the page draws a
    treemap; other formats list the values)."""
    tree = m.hierarchy()
    types = {r.name: r.type for r in m.summary.rows}
    # "layer2.0 (Conv2d)": the page writes a tile as "Conv2d layer2.0", not a bare index "0"
    labels = [f"{name} ({types[name]})" if name in types else name for name in tree]
    return Chart(title, labels, [("params", [float(p) for p, _ in tree.values()]),
                                 ("MACs", [float(c) for _, c in tree.values()])],
                 kind="treemap")


def graph_figure(m: ModelOverview, title: str = "Module graph") -> Figure:
    if m.graph is None:
        why = m.missing.get("graph", "not requested")
        return Figure(title, None, f"graph: {why}")
    g = m.graph
    head = f"{len(g.graph.nodes)} nodes, depth {g.graph.depth}; repeated blocks folded (×N)"
    if g.svg is None:
        return Figure(title, None, f"graph: not drawn ({g.note}); {head}")
    notes = "; ".join([head, *g.graph.notes])
    return Figure(title, g.svg, notes)


def layers_table(m: ModelOverview, title: str, primary: bool = True) -> Table:
    table = next(s for s in summary_report(m.summary).sections if isinstance(s, Table))
    table.title = title
    table.primary = primary
    return table


def doctor_sections(m: ModelOverview, title: str) -> list[Any]:
    if m.doctor is None:
        return [Text([f"doctor: {m.missing.get('doctor', 'not requested')}"], title=title,
                     style="yellow")]
    r = m.doctor.result
    out: list[Any] = []
    lines = [f"checks run: {_codes(r.checked) or 'none'}"]
    # one line per reason: 12 checks left out for one reason are one line naming them
    by_reason: dict[str, list[str]] = {}
    for code, why in {**r.skipped, **m.doctor.left_out}.items():
        by_reason.setdefault(why, []).append(code)
    lines += [f"{_codes(codes)} not run: {why}" for why, codes in by_reason.items()]
    lines += [f"{code} could not finish: {why}" for code, why in r.broken.items()]
    if r.findings:
        rows = [[str(f.severity), f.code, f.name, f.module or "(model)", f.what, f.fix]
                for f in r.findings]
        out.append(Table(title, ["Severity", "Code", "Check", "Module", "What", "Fix"], rows,
                         align=["left"] * 6, footer=lines, wrap=["What"], code=["Fix"]))
    else:
        out.append(Text(["no findings", *lines], title=title))
    if r.notes:
        out.append(Text([f"note: {n}" for n in r.notes], style="yellow"))
    return out


def best_throughput(m: ModelOverview) -> Shown:
    """The highest samples/s of the bench and where it was reached: ``1,234.5/s at batch 32
    (fp32, cpu)`` (the raw rate for CSV/JSON and sorting)."""
    bench = m.bench
    ok = [c for c in bench.configs if c.status == "ok" and c.throughput] if bench else []
    if bench is None or not ok:
        return Shown("", "-")
    best = max(ok, key=lambda c: c.throughput)
    batch = f" at batch {best.batch}" if best.batch is not None else ""
    return Shown(best.throughput, f"{best.throughput:,.1f}/s{batch} ({best.dtype}, "
                 f"{bench.device})")


def bench_sections(ms: list[ModelOverview]) -> list[Any]:
    out: list[Any] = []
    runs = [(m, m.bench) for m in ms if m.bench is not None]
    for m in ms:
        if m.bench is None:
            out.append(Text([f"bench ({m.name}): {m.missing.get('bench', 'not requested')}"],
                            title="Bench", style="yellow"))
    if not runs:
        return out
    batches = sorted({c.batch for _, b in runs for c in b.configs if c.batch is not None})
    labels = [str(b) for b in batches]
    thr: list[tuple[str, list[float | None]]] = []
    lat: list[tuple[str, list[float | None]]] = []
    rows: list[list[Any]] = []
    for m, bench in runs:
        for dtype in dict.fromkeys(c.dtype for c in bench.configs):
            name = dtype if len(ms) == 1 else f"{m.name} {dtype}"
            by_batch = {c.batch: c for c in bench.configs if c.dtype == dtype}
            thr.append((name, [_ok(by_batch.get(b), "throughput") for b in batches]))
            lat.append((name, [_ok(by_batch.get(b), "median") for b in batches]))
        for c in bench.configs:
            st = c.timing.stats if c.timing is not None else None
            rows.append([m.name, c.dtype, c.batch if c.batch is not None else "-", c.status,
                         _time(st.median if st else None), _time(st.p25 if st else None),
                         _time(st.p75 if st else None),
                         Shown(c.throughput, f"{c.throughput:,.1f}") if c.throughput else Shown("", "-"),
                         c.timing.iters if c.timing else "-", c.error or "; ".join(c.warnings)])
    device = runs[0][1].device
    if batches:
        out.append(Chart(f"Throughput per batch size ({device}, samples/s)", labels, thr,
                         kind="line", unit="/s", x_title="batch size"))
        out.append(Chart(f"Latency per batch size ({device}, median per call)", labels, lat,
                         kind="line", unit="s", x_title="batch size"))
    out.append(Table(f"Bench on {device}",
                     ["Model", "Dtype", "Batch", "Status", "Median", "p25", "p75", "Samples/s",
                      "Iters", "Notes"], rows,
                     align=["left", "left", "right", "left", "right", "right", "right", "right",
                            "right", "left"],
                     footer=["A quick look (about --bench-seconds per configuration); use "
                             "`inspect bench` for careful numbers."]))
    return out


def _ok(c: Any, what: str) -> float | None:
    if c is None or c.status != "ok" or c.timing is None:
        return None
    return c.throughput if what == "throughput" else c.timing.stats.median


def _time(seconds: float | None) -> Shown:
    if seconds is None:
        return Shown("", "-")
    return Shown(seconds, fmt_value(seconds, "s"))

