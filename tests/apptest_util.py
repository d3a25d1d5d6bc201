"""Helpers for AppTest-based tests of the Streamlit app."""
import os
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from ui import metrics as ui_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "app.py")
PAGES = ["pages/kv_cache.py", "pages/capacity.py", "pages/roofline.py", "pages/benchmark.py", "pages/claims.py",
         "pages/serving.py"]
TIMEOUT = 60  # the first run imports plotly and pandas; AppTest's own default is 3 s


def app(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({k: str(v) for k, v in query.items()})
    return at


def run_page(page: str, **query) -> AppTest:
    """Open `page` with a deep link's query. The query is read on the session's first run (on the
    default page: before a first run AppTest cannot resolve st.navigation's URL paths), then
    the page is switched to, as a link to that page does."""
    at = app(**query).run()
    if page != PAGES[0]:
        at.switch_page(page).run()
    return at


def no_exceptions(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


class _MetricReader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[SimpleNamespace] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-label" in a:
            self.found.append(SimpleNamespace(label=a["data-label"], value=a["data-value"], help=a.get("data-help"),
                                              delta=a.get("data-delta")))


def metrics(at: AppTest) -> list[SimpleNamespace]:
    """Every key number the page drew (ui.metrics rows, in page order), each with .label, .value,
    .help and .delta as the reader sees them (the attributes ui.metrics.Metric.html writes)."""
    out = []
    for h in at.get("html"):
        if ui_metrics.ROW_CLASS in h.proto.body:
            reader = _MetricReader()
            reader.feed(h.proto.body)
            out += reader.found
    return out


def metric(at: AppTest, label_start: str) -> str:
    found = metrics(at)
    for m in found:
        if m.label.startswith(label_start):
            return m.value
    raise AssertionError(f"no metric starting {label_start!r}: {[m.label for m in found]}")


def plain(text: str) -> str:
    """Text as a reader sees it: Markdown backslash-escapes and zero-width spaces removed."""
    import re

    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def shown(elements) -> str:
    """All the texts of a list of AppTest elements (errors, warnings, ...) as read on screen."""
    return " ".join(plain(e.value) for e in elements)


def own_model(at: AppTest) -> AppTest:
    """Open the KV page's upload / paste / by-hand controls (a toggle)."""
    at.toggle(key="_own_model").set_value(True).run()
    return at


@pytest.fixture
def isolated_store(tmp_path, monkeypatch):
    """A history of this test's own (MLA_EXPLORER_HISTORY in tmp_path), its path yielded; after the
    test, every benchmark or profile run it left in the page's registry is cancelled and taken,
    so a failed test does not leave a run behind. A module imports it and asks for it in its own
    autouse fixture."""
    from mla_core.store import history
    from ui import bench_runs

    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv(history.ENV_VAR, str(path))
    history.pop_notices()
    yield str(path)
    reg = bench_runs.registry()
    for owner in list(reg._jobs):
        reg.cancel(owner)
        reg.join(owner, 10)
        reg.take(owner)


def chart_specs(at: AppTest) -> list[str]:
    """The JSON of every chart the page drew (ui.charts.show's element), in page order: what the
    browser hands to Plotly."""
    import json

    from ui.charts import CHART_ELEMENT

    return [json.loads(e.proto.json)["figure"] for e in at.get("bidi_component")
            if e.proto.component_name == CHART_ELEMENT]
