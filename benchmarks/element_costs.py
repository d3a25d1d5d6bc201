"""8. What one Streamlit element costs a served rerun: the floor under every page.

Each kind of element the pages draw is put N times into an app of its own, beside one number box
and one metric, and served and driven as benchmarks/served.py does (the real server, Streamlit's
websocket protocol, TCP_NODELAY). A kind's cost per element is (its app's rerun p50 - the p50 of
the same app with no element of its own) / N. The tables are measured both ways the pages
could hand them over: a pandas DataFrame (which Streamlit converts to Arrow on every rerun) and a
pyarrow Table (ui.text.frame, which Streamlit sends as it is). The charts are measured both ways
too: a KV-sized figure built as ui.charts' plain dicts and drawn by its chart element (the pages'
way) and built with plotly.graph_objects for st.plotly_chart (`ui_charts_gain_over_plain_plotly_ms`:
what ui/charts.py saves a chart on the server; benchmarks/browser.py times the browser's side).

Rows of key numbers are measured both ways too, the server's side above and, with --browser, what
the user waits for in chromium (benchmarks/browser.py's probe and slider drag): ten rows of four
numbers as st.metric in st.columns (a horizontal block, four columns and four metrics a row, nine
nodes Streamlit's React tree re-renders on every rerun) against ten ui.metrics.metric_row elements
(one node a row), each app beside the same slider, against the slider alone
(`metric_row_gain_in_the_browser_ms`: what ui/metrics.py saves a row of four); and ten rows each
carrying its own copy of the rows' CSS, as they did before app.py drew it once a rerun
(`metric_row_stylesheet_once_gain_ms`: a new <style> in the page at every changed row restyles it).

    .venv/bin/python benchmarks/element_costs.py [--tiny] [--browser] [--rounds N] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from common import ROOT, dump, result

sys.path.insert(0, os.path.join(ROOT, "tests"))
from browser_util import free_port  # noqa: E402

import served  # noqa: E402

# kind -> (elements in its app, the loop body drawing element i; `x` is the context just typed)
KINDS = {
    "markdown": (30, 'st.markdown(f"line {i}: {x:,} tokens")'),
    "metric": (30, 'st.metric(f"metric {i}", f"{x * i:,} B", help="exact bytes")'),
    "number_input": (30, 'st.number_input(f"number {i}", 0, 10**6, step=1, key=f"n{i}")'),
    "selectbox": (30, 'st.selectbox(f"choice {i}", ["a", "b", "c", "d"], key=f"s{i}")'),
    "select_slider": (30, 'st.select_slider(f"stop {i}", [1, 2, 4, 8, 16, 32, 64, 128], key=f"ss{i}")'),
    "columns_row_of_4": (15, "st.columns(4)"),
    "st_metric_row_of_4_in_columns": (10, '[c.metric(f"metric {i}.{j}", f"{x * j:,} B", help="exact bytes") '
                                          'for j, c in enumerate(st.columns(4))]'),
    "ui_metrics_metric_row_of_4": (10, 'metric_row([Metric(f"metric {i}.{j}", f"{x * j:,} B", help="exact bytes") '
                                       'for j in range(4)])'),
    "dataframe_pandas_8_rows": (15, 'st.dataframe(pd.DataFrame(ROWS), hide_index=True)'),
    "dataframe_pyarrow_8_rows": (15, 'st.dataframe(frame(ROWS), hide_index=True)'),
    "plotly_chart_5_traces_60_points": (3, 'charts.show(figure(x), "c", key=f"c{i}")'),
    # The KV page's chart against context (6 lines of 128 points with their exact-bytes hover text), built
    # as ui.charts' plain dicts (the pages' way) and with plotly.graph_objects (a plain Plotly app's way).
    "plotly_chart_kv_sized_ui_charts_dicts": (3, 'charts.show(kv_figure(x), "c", key=f"c{i}")'),
    "plotly_chart_kv_sized_plain_plotly": (3, 'st.plotly_chart(kv_figure_plain(x), config=CONFIG, theme="streamlit", '
                                              'key=f"c{i}")'),
}
# ui.charts against plain Plotly: (the dict-built kind, the graph_objects kind) of the same figure.
CHARTS_PAIR = ("plotly_chart_kv_sized_ui_charts_dicts", "plotly_chart_kv_sized_plain_plotly")
TINY_KINDS = ("markdown", "selectbox", "dataframe_pyarrow_8_rows", *CHARTS_PAIR)

# In the browser: a slider (its drag is timed) and ROWS_IN_BROWSER rows of four numbers drawn each way.
ROWS_IN_BROWSER = 10
BROWSER_APP = '''import sys
sys.path.insert(0, {root!r})
import streamlit as st
from ui.metrics import CSS, Metric, metric_row, metric_row_html, stylesheet

x = st.slider("Scale", min_value=1, max_value=64, value=8, key="scale")
stylesheet()  # as app.py draws it
for i in range({n}):
    {body}
'''
BROWSER_KINDS = {"st_metric_in_columns": KINDS["st_metric_row_of_4_in_columns"][1],
                 "metric_row": KINDS["ui_metrics_metric_row_of_4"][1],
                 # The rows as they were before the stylesheet was drawn once a rerun: each row its own copy.
                 "metric_row_css_in_each_row": 'st.html(CSS + metric_row_html([Metric(f"metric {i}.{j}", f"{x * j:,} B", '
                                               'help="exact bytes") for j in range(4)]))'}

APP = '''import sys
sys.path.insert(0, {root!r})
import pandas as pd
import streamlit as st
from ui import charts
from ui.charts import plot
from ui.metrics import Metric, metric_row
from ui.text import frame

ROWS = [{{"variant": f"v{{j}}", "KV heads": j, "per token": f"{{j * 1.5:.2f}} KiB", "vs MHA": j / 7}} for j in range(8)]


def figure(x):
    fig = plot.Figure()
    for t in range(5):
        fig.add_trace(dict(type="scatter", x=list(range(1, 61)), y=[v * x * (t + 1) for v in range(1, 61)],
                           mode="lines", name=f"trace {{t}}"))
    return charts.style(fig, title="t", x_title="x", y_title="y", log_x=True, log_y=True)


CONFIG = {{"displaylogo": False}}
XS = [int(1024 * 2 ** (j / 12)) for j in range(128)]


def kv_traces(x):
    return [dict(name=f"variant {{t}}", x=XS, y=[v * (t + 1) * x / 2**30 for v in XS], mode="lines",
                 customdata=[[f"{{v * (t + 1) * x:,}} B", f"{{v:,}} tokens"] for v in XS],
                 hovertemplate="%{{customdata[1]}}<br>%{{customdata[0]}}<extra></extra>") for t in range(6)]


def kv_style(fig):
    return charts.style(fig, title="KV cache against context", x_title="context (tokens)", y_title="KV cache (GiB)",
                        log_x=True, log_y=True)


def kv_figure(x):
    fig = plot.Figure()
    for t in kv_traces(x):
        fig.add_trace(dict(type="scatter", **t))
    return kv_style(fig)


def kv_figure_plain(x):
    import plotly.graph_objects as pgo

    fig = pgo.Figure()
    for t in kv_traces(x):
        fig.add_trace(pgo.Scatter(**t))
    fig.update_layout(kv_style(plot.Figure()).layout)
    return fig


x = st.number_input("Context, tokens per sequence", min_value=1, value=32768, step=1024, key="context")
st.metric("Tokens", f"{{x:,}}")
for i in range({n}):
    {body}
'''


def _p50(port: int, rounds: int) -> float:
    m = served.measure_page(port, "/", rounds, 1)
    return served._pct(m["one"], 50)


def run(tiny: bool = False, rounds: int | None = None) -> list[dict]:
    rounds = rounds or (4 if tiny else 30)
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=os.path.join(tmp, "history.sqlite3"))
    out: list[dict] = []
    try:
        def serve_and_time(script: str, log: str) -> float:
            port = free_port()
            srv = served.Server(port, script, env, os.path.join(tmp, log))
            try:
                return _p50(port, rounds)
            finally:
                srv.stop()

        # The floor: the same app with no element of its own (one number box and one metric).
        path = os.path.join(tmp, "floor.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(APP.format(root=ROOT, n=0, body="pass"))
        base = serve_and_time(path, "floor.log")
        out.append(result("served_rerun_floor_app_ms", base * 1e3, "ms", reruns=rounds,
                          what="one number box and one metric"))
        for kind, (n, body) in KINDS.items():
            if tiny and kind not in TINY_KINDS:
                continue
            n = min(n, 5) if tiny else n
            path = os.path.join(tmp, f"{kind}.py")  # a folder of its own: no pages/ beside it
            with open(path, "w", encoding="utf-8") as f:
                f.write(APP.format(root=ROOT, n=n, body=body))
            t = serve_and_time(path, f"{kind}.log")
            out.append(result(f"served_cost_of_one_{kind}_ms", (t - base) / n * 1e3, "ms", elements=n,
                              app_p50_ms=round(t * 1e3, 1), floor_p50_ms=round(base * 1e3, 1)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    by = {r["name"]: r for r in out}
    ours, plain = (by.get(f"served_cost_of_one_{k}_ms") for k in CHARTS_PAIR)
    if ours and plain:
        out.append(result("ui_charts_gain_over_plain_plotly_ms", plain["value"] - ours["value"], "ms per chart",
                          ui_charts_ms=round(ours["value"], 2), plain_plotly_ms=round(plain["value"], 2),
                          ratio=round(plain["value"] / ours["value"], 2) if ours["value"] > 0 else None,
                          what="one KV-sized chart (6 lines x 128 points, hover text) a served rerun, built as "
                               "ui.charts dicts against plotly.graph_objects"))
    return out


def run_browser(rounds: int = 12) -> list[dict]:
    """Each BROWSER_KINDS app's slider drag in chromium (benchmarks/browser.py's measure), its p50
    less the bare slider's, per row of four; the bare and the two apps take turns every round."""
    from playwright.sync_api import sync_playwright

    import browser
    from browser_util import CHROMIUM, LAUNCH_ARGS

    if CHROMIUM is None:
        return [result("browser_costs_skipped", 0, "", note="no chromium on PATH (apt-get install chromium)")]
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=os.path.join(tmp, "history.sqlite3"))
    apps = {"bare": (0, "pass"), **{k: (ROWS_IN_BROWSER, body) for k, body in BROWSER_KINDS.items()}}
    servers, out = {}, []
    try:
        for name, (n, body) in apps.items():
            path = os.path.join(tmp, f"browser_{name}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(BROWSER_APP.format(root=ROOT, n=n, body=body))
            port = free_port()
            servers[name] = (served.Server(port, path, env, os.path.join(tmp, f"browser_{name}.log")), port)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            controls = {}
            for name, (_srv, port) in servers.items():
                page = b.new_page(viewport=browser.VIEWPORT)
                page.add_init_script(browser.PROBE)
                page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
                page.wait_for_selector('[data-testid="stSlider"]', timeout=90000)
                browser._settle(page)
                controls[name] = browser.Control(page, "slider", "Scale", 0)
            for _ in range(rounds):
                for name, c in controls.items():
                    c.page.bring_to_front()
                    browser.measure(c)
                    browser._settle(c.page)
            b.close()
    finally:
        for srv, _port in servers.values():
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    p50 = {name: served._pct(c.times, 50) * 1e3 for name, c in controls.items()}
    out.append(result("browser_slider_bare_app_ms", p50["bare"], "ms p50", uses=len(controls["bare"].times)))
    for name in BROWSER_KINDS:
        out.append(result(f"browser_cost_of_a_row_of_4_{name}_ms", (p50[name] - p50["bare"]) / ROWS_IN_BROWSER,
                          "ms per row", rows=ROWS_IN_BROWSER, app_p50_ms=round(p50[name]), bare_p50_ms=round(p50["bare"]),
                          failures=controls[name].failures[:2]))
    cols, ours, each = (p50[k] - p50["bare"] for k in BROWSER_KINDS)
    out.append(result("metric_row_gain_in_the_browser_ms", (cols - ours) / ROWS_IN_BROWSER, "ms per row of 4",
                      ratio=round(cols / ours, 2) if ours > 0 else None,
                      what=f"{ROWS_IN_BROWSER} rows of four numbers, st.metric in st.columns against "
                           "ui.metrics.metric_row, a slider drag to the redrawn page in chromium"))
    out.append(result("metric_row_stylesheet_once_gain_ms", (each - ours) / ROWS_IN_BROWSER, "ms per row of 4",
                      ratio=round(each / ours, 2) if ours > 0 else None,
                      what=f"{ROWS_IN_BROWSER} rows of four numbers, each row with its own copy of ui.metrics.CSS "
                           "against the stylesheet drawn once (ui.metrics.stylesheet), a slider drag to the "
                           "redrawn page in chromium"))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--browser", action="store_true", help="the rows of numbers in chromium, not the server's costs")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run_browser(a.rounds or (3 if a.tiny else 12)) if a.browser else run(a.tiny, a.rounds), a.out)
