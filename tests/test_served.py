"""What the served speed work must not change, and the smaller served-app items:
- every chart of every page reaches the browser as the same JSON whether Plotly validates the
  figure (the test suite) or not (the app: ui/charts.py builds dicts for speed);
- the figure builder follows Plotly's update rules for the spellings the pages use;
- the listening socket is set up with TCP_NODELAY (ui/serve.py);
- an oversized paste is told its size; the upload limit is one unit (1 MiB) everywhere;
- the Benchmark page marks disturbed and damaged runs, leaves them out of comparisons unless
  asked, shows stored notices and interrupted runs to every session, and says "another session"
  only when another session's run exists;
- a section drawn only while open (ui.layout.lazy_expander) stays open while the user works in
  it, and the Roofline page's disturbed mark survives a malformed disturbed block.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import tomllib

import pytest

from apptest_util import chart_specs, PAGES, ROOT, app, no_exceptions, plain, run_page
from mla_core.store import history
from mla_core.store.schema import MAX_RESULT_BYTES
from mla_core.config import MAX_CONFIG_BYTES
from ui import bench_runs, charts

SAMPLE_PATH = os.path.join(ROOT, "data", "samples", "cpu-2core-quick.json")


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(path))
    history.pop_notices()
    history._pending_notices.clear()
    yield path


OPEN_WHEN_ASKED = ("_roofline_step_open", "_roofline_tp_open", "_capacity_across_open")


def _specs(monkeypatch, validate: bool) -> dict:
    monkeypatch.setenv(charts.VALIDATE_ENV, "1" if validate else "0")
    out = {}
    for page in PAGES:
        for query in ({"model": "deepseek-v3", "context": 65536}, {"model": "kimi-k2", "present": "true"}):
            at = run_page(page, **query)
            for key in OPEN_WHEN_ASKED:  # the sections drawn only while open, opened: their charts too
                at.session_state[key] = True
            at.run()
            no_exceptions(at)
            out[f"{page} {query}"] = [json.loads(el) for el in chart_specs(at)]
    return out


def test_every_chart_reaches_the_browser_the_same_with_or_without_validation(monkeypatch):
    fast = _specs(monkeypatch, validate=False)
    checked = _specs(monkeypatch, validate=True)
    assert sum(len(v) for v in fast.values()) >= 20  # every page draws charts
    assert fast == checked


def test_the_figure_builder_follows_plotlys_update_rules():
    import plotly.graph_objects as pgo

    fig = charts.plot.Figure()
    fig.add_trace(charts.plot.Scatter(x=[1, 2], y=[3, 4], marker_color="#000", line_shape="hv", name=None))
    fig.add_trace(charts.plot.Bar(x=["a"], y=[1], marker={"color": "#111"}))
    fig.update_layout(title="plain text", barmode="group", legend={"x": 0})
    fig.update_layout(legend={"y": 1}, xaxis_title="x (unit)")
    fig.update_xaxes(type="category")
    ours = fig.to_dict()
    theirs = pgo.Figure(ours).to_dict()  # validated by Plotly: the same properties survive
    theirs["layout"].pop("template")
    assert ours == theirs
    assert ours["layout"]["legend"] == {"x": 0, "y": 1} and ours["layout"]["title"] == {"text": "plain text"}
    assert ours["data"][0]["marker"] == {"color": "#000"} and "name" not in ours["data"][0]


def test_a_log_axis_labels_its_minor_ticks_in_full_or_not_at_all():
    """Never a bare digit ("2" for 20): over two decades or more only the powers of ten are
    labelled (fewer labels to lay out on every redraw); a narrower span labels its 2s and 5s in full."""
    def axes(ys):
        fig = charts.plot.Figure()
        fig.add_trace(charts.plot.Scatter(x=[1, 2, 3], y=ys))
        charts.style(fig, title="t", x_title="x", y_title="y", log_x=True, log_y=True)
        return fig.layout["xaxis"]["minorloglabels"], fig.layout["yaxis"]["minorloglabels"]

    assert axes([1.0, 50.0, 99.0]) == ("complete", "complete")  # x: 3 / 1, y: 99 / 1, both under 100
    assert axes([1.0, 50.0, 100.0]) == ("complete", "none")  # y spans two decades
    assert charts.WIDE_LOG_DECADES == 2.0


def test_the_server_socket_sends_without_nagle_delay():
    from ui import serve

    def bind(address, port, backlog):
        s = socket.socket(socket.AF_INET)  # as Streamlit binds it: protocol 0
        s.bind((address, port))
        s.listen(backlog)
        return s

    sock = serve._no_delay_listener(bind)("127.0.0.1", 0, 8)
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio then sets TCP_NODELAY on each connection
        client = socket.create_connection(sock.getsockname())
        conn, _ = sock.accept()
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        conn.close()
        client.close()
    finally:
        sock.close()


def test_an_oversized_paste_is_told_its_size():
    at = app(model="llama-3.1-8b").run()
    at.toggle(key="_own_model").set_value(True).run()  # the KV page's upload / paste / by-hand controls
    text = '{"num_hidden_layers": 2, "pad": "' + "x" * (1536 * 1024) + '"}'  # 1.5 MiB
    at.text_area(key="_paste").input(text).run()
    at.button[[b.label for b in at.button].index("Use the pasted config")].click().run()
    no_exceptions(at)
    errors = plain(" ".join(e.value for e in at.error))
    assert f"the text is {len(text):,} bytes; a config.json may be at most 1,048,576 bytes (1 MiB)" in errors
    assert at.session_state["model"] == "llama-3.1-8b" and at.text_area(key="_paste").value == ""


def test_the_upload_limit_is_one_unit_everywhere():
    with open(os.path.join(ROOT, ".streamlit", "config.toml"), "rb") as f:
        mb = tomllib.load(f)["server"]["maxUploadSize"]
    assert mb * 2**20 == MAX_RESULT_BYTES == MAX_CONFIG_BYTES == 1 << 20  # Streamlit's "MB" is 2^20 bytes
    kv = run_page(PAGES[0])
    bench = run_page("pages/benchmark.py")
    labels = [w.proto.label for at in (kv, bench) for w in at.get("file_uploader")]
    assert labels and all("1 MiB" in label and "1 MB" not in label for label in labels)


def _sample() -> dict:
    with open(SAMPLE_PATH, encoding="utf-8") as f:
        return json.load(f)


def test_disturbed_and_damaged_runs_are_marked_and_left_out_of_comparisons(store):
    quiet = history.save_run(_sample(), label="quiet")
    busy = _sample()
    busy["disturbed"] = {"disturbed": True, "reasons": ["other processes kept 1.00 of the 2 CPUs busy during the "
                                                         "run (threshold 0.25)"]}
    noisy = history.save_run(busy, label="busy")
    broken = history.save_run(_sample(), label="broken")
    conn = sqlite3.connect(store)
    conn.execute("UPDATE runs SET json = replace(json, '\"median_s\":', '\"median_s\": ') WHERE id = ?", (broken,))
    conn.commit()
    conn.close()
    at = run_page("pages/benchmark.py")
    no_exceptions(at)
    options = at.multiselect(key="_bench_selected").options
    assert any(o.startswith(f"#{noisy} ") and o.endswith("[disturbed]") for o in options)
    assert any(o.startswith(f"#{broken} ") and o.endswith("[damaged]") for o in options)
    assert not any(o.startswith(f"#{quiet} ") and o.endswith("]") for o in options)
    table = at.dataframe[-1].value
    row = table[table["id"] == noisy].iloc[0]
    assert row["disturbed"].startswith("yes: other processes kept 1.00") and row["damaged"] == ""
    assert "sha256" in table[table["id"] == broken].iloc[0]["damaged"]
    compare = at.multiselect(key="_bench_compare")
    assert not any(f"#{noisy} " in o or f"#{broken} " in o for o in compare.options)
    at.toggle(key="_bench_cmp_disturbed").set_value(True).run()
    assert any(f"#{noisy} " in o for o in at.multiselect(key="_bench_compare").options)
    at.selectbox(key="_bench_show").set_value(f"run:{noisy}").run()
    no_exceptions(at)
    assert any(plain(w.value).startswith("This run was disturbed: other processes kept") for w in at.warning)
    titles = [json.loads(c)["layout"]["title"]["text"] for c in chart_specs(at)]
    assert titles and all(t.endswith("[disturbed]") for t in titles)


def test_stored_notices_and_interrupted_runs_reach_every_session_until_acknowledged(store):
    history.save_run(_sample())
    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO notices (created, kind, text) VALUES ('2026-01-01', 'moved-aside', 'history store X "
                 "was unreadable (file is not a database); moved it to X.corrupt-1 and started a new one')")
    conn.execute("INSERT INTO starts (started_at, pid, host, source, what) VALUES ('2026-01-01T00:00:00Z', 999999999, "
                 f"'{socket.gethostname()}', 'app', 'cpu quick benchmark, 8 kernels')")
    conn.commit()
    conn.close()
    sessions = [run_page("pages/benchmark.py") for _ in range(3)]
    for at in sessions:
        texts = plain(" ".join(w.value for w in at.warning))
        assert "moved it to X.corrupt-1" in texts and "never finished: its process stopped during the run" in texts
    first = sessions[0]
    for _ in range(2):
        next(b for b in first.button if b.label == "Understood").click()
        first.run()
    assert history.notices() == [] and history.interrupted_runs() == []
    later = run_page("pages/benchmark.py")
    assert not any("corrupt" in plain(w.value) or "never finished" in plain(w.value) for w in later.warning)


def test_a_session_alone_is_not_told_of_another_sessions_run(monkeypatch):
    brun = pytest.importorskip("mla_core.bench.run")
    started, release = threading.Event(), threading.Event()

    def slow_start(config, progress=None, cancel=None, *, wait=False, source="api"):
        with brun._LOCK:  # holds the lock while it sizes the run, before its first progress call
            started.set()
            release.wait(20)
            progress(8, 8, "done")
            return _sample()

    monkeypatch.setattr(brun, "run_benchmark", slow_start)
    at = run_page("pages/benchmark.py")
    at.button(key="_bench_setup_button").click().run()
    at.button(key="_bench_run").click().run()
    try:
        assert started.wait(20)
        at.run()
        infos = plain(" ".join(i.value for i in at.info))
        assert "Your benchmark is starting" in infos and "another session" not in infos
    finally:
        release.set()
        owner = at.session_state["_bench_owner"]
        bench_runs.registry().join(owner, 20)
        bench_runs.registry().take(owner)


def _has(at, kind: str, key: str) -> bool:
    return any(getattr(w, "key", None) == key for w in at.get(kind))


def test_a_section_drawn_only_while_open_stays_open_while_the_user_works_in_it():
    # Opened by the link (configuration 2 set), then configuration 2 turned off inside it: it stays open.
    at = run_page("pages/capacity.py", cmp2_model="llama-3.1-405b", cmp2_gpu="h200")
    no_exceptions(at)
    assert _has(at, "selectbox", "cmp2_model")
    at.selectbox(key="cmp2_model").set_value("").run()
    no_exceptions(at)
    assert _has(at, "selectbox", "cmp2_model")
    at.number_input(key="context").set_value(65536).run()  # an unrelated change keeps it open too
    assert _has(at, "selectbox", "cmp2_model")
    # KV comparison settings opened by the link, then set back to the default inside.
    at = run_page("pages/kv_cache.py", gqa_groups="4")
    assert _has(at, "selectbox", "gqa_groups")
    at.selectbox(key="gqa_groups").set_value(0).run()
    at.number_input(key="context").set_value(65536).run()
    assert _has(at, "selectbox", "gqa_groups")
    # A refused link value is reset by the page; the section opened for it does not close on the next rerun.
    at = run_page("pages/kv_cache.py", gqa_groups="5")
    at.number_input(key="context").set_value(65536).run()
    no_exceptions(at)
    assert _has(at, "selectbox", "gqa_groups")
    # The claims' details, opened, stay open when a filter changes what they list.
    at = run_page("pages/claims.py")
    at.session_state["_claims_details_open"] = True
    at.run()
    details = [e for e in at.expander if "differing claims in detail" in e.label]
    assert details and details[0].markdown
    at.multiselect(key="claims_topic").set_value(["arithmetic intensity"]).run()
    details = [e for e in at.expander if "differing claims in detail" in e.label]
    assert details and details[0].markdown
    assert "#### " in details[0].markdown[0].value


def test_a_malformed_disturbed_block_gives_no_exception_on_the_roofline():
    from test_app_roofline import _fake_result

    for reasons in ({"x": 1}, 5, "abc", [None, 3, "fine"]):
        at = run_page("pages/kv_cache.py")
        result = _fake_result(name="NVIDIA H200")
        result["disturbed"] = {"disturbed": True, "reasons": reasons}
        at.session_state["bench_result"] = result
        at.switch_page("pages/roofline.py").run()
        no_exceptions(at)
        assert any("disturbed while it ran" in w.value for w in at.warning)
