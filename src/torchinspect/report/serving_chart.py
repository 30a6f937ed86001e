"""The serving section of ``inspect report`` for a decoder: the predicted peak of generate at
growing context lengths, stacked (weights, KV cache, the rest) under the card's usable
memory, and the predicted time per new token at growing batches, eager and under a CUDA
graph. Inline SVG drawn here (a :class:`Figure`); the tables carry the same numbers for
the text formats.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torchinspect.report.base import Figure, Shown, Table, Text, fmt_bytes
from torchinspect.report.memory_chart import CATEGORY_FILL
from torchinspect.report.page import esc, svg_open

if TYPE_CHECKING:
    from torchinspect.overview.serving import ServingPart

W, H, LEFT, RIGHT, TOP, BOTTOM = 720.0, 260.0, 76.0, 130.0, 24.0, 40.0
STACK = (("weights", CATEGORY_FILL["weights"]), ("kv cache", CATEGORY_FILL["kv cache"]),
         ("activations etc.", CATEGORY_FILL["activations"]))
LINE_FILL = {"eager": "#4e79a7", "CUDA graph": "#f28e2b"}
SHOW_LINE = 3.0  # the card's line is drawn when it is at most this times the largest peak


def serving_sections(part: ServingPart | None, missing: str | None = None) -> list[Any]:
    """The section for one decoder (nothing for a model that is not one)."""
    if part is None:
        return ([Text([f"serving: {missing}"], title="Serving (predicted)", style="yellow")]
                if missing else [])
    from torchinspect.overview.serving import DTYPE, NEW_TOKENS

    call = f"{DTYPE}, generate of {NEW_TOKENS} new tokens, {part.gpu_label}"
    out: list[Any] = []
    if part.contexts:
        out.append(Figure(f"Peak memory of generate against the context, batch {part.batch} "
                          f"({call}, predicted)", memory_svg(part)))
        out.append(context_table(part))
    if part.decode:
        out.append(Figure(f"Time per new token against the batch, prompt {part.prompt:,} "
                          f"({call}, predicted)", decode_svg(part)))
        out.append(batch_table(part))
    if part.notes:
        out.append(Text([f"note: {n}" for n in part.notes]))
    return out


def _stack(m: Any) -> list[int]:
    from torchinspect.overview.serving import other_bytes

    return [m.weights_bytes + m.buffer_bytes, m.kv_cache_bytes, other_bytes(m)]


def context_table(part: ServingPart) -> Table:
    rows = []
    for m in part.contexts:
        w, kv, other = _stack(m)
        fits = m.peak <= part.usable
        rows.append([Shown(m.prompt, f"{m.prompt:,}"), Shown(m.peak, fmt_bytes(m.peak)),
                     Shown(w, fmt_bytes(w)), Shown(kv, fmt_bytes(kv)),
                     Shown(other, fmt_bytes(other)), "yes" if fits else "no"])
    return Table(f"Generate peak by prompt, batch {part.batch} (predicted)",
                 ["Prompt", "Peak", "Weights", "KV cache", "Other",
                  f"Fits {part.gpu} ({fmt_bytes(part.usable)})"], rows)


def batch_table(part: ServingPart) -> Table:
    rows = []
    for p in part.decode:
        graph = p.decode_graph_ms_per_token
        rows.append([p.batch, Shown(p.decode_ms_per_token, f"{p.decode_ms_per_token:.2f}"),
                     p.decode.binds,
                     Shown(graph, f"{graph:.2f}") if graph is not None else "not capturable",
                     Shown(p.tokens_per_s, f"{p.tokens_per_s:,.0f}")])
    return Table(f"Decode per new token by batch, prompt {part.prompt:,} (predicted)",
                 ["Batch", "Eager ms", "Binds", "CUDA graph ms", "Tokens/s (eager)"], rows)


def _grid(top: float, label: Any) -> str:
    """Five horizontal grid lines from 0 to ``top``, each labelled ``label(value)``."""
    ph, out = H - TOP - BOTTOM, []
    for k in range(5):
        v = top * k / 4
        y = TOP + ph * (1 - v / top)
        out.append(f'<line x1="{LEFT:.1f}" x2="{W - RIGHT:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#ccc" stroke-width="0.5"/><text x="{LEFT - 6:.1f}" '
                   f'y="{y + 4:.1f}" text-anchor="end">{esc(label(v))}</text>')
    return "".join(out)


def memory_svg(part: ServingPart) -> str:
    """One stacked bar per prompt length; the card's usable memory as a line where it is in
    reach of the bars, else said in the corner."""
    stacks = [_stack(m) for m in part.contexts]
    peak = max(sum(s) for s in stacks) or 1
    line = part.usable if part.usable <= SHOW_LINE * peak else None
    top = max(peak, line or 0) * 1.08
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    n = len(stacks)
    slot = pw / n
    bar = min(slot * 0.6, 70.0)

    def y(v: float) -> float:
        return TOP + ph * (1 - v / top)

    parts = [svg_open(W, H, "peak memory of generate against the context length", font=True),
             _grid(top, fmt_bytes)]
    for i, (m, s) in enumerate(zip(part.contexts, stacks, strict=True)):
        x0 = LEFT + slot * i + (slot - bar) / 2
        base = 0.0
        for (name, fill), b in zip(STACK, s, strict=True):
            if b <= 0:
                continue
            parts.append(f'<rect x="{x0:.1f}" y="{y(base + b):.1f}" width="{bar:.1f}" '
                         f'height="{y(base) - y(base + b):.1f}" fill="{fill}"><title>'
                         f'{esc(name)}: {esc(fmt_bytes(b))}</title></rect>')
            base += b
        parts.append(f'<text x="{x0 + bar / 2:.1f}" y="{y(base) - 4:.1f}" text-anchor="middle">'
                     f'{esc(fmt_bytes(m.peak))}</text><text x="{x0 + bar / 2:.1f}" '
                     f'y="{H - BOTTOM + 16:.1f}" text-anchor="middle">{m.prompt:,}</text>')
    parts.append(f'<text x="{LEFT + pw / 2:.1f}" y="{H - 6:.1f}" text-anchor="middle" '
                 f'fill="#555">prompt tokens (+ {part.contexts[0].new_tokens} new)</text>')
    label = f"{part.gpu} usable {fmt_bytes(part.usable)}"
    if line is not None:
        parts.append(f'<line x1="{LEFT:.1f}" x2="{LEFT + pw:.1f}" y1="{y(line):.1f}" '
                     f'y2="{y(line):.1f}" stroke="#b00" stroke-dasharray="6,3" '
                     f'stroke-width="1.5"/><text x="{LEFT + pw - 4:.1f}" y="{y(line) - 5:.1f}" '
                     f'text-anchor="end" fill="#b00">{esc(label)}</text>')
    else:
        parts.append(f'<text x="{LEFT + pw - 4:.1f}" y="{TOP - 8:.1f}" text-anchor="end" '
                     f'fill="#b00">{esc(label)}: {part.usable / peak:,.0f}x the largest peak, '
                     'above the chart</text>')
    for j, (name, fill) in enumerate(STACK):
        ly = TOP + 16 * j
        parts.append(f'<rect x="{LEFT + pw + 12:.1f}" y="{ly:.1f}" width="10" height="10" '
                     f'fill="{fill}"/><text x="{LEFT + pw + 26:.1f}" y="{ly + 9:.1f}">'
                     f'{esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def decode_svg(part: ServingPart) -> str:
    """Milliseconds per new token against the batch (log axis), eager and CUDA graph."""
    series = {"eager": [(p.batch, p.decode_ms_per_token) for p in part.decode],
              "CUDA graph": [(p.batch, p.decode_graph_ms_per_token) for p in part.decode
                             if p.decode_graph_ms_per_token is not None]}
    values = [v for pts in series.values() for _, v in pts]
    top = max(values) * 1.1 if values else 1.0
    batches = [p.batch for p in part.decode]
    lo, hi = math.log2(min(batches)), math.log2(max(batches))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(b: float) -> float:
        return LEFT + pw * ((math.log2(b) - lo) / (hi - lo) if hi > lo else 0.5)

    def y(v: float) -> float:
        return TOP + ph * (1 - v / top)

    parts = [svg_open(W, H, "time per new token against the batch", font=True),
             _grid(top, lambda v: f"{v:.2f} ms")]
    for b in batches:
        parts.append(f'<text x="{x(b):.1f}" y="{H - BOTTOM + 16:.1f}" '
                     f'text-anchor="middle">{b}</text>')
    parts.append(f'<text x="{LEFT + pw / 2:.1f}" y="{H - 6:.1f}" text-anchor="middle" '
                 'fill="#555">batch (sequences decoded together)</text>')
    for j, (name, pts) in enumerate(series.items()):
        fill = LINE_FILL[name]
        if pts:
            path = " ".join(f"{x(b):.1f},{y(v):.1f}" for b, v in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{fill}" '
                         'stroke-width="1.8"/>')
            parts += [f'<circle cx="{x(b):.1f}" cy="{y(v):.1f}" r="3" fill="{fill}"><title>'
                      f'{esc(name)}, batch {b}: {v:.3f} ms</title></circle>' for b, v in pts]
        ly = TOP + 16 * j
        text = name if pts else "no CUDA graph"
        parts.append(f'<rect x="{LEFT + pw + 12:.1f}" y="{ly:.1f}" width="10" height="10" '
                     f'fill="{fill}"/><text x="{LEFT + pw + 26:.1f}" y="{ly + 9:.1f}">'
                     f'{esc(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)
