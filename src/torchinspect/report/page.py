"""The html renderer: any :class:`Report` as one self-contained page (inline CSS, JS, SVG).

Tables with row depths collapse by block and every table sorts by a column (a small inline
script); charts are SVG drawn here, readable without JavaScript; a :class:`Figure` (the
Graphviz module graph) is inlined as is. Every text from a model or a user is escaped.
No torch here and no network: the page opens offline.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from torchinspect.escape import xml_text
from torchinspect.report.base import (
    Chart,
    Figure,
    KeyValues,
    Report,
    Section,
    Table,
    Text,
    fmt_value,
)
from torchinspect.report.cells import cell_text, cell_value, column_aligns

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948",
           "#9c755f", "#ff9da7", "#bab0ac")
CHAR_W = 6.6  # px per character of 12px sans text (legend width estimate)
LABEL_W = 7.6  # the same for bar labels, with room for wide digits and signs (× →)


def esc(value: Any) -> str:
    """Text for HTML (and its inline SVG): markup escaped, and what escape.xml_text escapes
    (C0/C1 and bidi controls, lone surrogates) shown as escapes."""
    return html.escape(xml_text(str(value)), quote=True)


def render_html(report: Report) -> str:
    """The whole page for ``report``."""
    title = page_title(report)
    body: list[str] = []
    toc: list[str] = []
    for i, s in enumerate(report.sections):
        sid = f"s{i}"
        if s.title:
            toc.append(f'<li><a href="#{sid}">{esc(s.title)}</a></li>')
        body.append(f'<section id="{sid}" class="sec-{type(s).__name__.lower()}">'
                    f'{section_html(s, sid)}</section>')
    nav = f'<nav><ul>{"".join(toc)}</ul></nav>' if len(toc) > 2 else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f'<header><h1>{esc(title)}</h1><p class="schema">{esc(report.schema)}</p></header>\n'
        f"{nav}\n<main>\n" + "\n".join(body) + "\n</main>\n"
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


def page_title(report: Report) -> str:
    data = report.data
    models = data.get("models")
    if isinstance(models, list) and models:
        names = [str(m.get("model", "?")) if isinstance(m, dict) else str(m) for m in models]
        return f"torchinspect {report.command}: {', '.join(names)}"
    if data.get("model"):
        return f"torchinspect {report.command}: {data['model']}"
    return f"torchinspect {report.command}"


def section_html(s: Section, sid: str) -> str:
    head = f"<h2>{esc(s.title)}</h2>" if s.title else ""
    if isinstance(s, Table):
        return head + table_html(s, sid)
    if isinstance(s, KeyValues):
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(cell_text(v))}</td></tr>" for k, v in s.items)
        return f'{head}<table class="kv">{rows}</table>'
    if isinstance(s, Chart):
        return head + chart_svg(s, sid)
    if isinstance(s, Figure):
        if s.svg is None:
            return f'{head}<p class="note">{esc(s.note or "no picture")}</p>'
        note = f'<p class="muted">{esc(s.note)}</p>' if s.note else ""
        return f'{head}<div class="figure">{scoped_svg(s.svg, sid)}</div>{note}'
    if not isinstance(s, Text):
        raise TypeError(f"cannot render a {type(s).__name__} section")
    if s.code:
        return f"{head}<pre><code>{esc(chr(10).join(s.lines))}</code></pre>"
    cls = "note" if s.style else "muted"
    return head + "".join(f'<p class="{cls}">{esc(line)}</p>' for line in s.lines)


def parents(depths: list[int]) -> list[int]:
    """Each row's parent row (-1 for none): the nearest earlier row of smaller depth."""
    out: list[int] = []
    stack: list[int] = []
    for i, d in enumerate(depths):
        while stack and depths[stack[-1]] >= d:
            stack.pop()
        out.append(stack[-1] if stack else -1)
        stack.append(i)
    return out


def table_html(t: Table, sid: str) -> str:
    aligns = column_aligns(t)
    depths = t.depths if t.depths is not None and len(t.depths) == len(t.rows) else None
    par = parents(depths) if depths else []
    has_kids = set(par)
    heads = "".join(
        f'<th class="{a}" aria-sort="none"><button type="button" class="sort" data-col="{i}">'
        f"{esc(c)}</button></th>" for i, (c, a) in enumerate(zip(t.columns, aligns, strict=False)))
    body: list[str] = []
    for i, row in enumerate(t.rows):
        attrs = f' data-i="{i}"'
        if depths:
            attrs += f' data-d="{depths[i]}" data-p="{par[i]}"'
        cells = []
        for j, v in enumerate(row):
            num = cell_value(v)
            data = f' data-v="{num:.17g}"' if num is not None and math.isfinite(num) else ""
            cls = aligns[j] if j < len(aligns) else "left"
            if j < len(t.columns) and t.columns[j] in t.wrap:  # sentences fold, not scroll
                cls += " wrap"
            text = esc(cell_text(v))
            if j == 0 and depths:
                tog = ('<button type="button" class="tog" aria-expanded="true" '
                       'title="collapse/expand">\u25be</button>' if i in has_kids
                       else '<span class="tog-pad"></span>')
                text = f'{tog}<span class="tree">{text}</span>'
            cells.append(f'<td class="{cls}"{data}>{text}</td>')
        body.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    tools = ""
    if depths:
        levels = sorted(set(depths))
        buttons = "".join(f'<button type="button" class="lvl" data-level="{d}">{d}</button>'
                          for d in levels[1:])
        tools = (f'<div class="tools">show depth: {buttons}'
                 f'<button type="button" class="lvl" data-level="all">all</button>'
                 '<span class="muted"> · click ▾ to collapse a block, a column header to sort'
                 '</span></div>')
    footer = "".join(f'<p class="muted">{esc(line)}</p>' for line in t.footer_for(t.columns))
    kind = "data sortable tree" if depths else "data sortable"
    return (f'{tools}<div class="scroll"><table class="{kind}" id="{sid}-t"><thead><tr>{heads}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>{footer}')


def scoped_svg(svg: str, sid: str) -> str:
    """Graphviz SVG with ids prefixed (several graphs on one page) and a scalable size."""
    svg = re.sub(r'\bid="', f'id="{sid}-', svg)
    svg = re.sub(r'(xlink:)?href="#', lambda m: f'{m.group(0)}{sid}-', svg)
    return svg


# ------------------------------------------------------------------ charts


def chart_svg(c: Chart, sid: str) -> str:
    if not c.labels or not c.series:
        return '<p class="note">no data to chart</p>'
    if c.kind == "treemap":
        return treemap_svg(c, sid)
    return line_svg(c, sid) if c.kind == "line" else bar_svg(c, sid)


def _legend(c: Chart, x: float, y: float) -> tuple[str, float]:
    if len(c.series) < 2:
        return "", 0.0
    out, cx = [], x
    for k, (name, _) in enumerate(c.series):
        color = PALETTE[k % len(PALETTE)]
        out.append(f'<rect x="{cx:.1f}" y="{y:.1f}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{cx + 14:.1f}" y="{y + 9:.1f}" class="lg">{esc(name)}</text>')
        cx += 24 + CHAR_W * len(name)
    return "".join(out), 18.0


def svg_open(width: float, height: float, label: str, sid: str | None = None,
             font: bool = False) -> str:
    """The opening tag of every chart of the page (and of the memory figures): an accessible
    label, a viewBox; ``sid`` scopes its id, ``font`` sets the text style for an SVG that
    may be shown outside the page's CSS."""
    ident = f' id="{sid}-chart"' if sid else ""
    style = ' font-family="sans-serif" font-size="11"' if font else ""
    return (f'<svg class="chart"{ident} xmlns="http://www.w3.org/2000/svg" '
            f'role="img" aria-label="{esc(label)}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'width="{width:.0f}" height="{height:.0f}"{style}>')


def bar_svg(c: Chart, sid: str) -> str:
    """Horizontal bars: a group per label, a bar per series that has a value there (several
    models overlay on the union of their labels), the value written after each bar."""
    bar_h, gap = 14.0, 8.0
    label_w = min(360.0, max(60.0, LABEL_W * max(len(str(lb)) for lb in c.labels) + 10))
    plot_w, value_w = 440.0, 90.0
    width = label_w + plot_w + value_w
    legend, legend_h = _legend(c, label_w, 4)
    top = 6 + legend_h
    groups = [[(k, v) for k, (_, vals) in enumerate(c.series)
               if i < len(vals) and (v := vals[i]) is not None] for i in range(len(c.labels))]
    height = top + sum(max(1, len(g)) * bar_h + gap for g in groups) + 4
    vmax = max((v for g in groups for _, v in g), default=0) or 1
    out = [svg_open(width, height, c.title or "chart", sid), legend]
    y0 = top
    for label, group in zip(c.labels, groups, strict=True):
        rows = max(1, len(group))
        out.append(f'<text x="{label_w - 6:.1f}" y="{y0 + rows * bar_h / 2 + 4:.1f}" '
                   f'class="lb" text-anchor="end">{esc(label)}</text>')
        for j, (k, v) in enumerate(group):
            y = y0 + j * bar_h
            w = max(0.0, plot_w * float(v) / vmax)
            text = fmt_value(v, c.unit)
            name = c.series[k][0]
            tip = f"{label} — {name}: {text}" if len(c.series) > 1 else f"{label}: {text}"
            out.append(f'<rect class="bar" x="{label_w:.1f}" y="{y + 1:.1f}" width="{w:.1f}" '
                       f'height="{bar_h - 2:.1f}" fill="{PALETTE[k % len(PALETTE)]}">'
                       f"<title>{esc(tip)}</title></rect>"
                       f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3:.1f}" class="val">'
                       f"{esc(text)}</text>")
        y0 += rows * bar_h + gap
    out.append(f'<line x1="{label_w:.1f}" y1="{top - 2:.1f}" x2="{label_w:.1f}" '
               f'y2="{height - 2:.1f}" class="axis"/></svg>')
    return "".join(out)


def nice_step(vmax: float, parts: int) -> float:
    """A 1/2/2.5/5 x 10^k grid step giving about ``parts`` grid lines up to ``vmax``."""
    raw = vmax / parts
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def line_svg(c: Chart, sid: str) -> str:
    """Lines over evenly spaced x labels (batch sizes), y from 0, a point per value."""
    left, right, plot_w, plot_h = 70.0, 20.0, 460.0, 220.0
    legend, legend_h = _legend(c, left, 4)
    top = 10 + legend_h
    width, height = left + plot_w + right, top + plot_h + 42
    vals = [v for _, vs in c.series for v in vs if v is not None]
    step = nice_step((max(vals) if vals else 0) or 1, 4)
    vmax = step * math.ceil(((max(vals) if vals else 0) or 1) * 1.05 / step)
    n = len(c.labels)

    def x(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return top + plot_h - plot_h * float(v) / vmax

    out = [svg_open(width, height, c.title or "chart", sid), legend]
    for g in range(round(vmax / step) + 1):
        gv = step * g
        tick = "0" if g == 0 else fmt_value(gv, c.unit)
        out.append(f'<line x1="{left:.1f}" y1="{y(gv):.1f}" x2="{left + plot_w:.1f}" '
                   f'y2="{y(gv):.1f}" class="grid"/><text x="{left - 6:.1f}" y="{y(gv) + 4:.1f}" '
                   f'class="tick" text-anchor="end">{esc(tick)}</text>')
    for i, label in enumerate(c.labels):
        out.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16:.1f}" class="tick" '
                   f'text-anchor="middle">{esc(label)}</text>')
    if c.x_title:
        out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 34:.1f}" class="lb" '
                   f'text-anchor="middle">{esc(c.x_title)}</text>')
    for k, (name, vs) in enumerate(c.series):
        color = PALETTE[k % len(PALETTE)]
        pts = [(x(i), y(v), v, c.labels[i]) for i, v in enumerate(vs) if v is not None and i < n]
        if len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for px, py, v, label in pts:
            tip = f"{name} @ {label}: {fmt_value(v, c.unit)}"
            out.append(f'<circle class="pt" cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{color}">'
                       f"<title>{esc(tip)}</title></circle>")
    out.append(f'<line x1="{left:.1f}" y1="{top + plot_h:.1f}" x2="{left + plot_w:.1f}" '
               f'y2="{top + plot_h:.1f}" class="axis"/></svg>')
    return "".join(out)


# ------------------------------------------------------------------ treemap

Rect = tuple[float, float, float, float]  # x, y, width, height


def _worst(row: list[float], side: float) -> float:
    """The largest aspect ratio of a row of areas laid along ``side`` (squarify's measure)."""
    total = sum(row)
    return max(max(side * side * a / (total * total), total * total / (side * side * a))
               for a in row)


def squarify(values: list[float], rect: Rect) -> list[Rect]:
    """Rectangles for ``values`` (positive) filling ``rect``, areas proportional to the values,
    as square as the squarified layout of Bruls, Huizing and van Wijk makes them; in the
    order of ``values``."""
    x, y, w, h = rect
    order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)
    total = sum(values)
    if total <= 0 or w <= 0 or h <= 0:
        return [(x, y, 0.0, 0.0) for _ in values]
    areas = [values[i] * w * h / total for i in order]
    out: list[Rect] = []
    i = 0
    while i < len(areas):
        side = min(w, h)
        row = [areas[i]]
        i += 1
        while i < len(areas) and _worst([*row, areas[i]], side) <= _worst(row, side):
            row.append(areas[i])
            i += 1
        thick = sum(row) / side
        pos = y if w >= h else x
        for a in row:  # along the short side: a column at the left, or a row at the top
            length = a / thick
            out.append((x, pos, thick, length) if w >= h else (pos, y, length, thick))
            pos += length
        if w >= h:
            x, w = x + thick, w - thick
        else:
            y, h = y + thick, h - thick
    placed = [(0.0, 0.0, 0.0, 0.0)] * len(values)
    for k, i in enumerate(order):
        placed[i] = out[k]
    return placed


def treemap_groups(labels: list[str], values: list[float | None]) -> dict[str, list[tuple[str, float]]]:
    """Dotted names two levels deep -> ``{top-level name: [(name, value), ...]}`` (values
    above 0 only; ``(own)`` stays a group of its own)."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for label, v in zip(labels, values, strict=False):
        if v is not None and v > 0:
            groups.setdefault(_module(label).split(".")[0], []).append((label, float(v)))
    return groups


def _treemap_panel(groups: dict[str, list[tuple[str, float]]], name: str, unit: str,
                   box: Rect, colors: dict[str, str]) -> list[str]:
    total = sum(v for items in groups.values() for _, v in items)
    x0, y0, w, h = box
    out = [f'<text x="{x0:.1f}" y="{y0 - 6:.1f}" class="lb">{esc(name)}: '
           f'{esc(fmt_value(total, unit))}</text>']
    if total <= 0:
        out.append(f'<text x="{x0 + 6:.1f}" y="{y0 + 16:.1f}" class="val">none</text>')
        return out
    keys = list(groups)
    rects = squarify([sum(v for _, v in groups[k]) for k in keys], box)
    for key, (gx, gy, gw, gh) in zip(keys, rects, strict=True):
        color = colors[key]
        gsum = sum(v for _, v in groups[key])
        tip = f"{key}: {fmt_value(gsum, unit)} ({100 * gsum / total:.1f}% of {name})"
        out.append(f'<g class="tm-group"><rect class="tm-box" x="{gx:.1f}" y="{gy:.1f}" '
                   f'width="{gw:.1f}" height="{gh:.1f}" fill="{color}" fill-opacity="0.25" '
                   f'stroke="#fff" stroke-width="2"><title>{esc(tip)}</title></rect>')
        head = 14.0 if gh > 34 and gw > 30 else 0.0
        if head:
            out.append(_fit_text(key, gx + 3, gy + 11, gw - 6))
        inner = (gx + 2, gy + 2 + head, max(0.0, gw - 4), max(0.0, gh - 4 - head))
        items = groups[key]
        for (label, v), (cx, cy, cw, ch) in zip(items, squarify([v for _, v in items], inner),
                                                 strict=True):
            tip = f"{label}: {fmt_value(v, unit)} ({100 * v / total:.1f}% of {name})"
            out.append(f'<rect class="tm" x="{cx:.1f}" y="{cy:.1f}" width="{cw:.1f}" '
                       f'height="{ch:.1f}" fill="{color}" stroke="#fff" stroke-width="1">'
                       f"<title>{esc(tip)}</title></rect>")
            if ch > 14 and cw > 24:
                out.append(_fit_text(tile_text(label), cx + 3, cy + 11, cw - 6, cls="tm-lb"))
        out.append("</g>")
    return out


def _module(label: str) -> str:
    """``layer2.0 (Conv2d)`` -> ``layer2.0``; a label without a type as it is."""
    name, sep, kind = label.rpartition(" (")
    return name if sep and kind.endswith(")") and name else label


def tile_text(label: str) -> str:
    """A treemap tile's text: ``layer2.0 (Conv2d)`` -> ``Conv2d layer2.0`` (what it is, then
    which one; the page cuts the end when the tile is narrow, the tooltip has it all)."""
    name = _module(label)
    return f"{label[len(name) + 2:-1]} {name}" if name != label else label


def _fit_text(text: str, x: float, y: float, width: float, cls: str = "tm-head",
              tail: bool = False) -> str:
    """``text`` cut to what ``width`` pixels hold (…), or nothing when not one character;
    ``tail`` keeps the end (``…layer_11``: the index that tells siblings apart)."""
    fits = int(width / CHAR_W)
    if fits < 1:
        return ""
    keep = max(1, fits - 1)
    shown = text if len(text) <= fits else ("…" + text[-keep:] if tail else text[:keep] + "…")
    return f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}">{esc(shown)}</text>'


def treemap_svg(c: Chart, sid: str) -> str:
    """One squarified treemap per series (params, MACs) side by side: a box per top-level
    module, a tile per module one level down; names and values in tooltips."""
    pw, ph, gap, top = 380.0, 260.0, 24.0, 22.0
    width = len(c.series) * pw + (len(c.series) - 1) * gap
    out = [svg_open(width, top + ph + 4, c.title or "treemap", sid)]
    # one colour per top-level module in every panel
    tops = dict.fromkeys(_module(label).split(".")[0] for label in c.labels)
    colors = {t: PALETTE[k % len(PALETTE)] for k, t in enumerate(tops)}
    for k, (name, values) in enumerate(c.series):
        unit = c.unit if name != "params" else ""
        box = (k * (pw + gap), top, pw, ph)
        out += _treemap_panel(treemap_groups(c.labels, values), name, unit, box, colors)
    out.append("</svg>")
    return "".join(out)


CSS = """
:root{--fg:#1d2430;--muted:#5b6575;--line:#d9dee7;--bg:#fff;--head:#f3f5f9;--accent:#4e79a7}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
color:var(--fg);background:var(--bg)}
header{padding:18px 28px 6px;border-bottom:1px solid var(--line)}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:22px 0 8px}
.schema{color:var(--muted);margin:0;font-size:12px}
nav{padding:6px 28px;border-bottom:1px solid var(--line);background:var(--head)}
nav ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px}
nav a{color:var(--accent);text-decoration:none;font-size:13px}
main{padding:0 28px 40px;max-width:1500px}
.sec-keyvalues{display:inline-block;vertical-align:top;margin-right:56px}
p{margin:3px 0}.muted{color:var(--muted)}.note{color:#8a5a00;background:#fff7e0;
padding:6px 10px;border-left:3px solid #e0a800;border-radius:2px}
table.kv{border-collapse:collapse}table.kv th{text-align:left;font-weight:500;color:var(--muted);
padding:2px 18px 2px 0}table.kv td{padding:2px 0;font-variant-numeric:tabular-nums}
.scroll{overflow:auto;max-height:80vh;border:1px solid var(--line);border-radius:4px}
table.data{border-collapse:collapse;width:100%;font-size:13px}
table.data th{position:sticky;top:0;background:var(--head);border-bottom:1px solid var(--line);
padding:0;white-space:nowrap}
table.data th button.sort{all:unset;cursor:pointer;display:block;padding:5px 8px}
table.data th.right button.sort{text-align:right}
table.data th[aria-sort=ascending] button.sort::after{content:" \\25b2"}
table.data th[aria-sort=descending] button.sort::after{content:" \\25bc"}
table.data td{padding:3px 8px;border-bottom:1px solid #eef0f4;white-space:nowrap;
font-variant-numeric:tabular-nums}
table.data td.right{text-align:right}table.data td.wrap{white-space:normal;min-width:14em}table.data tr:hover td{background:#f7f9fc}
table.data tr.hid{display:none}
.tree{font-family:ui-monospace,"DejaVu Sans Mono",monospace;white-space:pre}
button.tog{border:0;background:none;cursor:pointer;width:16px;padding:0;color:var(--accent)}
button.tog[aria-expanded=false]{transform:rotate(-90deg)}
.tog-pad{display:inline-block;width:16px}
.tools{margin:4px 0 6px;font-size:13px}
.tools button{margin:0 2px;border:1px solid var(--line);background:var(--head);
border-radius:3px;cursor:pointer;padding:1px 7px}
.figure{overflow:auto;border:1px solid var(--line);border-radius:4px;max-height:90vh;
padding:6px;background:#fff}
.figure svg{max-width:100%;height:auto}
svg.chart{max-width:100%;height:auto;display:block}
svg .lb{font-size:12px;fill:var(--fg)}svg .val,svg .tick{font-size:11px;fill:var(--muted)}
svg .lg{font-size:12px;fill:var(--fg)}svg .tm-head{font-size:11px;font-weight:600;fill:var(--fg)}
svg .tm-lb{font-size:10px;fill:#fff}svg rect.tm:hover{fill-opacity:.8}svg .axis{stroke:#8893a5}svg .grid{stroke:#e8ebf0}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#8a5a00;font-weight:600}
.sev-info{color:var(--muted)}
"""

JS = """
(function () {
  "use strict";
  function rowsOf(table) { return Array.prototype.slice.call(table.tBodies[0].rows); }
  function refresh(table) {
    var rows = rowsOf(table), byIndex = {};
    rows.forEach(function (r) { byIndex[r.dataset.i] = r; });
    rows.forEach(function (r) {
      var p = r.dataset.p, hidden = false;
      while (p !== undefined && p !== "-1") {
        var parent = byIndex[p];
        if (!parent) { break; }
        var tog = parent.querySelector("button.tog");
        if (tog && tog.getAttribute("aria-expanded") === "false") { hidden = true; break; }
        p = parent.dataset.p;
      }
      r.classList.toggle("hid", hidden);
    });
  }
  function key(row, col) {
    var td = row.cells[col];
    if (!td) { return { n: null, t: "" }; }
    var v = td.getAttribute("data-v");
    return { n: v === null ? null : parseFloat(v), t: td.textContent };
  }
  function sortBy(table, btn) {
    var col = parseInt(btn.dataset.col, 10);
    var th = btn.parentNode, state = th.getAttribute("aria-sort");
    var next = state === "descending" ? "ascending" : state === "ascending" ? "none" : "descending";
    table.querySelectorAll("thead th").forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", next);
    var rows = rowsOf(table);
    rows.sort(function (a, b) {
      if (next === "none") { return a.dataset.i - b.dataset.i; }
      var ka = key(a, col), kb = key(b, col), c;
      if (ka.n !== null || kb.n !== null) {
        if (ka.n === null) { return 1; }
        if (kb.n === null) { return -1; }
        c = ka.n - kb.n;
      } else {
        c = ka.t.localeCompare(kb.t);
      }
      if (next === "descending") { c = -c; }
      return c !== 0 ? c : a.dataset.i - b.dataset.i;
    });
    var body = table.tBodies[0];
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead button.sort").forEach(function (btn) {
      btn.addEventListener("click", function () { sortBy(table, btn); });
    });
    table.querySelectorAll("button.tog").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var open = btn.getAttribute("aria-expanded") !== "false";
        btn.setAttribute("aria-expanded", open ? "false" : "true");
        refresh(table);
      });
    });
  });
  document.querySelectorAll(".tools").forEach(function (tools) {
    var table = tools.parentNode.querySelector("table.tree");
    if (!table) { return; }
    tools.querySelectorAll("button.lvl").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var level = btn.dataset.level;
        rowsOf(table).forEach(function (r) {
          var tog = r.querySelector("button.tog");
          if (!tog) { return; }
          var open = level === "all" || parseInt(r.dataset.d, 10) < parseInt(level, 10);
          tog.setAttribute("aria-expanded", open ? "true" : "false");
        });
        refresh(table);
      });
    });
  });
})();
"""
