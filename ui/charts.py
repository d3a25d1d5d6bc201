"""Plotly styling shared by the pages (units in axis titles, exact hover text, presentation sizes)
and the chart element they draw with (`show`: one plot per chart, updated in place).

Colours are the Okabe-Ito palette (legible for colour-blind readers, and on light and dark
themes); the same variant keeps the same colour on every chart.
"""
from __future__ import annotations

import copy
import functools
import math
import numbers
import os
import types

import streamlit as st

# A mark drawn in the page's ink: the chart element draws this colour in the page's text colour,
# near-black on the light theme and light on the dark one, where black would not show (the reference
# marks: memory per GPU, the best point, saturation, the second model, measured points). Black in a
# figure handed elsewhere (a PNG export draws what the page drew).
INK = "#000000"
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
    "measured": INK,
}
SEQUENCE = ["#D55E00", "#0072B2", "#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#F0E442", "#999999"]
# Past the eight colours a series takes the next marker symbol: (colour, symbol) pairs stay distinct
# for 48 series (a 64-GPU search draws a line per split).
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star-triangle-up"]


def series_style(i: int) -> tuple[str, str]:
    """(colour, marker symbol) of the i-th series of a chart whose series have no colour of their
    own (the Serving plan's splits): SEQUENCE's colours, then again with the next symbol."""
    return SEQUENCE[i % len(SEQUENCE)], SYMBOLS[(i // len(SEQUENCE)) % len(SYMBOLS)]


def color_for(label: str) -> str:
    for key, color in COLORS.items():
        if label == key:
            return color
    for key, color in COLORS.items():
        if label.startswith(key):
            return color
    return "#999999"


# --- figures: built as plain dicts, handed to Plotly once --------------------------------------------
# Building figures with plotly.graph_objects validates every property and copies every array on
# each add_trace (and again when Streamlit serialises the figure): 60-70% of a page's rerun on the
# served path (benchmarks/served.py, pyinstrument). The pages keep graph_objects' spelling under another name
# (`from ui.charts import plot`; plot.Figure(), fig.add_trace(plot.Scatter(...)), fig.update_layout(...)),
# but traces and layout are plain dicts until `show()` hands them to one plotly.graph_objects.Figure. Plotly
# validates that figure when MLA_VALIDATE_FIGURES=1 (the test suite sets it, so a misspelt
# property fails there) and skips validation otherwise; tests/test_charts.py checks that both
# give the browser the same JSON for every chart of every page.
VALIDATE_ENV = "MLA_VALIDATE_FIGURES"
_COMPOUND = {"marker", "line", "xaxis", "yaxis", "legend", "title", "font", "hoverlabel", "margin", "textfont",
             "error_y", "error_x", "tickfont"}


def validating() -> bool:
    return os.environ.get(VALIDATE_ENV, "") not in ("", "0")


def _expand(props: dict) -> dict:
    """Plotly's 'magic underscore' names (marker_color -> {'marker': {'color': ...}}) for the
    compound properties the pages use; None means unset, as in Plotly."""
    out: dict = {}
    for key, value in props.items():
        if value is None:
            continue
        head, _, rest = key.partition("_")
        if rest and head in _COMPOUND and key not in ("error_x", "error_y"):
            _merge(out, {head: {rest: value}})
        else:
            _merge(out, {key: value})
    return out


def _merge(dst: dict, src: dict) -> dict:
    """Plotly's update semantics: nested dicts merge, anything else replaces; a string title
    is the title's text."""
    for key, value in src.items():
        if value is None:
            continue
        if key == "title" and isinstance(value, str):
            value = {"text": value}
        if isinstance(value, dict):
            value = _expand(value)
            if isinstance(dst.get(key), dict):
                _merge(dst[key], value)
                continue
            dst[key] = _merge({}, value)
        else:
            dst[key] = value
    return dst


class Figure:
    """The part of plotly.graph_objects.Figure the pages use, as plain dicts:
    `data` (list of trace dicts) and `layout` (dict)."""

    def __init__(self, data=None, layout=None):
        self.data: list[dict] = [dict(t) for t in (data or [])]
        self.layout: dict = _merge({}, dict(layout or {}))

    def add_trace(self, trace: dict) -> "Figure":
        self.data.append(trace)
        return self

    def update_layout(self, dict1: dict | None = None, **kwargs) -> "Figure":
        _merge(self.layout, _expand({**(dict1 or {}), **kwargs}))
        return self

    def update_xaxes(self, dict1: dict | None = None, **kwargs) -> "Figure":
        return self.update_layout(xaxis=_expand({**(dict1 or {}), **kwargs}))

    def update_yaxes(self, dict1: dict | None = None, **kwargs) -> "Figure":
        return self.update_layout(yaxis=_expand({**(dict1 or {}), **kwargs}))

    def to_dict(self) -> dict:
        return {"data": self.data, "layout": self.layout}

    def to_plotly(self):
        """One plotly.graph_objects.Figure of this figure (validated when `validating()`), with this
        module's template (TEMPLATE) where the figure names none."""
        self.layout.setdefault("template", TEMPLATE)
        if validating():
            import plotly.graph_objects as pgo

            return pgo.Figure(self.to_dict())
        return _ready(self.to_dict())


_READY = None


def _ready(spec: dict):
    """A plotly Figure standing for `spec` as it is: st.plotly_chart takes a Figure's to_dict()
    (which otherwise deep-copies every array: 90 ms for the KV chart) and serialises that."""
    global _READY
    if _READY is None:
        import plotly.graph_objects as pgo
        from _plotly_utils.utils import is_homogeneous_array, is_skipped_key, to_typed_array_spec

        def convert(obj) -> None:
            """plotly's convert_to_base64 (numpy arrays under dict keys become typed arrays) without
            a call per number: a list whose first item is a scalar is a list of scalars (what the
            pages build), and holds no dict whose arrays would need converting."""
            if isinstance(obj, dict):
                for key, value in obj.items():
                    if isinstance(value, (dict, list, tuple)):
                        if value and not isinstance(value, dict) and not isinstance(value[0], (dict, list, tuple)):
                            continue  # plotly's walk converts nothing inside a list either, only dict values
                        convert(value)
                    elif not is_skipped_key(key) and is_homogeneous_array(value):
                        obj[key] = to_typed_array_spec(value)
            elif isinstance(obj, (list, tuple)):
                for value in obj:
                    convert(value)

        class Ready(pgo.Figure):
            def __init__(self, spec: dict):  # noqa: D107 - no validation, no copy: built fresh each run
                self._spec = spec

            def to_dict(self) -> dict:
                convert(self._spec)  # what plotly's own to_dict does to numpy arrays
                return self._spec

            def to_plotly_json(self) -> dict:
                return self.to_dict()

        _READY = Ready
    return _READY(spec)


def _trace(kind: str):
    def make(**props) -> dict:
        return {"type": kind, **_expand(props)}

    make.__name__ = make.__qualname__ = kind.capitalize()
    return make


plot = types.SimpleNamespace(Figure=Figure, Scatter=_trace("scatter"), Bar=_trace("bar"))


@functools.lru_cache(maxsize=2)
def _base_layout(present: bool) -> dict:
    """This app's layout (type sizes, margins, legend). Properties are set on the layout itself,
    not in a template, because Streamlit swaps the template for its own light or dark theme in
    the browser."""
    base = 22 if present else 14
    return {
        "title": {"font": {"size": base + 6}},
        "font": {"size": base},
        "height": 680 if present else 460,
        "margin": {"l": 10, "r": 10, "t": 120 if present else 80, "b": 10},
        "legend": {"font": {"size": base}, "orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        "hoverlabel": {"font": {"size": base}},
        "hovermode": "closest",
        "xaxis": {"showgrid": True, "title": {"font": {"size": base + 2}}, "tickfont": {"size": base}},
        "yaxis": {"showgrid": True, "title": {"font": {"size": base + 2}}, "tickfont": {"size": base}},
    }


WIDE_LOG_DECADES = 2.0  # style(): a log axis over this many decades of data labels its powers of ten only


def _decades(fig: Figure, axis: str) -> float:
    """Decades (log10 of max / min) the positive numbers of the traces' `axis` ("x" or "y") span; 0 when none."""
    values = [float(x) for t in fig.data if t.get(axis) is not None for x in t.get(axis)
              if isinstance(x, numbers.Real) and not isinstance(x, bool) and x > 0]
    return math.log10(max(values) / min(values)) if values else 0.0


def style(fig: Figure, *, title: str, x_title: str, y_title: str, log_x: bool = False, log_y: bool = False,
          present: bool = False, height: int | None = None, x_tokens: tuple | None = None) -> Figure:
    """Titles with units, log axes where asked, larger type and height in presentation mode.
    Whatever the page already set on the layout (bar mode, shapes, ranges) is kept. Axis types
    are left to Plotly unless log is asked for, so category (bar) axes keep working.
    `x_tokens=(lo, hi)`: the x axis counts tokens; its ticks are labelled by the project's token
    rule (mla_core.units.token_ticks: '4K', '128K', '1M'), never Plotly's decimal '100k'."""
    own = fig.layout
    fig.layout = _merge(copy.deepcopy(_base_layout(bool(present))), own)
    fig.update_layout(title={"text": title}, xaxis={"title": {"text": x_title}}, yaxis={"title": {"text": y_title}})
    if present and len(y_title) > 24:  # a slide's plot is short: a long rotated title would run into the chart title
        cut = y_title.rfind(" ", 0, len(y_title) // 2 + 6)
        if cut > 0:
            fig.update_layout(yaxis={"title": {"text": y_title[:cut] + "<br>" + y_title[cut + 1:]}})
    # Log axes never label a minor tick with a bare digit ("2" for 20): over a span of data of
    # WIDE_LOG_DECADES or more only the powers of ten are labelled (Plotly's "none": each label is
    # tens of SVG nodes laid out again on every redraw, a sixth of a chart's draw in the browser,
    # benchmarks/browser.py), over a narrower one the 2s and 5s too, in full ("20", "50").
    for axis, asked in (("x", log_x), ("y", log_y)):
        if asked:
            wide = _decades(fig, axis) >= WIDE_LOG_DECADES
            getattr(fig, f"update_{axis}axes")(type="log", minorloglabels="none" if wide else "complete")
    if x_tokens:
        from mla_core.units import token_ticks

        values, labels = token_ticks(*x_tokens)
        if values:
            fig.update_xaxes(tickvals=values, ticktext=labels)
    if height:
        fig.update_layout(height=height)
    return fig


LEGEND_BELOW_AXIS_PX = 64  # the x axis's ticks and title above a legend under the plot (legend_below)
LEGEND_ROW_PX = 24  # one row of a horizontal legend at the desk's type size (30 on a slide)


def legend_below(fig: Figure, entries: int | None = None, *, present: bool = False, per_row: int = 3) -> Figure:
    """The legend under the plot, anchored to the bottom of the figure (yref "container") with the
    bottom margin grown to hold its rows (`entries`: the traces shown in the legend unless
    given), so it never runs into the x axis's title; the figure grows by as much, so the plot
    keeps its height."""
    if entries is None:
        entries = sum(1 for t in fig.data if t.get("showlegend", True) is not False)
    rows = max(1, -(-entries // per_row))
    row = LEGEND_ROW_PX + (6 if present else 0)
    extra = rows * row
    height = (fig.layout.get("height") or _base_layout(bool(present))["height"]) + extra
    fig.update_layout(legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0,
                              "xanchor": "left"},
                      margin={"b": LEGEND_BELOW_AXIS_PX + (16 if present else 0) + extra}, height=height)
    return fig


# --- the chart element: one Plotly plot per chart, updated in place ----------------------------------
# st.plotly_chart (Streamlit 1.67) keys its element by a hash of the figure: a changed figure is a
# new React element, a fresh Plotly plot, which Streamlit's theme effect then sets again, so every
# changed chart costs two full Plotly draws in the browser (benchmarks/browser.py counts them). A
# chart here is an st.components.v2 element keyed by the chart's own key: the browser keeps its
# plot and hands the new figure to Plotly.react, which redraws only what changed (one draw), and
# nothing when the figure is the one already drawn. plotly.js is the copy the plotly package
# ships (plotly/package_data/plotly.min.js), served by Streamlit's own component route
# (/component/<name>/...) through a components.v1 declaration of that folder, and loaded once a
# page load. Colours of text and grid follow the app's theme (light or dark) as the browser
# computes it; the series keep the colours this module gives them, INK takes the text's. The
# modebar has a full-screen button; on a phone's width (under 640 px) a long title is wrapped and
# the legend given the rows it wraps into (tests/test_browser.py checks 420 px).
# A chart is drawn once the window shows any of it (a CSS margin: above and below, sides). At 400 px,
# Capacity's and Roofline's first charts, 170-250 px below a 1440x900 window, were redrawn unseen
# on every rerun; scrolled to after a rerun, a waiting chart is drawn in about 50 ms
# (benchmarks/browser.py, scrolled_to: 51 ms p50, 97 ms p95 in browser_20261207c.json).
IN_VIEW_MARGIN = "0px 0px"
CHART_JS = r"""
let loading = null;
function plotly(src) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!loading) loading = new Promise((ok, fail) => {
    const script = document.createElement('script');
    script.src = new URL(src, document.baseURI).href;
    script.onload = () => ok(window.Plotly);
    script.onerror = () => { loading = null; fail(new Error('plotly.js did not load from ' + script.src)); };
    document.head.appendChild(script);
  });
  return loading;
}
function alpha(rgb, a) {
  const c = (rgb.match(/[\d.]+/g) || [0, 0, 0]).slice(0, 3).join(', ');
  return `rgba(${c}, ${a})`;
}
function isObject(x) { return x !== null && typeof x === 'object' && !Array.isArray(x); }
const INK = '__INK__';
function inked(x, text) {  // INK (black) as the page's text colour: light on the dark theme
  if (x === INK) return text;
  if (Array.isArray(x)) return x.some(v => v === INK || typeof v === 'object') ? x.map(v => inked(v, text)) : x;
  if (!isObject(x)) return x;
  const out = {};
  for (const [k, v] of Object.entries(x)) out[k] = inked(v, text);
  return out;
}
function under(defaults, own) {  // the figure's own properties over the theme's defaults
  const out = Object.assign({}, defaults);
  for (const [k, v] of Object.entries(own || {})) out[k] = isObject(v) && isObject(defaults[k]) ? under(defaults[k], v) : v;
  return out;
}
// Streamlit's chart theme (its PlotlyChart CustomTheme) in the app's colours as the browser computes them.
function themed(layout, el) {
  const css = getComputedStyle(el), app = document.querySelector('[data-testid="stApp"]') || document.body;
  const text = css.color, faint = alpha(text, 0.15), line = alpha(text, 0.3), bg = getComputedStyle(app).backgroundColor;
  const axis = {automargin: true, gridcolor: faint, zerolinecolor: line, linecolor: line, tickcolor: line,
                title: {font: {color: text}}, tickfont: {color: text}};
  const theme = {
    paper_bgcolor: bg, plot_bgcolor: bg,  // opaque, so a downloaded PNG reads on any background
    font: {family: css.fontFamily, color: text},
    title: {x: 0, xanchor: 'left', pad: {l: 4}, font: {color: text, weight: 600}},
    legend: {bgcolor: 'rgba(0,0,0,0)', borderwidth: 0, valign: 'top', font: {color: text}},
    hoverlabel: {bgcolor: bg, bordercolor: line, font: {color: text, family: css.fontFamily}},
    modebar: {bgcolor: 'rgba(0,0,0,0)', color: line, activecolor: text},
    margin: {pad: 8},
    xaxis: axis, yaxis: under(axis, {title: {standoff: 24}}),
  };
  for (const k of Object.keys(layout)) if (/^[xy]axis\d+$/.test(k)) theme[k] = axis;
  return under(theme, layout);
}
// The modebar's full-screen button (st.plotly_chart's toolbar had one): the plot fills the screen
// and is laid out at its size; Esc or the button again brings it back at the figure's own height.
const FULL_SCREEN_ICON = {width: 1000, height: 1000,
  path: 'M0 0h400v100H100v300H0zM600 0h400v400H900V100H600zM0 600h100v300h300v100H0zM900 600h100v400H600V900h300z'};
function fullScreen(el) {
  return el.mlaFullScreen || (el.mlaFullScreen = {name: 'fullscreen', title: 'Full screen (Esc to leave)',
    icon: FULL_SCREEN_ICON,
    click: () => document.fullscreenElement === el ? document.exitFullscreen() : el.requestFullscreen()});
}
// The PNG download, drawn in the browser's own sans-serif: Plotly lays a PNG out with the page's
// text measured in the page's web font (Source Sans), but draws it as an SVG image, which cannot use
// a web font; the wider fallback then overran the legend's entries ("kernel launches (eage" under the
// next swatch). A system font is the same in both.
const EXPORT_FONT = 'Helvetica, Arial, "Liberation Sans", "DejaVu Sans", sans-serif';
function legendBelow(L) {  // a horizontal legend under the plot (ui.charts.legend_below)
  return L.showlegend && L.legend.orientation === 'h' && L.legend.yref === 'container' && L.legend.y <= 0;
}
function pngButton(el, options) {
  return el.mlaPng || (el.mlaPng = {name: 'png', title: 'Download plot as a PNG', icon: window.Plotly.Icons.camera,
    click: () => {
      const L = el._fullLayout;
      const grow = legendBelow(L) ? __LEGEND_ROW_PX__ : 0;  // a legend under the plot may take a row more
      const layout = Object.assign({}, el.layout, {font: Object.assign({}, el.layout.font, {family: EXPORT_FONT}),
        margin: Object.assign({}, el.layout.margin, {b: L.margin.b + grow})});
      return window.Plotly.downloadImage({data: el.data, layout, config: {}},
        Object.assign({width: L.width, height: L.height + grow}, options));
    }});
}
function sized(layout, el) {  // in full screen, the screen's size; else the figure's own
  return document.fullscreenElement === el ? Object.assign({}, layout, {width: window.innerWidth, height: window.innerHeight})
                                           : layout;
}
// A phone's width: a long title is wrapped (Plotly does not) and a legend above the plot that wraps into
// several rows pushes the plot down; on a desk they already fit the figure's top margin.
const NARROW_PX = 640;
function wrapped(text, chars) {
  if (text.length <= chars || text.includes('<br>')) return text;
  const lines = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > chars) { lines.push(line); line = word; }
    else line = line ? line + ' ' + word : word;
  }
  lines.push(line);
  return lines.join('<br>');
}
function fitNarrow(el, P) {
  const L = el._fullLayout, w = el.clientWidth;
  if (!L || !w || w >= NARROW_PX || document.fullscreenElement === el) return;
  const size = L.title.font.size || 17, title = L.title.text || '', lg = L.legend;
  const text = wrapped(title, Math.max(16, Math.floor((w - 16) / (size * 0.56))));
  const lines = text ? text.split('<br>').length : 0;
  const above = L.showlegend && lg.orientation === 'h' && lg.yref === 'paper' && lg.y >= 1;
  // legend._height: all its rows (more on a phone than the figure made room for), not the part shown
  const top = Math.ceil(8 + lines * size * 1.45 + (above ? lg._height + 8 : 0) + 6);
  const bottom = legendBelow(L) ? Math.ceil(__LEGEND_BELOW_AXIS_PX__ + lg._height + 8) : L.margin.b;
  if (text === title && top <= L.margin.t && bottom <= L.margin.b) return;
  const grow = Math.max(0, top - L.margin.t) + Math.max(0, bottom - L.margin.b);
  // Plotly draws a wrapped title's first line about 1.2 em above a 'top' anchor: the anchor goes that far down
  return P.relayout(el, {'title.text': text, 'title.yref': 'container', 'title.yanchor': 'top',
                         'title.y': 1 - (8 + size * 1.2) / (L.height + grow), 'margin.t': Math.max(top, L.margin.t),
                         'margin.b': Math.max(bottom, L.margin.b), height: L.height + grow});
}
function draw(el, P) {  // the last figure handed to this chart, at the chart's width now
  const {fig, config} = el.mlaLast, text = getComputedStyle(el).color;
  return P.react(el, inked(fig.data, text), sized(themed(inked(fig.layout, text), el), el), config)
    .then(() => fitNarrow(el, P));
}
export default function (component) {
  const {data, parentElement} = component;
  let el = parentElement.querySelector('div.mla-chart');
  if (!el) {
    el = document.createElement('div');
    el.className = 'mla-chart';
    el.style.width = '100%';
    parentElement.appendChild(el);
    // The page's width can change without the window's (the sidebar opened or closed): follow it.
    let width = 0;
    const observer = new ResizeObserver(([entry]) => {
      const w = Math.round(entry.contentRect.width);
      if (!el.isConnected) {  // the chart left the page: free its plot and Plotly's window listener
        observer.disconnect();
        if (window.Plotly) window.Plotly.purge(el);
        return;
      }
      if (w === 0 || w === width) return;  // hidden (a closed expander) or unchanged
      const narrow = w < NARROW_PX || (width > 0 && width < NARROW_PX);
      width = w;
      if (!window.Plotly || !el._fullLayout) return;
      const P = window.Plotly;  // to the new width; at a phone's width, laid out again (fitNarrow)
      P.Plots.resize(el).then(() => (narrow && el.mlaLast ? draw(el, P) : null)).catch(() => {});
    });
    observer.observe(el);
    watchView(el);
    // plotly.js is loaded with the first chart of the page, in the window or not: a chart scrolled to
    // later is drawn at once, without waiting for the library
    plotly(data.src).catch(() => {});
    el.addEventListener('fullscreenchange', () => {
      if (!window.Plotly || !el._fullLayout) return;
      const full = document.fullscreenElement === el;
      window.Plotly.relayout(el, full ? {width: window.innerWidth, height: window.innerHeight}
                                      : {width: null, height: el.mlaHeight}).catch(() => {});
    });
  }
  const stamp = data.figure + '|' + getComputedStyle(el).color;
  if (el.mlaStamp === stamp) return;  // the figure already drawn or waiting (kept on the element, not in the DOM)
  el.mlaStamp = stamp;
  el.mlaNext = {fig: JSON.parse(data.figure), data, stamp};
  // the room the figure takes, kept while it waits: the page below a chart not yet drawn does not move
  if (!el._fullLayout && el.mlaNext.fig.layout.height) el.style.minHeight = el.mlaNext.fig.layout.height + 'px';
  if (el.mlaInView) render(el);  // else drawn when it comes within IN_VIEW_MARGIN of the window (the observer)
}
// A chart out of the window is not drawn on a rerun: the figure waits on the element, and is drawn when
// the chart comes within IN_VIEW_MARGIN of the window (scrolled to, its expander opened, the sidebar
// shut). A rerun then draws only the charts a user can see (a chart is a sixth to a third of a rerun's
// work in the browser, benchmarks/browser.py).
const IN_VIEW_MARGIN = '__IN_VIEW_MARGIN__';
function watchView(el) {
  // the window is the page's scrolling main area where there is one (Streamlit's stMain), so the margin holds
  const root = el.closest('[data-testid="stMain"]');
  const observer = new IntersectionObserver((entries) => {
    if (!el.isConnected) { observer.disconnect(); return; }
    el.mlaInView = entries[entries.length - 1].isIntersecting;
    if (el.mlaInView && el.mlaNext) render(el);
  }, {root, rootMargin: IN_VIEW_MARGIN});
  observer.observe(el);
}
function render(el) {  // the figure that waits on the element, drawn
  const {fig, data, stamp} = el.mlaNext;
  el.mlaNext = null;
  plotly(data.src).then(P => {
    if (el.mlaStamp !== stamp) return;  // a newer figure came while plotly.js loaded
    const failed = el.querySelector(':scope > .mla-chart-error');
    if (failed) failed.remove();
    el.mlaHeight = fig.layout.height || null;
    el.mlaLast = {fig, config: Object.assign({}, data.config, {
      modeBarButtonsToRemove: [...(data.config.modeBarButtonsToRemove || []), 'toImage'],
      modeBarButtonsToAdd: [pngButton(el, data.config.toImageButtonOptions), fullScreen(el)]})};
    return draw(el, P).then(() => { el.style.minHeight = ''; });
  }).catch(err => {
    el.mlaStamp = null;  // drawn again on the next rerun
    const note = el.querySelector(':scope > .mla-chart-error') || el.insertBefore(document.createElement('p'), el.firstChild);
    note.className = 'mla-chart-error';
    note.textContent = 'This chart could not be drawn: ' + err.message;
  });
}
"""
CHART_JS = (CHART_JS.replace("__INK__", INK).replace("__LEGEND_BELOW_AXIS_PX__", str(LEGEND_BELOW_AXIS_PX))
            .replace("__LEGEND_ROW_PX__", str(LEGEND_ROW_PX)).replace("__IN_VIEW_MARGIN__", IN_VIEW_MARGIN))
# The series' colours when a trace names none (Plotly's colorway): this module's palette. Streamlit's
# own "streamlit" template holds placeholder colours its chart element swaps in the browser.
TEMPLATE = {"layout": {"colorway": SEQUENCE[1:] + SEQUENCE[:1]}}  # orange (MLA, objectives) last
CHART_ELEMENT = "mla_explorer.chart"  # the chart element's component name


@functools.lru_cache(maxsize=1)
def _element():
    """(the chart element's mount function, the URL of plotly.js relative to the page)."""
    import plotly
    import streamlit.components.v1 as components_v1

    folder = os.path.join(os.path.dirname(plotly.__file__), "package_data")
    files = components_v1.declare_component("plotly_js", path=folder)
    mount = st.components.v2.component(CHART_ELEMENT, js=CHART_JS, isolate_styles=False)
    return mount, f"component/{files.name}/plotly.min.js"


def figure_json(fig) -> str:
    """The JSON the browser is handed for `fig` (a ui.charts Figure or a plotly Figure): Plotly's
    own serialiser (plotly.io.to_json, as st.plotly_chart uses)."""
    import plotly.io as pio

    if isinstance(fig, Figure):
        fig = fig.to_plotly()
    return pio.to_json(fig, validate=False)


def show(fig: Figure, name: str, key: str | None = None) -> None:
    """Draw a figure with Plotly's PNG download (modebar camera) named after the chart. `key`
    (default `_chart_<name>`) is the chart's identity on the page: the same key on the next rerun
    updates the drawn chart in place."""
    config = {
        "displaylogo": False,
        "responsive": True,
        # plotly.js 4 offers to upload the chart to Plotly Cloud unless told not to; nothing leaves
        # the machine. No selections on these charts: no box or lasso select.
        "showSendToCloud": False,
        "modeBarButtonsToRemove": ["select2d", "lasso2d"],
        "toImageButtonOptions": {"format": "png", "filename": f"mla-explorer-{name}", "scale": 2},
    }
    mount, src = _element()
    mount(key=key or f"_chart_{name}", data={"figure": figure_json(fig), "config": config, "src": src})


PRESENTATION_CSS = """
<style>
html, body, [data-testid="stAppViewContainer"] { font-size: 1.35rem; }
/* One slide per page at 1280 x 720: a slim frame, the header see-through above the title. */
[data-testid="stHeader"] { background: transparent; }
[data-testid="stMainBlockContainer"] { padding: 1.4rem 2rem 2rem 2rem !important; max-width: 100% !important; }
.mla-metric-value { font-size: 2.0rem !important; line-height: 1.15 !important; }
.mla-metric-label { font-size: 1.0rem !important; }
/* Big numbers wrap instead of being cut to "1.49M to..." on a projector's narrower screen. */
.mla-metric-value, .mla-metric-label {
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
