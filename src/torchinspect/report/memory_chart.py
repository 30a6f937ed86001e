"""The memory section of ``inspect report``: predicted peaks, a timeline of allocated memory
through forward, backward and the optimizer step (phases shaded, the peak marked; what
PyTorch's memory visualizer shows after a real GPU run, here predicted), a stacked bar of
what is allocated at each peak, and the modules that save the most for backward.

The pictures are inline SVG drawn here (a :class:`Figure`); the tables carry the same numbers
for the text formats. Module names come from the model: every text is escaped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchinspect.report.base import Figure, KeyValues, Shown, Table, Text, fmt_bytes
from torchinspect.report.page import esc, svg_open

if TYPE_CHECKING:
    from torchinspect.memory.result import MemoryResult, RunMemory

PHASE_FILL = {"forward": "#dbe9f6", "backward": "#fde3cc", "optimizer": "#dcefd8",
              "inference": "#ececec"}
# the stacked bar's colors, in result.CATEGORIES order
CATEGORY_FILL = {"weights": "#4e79a7", "buffers": "#76b7b2", "input": "#bab0ac",
                 "gradients": "#f28e2b", "optimizer state": "#59a14f",
                 "activations": "#e15759", "temporaries": "#b07aa1", "workspace": "#9c755f",
                 "kv cache": "#edc948"}
W, H, LEFT, TOP, BOTTOM = 720.0, 240.0, 70.0, 24.0, 34.0


def memory_sections(result: MemoryResult | None, missing: str | None = None) -> list[Any]:
    """The report's memory sections for one model (a note when it was not predicted)."""
    if result is None:
        return [Text([f"memory: {missing}"] if missing else ["memory: not predicted"],
                     title="Memory (predicted)", style="yellow")]
    out: list[Any] = [peaks_section(result)]
    run = result.training or result.inference
    if run is not None and run.timeline:
        out.append(Figure(f"Allocated memory, {_run_title(run)} (predicted)", timeline_svg(run)))
    out.append(Figure("What is allocated at the peak", stacked_svg(result)))
    out.append(phases_table(result))
    if result.training is not None and result.training.saved:
        out.append(saved_table(result.training))
    if result.notes:
        out.append(Text([f"note: {n}" for n in result.notes]))
    return out


def _run_title(run: RunMemory) -> str:
    return "inference" if run.mode == "inference" else "two training steps"


def _flat(where: str) -> str:
    """``backward at fc (steady step)`` -> ``backward at fc, steady step``: no parentheses
    inside the ones around it."""
    return where.replace(" (", ", ").replace(")", "")


def peaks_section(r: MemoryResult) -> KeyValues:
    on = r.device.upper() + (f", {r.gpu}" if r.gpu else "")
    items: list[tuple[str, Any]] = []
    if r.inference is not None:
        items.append((f"Peak memory, inference (predicted, {on})",
                      Shown(r.inference.peak, f"{fmt_bytes(r.inference.peak)} "
                            f"({_flat(r.inference.where)})")))
    if r.training is not None:
        t = r.training
        items += [
            (f"Peak memory, training step (predicted, {on}, {r.config.get('optimizer')})",
             Shown(t.peak, f"{fmt_bytes(t.peak)} ({_flat(t.where)})")),
            ("Weights", Shown(r.weight_bytes, fmt_bytes(r.weight_bytes))),
            ("Gradients", Shown(t.gradients, fmt_bytes(t.gradients))),
            ("Optimizer state", Shown(t.optimizer_state, fmt_bytes(t.optimizer_state))),
            ("Activations saved for backward", Shown(t.saved_total, fmt_bytes(t.saved_total))),
        ]
    return KeyValues("Memory (predicted)", items)


def phases_table(r: MemoryResult) -> Table:
    rows = []
    for run in (r.inference, r.training):
        if run is None:
            continue
        for p in run.phases:
            step = "-" if run.mode == "inference" else ("first" if p.step == 1 else "steady")
            rows.append([run.mode, p.phase, step, Shown(p.peak, fmt_bytes(p.peak)), p.module or "-"])
    return Table("Peak per phase (predicted)", ["Run", "Phase", "Step", "Peak", "At module"], rows)


def saved_table(run: RunMemory) -> Table:
    total = run.saved_total or 1
    rows = [[m, Shown(b, fmt_bytes(b)), Shown(round(100 * b / total, 2), f"{100 * b / total:.1f}%")]
            for m, b in run.saved]
    return Table("Saved for backward, by module (top)", ["Module", "Bytes", "Share"], rows)


def phase_spans(timeline: list[tuple[str, int, int]]) -> list[tuple[str, int, int, int]]:
    """Runs of one (phase, step) along the timeline: (phase, step, first index, last index)."""
    spans: list[tuple[str, int, int, int]] = []
    for i, (phase, step, _) in enumerate(timeline):
        if spans and spans[-1][0] == phase and spans[-1][1] == step:
            spans[-1] = (phase, step, spans[-1][2], i)
        else:
            spans.append((phase, step, i, i))
    return spans


def timeline_svg(run: RunMemory) -> str:
    """Allocated bytes per event, phases shaded (labelled with their step), the peak marked."""
    points = run.timeline
    n = len(points)
    top = max(max(b for _, _, b in points), run.peak, 1)
    plot_w, plot_h = W - LEFT - 10, H - TOP - BOTTOM

    def x(i: float) -> float:
        return LEFT + plot_w * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [svg_open(W, H, f"allocated memory of {_run_title(run)}", font=True)]
    for phase, step, a, b in phase_spans(points):
        x0, x1 = x(a - 0.5 if a else 0), x(b + 0.5 if b < n - 1 else n - 1)
        parts.append(f'<rect x="{x0:.1f}" y="{TOP:.1f}" width="{max(x1 - x0, 0.5):.1f}" '
                     f'height="{plot_h:.1f}" fill="{PHASE_FILL.get(phase, "#f4f4f4")}"/>')
        label = phase if run.mode == "inference" else f"{phase} {step}"
        if x1 - x0 > 6.5 * len(label):
            parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{TOP - 6:.1f}" text-anchor="middle" '
                         f'fill="#555">{esc(label)}</text>')
    for k in range(5):  # y grid and labels
        v = top * k / 4
        parts.append(f'<line x1="{LEFT:.1f}" x2="{W - 10:.1f}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#ccc" stroke-width="0.5"/><text x="{LEFT - 6:.1f}" '
                     f'y="{y(v) + 4:.1f}" text-anchor="end">{esc(fmt_bytes(v))}</text>')
    path = " ".join(f"{x(i):.1f},{y(b):.1f}" for i, (_, _, b) in enumerate(points))
    parts.append(f'<polyline points="{path}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>')
    peak_i = max(range(n), key=lambda i: points[i][2])
    px, py = x(peak_i), y(points[peak_i][2])
    anchor = "end" if px > W * 0.6 else "start"
    dx = -6 if anchor == "end" else 6
    parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#e15759"/>'
                 f'<text x="{px + dx:.1f}" y="{py + 14:.1f}" text-anchor="{anchor}" fill="#b00">'
                 f'peak {esc(fmt_bytes(run.peak))}: {esc(run.where)}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{H - 8:.1f}" text-anchor="middle" '
                 f'fill="#555">allocations and releases, in order</text></svg>')
    return "".join(parts)


def stacked_svg(r: MemoryResult) -> str:
    """One stacked bar per peak (inference, training): weights, gradients, optimizer state,
    activations... as allocated at that moment, and a legend."""
    runs = [run for run in (r.inference, r.training) if run is not None]
    top = max(run.peak for run in runs) or 1
    label_w, bar_w, bar_h = 90.0, W - 90.0 - 20, 22.0
    # the legend, in rows that stay inside the picture (a long one would be cut: "worl")
    legend: list[tuple[str, str, float, int]] = []  # (category, fill, x, row)
    lx, row = label_w, 0
    for cat, fill in CATEGORY_FILL.items():
        if not any(run.breakdown.get(cat, 0) > 0 for run in runs):
            continue
        need = 24 + 6.6 * len(cat)
        if lx + need > W and lx > label_w:
            lx, row = label_w, row + 1
        legend.append((cat, fill, lx, row))
        lx += need
    rows = 1 + max((r_ for *_, r_ in legend), default=0)
    height = 30 + len(runs) * (bar_h + 14) + 24 + 16 * rows
    parts = [svg_open(W, height, "what is allocated at the peak", font=True)]
    for k, run in enumerate(runs):
        y0 = 20 + k * (bar_h + 14)
        parts.append(f'<text x="{label_w - 8:.1f}" y="{y0 + 15:.1f}" text-anchor="end">'
                     f'{esc(run.mode)}</text>')
        x0 = label_w
        for cat, fill in CATEGORY_FILL.items():
            b = run.breakdown.get(cat, 0)
            if b <= 0:
                continue
            w = bar_w * b / top
            parts.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{bar_h:.1f}" '
                         f'fill="{fill}"><title>{esc(cat)}: {esc(fmt_bytes(b))}</title></rect>')
            x0 += w
        parts.append(f'<text x="{min(x0 + 4, W - 80):.1f}" y="{y0 + 15:.1f}">'
                     f'{esc(fmt_bytes(run.peak))}</text>')
    for cat, fill, lx, row in legend:
        ly = height - 8 - 16 * (rows - row)
        parts.append(f'<rect x="{lx:.1f}" y="{ly:.1f}" width="10" height="10" fill="{fill}"/>'
                     f'<text x="{lx + 14:.1f}" y="{ly + 9:.1f}">{esc(cat)}</text>')
    parts.append("</svg>")
    return "".join(parts)
