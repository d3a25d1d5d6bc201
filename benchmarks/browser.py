"""9. What a user waits for: a slider or a number box, in a real browser, until the page is redrawn.

Debian's chromium (Playwright, `executable_path`, the flags of tests/browser_util.py) opens the
explorer's KV, Capacity, Roofline and Serving plan pages (served as `make app` serves them:
`python -m ui.serve`) and, in another tab of the same browser, the trivial app
(benchmarks/trivial_app.py: one slider, one number box, one metric, one Plotly chart) served the
same way. Every slider and number box a page shows (the sidebar's included; the Serving plan's
"More settings", drawn only while open, opened in a tab of its own) is used as a user
uses it: a slider's thumb dragged and let go (timed from the mouse-up), a number typed into a
box and Enter pressed (timed from the Enter). The time stops at the frame after the last change
to the page that the rerun causes: the last message from the server and the last DOM mutation
(the new number, the redrawn chart, the elements Streamlit retires), once nothing has changed
for QUIET_S. Plotly's hover layer, tooltips, Streamlit's header (the running-man icon) and what a
canvas holds inside it (fallback content the browser never draws: the tables' accessibility copy,
rebuilt up to 0.3 s after the table has painted; the canvas's own size and style still count) do
not count. Each round measures the trivial app's slider and number box before each page's controls,
so the two are side by side in time; each control's p50 and p95 are reported as ratios of the
trivial app's control of the same kind (slider to slider, number box to number box), with
`server_p50_ms`, the p50 to the rerun's last message from the server (its script run and the
websocket): the rest of `p50_ms` is the browser drawing what came; and `chart_draws_p50`, the
charts Plotly drew for the rerun (its plotly_afterplot events). Streamlit 1.67's st.plotly_chart
draws a changed chart twice: its element id hashes the figure, so a new figure is a new React
element (a fresh Plotly plot), whose theme effect then sets the figure again (a second full draw);
the trivial app's one chart costs two draws. The explorer's charts (ui/charts.py's element, keyed
by the chart) are redrawn in place by Plotly.react: one draw per changed chart, none for the rest,
and none for a chart out of the window (ui.charts.IN_VIEW_MARGIN: it is drawn when scrolled to, and
its figure then is not timed; the benchmark's window is VIEWPORT, scrolled as each control needs).
What that costs a user who scrolls is timed apart (`scrolled_to`): Capacity's memory chart, below
the window, scrolled to after a rerun that changed it, from the scroll to its drawn figure.
Goal (issue 20): p50 <= 2.5x and p95 <= 4x on every control.

    .venv/bin/python benchmarks/browser.py [--rounds N] [--pages kv_cache,capacity] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from common import ROOT, dump, machine, result

sys.path.insert(0, os.path.join(ROOT, "tests"))
from browser_util import CHROMIUM, LAUNCH_ARGS, free_port  # noqa: E402

import served  # noqa: E402

PAGES = {"kv_cache": "/", "capacity": "/concurrency", "roofline": "/decode-roofline", "serving_plan": "/serving-plan",
         "serving_plan_more": "/serving-plan"}
# Controls in a section drawn only while open (ui.layout.lazy_expander), shut when the page opens: the
# section is opened as a user opens it, and its controls are timed in a tab of their own.
OPENED = {"serving_plan_more": "More settings: "}
QUERY = "model=deepseek-v3"
VIEWPORT = {"width": 1440, "height": 900}
P50_GOAL, P95_GOAL = 2.5, 4.0
QUIET_S = 0.6  # nothing changed on the page for this long: the rerun is drawn
TIMEOUT_S = 30.0
# Number boxes whose doubled value would say nothing new (0 = off), or refuse: the two values used.
NUMBER_VALUES = {
    "GPU memory, GiB (0 = the preset's)": (80.0, 0.0),
    "Reserve per GPU, GiB": (4.0, 0.0),
    "Prefix-cache hit rate": (0.5, 0.0),
    "Acceptance rate (a)": (0.7, 0.0),
    "Speculative tokens a step (k)": (2, 0),
    "Your price of one GPU hour, $ (0: none; no price is built in)": (2.5, 0.0),
    "GPU memory utilization": (0.8, 0.9),
    "MLA d_c (0 = model's / 4 d_h)": (256, 0),
    "MLA d_r (0 = model's / d_h/2)": (32, 0),
}

# Installed before the app's own scripts: counts the server's websocket messages and stamps the
# last change to the page, from the mouse-up or Enter that starts a measurement.
PROBE = r"""
(() => {
  const M = window.__mla = {armed: false, t0: 0, msgs: 0, lastMsg: 0, lastMut: 0, lastFrame: 0};
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', () => {
        M.msgs++;
        if (M.t0) { M.lastMsg = performance.now(); if (!M.firstMsg) M.firstMsg = M.lastMsg; }
      });
    }
  };
  const IGNORE = '[data-testid="stHeader"], [data-testid="stToolbar"], [data-testid="stStatusWidget"], ' +
                 '[data-testid="stDecoration"], .hoverlayer, [role="tooltip"], [data-baseweb="tooltip"]';
  // A canvas's children are its fallback content, never drawn where canvas works (HTML): Streamlit's
  // table (glide-data-grid) rebuilds an accessibility table there after it has painted.
  const counts = (r) => { const e = r.target.nodeType === 1 ? r.target : r.target.parentElement;
                          if (!e || e.closest(IGNORE)) return false;
                          const inCanvas = e.closest('canvas');
                          return !inCanvas || (r.type === 'attributes' && e === inCanvas); };
  const observer = new MutationObserver((records) => {
    if (!M.t0 || !records.some(counts)) return;
    M.lastMut = performance.now();
    requestAnimationFrame(() => { M.lastFrame = performance.now(); });
  });
  const watch = () => observer.observe(document, {subtree: true, childList: true, attributes: true,
                                                  characterData: true});
  watch();
  // Plotly's own events, through the emit it sets on each chart's div: every finished draw of a
  // chart (plotly_afterplot) counts: st.plotly_chart draws a changed chart twice (a new chart for the
  // new figure, then again when its theme effect runs), ui/charts.py's element once.
  M.draws = 0;
  Object.defineProperty(HTMLElement.prototype, 'emit', {configurable: true, get() { return undefined; },
    set(fn) { Object.defineProperty(this, 'emit', {configurable: true, writable: true, value: function (name, ...a) {
      if (name === 'plotly_afterplot' && M.t0) { M.draws++; M.lastDraw = performance.now(); }
      return fn.call(this, name, ...a); }}); }});
  const start = () => { if (M.armed && !M.t0) M.t0 = performance.now(); };
  window.addEventListener('pointerup', start, true);
  window.addEventListener('mouseup', start, true);
  window.addEventListener('keydown', (e) => { if (e.key === 'Enter') start(); }, true);
})();
"""
ARM = "() => { const M = window.__mla; Object.assign(M, {armed: true, t0: 0, firstMsg: 0, lastMsg: 0, lastMut: 0, " \
      "lastFrame: 0, msgs0: M.msgs, draws: 0}); }"
STATE = "() => { const M = window.__mla; return {now: performance.now(), t0: M.t0, msgs: M.msgs - M.msgs0, " \
        "firstMsg: M.firstMsg, lastMsg: M.lastMsg, lastMut: M.lastMut, lastFrame: M.lastFrame, draws: M.draws}; }"
# What the user reads: every metric's value and every chart's drawn traces (outside the timing).
SIGNATURE = """() => ({
  numbers: [...document.querySelectorAll('[data-testid="stMetricValue"], .mla-metric-value')].map(e => e.innerText).join('|'),
  charts: [...document.querySelectorAll('.js-plotly-plot')].map(c =>
      [...c.querySelectorAll('.scatterlayer path, .barlayer path, .gtitle, .xtick text, .ytick text')]
        .map(p => p.getAttribute('d') || p.textContent).join(';')).join('|')})"""


def _pct(xs, q: int) -> float:
    return served._pct(xs, q) if xs else float("nan")


class Control:
    """One slider or number box of a page, found again by its kind and label on every use."""

    def __init__(self, page, kind: str, label: str, nth: int):
        self.page, self.kind, self.label, self.nth = page, kind, label, nth
        self.times: list[float] = []
        self.server: list[float] = []  # to the server's last message of the rerun: its script and the wire
        self.draws: list[int] = []  # charts drawn by the rerun (Plotly's afterplot events)
        self.changed = {"numbers": 0, "charts": 0}
        self.values: tuple | None = None
        self.failures: list[str] = []
        self.used = 0  # uses so far: the next one moves to the other of its two values

    @property
    def name(self) -> str:
        return f"{self.kind}: {self.label}" + (f" #{self.nth + 1}" if self.nth else "")

    def locator(self):
        testid = "stSlider" if self.kind == "slider" else "stNumberInput"
        return self.page.locator(f'[data-testid="{testid}"]').filter(
            has=self.page.get_by_text(self.label, exact=True)).nth(self.nth)

    def act(self, i: int) -> None:
        """The i-th use: drag the thumb to 30% of the track if it sits right of the middle, else to 70%
        (a move that always changes the value, whatever a number box set); or type the other of the
        box's two values and press Enter."""
        el = self.locator()
        el.scroll_into_view_if_needed(timeout=10000)
        if self.kind == "slider":
            thumb = el.locator('input[type="range"]').locator("xpath=../..")
            track = thumb.locator("xpath=..").bounding_box()
            box = thumb.bounding_box()
            y = box["y"] + box["height"] / 2
            self.page.mouse.move(box["x"] + box["width"] / 2, y)
            self.page.mouse.down()
            left = box["x"] + box["width"] / 2 < track["x"] + track["width"] / 2
            self.page.mouse.move(track["x"] + track["width"] * (0.7 if left else 0.3), y, steps=6)
            self.page.evaluate(ARM)
            self.page.mouse.up()
        else:
            box = el.locator("input")
            if self.values is None:
                self.values = _number_values(self.label, box)
            box.fill(str(self.values[i % 2]))
            self.page.evaluate(ARM)
            box.press("Enter")


def _number_values(label: str, box) -> tuple:
    if label in NUMBER_VALUES:
        return NUMBER_VALUES[label]
    text, hi = box.input_value(), box.get_attribute("max")
    is_int = "." not in text
    v = int(text) if is_int else float(text)
    hi = float(hi) if hi else float("inf")
    other = v * 2 if v and v * 2 <= hi else (v / 2 if v else 1)
    return (int(other) if is_int else round(other, 4), v)


def _settle(page) -> None:
    """The page after a load or a measurement: no rerun in flight, nothing changing."""
    page.wait_for_selector('[data-testid="stMain"]', timeout=90000)
    deadline, last, stable = time.time() + 60, None, 0
    while time.time() < deadline and stable < 3:
        text = page.inner_text('[data-testid="stMain"]')
        running = page.locator('[data-testid="stStatusWidget"]').count()
        stable = stable + 1 if (text == last and not running) else 0
        last = text
        time.sleep(0.25)


def measure(control: Control) -> None:
    """One use of `control`, timed in the page's own clock (performance.now)."""
    page, i = control.page, control.used
    control.used += 1
    before = page.evaluate(SIGNATURE)
    try:
        control.act(i)
    except Exception as e:  # noqa: BLE001 - a control that cannot be used is reported, not timed
        control.failures.append(f"{type(e).__name__}: {str(e)[:160]}")
        page.evaluate("() => { window.__mla.armed = false; }")
        return
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        time.sleep(0.05)
        s = page.evaluate(STATE)
        last = max(s["lastMsg"], s["lastMut"])
        if s["t0"] and s["msgs"] and last and s["now"] - last > QUIET_S * 1000:
            break
        if time.monotonic() > deadline:
            control.failures.append("no rerun drawn within the timeout" if not s["msgs"] else "never quiet")
            page.evaluate("() => { window.__mla.armed = false; }")
            return
    page.evaluate("() => { window.__mla.armed = false; }")
    control.times.append((max(s["lastFrame"], s["lastMsg"], s["lastMut"]) - s["t0"]) / 1000)
    control.server.append((s["lastMsg"] - s["t0"]) / 1000)
    control.draws.append(s["draws"])
    after = page.evaluate(SIGNATURE)
    for k in control.changed:
        control.changed[k] += before[k] != after[k]


def discover(page, within: str | None = None) -> list[Control]:
    """Every visible slider and number box of the page, in the order drawn (the sidebar's first);
    `within`: only those of the expander whose label starts so, opened first."""
    found, seen = [], {}
    root = page
    if within:
        root = page.locator('[data-testid="stExpander"]').filter(has=page.locator("summary", has_text=within)).first
        root.locator("summary").click()
        page.wait_for_timeout(300)
        _settle(page)
    for kind, testid in (("slider", "stSlider"), ("number", "stNumberInput")):
        for el in root.locator(f'[data-testid="{testid}"]').all():
            if not el.is_visible() or el.locator("input").first.is_disabled():
                continue
            label = el.locator('[data-testid="stWidgetLabel"]').first.inner_text().strip()
            nth = seen.get((kind, label), 0)
            seen[(kind, label)] = nth + 1
            found.append(Control(page, kind, label, nth))
    return found


def _open(browser, url: str):
    page = browser.new_page(viewport=VIEWPORT)
    page.add_init_script(PROBE)
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector(".js-plotly-plot, div.mla-chart", timeout=90000, state="attached")
    _settle(page)
    return page


# From the scroll that brings a chart into the window to the end of its draw (its plotly_afterplot).
SCROLL_TO = """(c) => new Promise((ok) => {
  const M = window.__mla;
  Object.assign(M, {armed: true, t0: performance.now(), draws: 0, lastDraw: 0});
  const t0 = M.t0;
  c.scrollIntoView({block: 'center'});
  const poll = () => {
    if (M.draws) ok(M.lastDraw - t0); else if (performance.now() - t0 > 10000) ok(null); else setTimeout(poll, 5);
  };
  poll();
})"""


def scrolled_to(page, uses: int) -> dict:
    """What drawing only the charts in the window costs a user who scrolls: Capacity's memory chart,
    below the window (VIEWPORT), after a rerun that changed it (the sidebar's context slider, one
    step by the keyboard), is scrolled to; timed from the scroll to its drawn figure. Until then
    the user sees the chart's previous figure, or its empty room if it was never drawn."""
    slider = page.locator('[data-testid="stSidebar"] [data-testid="stSlider"]').first.locator('input[type="range"]')
    chart = page.locator("div.mla-chart").first
    times, waited, lost = [], 0, 0
    for i in range(uses):
        page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
        _settle(page)
        slider.focus()
        page.keyboard.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        _settle(page)
        if not chart.evaluate("(c) => !!c.mlaNext"):  # drawn already (it was in or near the window)
            times.append(0.0)
            continue
        waited += 1
        ms = chart.evaluate(SCROLL_TO)
        page.evaluate("() => { window.__mla.armed = false; window.__mla.t0 = 0; }")
        if ms is None:  # not drawn within 10 s of the scroll
            lost += 1
        else:
            times.append(ms / 1000)
    failures = [f"not drawn within 10 s of the scroll: {lost} of {waited}"] if lost else []
    if not times:
        return result("capacity chart scrolled to after a rerun", float("nan"), "ms p50", failures=failures)
    return result("capacity chart scrolled to after a rerun", round(_pct(times, 50) * 1e3), "ms p50",
                  p95_ms=round(_pct(times, 95) * 1e3), uses=len(times), waiting=f"{waited}/{uses}", failures=failures,
                  note="from the scroll that brings Capacity's memory chart into the window to its drawn figure, "
                       "after a rerun that changed it; 0 where the chart was drawn before the scroll")


def _summary(c: Control, base: dict[str, Control], prefix: str) -> dict:
    if not c.times:
        return result(f"{prefix}{c.name}", float("nan"), "x", goal=f"p50 <= {P50_GOAL}, p95 <= {P95_GOAL}", met=False,
                      failures=c.failures[:3])
    b = base[c.kind]
    p50, p95 = _pct(c.times, 50), _pct(c.times, 95)
    b50, b95 = _pct(b.times, 50), _pct(b.times, 95)
    r50, r95 = p50 / b50, p95 / b95
    return result(f"{prefix}{c.name}", round(r50, 2), "x p50", goal=f"p50 <= {P50_GOAL}, p95 <= {P95_GOAL}",
                  met=r50 <= P50_GOAL and r95 <= P95_GOAL and not c.failures, p50_ms=round(p50 * 1e3),
                  p95_ms=round(p95 * 1e3), p95_vs_trivial=round(r95, 2), uses=len(c.times),
                  server_p50_ms=round(_pct(c.server, 50) * 1e3), chart_draws_p50=statistics.median(c.draws),
                  number_changed=f"{c.changed['numbers']}/{len(c.times)}",
                  chart_changed=f"{c.changed['charts']}/{len(c.times)}", failures=c.failures[:2])


def run(rounds: int = 12, pages: dict | None = None, tiny: bool = False) -> list[dict]:
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:  # reported, as the browser test skips: the other sections still run
        return [result("browser_benchmark_skipped", 0, "", note="no chromium on PATH (apt-get install chromium)")]
    pages = pages or PAGES
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=os.path.join(tmp, "history.sqlite3"))
    env.pop("MLA_VALIDATE_FIGURES", None)  # as a user's server runs
    app_port, trivial_port = free_port(), free_port()
    app = served.Server(app_port, None, env, os.path.join(tmp, "app.log"))
    trivial = served.Server(trivial_port, served.TRIVIAL, env, os.path.join(tmp, "trivial.log"))
    out: list[dict] = []
    scroll = None
    try:
        with sync_playwright() as p:
            # One browser a page, each with its one window in front: a tab left behind another can be
            # throttled or frozen by chromium while the others are measured.
            browsers = []

            def launch():
                browsers.append(p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS))
                return browsers[-1]

            try:
                tpage = _open(launch(), f"http://127.0.0.1:{trivial_port}/")
                base = {c.kind: c for c in discover(tpage)}
                tabs = {name: _open(launch(), f"http://127.0.0.1:{app_port}{path}?{QUERY}")
                        for name, path in pages.items()}
                controls = {name: discover(pg, OPENED.get(name)) for name, pg in tabs.items()}
                if tiny:
                    controls = {n: cs[:2] for n, cs in controls.items()}
                print(f"controls: {', '.join(f'{n} {len(cs)}' for n, cs in controls.items())}", file=sys.stderr,
                      flush=True)
                for i in range(rounds):
                    print(f"round {i + 1} of {rounds}", file=sys.stderr, flush=True)
                    for name, cs in controls.items():
                        for c in base.values():
                            measure(c)
                            _settle(tpage)
                        for c in cs:
                            measure(c)
                            _settle(tabs[name])
                if "capacity" in tabs:
                    scroll = scrolled_to(tabs["capacity"], rounds * 2)
            finally:
                for b in browsers:
                    b.close()
    finally:
        app.stop()
        trivial.stop()
    for kind, c in base.items():
        out.append(result(f"trivial_app {c.name}", _pct(c.times, 50) * 1e3, "ms p50",
                          p95_ms=round(_pct(c.times, 95) * 1e3), server_p50_ms=round(_pct(c.server, 50) * 1e3),
                          chart_draws_p50=statistics.median(c.draws) if c.draws else None,
                          uses=len(c.times), failures=c.failures[:2]))
        if not c.times:
            raise RuntimeError(f"the trivial app's {c.name} could not be timed: {c.failures[:2]}")
    for name, cs in controls.items():
        for c in cs:
            out.append(_summary(c, base, f"{name} "))
    if scroll is not None:
        out.append(scroll)
    load = os.getloadavg()
    out.append(result("load_average_after_run", round(load[0], 2), "", load_5_15=[round(x, 2) for x in load[1:]],
                      cores=os.cpu_count()))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--pages", help="comma-separated subset of " + ", ".join(PAGES))
    ap.add_argument("--tiny", action="store_true", help="2 controls a page, for a smoke test")
    ap.add_argument("--out")
    a = ap.parse_args()
    chosen = {k: PAGES[k] for k in a.pages.split(",")} if a.pages else None
    t0 = time.time()
    LOAD_BEFORE = [round(x, 2) for x in os.getloadavg()]
    res = run(a.rounds, chosen, a.tiny)
    dump({"machine": machine(), "wall_s": round(time.time() - t0), "load_before": LOAD_BEFORE, "results": res}, a.out)
