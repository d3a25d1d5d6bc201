"""7. Served speed: each page's rerun through the real server, as a browser drives it.

The app is started as `make app` starts it (`python -m ui.serve`), and the trivial app
(benchmarks/trivial_app.py: one slider, one number box, one metric, one Plotly chart) is served
the same way (the same launcher and .streamlit/config.toml). A client speaks Streamlit's own
websocket protocol to both (`/_stcore/stream`, protobuf `BackMsg` up, `ForwardMsg` down, as the
frontend does; no rendering, so the figures are the server's; benchmarks/browser.py times what a
user sees): it opens a page, then changes the sidebar's context (and moves each slider the page
has; a widget drawn inside a fragment reruns that fragment alone, as the browser asks) and
times each rerun from sending the `rerun_script` BackMsg to the `script_finished` ForwardMsg.
One session alone, then 20 sessions changing at once. Reported: p50 / p95 per page, each page's
p50 as a ratio of the trivial app's measured in the same run, and the 20 sessions' p50 against
the trivial app's under the same 20 sessions (goal, issue 20: at most 5x). The same trivial app
under plain `streamlit run` is measured too (`stock_...`): Streamlit's own listener leaves
Nagle's algorithm on, which adds ~40 ms of delayed-ACK wait to each rerun (ui/serve.py turns it
off for the explorer and our trivial app alike). The explorer's shell (app.py with the page body
left out: its sidebar, state and navigation) is measured the same way, as the floor under every
page (`served_rerun_shell_vs_trivial`, and each page's `vs_shell`). Widget states are sent as
the browser sends them (a select_slider's formatted options as `string_array_value`); a rerun
that ends in an exception stops the benchmark, since it would time an error page. Last, 10
benchmark runs are started from the Benchmark page one after another (Set up, Run, wait until
saved), and the server's resident memory is read after each (goal: under 400 MiB after 10).

    .venv/bin/python benchmarks/served.py [--tiny] [--rounds N] [--port P] [--out FILE]

--port P serves the app on P and the trivial app on P+1 (default: free ports).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from common import ROOT, dump, result

sys.path.insert(0, os.path.join(ROOT, "tests"))
from browser_util import free_port  # noqa: E402

PAGES = {"kv_cache": "/", "capacity": "/concurrency", "roofline": "/decode-roofline", "serving_plan": "/serving-plan",
         "benchmark": "/measure", "published_figures": "/published-figures"}
QUERY = "model=deepseek-v3"
CONTEXT_LABEL = "Context, tokens per sequence"
CONTEXTS = (32768, 65536)  # alternated, so that every rerun is a real change
CONCURRENT = 20
CONCURRENT_GOAL = 5.0  # a page's p50 with CONCURRENT sessions changing at once / the trivial app's, same run
TRIVIAL = os.path.join("benchmarks", "trivial_app.py")


def _pct(xs, q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


# --- serving ---------------------------------------------------------------------------------------
class Server:
    """A Streamlit server on 127.0.0.1:`port`: the explorer (`python -m ui.serve`, script None),
    `script` through the same launcher (ui.serve.serve), or with `stock` through plain
    `streamlit run`."""

    def __init__(self, port: int, script: str | None, env: dict, log: str, stock: bool = False,
                 declared_pages: bool = False):
        if script is None:
            cmd = [sys.executable, "-m", "ui.serve"]
        elif stock:
            cmd = [sys.executable, "-m", "streamlit", "run", script]
        else:
            declare = ("from streamlit.runtime.pages_manager import PagesManager; "
                       "PagesManager.uses_pages_directory = False; ") if declared_pages else ""
            cmd = [sys.executable, "-c",
                   declare + "import sys; from ui.serve import serve; serve(sys.argv[1], sys.argv[2:])", script]
        cmd += ["--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
                "--browser.gatherUsageStats", "false"]
        self.port, self.log = port, log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                    return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("server did not start: " + open(log).read()[-1500:]) from None
                time.sleep(0.3)

    def rss_mib(self) -> float:
        for line in open(f"/proc/{self.proc.pid}/status", encoding="utf-8"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# --- the client: Streamlit's websocket protocol ----------------------------------------------------
class Session:
    """One browser tab's worth of protocol: connect, rerun with widget states, read until the
    script finishes. Widgets are found by (element type, label) in the deltas the server sends."""

    def __init__(self, port: int, path: str, query: str = ""):
        from websockets.sync.client import connect

        self._cm = connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], max_size=None,
                           open_timeout=60, compression=None)
        self.ws = self._cm.__enter__()
        # As browsers do: without TCP_NODELAY a frame written in two parts waits ~40 ms for the
        # server's delayed ACK (Nagle), and every rerun would measure that instead of the server.
        self.ws.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.page_name = path.strip("/")
        self.query = query
        self.page_hash = ""
        self.widgets: dict[tuple[str, str], object] = {}
        self.fragment_of: dict[str, str] = {}  # widget id -> the fragment (ui.layout.section) that drew it
        self.errors: list[str] = []

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def rerun(self, states: list | None = None, timeout_s: float = 120) -> float:
        """Send a rerun with `states` (WidgetState protos); seconds until script_finished. A change
        to a widget drawn inside a fragment reruns that fragment alone, as the browser asks."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_name = self.page_name
        cs.page_script_hash = self.page_hash
        for s in states or []:
            cs.widget_states.widgets.append(s)
        fragments = {self.fragment_of.get(s.id, "") for s in states or []}
        if len(fragments) == 1 and "" not in fragments:
            cs.fragment_id = fragments.pop()
        t0 = time.perf_counter()
        self.ws.send(msg.SerializeToString())
        deadline = t0 + timeout_s
        while True:
            fm = ForwardMsg.FromString(self.ws.recv(timeout=max(0.1, deadline - time.perf_counter())))
            kind = fm.WhichOneof("type")
            if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                el = fm.delta.new_element
                etype = el.WhichOneof("type")
                if etype == "exception":
                    self.errors.append(f"{el.exception.type}: {el.exception.message[:200]}")
                inner = getattr(el, etype) if etype else None
                if inner is not None and hasattr(inner, "id") and hasattr(inner, "label") and inner.id:
                    self.widgets[(etype, inner.label)] = inner
                    self.fragment_of[inner.id] = fm.delta.fragment_id
            elif kind == "new_session" and fm.new_session.page_script_hash:
                self.page_hash = fm.new_session.page_script_hash
            elif kind == "navigation" and fm.navigation.page_script_hash:
                self.page_hash = fm.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = fm.page_info_changed.query_string
            elif kind == "script_finished":
                if fm.script_finished in (0, 3):  # FINISHED_SUCCESSFULLY, FINISHED_FRAGMENT_RUN_SUCCESSFULLY
                    return time.perf_counter() - t0
                if fm.script_finished == 1:
                    raise RuntimeError("the script did not compile")
                # FINISHED_EARLY_FOR_RERUN: the server reruns at once (st.rerun); keep reading

    def number(self, label: str, value):
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        w = self.widgets[("number_input", label)]
        s = WidgetState(id=w.id)
        if w.data_type == 0:  # INT
            s.int_value = int(value)
        else:
            s.double_value = float(value)
        return s

    def sliders(self) -> list:
        return [w for (kind, _), w in self.widgets.items() if kind == "slider"]

    @staticmethod
    def slider_state(w, step: int):
        """A WidgetState moving slider `w` to another of its values (step 0, 1, 2, ...)."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        s = WidgetState(id=w.id)
        if w.options:  # select_slider: the browser sends the formatted option(s), as string_array_value
            n = len(w.options)
            s.string_array_value.data.extend([w.options[((step % max(1, n - 1)) + 1) % n]] * max(1, len(w.default)))
            return s
        lo, hi = float(w.min), float(w.max)
        span = hi - lo
        frac = (0.3, 0.6)[step % 2]
        v = lo + frac * span
        if w.step:
            v = lo + round((v - lo) / w.step) * w.step
        if w.data_type in (0,):  # INT
            v = float(round(v))
        s.double_array_value.data.extend([v] * max(1, len(w.default)))
        return s


def _changes(sess: Session, i: int) -> tuple[str, list]:
    """The i-th change a user makes on this page: the context, or one of the page's sliders."""
    sliders = sess.sliders()
    kinds = ["context"] + [f"slider:{w.label[:40]}" for w in sliders]
    kind = kinds[i % len(kinds)]
    if kind == "context":
        return kind, [sess.number(CONTEXT_LABEL, CONTEXTS[(i // len(kinds)) % 2])]
    w = sliders[i % len(kinds) - 1]
    return kind, [sess.slider_state(w, i // len(kinds))]


def measure_page(port: int, path: str, rounds: int, concurrent: int) -> dict:
    """One session's reruns (rounds changes), then `concurrent` sessions changing at once."""
    one = Session(port, path, QUERY)
    try:
        one.rerun()  # the page as it opens
        one.rerun([one.number(CONTEXT_LABEL, CONTEXTS[1])])  # warm: first change fills the caches
        times, by_kind = [], {}
        for i in range(rounds):
            kind, states = _changes(one, i)
            t = one.rerun(states)
            times.append(t)
            by_kind.setdefault(kind, []).append(t)
        errors = list(one.errors)
    finally:
        one.close()
    sessions = [Session(port, path, QUERY) for _ in range(concurrent)]
    conc: list[float] = []
    try:
        for s in sessions:
            s.rerun()
        barrier = threading.Barrier(concurrent)
        lock = threading.Lock()
        failures: list[BaseException] = []

        def worker(s: Session, n: int) -> None:
            try:
                for i in range(n):
                    kind, states = _changes(s, i)
                    barrier.wait(timeout=300)
                    t = s.rerun(states)
                    with lock:
                        conc.append(t)
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)
                barrier.abort()

        n = max(2, rounds // 2)
        threads = [threading.Thread(target=worker, args=(s, n)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise RuntimeError(f"a concurrent session failed: {failures[0]!r}")
        errors += [e for s in sessions for e in s.errors]
    finally:
        for s in sessions:
            s.close()
    if errors:  # a rerun that ended in an exception measured an error page, not the page
        raise RuntimeError(f"{path}: {len(errors)} rerun(s) raised in the app, e.g. {errors[0]} "
                           "(the server's log has the traceback)")
    return {"one": times, "by_kind": by_kind, "concurrent": conc, "errors": errors}


def _drain(sess: Session, seconds: float) -> None:
    """Read what the server pushes (the run panel's fragment reruns) for `seconds`."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            fm = ForwardMsg.FromString(sess.ws.recv(timeout=left))
        except TimeoutError:
            return
        if fm.WhichOneof("type") == "delta" and fm.delta.WhichOneof("type") == "new_element":
            el = fm.delta.new_element
            etype = el.WhichOneof("type")
            inner = getattr(el, etype) if etype else None
            if inner is not None and hasattr(inner, "id") and hasattr(inner, "label") and inner.id:
                sess.widgets[(etype, inner.label)] = inner
                sess.fragment_of[inner.id] = fm.delta.fragment_id


def benchmark_runs_rss(server: Server, history_path: str, runs: int, tiny: bool) -> dict:
    """Start `runs` benchmark runs one after another from the Benchmark page, as a user clicks
    (Set up, then Run, waiting for each to be saved); the server's RSS after each."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    from mla_core.store import history

    def saved() -> int:
        return len(history.list_runs(path=history_path)) if os.path.exists(history_path) else 0

    sess = Session(server.port, "/measure", QUERY)
    rss, seconds = [], []
    try:
        sess.rerun()
        sess.rerun([WidgetState(id=sess.widgets[("button", "Set up a run on this machine")].id, trigger_value=True)])
        settings = []
        if tiny:
            settings = [sess.number("Bandwidth buffer (MiB)", 16), sess.number("Context T (tokens per sequence)", 256)]
            sess.rerun(settings)
        for i in range(runs):
            before, t0 = saved(), time.monotonic()
            run = sess.widgets[("button", "Run the benchmark")]
            sess.rerun([WidgetState(id=run.id, trigger_value=True)])
            while saved() == before:
                if time.monotonic() - t0 > 600:
                    raise RuntimeError(f"benchmark run {i + 1} did not finish within 10 minutes")
                _drain(sess, 1.0)
            seconds.append(time.monotonic() - t0)
            _drain(sess, 1.5)  # the page takes the finished run
            sess.rerun()
            rss.append(round(server.rss_mib(), 1))
    finally:
        sess.close()
    return {"rss_MiB": rss, "run_s": [round(x, 1) for x in seconds], "saved": saved()}


SHELL = os.path.join(ROOT, ".served_shell_app.py")  # written for the run, removed after it (.gitignore)


def _write_shell() -> None:
    """The explorer's shell: app.py as it is (page config, state, sidebar, st.navigation, the
    URL sync) with the page body left out. What every page pays before its own content."""
    text = open(os.path.join(ROOT, "app.py"), encoding="utf-8").read()
    if text.count("\npage.run()\n") != 1:
        raise RuntimeError("app.py no longer calls page.run() once on a line of its own: update the shell")
    with open(SHELL, "w", encoding="utf-8") as f:
        f.write(text.replace("\npage.run()\n", "\npass  # benchmarks/served.py: the shell, no page body\n"))


def run(tiny: bool = False, rounds: int | None = None, port: int | None = None, bench_runs: int | None = None) -> list[dict]:
    rounds = rounds or (3 if tiny else 24)
    concurrent = 2 if tiny else CONCURRENT
    pages = {"kv_cache": "/", "capacity": "/concurrency"} if tiny else PAGES
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, MLA_EXPLORER_HISTORY=os.path.join(tmp, "history.sqlite3"))
    app_port = port or free_port()
    trivial_port = (port + 1) if port else free_port()
    out: list[dict] = []
    trivial = Server(trivial_port, TRIVIAL, env, os.path.join(tmp, "trivial.log"))
    try:
        base = measure_page(trivial_port, "/", rounds, concurrent)
    finally:
        trivial.stop()
    # Stock `streamlit run` of the same trivial app (no TCP_NODELAY: ~40 ms of delayed-ACK wait per
    # rerun): the floor the issue measured against, reported beside ours.
    stock = Server(trivial_port, TRIVIAL, env, os.path.join(tmp, "stock.log"), stock=True)
    try:
        stock_one = measure_page(trivial_port, "/", rounds, 1 if tiny else concurrent)
    finally:
        stock.stop()
    s50 = _pct(stock_one["one"], 50)
    b50, b95 = _pct(base["one"], 50), _pct(base["one"], 95)
    c50 = _pct(base["concurrent"], 50)
    out.append(result("served_rerun_trivial_app_ms", b50 * 1e3, "ms", p95_ms=round(b95 * 1e3, 1),
                      concurrent_p50_ms=round(c50 * 1e3, 1),
                      concurrent_p95_ms=round(_pct(base["concurrent"], 95) * 1e3, 1),
                      sessions=concurrent, reruns=len(base["one"]),
                      stock_streamlit_run_p50_ms=round(s50 * 1e3, 1),
                      stock_concurrent_p50_ms=round(_pct(stock_one["concurrent"], 50) * 1e3, 1)))
    # The explorer's shell served the same way: the floor of every page of the explorer.
    _write_shell()
    try:
        shell_srv = Server(trivial_port, SHELL, env, os.path.join(tmp, "shell.log"), declared_pages=True)
        try:
            shell = measure_page(trivial_port, "/", rounds, concurrent)
        finally:
            shell_srv.stop()
    finally:
        os.remove(SHELL)
    h50 = _pct(shell["one"], 50)
    out.append(result("served_rerun_shell_vs_trivial", h50 / b50, "x", p50_ms=round(h50 * 1e3, 1),
                      p95_ms=round(_pct(shell["one"], 95) * 1e3, 1),
                      concurrent_p50_ms=round(_pct(shell["concurrent"], 50) * 1e3, 1),
                      what="app.py with the page body left out: page config, state, sidebar, navigation, URL"))
    app = Server(app_port, None, env, os.path.join(tmp, "app.log"))
    try:
        for name, path in pages.items():
            m = measure_page(app_port, path, rounds, concurrent)
            p50, p95 = _pct(m["one"], 50), _pct(m["one"], 95)
            cp50, cp95 = _pct(m["concurrent"], 50), _pct(m["concurrent"], 95)
            kinds = {k: round(statistics.median(v) * 1e3, 1) for k, v in m["by_kind"].items()}
            out.append(result(f"served_rerun_{name}_vs_trivial", p50 / b50, "x", p50_ms=round(p50 * 1e3, 1),
                              p95_ms=round(p95 * 1e3, 1), p95_vs_trivial=round(p95 / b95, 2),
                              vs_stock_trivial=round(p50 / s50, 2), vs_shell=round(p50 / h50, 2),
                              median_ms_by_change=kinds, errors=m["errors"][:3]))
            out.append(result(f"served_rerun_{name}_{concurrent}_sessions_p50_s", cp50, "s",
                              goal=f"<= {CONCURRENT_GOAL:g}x the trivial app's", met=cp50 / c50 <= CONCURRENT_GOAL,
                              p95_s=round(cp95, 3), vs_trivial=round(cp50 / c50, 2), reruns=len(m["concurrent"])))
        out.append(result("served_app_rss_after_pages_MiB", app.rss_mib(), "MiB", goal="< 400",
                          met=app.rss_mib() < 400))
        n = bench_runs if bench_runs is not None else (1 if tiny else 10)
        if n:
            b = benchmark_runs_rss(app, env["MLA_EXPLORER_HISTORY"], n, tiny)
            out.append(result(f"served_app_rss_after_{n}_benchmark_runs_MiB", b["rss_MiB"][-1], "MiB", goal="< 400",
                              met=b["rss_MiB"][-1] < 400 and b["saved"] == n, rss_after_each_MiB=b["rss_MiB"],
                              run_s=b["run_s"], runs_saved=b["saved"],
                              settings="16 MiB buffers, T 256" if tiny else "the page's quick CPU defaults"))
    finally:
        app.stop()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--port", type=int, help="the app's port; the trivial app gets PORT+1 (default: free ports)")
    ap.add_argument("--bench-runs", type=int, help="benchmark runs from the page before the RSS reading "
                                                   "(default 10; --tiny: 1)")
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.tiny, a.rounds, a.port, a.bench_runs), a.out)
