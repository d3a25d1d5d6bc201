"""ui.metrics: a row of key numbers as one st.html element, read back as a user reads it."""
import re
from html import escape

import pytest

from apptest_util import metrics, no_exceptions, run_page
from mla_core.kv import kv_report
from mla_core.presets import load_model
from mla_core.units import format_bytes
from ui.metrics import CSS, ROW_CLASS, Metric, metric_row_html

HOSTILE = '<img src=x onerror="alert(1)"> & \'quoted\' <script>alert(2)</script>'


class _Html:
    """What AppTest gives for an st.html element (its proto's body)."""

    def __init__(self, body):
        self.proto = type("P", (), {"body": body})()


class _Page:
    def __init__(self, *bodies):
        self._bodies = bodies

    def get(self, kind):
        assert kind == "html"
        return [_Html(b) for b in self._bodies]


def test_text_is_escaped_and_reads_back_exactly():
    m = Metric(HOSTILE, "1.5 <GiB>", help=HOSTILE + " help", delta="bound > 2 ms")
    body = metric_row_html([m, None], [2, 1])
    # No tag of the hostile text survives: every < of it is an entity.
    assert "<img" not in body and "<script" not in body and "&lt;img" in body
    (read,) = metrics(_Page(body))
    assert (read.label, read.value, read.help, read.delta) == (HOSTILE, "1.5 <GiB>", HOSTILE + " help", "bound > 2 ms")
    # The label, value and note are drawn once each; the help is the "?"'s tooltip, not drawn text.
    assert body.count('class="mla-metric-value"') == 1 and body.count('class="mla-metric-delta"') == 1
    assert body.count('class="mla-help"') == 1
    # The tooltip is the help, escaped, hidden from screen readers (the "?" is labelled with it).
    tip = re.search(r'<span class="mla-tip" aria-hidden="true">(.*?)</span>', body).group(1)
    assert tip == escape(HOSTILE + " help") and f'aria-label="{tip}"' in body
    # Widths are the flex-grow of each slot, the empty slot included (st.columns' spec).
    assert re.findall(r"flex: ([\d.]+) 1 0", body) == ["2", "1"]


def test_a_metric_without_help_or_note_draws_neither():
    body = metric_row_html([Metric("Batch (sequences)", "1,024")])
    assert 'class="mla-help"' not in body and 'class="mla-metric-delta"' not in body
    (read,) = metrics(_Page(body))
    assert (read.label, read.value, read.help, read.delta) == ("Batch (sequences)", "1,024", None, None)


def test_tooltips_in_the_rows_right_half_open_leftwards():
    """A rightward tooltip on the last numbers of a row would run off the page."""
    body = metric_row_html([Metric(f"m{i}", "1", help="h") for i in range(4)])
    cells = re.findall(r'<div class="(mla-metric[^"]*)" style', body)
    assert cells == ["mla-metric", "mla-metric", "mla-metric mla-tip-left", "mla-metric mla-tip-left"]
    # By width, not by count: a wide first number keeps its tooltip rightward, the rest open leftwards.
    wide = metric_row_html([Metric("best", "1", help="h"), Metric("a", "2", help="h"), Metric("b", "3", help="h")],
                           [2, 1, 1])
    assert re.findall(r'<div class="(mla-metric[^"]*)" style', wide) == ["mla-metric", "mla-metric mla-tip-left",
                                                                         "mla-metric mla-tip-left"]


def test_widths_must_match_the_metrics():
    with pytest.raises(ValueError, match="3 widths for 2 metrics"):
        metric_row_html([Metric("a", "1"), Metric("b", "2")], [1, 1, 2])


def test_the_kv_page_draws_the_cores_bytes_in_rows_with_exact_bytes_in_the_help():
    at = run_page("pages/kv_cache.py", model="deepseek-v3", context="32768")
    shown = {m.label: m for m in metrics(at)}
    r = kv_report(load_model("deepseek-v3"), 32768)
    per_token = shown["KV bytes per token"]
    assert per_token.value == format_bytes(r["kv_bytes_per_token"]) == "68.6 KiB"  # 70,272 B: 61 x 576 x 2
    assert per_token.help.startswith("70,272 B: ")
    assert shown["Per sequence"].value == format_bytes(r["kv_cache_bytes_per_sequence"])
    # The four numbers are one element each row, not a metric each.
    assert not at.metric and sum("mla-metrics" in h.proto.body for h in at.get("html")) >= 1


def test_the_rows_css_is_drawn_once_a_rerun_and_in_no_row():
    """ui.metrics.stylesheet: app.py draws the rows' CSS once (style-only st.html, Streamlit's event
    container), so a rerun that changes a row puts no new <style> in the page (benchmarks/browser.py)."""
    at = run_page("pages/capacity.py", model="deepseek-v3", context="32768")
    bodies = [h.proto.body for h in at.get("html")]
    rows = [b for b in bodies if f'class="{ROW_CLASS}' in b]
    assert len(rows) >= 4 and not any("<style" in b for b in rows)
    assert bodies.count(CSS) == 1
    # It sits in the event container: no room taken on the page, in the sidebar or the main area.
    assert all(CSS not in h.proto.body for h in at.main.get("html")) and \
        all(CSS not in h.proto.body for h in at.sidebar.get("html"))
    # A rerun with other numbers (the sidebar's context) draws it once again, not once a row.
    before = metrics(at)
    next(n for n in at.number_input if n.label == "Context, tokens per sequence").set_value(131072).run()
    no_exceptions(at)
    bodies = [h.proto.body for h in at.get("html")]
    assert metrics(at) != before and bodies.count(CSS) == 1
    assert not any("<style" in b for b in bodies if f'class="{ROW_CLASS}' in b)
