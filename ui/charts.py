"""Plotly styling shared by the pages: units in axis titles, exact hover text, presentation sizes.

Colours are the Okabe-Ito palette (legible for colour-blind readers, and on light and dark
themes); the same variant keeps the same colour on every chart.
"""
from __future__ import annotations

import functools

import streamlit as st

COLORS = {
    "MHA": "#E69F00",
    "GQA": "#56B4E9",
    "MQA": "#009E73",
    "MLA": "#D55E00",
    "MLA (latent)": "#D55E00",
    "MLA absorbed": "#D55E00",
    "MLA expanded": "#CC79A7",
    "MLA recompute": "#0072B2",
    "model": "#F0E442",
    "measured": "#000000",
}
SEQUENCE = ["#D55E00", "#0072B2", "#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#F0E442", "#999999"]


def color_for(label: str) -> str:
    for key, color in COLORS.items():
        if label == key:
            return color
    for key, color in COLORS.items():
        if label.startswith(key):
            return color
    return "#999999"


@functools.lru_cache(maxsize=2)
def _layout(present: bool):
    """This app's layout (type sizes, margins, legend), built and validated once: handing Plotly
    a ready Layout costs about 3 ms a chart where update_layout re-validates for 15 ms.
    Properties are set on the layout itself, not in a template, because Streamlit swaps the
    template for its own light or dark theme in the browser."""
    import plotly.graph_objects as go

    base = 22 if present else 14
    return go.Layout(
        title={"font": {"size": base + 6}},
        font={"size": base},
        height=680 if present else 460,
        margin={"l": 10, "r": 10, "t": 120 if present else 80, "b": 10},
        legend={"font": {"size": base}, "orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        hoverlabel={"font": {"size": base}},
        hovermode="closest",
        xaxis={"showgrid": True, "title": {"font": {"size": base + 2}}, "tickfont": {"size": base}},
        yaxis={"showgrid": True, "title": {"font": {"size": base + 2}}, "tickfont": {"size": base}},
    )


def style(fig, *, title: str, x_title: str, y_title: str, log_x: bool = False, log_y: bool = False,
          present: bool = False, height: int | None = None):
    """Titles with units, log axes where asked, larger type and height in presentation mode.
    Whatever the page already set on the layout (bar mode, shapes, ranges) is kept. Axis types
    are left to Plotly unless log is asked for, so category (bar) axes keep working."""
    own = fig.layout.to_plotly_json()
    own.pop("template", None)
    fig.layout = _layout(bool(present))
    if own:
        fig.update_layout(own)
    layout = fig.layout
    layout.title.text = title
    layout.xaxis.title.text = x_title
    layout.yaxis.title.text = y_title
    if log_x:
        layout.xaxis.type = "log"
    if log_y:
        layout.yaxis.type = "log"
    if height:
        layout.height = height
    return fig


def show(fig, name: str, key: str | None = None) -> None:
    """Draw a figure with Plotly's PNG download (modebar camera) named after the chart."""
    config = {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": f"mla-explorer-{name}", "scale": 2},
    }
    st.plotly_chart(fig, config=config, theme="streamlit", key=key)


PRESENTATION_CSS = """
<style>
html, body, [data-testid="stAppViewContainer"] { font-size: 1.35rem; }
/* One slide per page at 1280 x 720: a slim frame, the header see-through above the title. */
[data-testid="stHeader"] { background: transparent; }
[data-testid="stMainBlockContainer"] { padding: 1.4rem 2rem 2rem 2rem !important; max-width: 100% !important; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] p { font-size: 2.0rem !important; line-height: 1.15; }
[data-testid="stMetricLabel"] p { font-size: 1.0rem !important; }
/* Big numbers wrap instead of being cut to "1.49M to..." on a projector's narrower screen. */
[data-testid="stMetricValue"] *, [data-testid="stMetricLabel"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
h1 { font-size: 2.2rem !important; }
h2 { font-size: 1.6rem !important; padding: 0 0 0.2rem 0 !important; }
h3 { font-size: 1.5rem !important; }
[data-testid="stMarkdownContainer"] p, [data-testid="stCaptionContainer"] { font-size: 1.0rem; }
</style>
"""
SLIDE_CHART_HEIGHT = 420  # px: title, one row of key numbers and this chart fill a 1280 x 720 screen


def slide_height(present: bool) -> int | None:
    """The height of a page's main chart: the slide's share in presentation mode, else the default."""
    return SLIDE_CHART_HEIGHT if present else None


def presentation_css() -> None:
    # A constant stylesheet: no user-supplied text ever goes through unsafe_allow_html.
    st.markdown(PRESENTATION_CSS, unsafe_allow_html=True)


def plot_text(text) -> str:
    """User-supplied text (an uploaded model's name) for Plotly, which renders a little HTML."""
    import html

    return html.escape(str(text)[:80])


def page_title(page: str, subtitle: str, model_name: str, context: int, *, extra: str | None = None,
               present: bool = False) -> None:
    """The page's title. In presentation mode the slide's title names the model and the context
    ("KV cache: DeepSeek-V3 at 128K tokens (131,072)"), since the sidebar is out of sight."""
    from mla_core.units import format_tokens

    from .text import escape_md

    if present:
        st.markdown(f"## {page}: {escape_md(model_name, 80)} at {format_tokens(context)} ({context:,})"
                    + (f", {escape_md(extra, 60)}" if extra else ""))
    else:
        st.title(f"{page}: {subtitle}")
