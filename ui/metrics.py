"""A row of key numbers as one element: what st.metric in st.columns draws, at a fraction of the
browser's work.

Measured in chromium (`benchmarks/element_costs.py --browser`, benchmarks/element_costs_browser.json,
the 2-core machine of the README): a row of four st.metric in st.columns is nine Streamlit nodes
(a horizontal block, four columns, four metrics) that React re-renders and restyles on every rerun
that draws them, 4.0-4.7 ms of a slider's redraw a row; one st.html element of the same four
numbers is one node, 0.5-0.8 ms a row (5-8x less; the tooltips' anchor positioning is about 0.3 ms
of it).

Each number is a `Metric` (label, value, help, and a grey note under the value: a bound beside an
estimate); `metric_row` draws them side by side, wrapping on a narrow window. The label and value are
plain text (escaped here: a model's name from an uploaded config is shown as typed). The help is
the tooltip of the "?" after the label, as st.metric's, shown on hover or keyboard focus (not left
open by a click), closed by Escape (the sidebar's script, ui.layout.COPY_LINK_HTML). Numbers never
shrink below their width: a row wraps instead, and on a phone-sized window (640 px and less, where
st.columns stacks) they stand one a line. Tooltips are placed by CSS anchor positioning (Chromium
125+, Safari 26): below the "?", rightwards, else leftwards, else across the main area, above the
"?" near the window's bottom (in the window itself at 768 px and less, where the sidebar lies
over the page); never under the sidebar or past the window's edges (tests/test_browser.py at
420 and 900 px). A browser without it gets the tooltip below the "?",
leftwards in a row's right half. Tests read the numbers back with tests/apptest_util.metrics (the
data-* attributes of each number).

The rows' stylesheet (CSS) is drawn once a rerun by app.py (`stylesheet`), not in each row: a row
that carried it put a new <style> element in the page every time its numbers changed, and the
browser restyled the whole page for each. Measured in chromium on the 2-core machine of the
README: 0.9 ms a row on element_costs' small page (`benchmarks/element_costs.py --browser`,
`metric_row_stylesheet_once_gain_ms`), more on a full page (the cost grows with what is restyled):
Capacity's context slider 168 -> 156 ms and the Serving plan's GPU count 144 -> 126 ms p50 in
interleaved A/Bs (README, Performance).
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Sequence

import streamlit as st

ROW_CLASS = "mla-metrics"
CSS = """<style>
.mla-metrics { display: flex; flex-wrap: wrap; column-gap: 1rem; row-gap: 0.5rem; margin: 0; }
.mla-metrics.mla-stack { flex-direction: column; }
.mla-metric { min-width: min-content; }
.mla-metric-label { font-size: 0.875rem; line-height: 1.5; min-height: 1.5rem; }
.mla-metric-value { font-size: 2.25rem; line-height: 1.2; padding-bottom: 0.25rem; white-space: nowrap; }
/* A phone: one number a line, as st.columns stacks there; a value longer than the line wraps. */
@media (max-width: 640px) { .mla-metric { flex-basis: 100% !important; } .mla-metric-value { white-space: normal; } }
.mla-nowrap { white-space: nowrap; }
.mla-metric-delta { font-size: 1rem; opacity: 0.6; }
.mla-help { position: relative; display: inline-flex; align-items: center; justify-content: center;
  width: 1rem; height: 1rem; margin-left: 0.35rem; vertical-align: -0.15rem; border: 1.5px solid currentColor;
  border-radius: 50%; font-size: 0.7rem; font-weight: 600; opacity: 0.6; cursor: help;
  anchor-name: --mla-help; anchor-scope: --mla-help; }
.mla-help:hover, .mla-help:focus { opacity: 1; }
.mla-tip { display: none; }
.mla-help:hover .mla-tip, .mla-help:focus-visible .mla-tip { display: block; position: absolute; z-index: 1000;
  top: 1.4rem; left: -0.5rem; width: max-content; max-width: min(22rem, calc(100vw - 2rem)); padding: 0.5rem 0.75rem;
  border-radius: 0.5rem; font-size: 0.875rem; font-weight: 400; line-height: 1.4; white-space: normal;
  text-align: left; color: #fafafa; background: #262730; border: 1px solid rgba(250, 250, 250, 0.2);
  box-shadow: 0 2px 8px rgba(0, 0, 0, 0.35); }
.mla-tip-left .mla-help:hover .mla-tip, .mla-tip-left .mla-help:focus-visible .mla-tip { left: auto; right: -0.5rem; }
@supports (position-area: bottom) {
  [data-testid="stElementContainer"]:has(> [data-testid="stHtml"] > .mla-metrics), .mla-help { position: static; }
  .mla-help:hover .mla-tip, .mla-help:focus-visible .mla-tip, .mla-tip-left .mla-help:hover .mla-tip,
  .mla-tip-left .mla-help:focus-visible .mla-tip { position: absolute; position-anchor: --mla-help; inset: auto;
    position-area: bottom span-right; margin: 0.3rem 0 0 -0.5rem;
    position-try-fallbacks: --mla-tip-leftwards, --mla-tip-across, flip-block, --mla-tip-leftwards flip-block,
      --mla-tip-across flip-block; }
  .mla-tip-left .mla-help:hover .mla-tip, .mla-tip-left .mla-help:focus-visible .mla-tip {
    position-area: bottom span-left; margin: 0.3rem -0.5rem 0 0;
    position-try-fallbacks: --mla-tip-rightwards, --mla-tip-across, flip-block, --mla-tip-rightwards flip-block,
      --mla-tip-across flip-block; }
}
/* A phone-sized window (the sidebar lies over the page there): placed in the window, so that a tooltip
   near its bottom opens above the "?" (the page's scrolling area would let it run below the fold). */
@media (max-width: 768px) { @supports (position-area: bottom) {
  .mla-help:hover .mla-tip, .mla-help:focus-visible .mla-tip, .mla-tip-left .mla-help:hover .mla-tip,
  .mla-tip-left .mla-help:focus-visible .mla-tip { position: fixed; } } }
/* Escape closes a tooltip (the sidebar's script: ui.layout.COPY_LINK_HTML) until the pointer or focus moves on. */
[data-mla-tips-off] .mla-tip { display: none !important; }
@position-try --mla-tip-leftwards { position-area: bottom span-left; margin: 0.3rem -0.5rem 0 0; }
@position-try --mla-tip-rightwards { position-area: bottom span-right; margin: 0.3rem 0 0 -0.5rem; }
@position-try --mla-tip-across { position-area: none; top: anchor(bottom); left: 1rem; right: 1rem; width: auto;
  max-width: none; margin: 0.3rem 0 0 0; }
</style>"""


@dataclass(frozen=True)
class Metric:
    """One key number as a reader sees it. Plain text throughout (no Markdown).

    label: what it is ("KV bytes per token"); value: the formatted number ("68.6 KiB");
    help: the exact figure or its formula, shown on hovering the "?" (None: no "?");
    delta: a grey note under the value, e.g. "bound 41.2 ms" beside an estimate (None: none)."""

    label: str
    value: str
    help: str | None = None
    delta: str | None = None

    def html(self, width: float, tip_left: bool = False) -> str:
        """This number's cell of a row; `tip_left`: its tooltip opens leftwards first (the row's right
        half, where a rightward tooltip would run off the page)."""
        data = f' data-label="{escape(self.label)}" data-value="{escape(self.value)}"'
        if self.help:
            data += f' data-help="{escape(self.help)}"'
        if self.delta:
            data += f' data-delta="{escape(self.delta)}"'
        tip = (f'<span class="mla-help" tabindex="0" role="img" aria-label="{escape(self.help)}">?'
               f'<span class="mla-tip" aria-hidden="true">{escape(self.help)}</span></span>' if self.help else "")
        delta = f'<div class="mla-metric-delta">{escape(self.delta)}</div>' if self.delta else ""
        head, _, last = self.label.rpartition(" ")  # the "?" stays on the line of the label's last word
        label = (escape(head + " " if head else "") + f'<span class="mla-nowrap">{escape(last)}{tip}</span>' if tip
                 else escape(self.label))
        cls = "mla-metric mla-tip-left" if tip_left else "mla-metric"
        return (f'<div class="{cls}" style="flex: {width:g} 1 0"{data}>'
                f'<div class="mla-metric-label">{label}</div>'
                f'<div class="mla-metric-value">{escape(self.value)}</div>{delta}</div>')


def metric_row_html(metrics: Sequence[Metric | None], widths: Sequence[float] | None = None, stack: bool = False) -> str:
    """The HTML of one row: each metric's share of the width is its entry of `widths` (as
    st.columns' spec; default equal); a None entry is an empty slot of its width. `stack`: one
    above the other instead (a column of numbers).

    Raises ValueError when `widths` does not give one width per entry."""
    widths = list(widths) if widths is not None else [1.0] * len(metrics)
    if len(widths) != len(metrics):
        raise ValueError(f"{len(widths)} widths for {len(metrics)} metrics")
    total, left = sum(widths), 0.0
    cells = []
    for m, w in zip(metrics, widths):  # a number whose middle is right of the row's middle: tooltip leftwards
        right_half = not stack and left + w / 2 > total / 2
        cells.append(m.html(w, right_half) if m is not None
                     else f'<div class="mla-metric" style="flex: {w:g} 1 0"></div>')
        left += w
    return f'<div class="{ROW_CLASS}{" mla-stack" if stack else ""}">' + "".join(cells) + "</div>"


def stylesheet() -> None:
    """The rows' CSS, once a full rerun (app.py draws it before the page). Style-only st.html goes
    to Streamlit's event container: it takes no room on the page, and the same body sent again
    changes nothing in the browser. A fragment's rerun leaves it in place."""
    st.html(CSS)


def metric_row(metrics: Sequence[Metric | None], widths: Sequence[float] | None = None, *, stack: bool = False,
               container=None) -> None:
    """Draw one row of key numbers as one element (st.html) in `container` (default: where the
    page is drawing), styled by `stylesheet` (drawn once a rerun by app.py). See metric_row_html
    for `widths` and `stack`."""
    (container or st).html(metric_row_html(metrics, widths, stack))
