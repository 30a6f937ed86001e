"""The `inspect report` page in a real headless browser (Debian's chromium via Playwright).

`make system` installs chromium with apt-get (as root; CI runs it); `make test` installs
nothing outside .venv, so without chromium (or Playwright) these tests skip, saying why,
unless TORCHINSPECT_BROWSER_TESTS=required (CI) makes that a failure. No browser is
downloaded.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from torchinspect.analysis.summary import summarize

MODEL = "zoo:convnet"


def _chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if name and Path(name).is_file():
            return name
    return None


def no_browser(what: str) -> NoReturn:
    """Skip a browser test, saying why and how to get it; a failure where the browser tests
    are required (CI: TORCHINSPECT_BROWSER_TESTS=required), so they can't silently skip."""
    reason = (f"{what} is not installed: the browser tests skip (make system installs "
              "chromium with apt-get, as root)")
    if os.environ.get("TORCHINSPECT_BROWSER_TESTS") == "required":
        pytest.fail(reason + "; TORCHINSPECT_BROWSER_TESTS=required")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright import sync_api
    except ImportError:
        no_browser("playwright (pip install -e '.[dev]')")
    exe = _chromium()
    if exe is None:
        no_browser("chromium")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    from typer.testing import CliRunner

    from torchinspect.cli.app import app

    out = tmp_path_factory.mktemp("browser") / "report.html"
    r = CliRunner().invoke(app, ["report", MODEL, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture
def page(browser, page_file):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    pg = ctx.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in
          ("error", "warning") else None)
    pg.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    pg.on("request", lambda req: problems.append(f"request: {req.url}")
          if not req.url.startswith(("file:", "data:", "about:")) else None)
    pg.goto(page_file.as_uri())
    pg.wait_for_load_state("load")
    pg.problems = problems  # type: ignore[attr-defined]
    yield pg
    ctx.close()


def _layers(pg):
    """The layer table (the one whose rows carry depths)."""
    return pg.locator("table.tree").first


def _visible_names(pg) -> list[str]:
    return pg.eval_on_selector_all(
        "table.tree tbody tr:not(.hid)",
        "rows => rows.map(r => r.cells[0].textContent.replace(/[\\u25be\\s\\u2502\\u251c\\u2514\\u2500]/g, ''))")


def test_loads_with_no_console_errors_and_no_network(page):
    assert page.title().startswith(f"torchinspect report: {MODEL}")
    assert page.problems == []  # type: ignore[attr-defined]


def test_charts_and_graph_are_drawn(page):
    charts = page.locator("svg.chart")
    assert charts.count() >= 3
    for i in range(charts.count()):
        box = charts.nth(i).bounding_box()
        assert box and box["width"] > 200 and box["height"] > 20
    bars = page.locator("svg.chart rect.bar")
    assert bars.count() >= 3
    figures = page.locator("section.sec-figure")
    assert figures.count() == 3  # the module graph, the memory timeline, the bar at the peak
    assert figures.filter(has_text="Allocated memory").locator("svg").count() == 1
    figure = figures.filter(has_text="Module graph")
    assert figure.count() == 1
    if figure.locator("svg").count():  # Graphviz drew it: nodes are there
        assert figure.locator("svg g.node").count() >= 3
        box = figure.locator("svg").bounding_box()
        assert box and box["height"] > 100
    else:
        note = figure.locator("p.note").inner_text()
        assert note.startswith("graph: ")


def test_sorting_a_column_reorders_rows(page):
    table = _layers(page)
    headers = table.locator("thead th").all_inner_texts()
    col = headers.index("Params")
    before = _visible_names(page)

    def values() -> list[float]:
        cells = table.locator(f"tbody tr td:nth-child({col + 1})")
        return [float(v) if v not in (None, "") else float("nan")
                for v in cells.evaluate_all("cs => cs.map(c => c.getAttribute('data-v'))")]

    table.locator("thead th button.sort").nth(col).click()
    desc = [v for v in values() if v == v]
    assert desc == sorted(desc, reverse=True)
    assert _visible_names(page) != before
    s = summarize(MODEL)
    biggest = max((r for r in s.rows if r.params is not None), key=lambda r: r.params)
    assert _visible_names(page)[0].endswith(biggest.name.rpartition(".")[2])
    table.locator("thead th button.sort").nth(col).click()
    asc = [v for v in values() if v == v]
    assert asc == sorted(asc)
    table.locator("thead th button.sort").nth(col).click()  # third click: original order
    assert _visible_names(page) == before


def test_collapsing_a_block_hides_its_rows(page):
    s = summarize(MODEL)
    block = next(r for r in s.rows if r.depth == 1 and r.container)
    inside = [r for r in s.rows if r.name.startswith(block.name + ".")]
    assert inside
    table = _layers(page)
    rows = table.locator("tbody tr")
    total = rows.count()
    assert total == len(s.rows)
    index = [r.name for r in s.rows].index(block.name)
    toggle = rows.nth(index).locator("button.tog")
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "false"
    for k in range(1, len(inside) + 1):
        assert not rows.nth(index + k).is_visible()
    assert table.locator("tbody tr:visible").count() == total - len(inside)
    toggle.click()
    assert table.locator("tbody tr:visible").count() == total
    # the depth buttons: depth 1 shows the model and its top-level blocks only
    page.locator(".tools button.lvl[data-level='1']").first.click()
    assert table.locator("tbody tr:visible").count() == sum(1 for r in s.rows if r.depth <= 1)


def test_screenshot_is_not_blank(page, tmp_path):
    from PIL import Image, ImageStat

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    img = Image.open(shot).convert("L")
    assert img.size[0] >= 1200 and img.size[1] > 900
    stat = ImageStat.Stat(img)
    assert stat.stddev[0] > 20  # text, bars and lines, not one flat colour
    dark = sum(img.histogram()[:128]) / (img.size[0] * img.size[1])
    assert 0.005 < dark < 0.5  # some ink, mostly paper


def test_treemap_tiles_are_drawn_with_names(page):
    from torchinspect.overview.aggregate import two_levels

    tree = two_levels(summarize(MODEL).trace)
    expected = sum(1 for p, _ in tree.values() if p) + sum(1 for _, m in tree.values() if m)
    svg = page.locator('svg[aria-label="Parameters and MACs by module"]')
    assert svg.count() == 1
    frame = svg.bounding_box()
    tiles = svg.locator("rect.tm")
    assert tiles.count() == expected  # a tile per module with params, one per module with MACs
    for i in range(tiles.count()):
        box = tiles.nth(i).bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
        assert frame["x"] - 1 <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1
    names = {t.split(":")[0] for t in svg.locator("rect.tm > title").all_text_contents()}
    assert {n.split(" (")[0] for n in names} == {n for n in tree}  # "layer2.0 (Conv2d)"
    shown = set(svg.locator("text.tm-lb").all_text_contents())
    assert "Conv2d layer2.0" in shown and not any(t.isdigit() for t in shown)


def test_a_missing_browser_skips_saying_why_or_fails_where_required(monkeypatch) -> None:
    monkeypatch.delenv("TORCHINSPECT_BROWSER_TESTS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make system installs chromium"):
        no_browser("chromium")
    monkeypatch.setenv("TORCHINSPECT_BROWSER_TESTS", "required")
    with pytest.raises(pytest.fail.Exception, match="chromium is not installed"):
        no_browser("chromium")
