"""A real browser (Debian's chromium through Playwright) against `streamlit run app.py`.

Opens every page of the navigation through a deep link, checks that no exception box shows,
that a Plotly chart is drawn and that the link's numbers are visible; shows every page in
presentation mode as one 1280 x 720 slide (title with the model and context, key numbers, the
main chart whole, nothing cut off); drags sliders with the mouse and the keyboard and checks
that the number shown becomes the core's. Screenshots go into pytest's temporary folder, or
MLA_SCREENSHOT_DIR when set (docs/screenshots for the README). Skipped when chromium is not
installed, unless MLA_REQUIRE_BROWSER=1 (set by .ci/run), which makes a missing browser fail.
"""
import os
import time

import pytest

from browser_util import CHROMIUM, LAUNCH_ARGS, app_server, every_chart, first_chart, settle as _settle
from mla_core.kv import kv_report
from mla_core.presets import load_model
from mla_core.units import format_bytes, format_tokens
from mla_core.whatif import what_if

pytestmark = pytest.mark.browser

if CHROMIUM is None:
    if os.environ.get("MLA_REQUIRE_BROWSER") == "1":
        raise RuntimeError("MLA_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    history = str(tmp_path_factory.mktemp("history") / "history.sqlite3")
    log = str(tmp_path_factory.mktemp("streamlit") / "server.log")
    with app_server(history, log) as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = os.environ.get("MLA_SCREENSHOT_DIR") or str(tmp_path_factory.mktemp("screenshots"))
    os.makedirs(folder, exist_ok=True)
    return folder


def _shoot(page, path):
    """A screenshot of the whole page: Streamlit scrolls inside its main block, so the viewport
    is grown to that block's height first (capped)."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    width = page.viewport_size["width"]
    page.set_viewport_size({"width": width, "height": max(900, min(int(height) + 40, 6000))})
    every_chart(page)  # each drawn (a chart is drawn when it comes near the window)
    time.sleep(1.5)  # let Plotly re-layout
    page.screenshot(path=path, full_page=True)


DSV3 = kv_report(load_model("deepseek-v3"), 131072, 1, "bf16")
LINK = "model=deepseek-v3&context=131072&kv_dtype=bf16&gpu=h200&num_gpus=8&tp=8"
PAGES = [
    # (url path, name, texts the deep link must show)
    ("", "kv_cache", [format_bytes(DSV3["kv_bytes_per_token"]), format_bytes(DSV3["kv_cache_bytes"])]),
    ("concurrency", "capacity", []),
    ("decode-roofline", "roofline", []),
    ("measure", "benchmark", []),
    ("published-figures", "claims", []),
    ("serving-plan", "serving", ["vllm serve deepseek-ai/DeepSeek-V3", "sglang.launch_server"]),
]


@pytest.mark.parametrize("path, name, texts", PAGES, ids=[p[1] for p in PAGES])
def test_page_in_a_real_browser(server, browser, shots, path, name, texts):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/{path}?{LINK}", wait_until="domcontentloaded")
    first_chart(page)  # a chart is drawn (a slow machine gets time)
    text = _settle(page)
    _shoot(page, os.path.join(shots, f"{name}.png"))
    assert page.locator('[data-testid="stException"]').count() == 0, text[:2000]
    assert page.get_by_text("Page not found").count() == 0, f"{name}: the deep link was not resolved"
    assert page.locator(".js-plotly-plot").count() >= 1, f"no Plotly chart on {name}"
    for t in texts:
        assert t in text, f"{t!r} not visible on {name}"
    assert not errors, errors
    page.close()


def test_link_state_survives_navigation_in_the_browser(server, browser, shots):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?model=kimi-k2-instruct&context=65536", wait_until="domcontentloaded")
    _settle(page)
    page.locator('[data-testid="stSidebarNav"] a', has_text="Capacity").click()
    _settle(page)
    assert "model=kimi-k2-instruct" in page.url and "context=65536" in page.url
    page.locator('[data-testid="stSidebarNav"] a', has_text="KV cache").click()
    text = _settle(page)
    want = kv_report(load_model("kimi-k2-instruct"), 65536)["kv_cache_bytes_per_sequence"]
    assert format_bytes(want) in text
    page.close()


CUT_METRICS = """() => [...document.querySelectorAll('.mla-metric-value, .mla-metric-label')]
    .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right >
                 e.closest('.mla-metric').getBoundingClientRect().right + 1)
    .map(e => e.innerText)"""


SLIDE = (1280, 720)
SLIDES = [
    # (url path, name, the title must name the model and the context)
    ("", "kv", True),
    ("concurrency", "capacity", True),
    ("decode-roofline", "roofline", True),
    ("measure", "benchmark", False),
    ("published-figures", "claims", False),
    ("serving-plan", "serving", False),
]
MAIN_CHART_BOTTOM = """() => { const c = document.querySelector('.js-plotly-plot');
    return c ? c.getBoundingClientRect().bottom : null; }"""


@pytest.mark.parametrize("path, name, titled", SLIDES, ids=[s[1] for s in SLIDES])
def test_every_page_is_one_slide_in_presentation_mode(server, browser, shots, path, name, titled):
    scheme = "dark" if name == "capacity" else "light"
    ctx = browser.new_context(viewport={"width": SLIDE[0], "height": SLIDE[1]}, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(f"{server}/{path}?{LINK}&present=1", wait_until="domcontentloaded")
    page.wait_for_selector(".js-plotly-plot", timeout=90000)
    text = _settle(page)
    time.sleep(1)  # let Plotly lay out at its final size
    page.screenshot(path=os.path.join(shots, f"slide_{name}.png"), full_page=False)
    assert page.locator('[data-testid="stException"]').count() == 0, text[:2000]
    px = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.mla-metric-value')).fontSize)")
    assert px >= 40, px  # projector-sized key numbers
    assert page.evaluate(CUT_METRICS) == []  # none cut short ("1.49M tokens" wraps, never "1.49M to...")
    bottom = page.evaluate(MAIN_CHART_BOTTOM)
    assert bottom is not None and bottom <= SLIDE[1], f"{name}: the main chart ends at {bottom}px, below the slide"
    metrics_bottom = page.evaluate("() => Math.max(...[...document.querySelectorAll('.mla-metric-value')]"
                                   ".slice(0, 4).map(e => e.getBoundingClientRect().bottom))")
    assert metrics_bottom <= SLIDE[1]
    if titled:
        title = page.locator('[data-testid="stMain"] h2').first.inner_text()
        assert "deepseek-v3" in title and format_tokens(131072) in title and "131,072" in title, title
    ctx.close()


def _metric_text(page, label_start: str) -> str:
    for m in page.locator('.mla-metric').all():
        if m.locator('.mla-metric-label').inner_text().strip().startswith(label_start):
            return m.locator('.mla-metric-value').inner_text().strip()
    raise AssertionError(f"no metric {label_start!r}")


def _slider(page, label: str):
    return page.locator('[data-testid="stSlider"]').filter(has_text=label).first


def test_dragging_sliders_moves_the_numbers_to_the_cores(server, browser, shots):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?model=deepseek-v3&kv_dtype=bf16", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    model = load_model("deepseek-v3")
    assert _metric_text(page, "KV bytes per token") == format_bytes(70272)

    # The what-if latent d_c, dragged with the mouse: its thumb to the track's left end.
    d_c = _slider(page, "MLA latent d_c")
    d_c.scroll_into_view_if_needed()
    thumb = d_c.locator('input[type="range"]').locator("..")
    box = thumb.bounding_box()
    track = d_c.locator('[data-testid="stSliderTickBar"]').bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] * 0.2, box["y"] + box["height"] / 2, steps=12)
    page.mouse.up()
    _settle(page)
    chosen = int(d_c.locator('input[type="range"]').get_attribute("aria-valuetext").replace(",", ""))
    assert chosen < 512
    want = kv_report(what_if(model, kv_lora_rank=chosen), 131072, 1, "bf16")["kv_bytes_per_token"]
    assert _metric_text(page, "KV bytes per token") == format_bytes(want) != format_bytes(70272)
    assert f"wi_kv_lora_rank={chosen}" in page.url

    # The layer slider, moved with the keyboard: three steps down from 61.
    layers = _slider(page, "Layers")
    layers.locator('input[type="range"]').focus()
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
    _settle(page)
    assert layers.locator('input[type="range"]').get_attribute("aria-valuetext") == "58"
    want = kv_report(what_if(model, kv_lora_rank=chosen, num_hidden_layers=58), 131072, 1, "bf16")
    assert _metric_text(page, "KV bytes per token") == format_bytes(want["kv_bytes_per_token"])

    # The sidebar's context slider, one stop up with the keyboard (128K -> 256K): the sequence follows.
    page.locator('[data-testid="stSidebar"] [data-testid="stSlider"]').first.locator('input[type="range"]').focus()
    page.keyboard.press("ArrowRight")
    _settle(page)
    assert "context=262144" in page.url
    want = kv_report(what_if(model, kv_lora_rank=chosen, num_hidden_layers=58), 262144, 1, "bf16")
    assert _metric_text(page, "Per sequence") == format_bytes(want["kv_cache_bytes_per_sequence"])
    page.screenshot(path=os.path.join(shots, "kv_what_if.png"), full_page=False)
    page.close()


# Boxes of a chart's parts that must not overlap: the y axis's title and the chart's title; the legend
# and the x axis's title (Plotly's SVG classes). A legend that needs a scrollbar is too tall for its chart.
CHART_OVERLAPS = """() => {
  const box = (el) => el ? el.getBoundingClientRect() : null;
  const hit = (a, b) => a && b && a.width && b.width && a.left < b.right && b.left < a.right &&
                        a.top < b.bottom && b.top < a.bottom;
  return [...document.querySelectorAll('.js-plotly-plot')].flatMap((plot, i) => {
    const title = box(plot.querySelector('.g-gtitle text')), ytitle = box(plot.querySelector('.g-ytitle text'));
    const xtitle = box(plot.querySelector('.g-xtitle text')), legend = box(plot.querySelector('.legend .bg'));
    const out = [];
    const frame = plot.getBoundingClientRect();
    if (hit(title, ytitle)) out.push(`chart ${i}: the y axis title runs into the chart title`);
    const entries = [...plot.querySelectorAll('.legend .traces text')].map(box);  // the legend's words
    if (entries.some(e => hit(title, e))) out.push(`chart ${i}: the legend runs into the chart title`);
    // (a text's box reaches a few pixels above its glyphs)
    if (title && (title.top < frame.top - 4 || title.right > frame.right + 1)) out.push(`chart ${i}: the title is cut`);
    if (hit(legend, xtitle)) out.push(`chart ${i}: the legend touches the x axis title`);
    const bar = plot.querySelector('.legend .scrollbar');
    if (bar && bar.getBoundingClientRect().height > 0) out.push(`chart ${i}: the legend needs a scrollbar`);
    return out;
  });
}"""
# A table wider than its frame scrolls sideways (its last columns out of sight).
CLIPPED_TABLES = """() => [...document.querySelectorAll('[data-testid="stDataFrame"]')].map((t, i) => {
    const s = t.querySelector('.dvn-scroller'); return s && s.scrollWidth > s.clientWidth + 2 ? i : null; })
    .filter(i => i !== null)"""


@pytest.mark.parametrize("path, name", [(s[0], s[1]) for s in SLIDES if s[1] in ("capacity", "serving", "claims", "roofline", "kv")])
def test_chart_titles_legends_and_axis_titles_do_not_overlap(server, browser, path, name):
    # A slide, a desk, and a phone's width (charts laid out again there: titles wrapped, legends given room).
    for present, viewport in ((True, {"width": SLIDE[0], "height": SLIDE[1]}), (False, {"width": 1440, "height": 900}),
                              (False, {"width": 420, "height": 900})):
        page = browser.new_page(viewport=viewport)
        page.goto(f"{server}/{path}?{LINK}" + ("&present=1" if present else ""), wait_until="domcontentloaded")
        first_chart(page)
        _settle(page)
        assert every_chart(page) >= 1
        time.sleep(1)
        assert page.evaluate(CHART_OVERLAPS) == [], (name, present, viewport["width"])
        if not present and viewport["width"] == 1440:
            assert page.evaluate(CLIPPED_TABLES) == [], f"{name}: a table is wider than the page at 1440 px"
            if name == "claims":  # the estimate's accuracy tables, drawn when their expander opens
                page.get_by_text("Accuracy of the estimate").click()
                page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stDataFrame\"]').length >= 7",
                                       timeout=90000)
                _settle(page)
                assert page.evaluate(CLIPPED_TABLES) == [], "claims: an accuracy table is wider than the page"
        page.close()


# Every key number whole and on screen; every "?" tooltip, shown by focusing its "?" (which scrolls it
# into view, often to the window's bottom edge), inside the page's main area (not under the sidebar, not
# past the window's edges: above the "?" at the bottom) and beside its "?", not over it.
NUMBERS_OFF = """() => { const W = document.documentElement.clientWidth;
    return [...document.querySelectorAll('.mla-metric-value, .mla-metric-label')]
      .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > W + 1).map(e => e.innerText); }"""
TOOLTIPS_OFF = """async () => { const main = document.querySelector('[data-testid="stMain"]').getBoundingClientRect();
    const W = document.documentElement.clientWidth, off = []; let n = 0;
    for (const h of document.querySelectorAll('.mla-help')) {
      // Measured once the focus's scroll has settled: a tooltip is judged where it stays, measured again
      // after 300 ms when the first look finds it off (a loaded machine can still be scrolling).
      const bad = () => { const t = h.querySelector('.mla-tip').getBoundingClientRect(), a = h.getBoundingClientRect();
        return [t, t.width === 0 || t.left < main.left - 1 || t.right > Math.min(main.right, W) + 1 || t.top < -1 ||
                   t.bottom > window.innerHeight + 1 || (t.top < a.bottom - 1 && t.bottom > a.top + 1)]; };
      h.focus(); await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
      let [t, isOff] = bad(); n += 1;
      if (isOff) { await new Promise(r => setTimeout(r, 300)); [t, isOff] = bad(); }
      if (isOff)
        off.push([h.closest('.mla-metric').dataset.label, Math.round(t.left), Math.round(t.right), Math.round(main.left), W]); }
    return {n, off}; }"""


@pytest.mark.parametrize("width", [420, 900])
@pytest.mark.parametrize("path, name", [("", "kv"), ("concurrency", "capacity"), ("serving-plan", "serving")])
def test_key_numbers_and_their_tooltips_stay_whole_on_a_narrow_window(server, browser, path, name, width):
    """420 px: a phone (sidebar closed, one number a line); 900 px: a laptop's half screen with the
    sidebar open, where a row of four wraps and a tooltip chosen by its place in the row would run off."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(f"{server}/{path}?{LINK}", wait_until="domcontentloaded")
    page.wait_for_selector(".mla-metric-value", timeout=90000)
    _settle(page)
    assert page.evaluate(NUMBERS_OFF) == [], f"{name} at {width} px: numbers cut or past the edge"
    tips = page.evaluate(TOOLTIPS_OFF)
    assert tips["n"] >= 5 and tips["off"] == [], f"{name} at {width} px: {tips}"
    page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_reference_marks_are_drawn_in_the_pages_ink(server, browser, scheme):
    """charts.INK (the memory-per-GPU mark on Capacity) is drawn in the page's text colour: near-black
    on the light theme, light on the dark one, where black would not show."""
    from ui.charts import INK

    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(f"{server}/concurrency?{LINK}", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    time.sleep(1)
    text, drawn = page.evaluate("""() => [getComputedStyle(document.querySelector('[data-testid="stMain"]')).color,
        [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => p._fullData)
          .filter(d => d.name === 'memory per GPU').map(d => d.marker.line.color)]""")
    assert len(drawn) == 1, drawn
    assert drawn[0].replace(" ", "") == text.replace(" ", ""), (scheme, drawn, text, INK)
    rgb = sum(map(int, text[text.index("(") + 1:text.index(")")].split(",")[:3]))
    assert (rgb < 200) if scheme == "light" else (rgb > 600), text  # dark ink on light, light ink on dark
    ctx.close()


def test_a_chart_goes_full_screen_from_its_modebar_and_back(server, browser):
    """The modebar's full-screen button: the plot fills the screen and is laid out at its size;
    leaving full screen gives it back the figure's own height and the column's width."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{server}/?{LINK}", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    time.sleep(1)
    plot = page.locator(".js-plotly-plot").first
    before = page.evaluate("() => { const p = document.querySelector('.js-plotly-plot'); "
                           "return [p._fullLayout.width, p._fullLayout.height]; }")
    plot.hover()
    plot.locator('[data-title="Full screen (Esc to leave)"]').click()
    page.wait_for_function("() => document.fullscreenElement === document.querySelector('.js-plotly-plot') && "
                           "document.fullscreenElement._fullLayout.height === window.innerHeight", timeout=10000)
    full = page.evaluate("() => [document.fullscreenElement._fullLayout.width, window.innerWidth]")
    assert full[0] == full[1] > before[0], (full, before)
    page.evaluate("() => document.exitFullscreen()")
    page.wait_for_function("() => !document.fullscreenElement", timeout=10000)
    time.sleep(1)
    after = page.evaluate("() => { const p = document.querySelector('.js-plotly-plot'); "
                          "return [p._fullLayout.width, p._fullLayout.height]; }")
    assert after == before, (after, before)
    page.close()


TIP_SHOWN = "(h) => h.querySelector('.mla-tip').getBoundingClientRect().width > 0"


def test_a_tooltip_shows_while_hovered_or_tabbed_to_and_escape_closes_it(server, browser):
    """A click on a "?" does not leave its tooltip stuck open over the next number (it shows on
    hover and on keyboard focus only); Escape closes the one shown (WCAG 1.4.13), and the next
    "?" hovered opens again."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{server}/concurrency?{LINK}", wait_until="domcontentloaded")
    page.wait_for_selector(".mla-help", timeout=90000)
    _settle(page)
    first, second = page.locator(".mla-help").nth(0), page.locator(".mla-help").nth(1)
    first.click()
    assert first.evaluate(TIP_SHOWN)  # hovered
    page.mouse.move(2, 2)
    assert not first.evaluate(TIP_SHOWN), "the clicked tooltip stayed open"
    first.hover()
    assert first.evaluate(TIP_SHOWN)
    page.keyboard.press("Escape")
    assert not first.evaluate(TIP_SHOWN), "Escape left the hovered tooltip open"
    second.hover()
    assert second.evaluate(TIP_SHOWN) and not first.evaluate(TIP_SHOWN)
    page.mouse.move(2, 2)
    first.focus()  # as Tab reaches it
    page.keyboard.press("Tab")
    assert second.evaluate("(h) => document.activeElement === h") and second.evaluate(TIP_SHOWN)
    page.keyboard.press("Escape")
    assert not second.evaluate(TIP_SHOWN), "Escape left the focused tooltip open"
    page.close()


def test_the_png_download_is_the_chart_at_twice_its_size(server, browser, tmp_path):
    """The modebar's PNG button (drawn in a system font, so that the legend laid out in the page
    is the legend drawn in the file): a PNG named after the chart, at twice the plot's size."""
    import struct

    page = browser.new_page(viewport={"width": 1440, "height": 900}, accept_downloads=True)
    page.goto(f"{server}/serving-plan?{LINK}", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    plot = page.locator(".js-plotly-plot").filter(has_text="steps by op class").first
    plot.scroll_into_view_if_needed()
    plot.hover()
    size = plot.evaluate("(p) => [p._fullLayout.width, p._fullLayout.height]")
    with page.expect_download(timeout=60000) as d:
        plot.locator('.modebar-btn[data-title="Download plot as a PNG"]').click()
    assert d.value.suggested_filename == "mla-explorer-serving-breakdown.png", d.value.suggested_filename
    data = open(d.value.path(), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (2 * size[0], 2 * (size[1] + 24)), (width, height, size)  # + a legend row
    assert plot.locator('.modebar-btn[data-title="Download plot as a png"]').count() == 0  # Plotly's own: replaced
    page.close()


def test_the_copy_link_button_copies_this_views_link(server, browser):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page = ctx.new_page()
    page.goto(f"{server}/concurrency?model=kimi-k2-instruct&context=65536", wait_until="domcontentloaded")
    _settle(page)
    button = page.locator("[data-mla-copy-link]")
    assert button.count() == 1
    button.click()
    page.wait_for_function("() => document.querySelector('[data-mla-copy-link]').textContent === 'Link copied'")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == page.url and "/concurrency?" in copied and "model=kimi-k2-instruct" in copied
    assert "context=65536" in copied
    ctx.close()


def test_the_serving_plans_csv_is_built_on_click_and_holds_every_point(server, browser):
    """The Serving plan's 'every point' CSV is a deferred download (built when clicked, not on each
    rerun): the file the browser receives is the core's plan, one row per point."""
    import csv
    import io

    from mla_core.presets import load_gpu
    from mla_core.serving import Workload, search

    page = browser.new_page(viewport={"width": 1440, "height": 900}, accept_downloads=True)
    page.goto(f"{server}/serving-plan?model=deepseek-v3&gpu=h200&num_gpus=16&gpus_per_node=8&input_len=4096"
              "&output_len=1024&ttft_ms=2000&tpot_ms=50&usd_per_gpu_hour=3", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    with page.expect_download(timeout=60000) as d:
        page.get_by_text("Download every point (CSV)").click()
    assert d.value.suggested_filename == "serving_plan_points.csv"
    rows = list(csv.DictReader(io.StringIO(open(d.value.path(), encoding="utf-8").read())))
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0)
    assert len(rows) == len(plan.points) > 1
    assert [(r["split"], int(r["batch"])) for r in rows] == [(p.split, p.batch) for p in plan.points]
    assert float(rows[0]["tokens_per_s_per_gpu"]) == plan.points[0].tokens_per_s_per_gpu
    page.close()


# Plotly's draws of each chart from now on (its plotly_afterplot events), and the plot elements as they are.
WATCH_PLOTS = """() => { window.__plots = [...document.querySelectorAll('.js-plotly-plot')];
  window.__draws = window.__plots.map(() => 0);
  window.__plots.forEach((p, i) => p.on('plotly_afterplot', () => { window.__draws[i]++; })); }"""
SAME_PLOTS = """() => { const now = [...document.querySelectorAll('.js-plotly-plot')];
  return now.length === window.__plots.length && now.every((p, i) => p === window.__plots[i]); }"""


def test_a_changed_chart_is_redrawn_in_place_once_in_the_themes_colours(server, browser):
    """ui.charts.show: a slider that changes the KV chart redraws that chart in its own plot
    element (no new element, one Plotly draw, where st.plotly_chart 1.67 makes a new plot and
    draws it twice), the drawn trace holds the core's new figure, and a chart nothing changed is
    not drawn again. Text follows the app's theme: light on the dark scheme."""
    # a window tall enough to hold the KV chart and the what-if sliders (a chart is drawn only near the window)
    ctx = browser.new_context(viewport={"width": 1440, "height": 1700}, color_scheme="dark")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/?model=deepseek-v3&kv_dtype=bf16&context=131072", wait_until="domcontentloaded")
    first_chart(page)
    _settle(page)
    time.sleep(1)
    page.evaluate(WATCH_PLOTS)
    layers = _slider(page, "Layers")
    layers.locator('input[type="range"]').focus()
    page.keyboard.press("ArrowLeft")  # 61 -> 60 layers
    _settle(page)
    time.sleep(1)
    assert layers.locator('input[type="range"]').get_attribute("aria-valuetext") == "60"
    assert page.evaluate(SAME_PLOTS), "a chart was replaced by a new plot element"
    titles = page.evaluate("() => window.__plots.map(p => p.layout.title.text)")
    draws = dict(zip(titles, page.evaluate("() => window.__draws")))
    kv_title = next(t for t in titles if "against context" in t)
    assert draws[kv_title] == 1, draws
    # The chart's marker at this context holds the core's exact bytes for 60 layers, no longer 61's.
    drawn = page.evaluate("""(t) => window.__plots.find(p => p.layout.title.text === t).data
        .find(d => d.mode === 'markers').customdata.map(c => c[2])""", kv_title)
    model = load_model("deepseek-v3")
    want = kv_report(what_if(model, num_hidden_layers=60), 131072, 1, "bf16")["kv_cache_bytes_per_sequence"]
    was = kv_report(model, 131072, 1, "bf16")["kv_cache_bytes_per_sequence"]
    assert f"{want:,}" in drawn and f"{was:,}" not in drawn, drawn
    # The page's text colour is light on the dark scheme, and the chart's title is drawn in it.
    text, fill = page.evaluate("""() => [getComputedStyle(document.querySelector('[data-testid="stMain"]')).color,
        document.querySelector('.js-plotly-plot .gtitle').style.fill]""")
    assert sum(map(int, text[text.index("(") + 1:text.index(")")].split(",")[:3])) > 600, text
    assert fill.replace(" ", "") == text.replace(" ", ""), (fill, text)
    # Grid and lines are the text colour, faint; the background is the page's (a PNG download reads).
    grid, paper, app_bg = page.evaluate("""() => [window.__plots[0]._fullLayout.xaxis.gridcolor,
        window.__plots[0]._fullLayout.paper_bgcolor,
        getComputedStyle(document.querySelector('[data-testid="stApp"]')).backgroundColor]""")
    rgb = text[text.index("(") + 1:text.index(")")].replace(" ", "")
    assert grid.replace(" ", "") == f"rgba({rgb},0.15)", (grid, text)
    assert paper.replace(" ", "") == app_bg.replace(" ", "").replace("rgb(", "rgba(").replace(")", ",1)") or \
        paper.replace(" ", "") == app_bg.replace(" ", ""), (paper, app_bg)
    # Nothing on the modebar sends the chart off the machine (plotly.js 4 offers Plotly Cloud by default).
    titles = page.evaluate("() => [...document.querySelectorAll('.modebar-btn')].map(b => b.dataset.title)")
    assert any("PNG" in (t or "") for t in titles), titles
    assert not any("Share" in (t or "") or "Cloud" in (t or "") or "Lasso" in (t or "") for t in titles), titles
    # The page narrows without the window (as when the sidebar closes): the chart follows its width.
    wide = page.evaluate("() => window.__plots[0]._fullLayout.width")
    page.evaluate("() => { document.querySelector('[data-testid=\"stMainBlockContainer\"]').style.maxWidth = '640px'; }")
    page.wait_for_function("() => window.__plots[0]._fullLayout.width <= 640", timeout=10000)
    assert wide > 800
    # Leaving the page and coming back: no error from a removed chart, and its plot is freed.
    for _ in range(2):
        page.locator('[data-testid="stSidebarNav"] a', has_text="Capacity").click()
        _settle(page)
        page.locator('[data-testid="stSidebarNav"] a', has_text="KV cache").click()
        _settle(page)
    time.sleep(1)
    assert not errors, errors
    assert page.evaluate("() => window.__plots.every(p => !p.isConnected && !p._fullLayout)")
    ctx.close()


# A chart's place in the page (its top, scrolled or not) and whether Plotly has drawn it.
CHART_STATE = """(c) => ({drawn: c.classList.contains('js-plotly-plot'), height: c.offsetHeight,
    top: c.getBoundingClientRect().top + document.querySelector('[data-testid="stMain"]').scrollTop,
    dots: c.data ? c.data.filter(d => d.mode === 'markers').flatMap(d => d.x) : null})"""
BELOW_TOP = """(e) => e.getBoundingClientRect().top + document.querySelector('[data-testid="stMain"]').scrollTop"""


def test_a_chart_below_the_window_waits_and_is_drawn_with_the_newest_figure_when_scrolled_to(server, browser):
    """ui.charts draws a chart only when it comes within IN_VIEW_MARGIN of the window (0 px: when the
    window shows it): Capacity's two charts, below the fold at 1440x900, are not drawn at load nor
    on a rerun that changes them (the sidebar's context, 128K -> 256K), while plotly.js is loaded
    at once; scrolled to, each is drawn with that rerun's figure (the memory chart's title at 256K,
    the requests chart's dots at 262,144 tokens), in the room kept for it (the caption below does
    not move)."""
    from ui.charts import IN_VIEW_MARGIN

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/concurrency?{LINK}", wait_until="domcontentloaded")
    page.wait_for_selector("div.mla-chart", timeout=90000, state="attached")
    _settle(page)
    page.wait_for_function("() => !!window.Plotly", timeout=60000)  # loaded with the first chart, drawn or not
    memory, chart = page.locator("div.mla-chart").nth(0), page.locator("div.mla-chart").nth(1)
    caption = page.get_by_text("Dots: the chosen context")
    margin = int(IN_VIEW_MARGIN.split("px")[0])
    for c in (memory, chart):
        at_load = c.evaluate(CHART_STATE)
        assert at_load["top"] > 900 + margin and not at_load["drawn"], at_load
    assert chart.evaluate(CHART_STATE)["height"] == 460  # the figure's height, kept while it waits

    page.locator('[data-testid="stSidebar"] [data-testid="stSlider"]').first.locator('input[type="range"]').focus()
    page.keyboard.press("ArrowRight")
    _settle(page)
    assert "context=262144" in page.url
    waiting = chart.evaluate(CHART_STATE)
    assert not waiting["drawn"] and waiting["height"] == 460, waiting
    assert not memory.evaluate(CHART_STATE)["drawn"]
    caption_top = caption.evaluate(BELOW_TOP)

    memory.scroll_into_view_if_needed()
    memory.and_(page.locator(".js-plotly-plot")).wait_for(timeout=30000)
    assert "requests of 256K tokens" in memory.inner_text()  # the rerun's figure, not the load's
    chart.scroll_into_view_if_needed()
    chart.and_(page.locator(".js-plotly-plot")).wait_for(timeout=30000)
    time.sleep(0.5)
    drawn = chart.evaluate(CHART_STATE)
    assert drawn["dots"] and set(drawn["dots"]) == {262144}, drawn  # the rerun's figure, not the load's
    assert drawn["height"] == 460 and drawn["top"] == waiting["top"], (drawn, waiting)
    assert caption.evaluate(BELOW_TOP) == caption_top
    assert not errors, errors
    page.close()
