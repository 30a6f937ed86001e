"""The roofline section of ``inspect report --gpu NAME``: one point per module (its own ops),
arithmetic intensity (FLOP per byte moved) against the rate it achieves (FLOP/s, predicted),
on log axes under the GPU's two roofs: memory bandwidth x intensity, and the peak compute
rate of the dtype (tensor cores; the CUDA-core fp32 roof is drawn too). A point far under
both roofs is latency-bound (launch and tail effects), not short of bandwidth or compute.

Inline SVG drawn here (a :class:`Figure`); the table beside it carries the same numbers
for the text formats. Module names come from the model: every text is escaped.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

from torchinspect.gpus import CATALOGUE
from torchinspect.latency.calibrated import validation_text
from torchinspect.report.base import Figure, Table, Text, fmt_si

if TYPE_CHECKING:
    from torchinspect.latency import Prediction

W, H, LEFT, RIGHT, TOP, BOTTOM = 720.0, 380.0, 70.0, 150.0, 20.0, 44.0
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")


def roofline_sections(pred: Prediction | None, missing: str | None = None) -> list[Any]:
    if pred is None:
        return [Text([f"latency: {missing}"] if missing else ["latency: not predicted"],
                     title="Roofline (predicted)", style="yellow")]
    r = pred.results[0]
    head = [f"{pred.model} on {pred.gpu_label}, {r.dtype} batch {r.batch}: PREDICTED, not "
            f"measured; CUDA-graph replay {r.gpu_ms:.3f} ms, eager {r.eager_ms:.3f} ms "
            f"({r.binds} binds)", f"table: {pred.source}", validation_text(pred.validation)]
    rows = sorted(r.points, key=lambda p: -p.us)[:15]
    table = Table("Modules by predicted time", ["module", "type", "ms", "FLOP/B", "FLOP/s"],
                  [[p.module or pred.model, p.layer, f"{p.us / 1e3:.3f}", f"{p.intensity:.1f}",
                    fmt_si(p.rate)] for p in rows],
                  align=["left", "left", "right", "right", "right"])
    return [Text(head, title="Roofline (predicted)"),
            Figure(f"Roofline on the {pred.gpu_label} ({r.dtype}, predicted)",
                   roofline_svg(pred)), table]


def _log_range(values: list[float], lo_pad: float = 0.3, hi_pad: float = 0.3) -> tuple[float, float]:
    logs = [math.log10(v) for v in values if v > 0]
    return math.floor(min(logs) - lo_pad), math.ceil(max(logs) + hi_pad)


def roofline_svg(pred: Prediction) -> str:
    r = pred.results[0]
    spec = CATALOGUE[pred.gpu]
    peak = spec.tensor_16 if r.dtype in ("bf16", "fp16") else spec.tf32
    points = [p for p in r.points if p.intensity > 0 and p.rate > 0]
    ridge = peak / spec.bandwidth
    x0, x1 = _log_range([p.intensity for p in points] + [ridge * 4, 0.1])
    y0, y1 = _log_range([p.rate for p in points] + [peak])
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(v: float) -> float:
        return LEFT + (math.log10(v) - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return TOP + ph - (math.log10(max(v, 10 ** y0)) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W:.0f} {H:.0f}" '
           f'width="{W:.0f}" height="{H:.0f}" font-family="sans-serif" font-size="11">',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>']
    for e in range(int(x0), int(x1) + 1):
        x = sx(10.0 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 14}" text-anchor="middle">'
                   f'{html.escape(fmt_si(10.0 ** e))}</text>')
    for e in range(int(y0), int(y1) + 1):
        y = sy(10.0 ** e)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{html.escape(fmt_si(10.0 ** e))}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 8}" text-anchor="middle">arithmetic intensity '
               '(FLOP per byte moved)</text>')
    out.append(f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" transform="rotate(-90 14 '
               f'{TOP + ph / 2})">achieved FLOP/s (predicted)</text>')
    # the roofs: bandwidth x intensity up to the ridge, then the compute peak
    xa, xb = 10.0 ** x0, 10.0 ** x1
    roof = f"{r.dtype} tensor cores" if r.dtype in ("bf16", "fp16") else "TF32 tensor cores"
    for label, top, dash in ((f"{roof} {fmt_si(peak)}FLOP/s", peak, ""),
                             (f"fp32 CUDA cores {fmt_si(spec.fp32)}FLOP/s", spec.fp32, "4 3")):
        knee = top / spec.bandwidth
        path = (f"M{sx(xa):.1f},{sy(spec.bandwidth * xa):.1f} L{sx(knee):.1f},{sy(top):.1f} "
                f"L{sx(xb):.1f},{sy(top):.1f}")
        out.append(f'<path d="{path}" fill="none" stroke="#333" stroke-width="1.6"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out.append(f'<text x="{sx(xb) - 4:.1f}" y="{sy(top) - 5:.1f}" text-anchor="end">'
                   f'{html.escape(label)}</text>')
    bw_label = f"{fmt_si(spec.bandwidth)}B/s memory"
    lx = 10.0 ** (x0 + 0.4)
    out.append(f'<text x="{sx(lx):.1f}" y="{sy(spec.bandwidth * lx) - 6:.1f}" '
               f'transform="rotate(-{_slope_deg(sx, sy, spec.bandwidth, lx):.1f} {sx(lx):.1f} '
               f'{sy(spec.bandwidth * lx) - 6:.1f})">{html.escape(bw_label)}</text>')
    # points, colored by layer type (the types with the most time first)
    by_type: dict[str, float] = {}
    for p in points:
        by_type[p.layer] = by_type.get(p.layer, 0.0) + p.us
    types = sorted(by_type, key=lambda t: -by_type[t])
    color = {t: PALETTE[i] if i < len(PALETTE) - 1 else PALETTE[-1] for i, t in enumerate(types)}
    total = sum(p.us for p in points) or 1.0
    for p in sorted(points, key=lambda p: -p.us):
        rad = 2.5 + 9.0 * math.sqrt(p.us / total)
        name = html.escape(p.module or pred.model)
        out.append(f'<circle cx="{sx(p.intensity):.1f}" cy="{sy(p.rate):.1f}" r="{rad:.1f}" '
                   f'fill="{color[p.layer]}" fill-opacity="0.7" stroke="#fff" stroke-width="0.5">'
                   f'<title>{name} ({html.escape(p.layer)}): {p.us / 1e3:.4f} ms, '
                   f'{p.intensity:.1f} FLOP/B, {html.escape(fmt_si(p.rate))}FLOP/s</title></circle>')
    legend = types[:len(PALETTE) - 1] + (["other"] if len(types) >= len(PALETTE) else [])
    for i, t in enumerate(legend):
        y = TOP + 12 + i * 16
        fill = PALETTE[i] if t != "other" else PALETTE[-1]
        out.append(f'<circle cx="{LEFT + pw + 14}" cy="{y - 4}" r="5" fill="{fill}"/>'
                   f'<text x="{LEFT + pw + 24}" y="{y}">{html.escape(t[:18])}</text>')
    out.append(f'<text x="{LEFT + pw + 8}" y="{TOP + ph}" font-size="10">size: time</text>')
    out.append("</svg>")
    return "\n".join(out)


def _slope_deg(sx: Any, sy: Any, bw: float, x: float) -> float:
    dx = sx(x * 10) - sx(x)
    dy = sy(bw * x) - sy(bw * x * 10)
    return math.degrees(math.atan2(dy, dx))
