"""`inspect report` and the html renderer: content, escaping, optional parts, safety.

The page is checked in a real browser in tests/test_report_browser.py; here we parse the
HTML with the standard library and compare numbers with the summary/flops cores.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from html.parser import HTMLParser

import pytest

from torchinspect.report.base import Chart, Figure, KeyValues, Report, Shown, Table, Text, fmt_si


class Tags(HTMLParser):
    """Collects start tags with their attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(
            v in (a.get(k.rstrip("_")) or "").split() for k, v in attrs.items())]


def parse(page: str) -> Tags:
    p = Tags()
    p.feed(page)
    return p


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


HAS_GRAPH = _available("torchinspect.export.graph")
HAS_DOCTOR = _available("torchinspect.analysis.doctor")
HAS_BENCH = _available("torchinspect.bench.run")


# ------------------------------------------------------------------ the renderer


def test_html_escapes_everything_from_the_model():
    from torchinspect.report import render

    evil = '<script>alert("x")</script> & \'q\''
    report = Report("summary", {"model": evil}, [
        Text([evil], title=evil),
        KeyValues(evil, [(evil, evil)]),
        Table(evil, [evil, "n"], [[evil, Shown(3, evil)]], depths=[0]),
        Chart(evil, [evil], [(evil, [1.0])]),
        Chart(evil, ["1", "2"], [(evil, [1.0, 2.0])], kind="line"),
        Figure(evil, None, evil),
    ])
    import io

    buf = io.StringIO()
    render(report, "html", buf)
    page = buf.getvalue()
    p = parse(page)
    # the one script is ours (at the end); no element came from the model's text
    assert [t for t, _ in p.tags].count("script") == 1
    assert page.count("<script>") == 1
    assert evil not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;" in page
    assert evil in "".join(p.text)  # what a reader sees is the text itself


@pytest.mark.parametrize("text", ["[/x]", "[bold red]loud", "a|b,c\"d\nnew\tx\x1b[31m"])
def test_table_and_markdown_show_names_as_text(text):
    """A ModuleDict key or a folder name is shown as it is: never rich markup (a "[/x]" made
    the table renderer fail with MarkupError), one line (a newline broke the row), and no
    HTML a Markdown viewer would render."""
    import io

    from torchinspect.report import render

    shown = text.replace("\n", "\\n").replace("\t", "\\t").replace("\x1b", "\\x1b")
    report = Report("summary", {"model": text}, [
        Text([text], title=text),
        KeyValues(text, [(text, text)]),
        Table(text, [text, "n"], [[text, 1], ["b", 2]], footer=[text]),
    ])
    buf = io.StringIO()
    render(report, "table", buf)
    out = buf.getvalue()
    assert out.count(shown) == 9  # each title, header, cell, key, value, line and footer
    assert "\x1b" not in out  # no raw escape sequence reaches the terminal
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("1", "2"))]
    assert len(rows) == 2  # one line per table row
    buf = io.StringIO()
    render(report, "markdown", buf)
    md = buf.getvalue()
    table_rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table_rows) == 2 + 3  # the key/value table (2 lines), the table (header, 2 rows)
    assert all(line.endswith(" |") for line in table_rows)
    cell = shown.replace("|", "\\|")
    assert f"| {cell} | 1 |" in md


def test_markdown_escapes_html_but_keeps_comparisons():
    import io

    from torchinspect.report import render

    evil = '<img src=x onerror=alert(1)>'
    report = Report("summary", {}, [Text([evil, "CoV < 2.5%"]), Table(None, ["Layer"], [[evil]])])
    buf = io.StringIO()
    render(report, "markdown", buf)
    md = buf.getvalue()
    assert "<img" not in md and md.count("&lt;img src=x onerror=alert(1)>") == 2
    assert "CoV < 2.5%" in md  # a "<" that opens no tag stays as written


def test_summary_of_markup_like_module_names(invoke, tmp_path):
    spec = tmp_path / "m.py"
    spec.write_text(
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.d = nn.ModuleDict({'[/x]': nn.Linear(4, 4), '[bold]b\\nc': nn.Linear(4, 2)})\n"
        "    def forward(self, x):\n"
        "        return self.d['[bold]b\\nc'](self.d['[/x]'](x))\n")
    for args in (("summary", f"{spec}:Net", "--input", "4"), ("params", f"{spec}:Net")):
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert "[/x]" in r.output and "[bold]b\\nc" in r.output


def test_bar_lengths_are_proportional_to_values():
    from torchinspect.report.page import bar_svg

    values = [3.0, 12.0, 6.0]
    svg = bar_svg(Chart("c", ["a", "b", "c"], [("s", values)]), "t")
    widths = [float(w) for w in re.findall(r'class="bar"[^>]*width="([\d.]+)"', svg)]
    assert len(widths) == 3
    for w, v in zip(widths, values, strict=True):
        assert w / widths[1] == pytest.approx(v / max(values), abs=1e-3)


def test_tree_parents_follow_depths():
    from torchinspect.report.page import parents

    assert parents([0, 1, 2, 2, 1, 2, 0]) == [-1, 0, 1, 1, 0, 4, -1]


def test_summary_format_html_rows_and_values(invoke):
    from torchinspect.analysis.summary import summarize

    r = invoke("summary", "zoo:convnet", "--format", "html")
    assert r.exit_code == 0, r.output
    s = summarize("zoo:convnet")
    p = parse(r.stdout)
    rows = p.find("tr")
    tree_rows = [a for a in rows if a.get("data-d") is not None]
    assert [int(a["data-d"]) for a in tree_rows] == [row.depth for row in s.rows]
    # the Params column carries the raw numbers for sorting
    params = re.findall(r'<td class="right" data-v="(\d+)">[\d,]+</td>', r.stdout)
    assert str(s.totals.params) in r.stdout.replace(",", "")
    assert "15690" in params  # fc: 1568*10 + 10


# ------------------------------------------------------------------ inspect report


@pytest.fixture(scope="module")
def convnet_page(tmp_path_factory):
    from typer.testing import CliRunner

    from torchinspect.cli.app import app

    out = tmp_path_factory.mktemp("report") / "convnet.html"
    r = CliRunner().invoke(app, ["report", "zoo:convnet", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def test_report_header_and_totals_match_the_cores(convnet_page):
    import torch

    from torchinspect.analysis.flops import count_flops
    from torchinspect.analysis.summary import summarize

    s = summarize("zoo:convnet")
    f = count_flops("zoo:convnet")
    assert f"{s.totals.params:,}" in convnet_page
    assert f"{f.macs:,}" in convnet_page  # MACs, exact
    assert f"{2 * f.macs:,}" in convnet_page  # FLOPs
    assert torch.__version__ in convnet_page
    assert "multiply-accumulates" in convnet_page  # the convention is stated
    # conv 5x5, 1->16 channels on 28x28 output: 25 * 16 * 28 * 28 MACs
    assert f.rows and 25 * 16 * 28 * 28 + 25 * 16 * 32 * 14 * 14 + 1568 * 10 == f.macs


def test_report_charts_blocks_and_top_layers(convnet_page):
    from torchinspect.analysis.summary import summarize

    p = parse(convnet_page)
    charts = p.find("svg", class_="chart")
    assert len(charts) >= 3
    labels = {a.get("aria-label") for a in charts}
    assert {"Parameters per top-level block", "MACs per top-level block"} <= labels
    # block params add up to the model total (from the page's bar tooltips)
    tips = re.findall(r"<title>(layer1|layer2|fc) \([A-Za-z]+\): ([\d.]+)(K?)</title>",
                      convnet_page)
    s = summarize("zoo:convnet")
    assert len(tips) >= 3
    fc = next(r for r in s.rows if r.name == "fc")
    assert ("fc", f"{fc.params / 1000:.2f}", "K") in tips


def test_report_graph_doctor_present_or_noted(convnet_page):
    if HAS_GRAPH and shutil.which("dot"):
        assert re.search(r'<section id="s\d+" class="sec-figure"><h2>Module graph</h2>'
                         r'<div class="figure"><svg', convnet_page)
    else:
        assert "graph: not available" in convnet_page or "graph: not drawn" in convnet_page
    if HAS_DOCTOR:
        assert "checks run:" in convnet_page
    else:
        assert "doctor: not available" in convnet_page


def test_missing_parts_degrade_to_a_note(invoke, tmp_path, monkeypatch):
    for name in ("torchinspect.export.graph", "torchinspect.analysis.doctor",
                 "torchinspect.bench.run"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchinspect.bench", None)
    out = tmp_path / "r.html"
    r = invoke("report", "zoo:mnist-net", "--bench", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "graph: not available (`inspect graph` is not in this build" in page
    assert "doctor: not available (`inspect doctor` is not in this build" in page
    assert "bench (zoo:mnist-net): not available (`inspect bench` is not in this build" in page


@pytest.mark.slow
def test_a_failing_part_is_a_note_not_an_error(invoke, tmp_path, monkeypatch):
    from torchinspect.overview import parts

    def broken(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(parts, "graph_part", broken)
    out = tmp_path / "r.html"
    r = invoke("report", "zoo:mnist-net", "--no-doctor", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "graph: failed: RuntimeError: boom" in page and "second line" not in page
    assert "Doctor findings" in page  # still a section, saying it was not requested


@pytest.mark.skipif(not HAS_BENCH, reason="inspect bench is not in this build")
@pytest.mark.slow
def test_report_bench_table_and_chart(invoke, tmp_path):
    out = tmp_path / "b.html"
    r = invoke("report", "zoo:mnist-net", "--no-doctor", "--no-graph", "--bench",
               "--bench-batch", "1,2", "--bench-seconds", "0.05", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    p = parse(page)
    assert "Throughput per batch size" in {a.get("aria-label", "").split(" (")[0]
                                           for a in p.find("svg", class_="chart")}
    rows = re.findall(r"<tr data-i=\"\d+\"><td class=\"left\">zoo:mnist-net</td>"
                      r"<td class=\"left\">fp32</td><td class=\"right\" data-v=\"(\d+)\"",
                      page)
    assert rows == ["1", "2"]


@pytest.mark.slow
def test_comparison_page(invoke, tmp_path):
    from torchinspect.analysis.summary import summarize

    out = tmp_path / "cmp.html"
    r = invoke("report", "zoo:convnet", "zoo:mnist-net", "--no-doctor", "--no-graph", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "Totals side by side" in page
    for spec in ("zoo:convnet", "zoo:mnist-net"):
        s = summarize(spec)
        assert f'<td class="left">{s.model}</td>' in page
        assert f'data-v="{s.totals.params}"' in page
    # models side by side per module type: one legend entry per model
    block = page[page.index('aria-label="Parameters per module type"'):]
    block = block[:block.index("</svg>")]
    assert block.count('class="lg"') == 2


@pytest.mark.slow
def test_report_json_format(invoke):
    from torchinspect.analysis.summary import summarize

    r = invoke("report", "zoo:convnet", "--no-graph", "--no-doctor", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "torchinspect/report/v1"
    m = data["models"][0]
    assert m["summary"]["totals"]["params"] == summarize("zoo:convnet").totals.params
    assert sum(b["params"] for b in m["blocks"]) == m["summary"]["totals"]["params"]
    assert m["missing"] == {}


def test_report_never_writes_over_an_input(invoke, tmp_path):
    src = tmp_path / "net.py"
    text = ("import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.fc = torch.nn.Linear(4, 2)\n\n"
            "    def forward(self, x):\n        return self.fc(x)\n")
    src.write_text(text)
    r = invoke("report", f"{src}:Net", "--input", "4", "--no-graph", "--no-doctor", "-o", src)
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ")
    assert src.read_text() == text


def test_bad_bench_batch_is_a_usage_error(invoke):
    r = invoke("report", "zoo:convnet", "--bench", "--bench-batch", "1,x")
    assert r.exit_code == 2
    assert "error: --bench-batch '1,x'" in r.stderr and "hint:" in r.stderr


def _sections(page: str) -> dict[str, str]:
    """Each section's h2 title -> its html."""
    out = {}
    for m in re.finditer(r'<section id="s\d+" class="[^"]*">(.*?)</section>', page, re.S):
        title = re.match(r"<h2>(.*?)</h2>", m.group(1))
        if title:
            out[title.group(1)] = m.group(1)
    return out


def test_not_counted_ops_sit_under_flops_not_under_the_doctor(invoke, tmp_path):
    out = tmp_path / "one.html"
    r = invoke("report", "zoo:mnist-net", "--no-graph", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    sections = _sections(page)
    assert "not counted (no MAC formula)" in sections["FLOPs"]
    assert all("not counted" not in html for title, html in sections.items() if title != "FLOPs")
    assert page.index("<h2>Layers</h2>") < page.index("<h2>FLOPs</h2>") < page.index("<h2>Doctor findings</h2>")


@pytest.mark.skipif(not HAS_DOCTOR, reason="doctor not available")
@pytest.mark.slow
def test_comparison_doctor_cell_names_the_checks_that_did_not_run(invoke, tmp_path):
    from torchinspect.analysis.doctor import diagnose

    out = tmp_path / "cmp.html"
    r = invoke("report", "zoo:doctor-aligned", "zoo:mnist-net", "--no-graph", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    clean = diagnose("zoo:doctor-aligned")
    assert not clean.findings
    cells = re.findall(r'<tr data-i="\d"><td class="left">(zoo:[\w-]+)</td>.*?'
                       r'<td class="left">([^<]*)</td><td class="left">[^<]*</td></tr>', page)
    by_model = dict(cells)
    assert by_model["zoo:doctor-aligned"].startswith("none in TI001, TI002")
    from torchinspect.analysis.doctor.rules import fold_codes, run_codes

    for cell in by_model.values():
        assert f"{fold_codes(run_codes())} not run" in cell


@pytest.mark.slow
def test_report_memory_section_timeline_bar_and_json(convnet_page, invoke):
    """The memory section: inspect memory's prediction (the summary's numbers), a timeline
    with forward/backward/optimizer shaded and the peak marked, a stacked bar, and the whole
    breakdown in JSON."""
    from torchinspect.memory.faking import make_target
    from torchinspect.memory.predict import predict_case
    from torchinspect.memory.step import StepConfig
    from torchinspect.report.base import fmt_bytes
    from torchinspect.report.memory_chart import CATEGORY_FILL, PHASE_FILL
    from torchinspect.sources.case import make_case

    want = predict_case(make_case("zoo:convnet", None), StepConfig(), make_target("cuda"))
    p = parse(convnet_page)
    labels = {a.get("aria-label") for a in p.find("svg", class_="chart")}
    assert {"allocated memory of two training steps", "what is allocated at the peak"} <= labels
    timeline = re.search(r'aria-label="allocated memory of two training steps".*?</svg>',
                         convnet_page, re.S).group(0)
    for phase in ("forward", "backward", "optimizer"):  # each phase of both steps is shaded
        assert timeline.count(f'fill="{PHASE_FILL[phase]}"') >= 2, phase
    assert f"peak {fmt_bytes(want.training.peak)}: {want.training.where}" in timeline
    bar = re.search(r'aria-label="what is allocated at the peak".*?</svg>', convnet_page, re.S).group(0)
    for cat in ("weights", "gradients", "optimizer state"):
        b = want.training.breakdown[cat]
        assert f'fill="{CATEGORY_FILL[cat]}"><title>{cat}: {fmt_bytes(b)}</title>' in bar
    # the totals show the same peaks as the summary; the JSON has the whole prediction
    assert f"{fmt_bytes(want.inference.peak)}" in convnet_page
    r = invoke("report", "zoo:convnet", "-f", "json", "--no-graph", "--no-doctor")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["models"][0]
    assert m["memory"]["training"]["peak"] == want.training.peak
    assert m["memory"]["training"]["breakdown"] == want.training.breakdown
    assert m["memory"]["training"]["saved"][0]["bytes"] == want.training.saved[0][1]
    assert m["summary"]["totals"]["peak_training_bytes"] == want.training.peak


def test_memory_chart_escapes_module_names():
    from torchinspect.memory.result import MemoryResult, PhasePeak, RunMemory
    from torchinspect.report.memory_chart import memory_sections
    from torchinspect.report.page import render_html

    evil = '<img src=x onerror="alert(1)">'
    run = RunMemory("training", 300, "backward", 1, evil, {"weights": 100, "activations": 200},
                    [PhasePeak("forward", 1, 200, evil, {}), PhasePeak("backward", 1, 300, evil, {})],
                    [(evil, 200)], 200, [("forward", 1, 100), ("forward", 1, 200),
                                         ("backward", 1, 300), ("optimizer", 1, 150)])
    result = MemoryResult("m", "1,4", None, "cuda", "h100", {"optimizer": "adamw"}, 10, 100, 0,
                          16, None, run, notes=[evil])
    page = render_html(Report("report", {}, memory_sections(result)))
    assert "<img" not in page and "&lt;img src=x" in page


# ------------------------------------------------------------------ charts that say something


def _chart(page: str, label: str) -> str:
    """The svg of the chart whose aria-label is ``label``."""
    start = page.index(f'aria-label="{label}"')
    return page[start:page.index("</svg>", start)]


def _bar_labels(svg: str) -> list[str]:
    import html

    return [html.unescape(t) for t in re.findall(r'<text [^>]*class="lb"[^>]*>([^<]*)</text>', svg)]


def _own_by_class(model, classes: tuple[type, ...]) -> int:
    return sum(p.numel() for mod in model.modules() if isinstance(mod, classes)
               for p in mod.parameters(recurse=False))


@pytest.fixture(scope="module")
def resnet18_vs_convnet(tmp_path_factory):
    from typer.testing import CliRunner

    from torchinspect.cli.app import app

    out = tmp_path_factory.mktemp("cmp") / "cmp.html"
    r = CliRunner().invoke(app, ["report", "resnet18", "zoo:convnet", "--no-doctor",
                                 "--no-graph", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def test_comparison_per_module_type(resnet18_vs_convnet):
    """Unrelated architectures are compared on what they share: module types."""
    import torchvision
    from torch import nn

    from torchinspect import zoo

    page = resnet18_vs_convnet
    params = _chart(page, "Parameters per module type")
    assert {"Conv2d", "Linear", "norm"} <= set(_bar_labels(params))
    assert {"Conv2d", "Linear"} <= set(_bar_labels(_chart(page, "MACs per module type")))
    assert "norm" not in _bar_labels(_chart(page, "MACs per module type"))  # no MACs: no bar
    r18, convnet = torchvision.models.resnet18(), zoo.get("convnet").build()
    for name, model in (("resnet18", r18), ("zoo:convnet", convnet)):
        conv = _own_by_class(model, (nn.Conv2d,))
        tip = re.search(rf"<title>Conv2d — {re.escape(name)}: ([^<]*)</title>", params)
        assert tip and tip.group(1) == fmt_si(conv), (name, tip)
    # resnet18's Linear is fc: 512*1000 + 1000
    assert "<title>Linear — resnet18: 513.00K</title>" in params


def test_comparison_block_bars_only_for_shared_names(resnet18_vs_convnet):
    page = resnet18_vs_convnet
    for title in ("Parameters", "MACs"):
        labels = _bar_labels(_chart(page, f"{title} per top-level block (blocks every model has)"))
        assert labels == ["layer1", "layer2", "fc"]  # conv1, layer3, layer4 are resnet18's only
    assert 'aria-label="Parameters per top-level block"' not in page


@pytest.mark.slow
def test_comparison_without_shared_blocks_says_so(invoke, tmp_path):
    out = tmp_path / "cmp.html"
    r = invoke("report", "zoo:convnet", "zoo:mnist-net", "--no-doctor", "--no-graph", "-o", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "per top-level block (blocks every model has)" not in page
    assert "No top-level block with params or MACs has the same name in every model" in page


@pytest.mark.slow
def test_top_layers_group_identical_layers():
    """resnet50's top 15 used to be 14 bars of identical convolutions."""
    import torchvision
    from torch import nn

    from torchinspect.overview import collect_overview
    from torchinspect.report.overview import top_layers_chart

    m = collect_overview("resnet50", graph=False, doctor=False).models[0]
    chart = top_layers_chart(m)
    assert len(set(chart.labels)) == len(chart.labels)  # no two bars alike
    # layer3.1..5.conv2: 3x3, 256 -> 256 channels at 14x14: 256*256*9*14*14 MACs each
    label = "Conv2d 3×3 p1 256→256 @14×14 (×5)"
    assert chart.labels[0] == label
    assert chart.series[0][1][0] == 5 * 256 * 256 * 9 * 14 * 14
    group = m.top_layers()[0]
    model = torchvision.models.resnet50()
    assert group.layers == [f"layer3.{i}.conv2" for i in range(1, 6)]
    assert group.params == 5 * model.layer3[1].conv2.weight.numel()
    counting = (nn.Conv2d, nn.Linear)  # the leaf layers that run MACs: each in one group
    assert sum(g.count for g in m.top_layers(1000)) == sum(
        isinstance(mod, counting) for mod in model.modules())


def test_aggregates_add_up_to_the_totals():
    from torchinspect.overview import collect_overview

    for spec in ("resnet18", "zoo:llama-tiny"):  # llama-tiny ties its embedding and LM head
        m = collect_overview(spec, graph=False, doctor=False, memory=False).models[0]
        t = m.summary.totals
        types = m.by_type()
        assert sum(x.params for x in types.values()) == t.params, spec
        assert sum(x.macs for x in types.values()) == t.macs, spec
        tree = m.hierarchy()
        assert sum(p for p, _ in tree.values()) == t.params, spec
        assert sum(c for _, c in tree.values()) == t.macs, spec


def test_treemap_of_the_top_two_levels(convnet_page):
    from torchinspect.analysis.summary import summarize

    svg = _chart(convnet_page, "Parameters and MACs by module")
    s = summarize("zoo:convnet", depth=2)
    rows = {r.name: r for r in s.rows}
    tiles = re.findall(r'<rect class="tm" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
                       r'height="([\d.]+)"[^>]*><title>([^<:]+): ', svg)
    tiles = [(x, y, w, h, re.sub(r" \(\w+\)$", "", name)) for x, y, w, h, name in tiles]
    params = [(name, float(w) * float(h)) for x, y, w, h, name in tiles[:len(tiles) // 2 + 1]
              if rows.get(name) and rows[name].params]
    # the params panel: a tile per module two levels down, areas in proportion to params
    names = [n for n, _ in params]
    assert {"layer1.0", "layer2.0", "fc"} <= set(names)
    area = dict(params)
    ratio = area["layer2.0"] / area["fc"]
    assert ratio == pytest.approx(rows["layer2.0"].params / rows["fc"].params, rel=0.03)


def test_squarify_fills_the_box_in_proportion():
    from torchinspect.report.page import squarify

    values = [6.0, 6.0, 4.0, 3.0, 2.0, 2.0, 1.0]
    rects = squarify(values, (10.0, 20.0, 600.0, 400.0))
    total = 600.0 * 400.0
    for v, (x, y, w, h) in zip(values, rects, strict=True):
        assert w * h == pytest.approx(total * v / sum(values))
        assert 10.0 - 1e-6 <= x and x + w <= 610.0 + 1e-6 and 20.0 - 1e-6 <= y and y + h <= 420.0 + 1e-6
    for i, a in enumerate(rects):  # no two tiles overlap
        for b in rects[i + 1:]:
            overlap_w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
            overlap_h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
            assert overlap_w <= 1e-6 or overlap_h <= 1e-6
    worst = max(max(w / h, h / w) for _, _, w, h in rects)
    assert worst < 3  # squarified: no long thin slices


def test_best_throughput_names_batch_dtype_and_device():
    from types import SimpleNamespace

    from torchinspect.report.overview import best_throughput

    configs = [SimpleNamespace(status="ok", throughput=t, batch=b, dtype=d)
               for t, b, d in ((100.0, 1, "fp32"), (900.5, 32, "fp32"), (700.0, 8, "fp16"))]
    configs.append(SimpleNamespace(status="oom", throughput=None, batch=64, dtype="fp32"))
    m = SimpleNamespace(bench=SimpleNamespace(configs=configs, device="cpu"))
    best = best_throughput(m)
    assert best.value == 900.5
    assert best.text == "900.5/s at batch 32 (fp32, cpu)"
    assert best_throughput(SimpleNamespace(bench=None)).text == "-"


@pytest.mark.skipif(not HAS_BENCH, reason="inspect bench is not in this build")
def test_comparison_throughput_cell_names_the_batch(invoke, tmp_path):
    out = tmp_path / "cmp.html"
    r = invoke("report", "zoo:mnist-net", "zoo:convnet", "--no-doctor", "--no-graph", "--bench",
               "--bench-batch", "1,2", "--bench-seconds", "0.05", "-o", out)
    assert r.exit_code == 0, r.output
    cells = re.findall(r'<td class="right" data-v="[\d.e+-]+">([\d,.]+/s at batch (\d) '
                       r'\(fp32, cpu\))</td>', out.read_text())
    assert len(cells) == 2 and {b for _, b in cells} <= {"1", "2"}


def test_treemap_goes_down_through_a_dominant_child():
    """vit's encoder is one tile unless the treemap looks inside encoder.layers."""
    import torch
    from torch import nn

    from torchinspect.analysis.summary import summarize
    from torchinspect.overview.aggregate import two_levels

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 64), nn.Linear(64, 4))
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.layers(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(4, 4)
            self.encoder = Encoder()

        def forward(self, x):
            return self.encoder(self.stem(x))

    trace = summarize(Net(), torch.zeros(1, 4)).trace
    assert two_levels(trace) == {
        "stem": (4 * 4 + 4, 4 * 4),
        "encoder.layers.0": (4 * 64 + 64, 4 * 64),
        "encoder.layers.1": (64 * 4 + 4, 64 * 4),
        "encoder.norm": (4 + 4, 0),
    }


# ------------------------------------------------------------------ issue 33: what a reader sees

def test_the_flops_section_has_macs_by_op_and_the_treemap_names_its_tiles(convnet_page):
    sections = _sections(convnet_page)
    flops = sections["FLOPs"]
    assert "<table" in flops and ">convolution<" in flops and ">addmm<" in flops
    assert "Total: 2.84M MACs (2,838,080) = 5.68M FLOPs" in flops
    treemap = _chart(convnet_page, "Parameters and MACs by module")
    tiles = re.findall(r'class="tm-lb">([^<]*)</text>', treemap)
    assert "Conv2d layer2.0" in tiles and "Linear fc" in tiles
    assert not [t for t in tiles if t.isdigit()]  # never a bare index ("0")
    memory = sections["Memory (predicted)"]
    assert "(backward at layer1.2, steady step)" in memory  # no parentheses inside parentheses


def test_the_memory_legend_stays_inside_its_picture():
    from torchinspect.memory.result import CATEGORIES, MemoryResult, RunMemory
    from torchinspect.report.memory_chart import W, stacked_svg
    from torchinspect.report.page import CHAR_W

    every = {c: 10 * (k + 1) for k, c in enumerate(CATEGORIES)}  # all eight categories
    run = RunMemory("training", sum(every.values()), "backward", 2, "fc", every, [], [])
    result = MemoryResult("m", "1,4", None, "cuda", "h100", {"optimizer": "adamw"}, 10, 100, 0,
                          16, None, run)
    svg = stacked_svg(result)
    texts = re.findall(r'<text x="([0-9.]+)" y="[0-9.]+">([a-z ]+)</text>', svg)
    legend = [(float(x), name) for x, name in texts if name in CATEGORIES]
    assert {name for _, name in legend} == set(CATEGORIES)
    assert all(x + CHAR_W * len(name) <= W for x, name in legend), legend
    height = float(re.search(r'height="([0-9.]+)"', svg).group(1))
    assert all(float(y) < height for y in re.findall(r'<rect x="[0-9.]+" y="([0-9.]+)" '
                                                     r'width="10"', svg))
