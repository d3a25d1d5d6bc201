"""A real browser (Debian's chromium through Playwright) against `streamlit run app.py`.

Opens every page of the navigation through a deep link, checks that no exception box shows,
that a Plotly chart is drawn and that the link's numbers are visible, and saves screenshots
(into pytest's temporary folder, or MLA_SCREENSHOT_DIR when set). Skipped when chromium is not
installed, unless MLA_REQUIRE_BROWSER=1 (set by .ci/run), which makes a missing browser fail.
"""
import os
import time

import pytest

from browser_util import CHROMIUM, LAUNCH_ARGS, app_server, settle as _settle
from mla_core.kv import kv_report
from mla_core.presets import load_model
from mla_core.units import format_bytes

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
    page.wait_for_selector(".js-plotly-plot", timeout=90000)  # a chart is drawn (a slow machine gets time)
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


CUT_METRICS = """() => [...document.querySelectorAll('[data-testid="stMetricValue"] p, [data-testid="stMetricLabel"] p')]
    .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right >
                 e.closest('[data-testid="stColumn"]').getBoundingClientRect().right + 1)
    .map(e => e.innerText)"""


@pytest.mark.parametrize("path", ["", "concurrency", "decode-roofline"])
def test_presentation_mode_in_both_themes(server, browser, shots, path):
    for scheme, size in (("light", (1600, 1000)), ("dark", (1280, 720))):
        ctx = browser.new_context(viewport={"width": size[0], "height": size[1]}, color_scheme=scheme)
        page = ctx.new_page()
        page.goto(f"{server}/{path}?{LINK}&present=1", wait_until="domcontentloaded")
        page.wait_for_selector('[data-testid="stMetricValue"] p', timeout=60000)
        _settle(page)
        page.screenshot(path=os.path.join(shots, f"presentation_{path or 'kv'}_{scheme}.png"), full_page=False)
        px = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('[data-testid=\"stMetricValue\"] p')).fontSize)")
        assert px >= 40, px  # projector-sized metrics
        assert page.evaluate(CUT_METRICS) == []  # and none cut short
        assert page.locator('[data-testid="stException"]').count() == 0
        ctx.close()
