"""The KV page's layer map: one cell per layer, coloured by what it caches (mla_core.layermap.layer_map)."""
from __future__ import annotations

from ui.charts import plot  # plotly.graph_objects spelt as plain dicts (ui/charts.py)
import streamlit as st

from mla_core.layermap import LayerMap
from mla_core.units import format_bytes, format_tokens
from ui import charts, layout
from ui.metrics import Metric, metric_row

# One colour per cache kind (Okabe-Ito); kinds the table does not name fall back to grey.
KIND_COLORS = {
    "full": "#D55E00", "sliding": "#56B4E9", "chunked": "#0072B2", "shared": "#CC79A7", "none": "#BBBBBB",
    "mamba1": "#009E73", "mamba2": "#009E73", "gdn": "#E69F00", "kda": "#F0E442", "lightning": "#999933",
    "compressed": "#882255", "shortconv": "#44AA99",
}


def kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, KIND_COLORS.get(kind.split("+")[-1], "#999999"))


# A kind's second, third ... label (same colour): hatched, so that each legend entry names its own cells.
PATTERNS = ("", "/", "x", ".", "\\", "+", "-", "|")


def figure(lm: LayerMap, present: bool = False) -> plot.Figure:
    """Cells in layer order, one trace per legend entry (kind and label; a kind's colour, hatched
    from its second label on), hover with exact bytes."""
    fig = plot.Figure()
    seen: dict[str, int] = {}
    for kind, label in lm.legend:
        cells = [c for c in lm.cells if (c.kind, c.label) == (kind, label)]
        nth = seen[kind] = seen.get(kind, -1) + 1
        fig.add_trace(plot.Bar(
            x=[c.index for c in cells], y=[1] * len(cells), name=label, width=0.92,
            marker={"color": kind_color(kind), "line": {"width": 0.5, "color": "#333"},
                    "pattern": {"shape": PATTERNS[nth % len(PATTERNS)]}},
            customdata=[[c.label, format_bytes(c.bytes), f"{c.bytes:,}", format_tokens(c.tokens_held),
                         format_bytes(c.state_bytes), format_bytes(c.index_bytes)] for c in cells],
            hovertemplate="layer %{x}: %{customdata[0]}<br>%{customdata[1]} (%{customdata[2]} B) for one sequence"
                          "<br>entries held %{customdata[3]} (index keys %{customdata[5]}), "
                          "state %{customdata[4]}<extra></extra>",
        ))
    charts.style(fig, title=f"What each layer holds for one sequence at {format_tokens(lm.context)}",
                 x_title="layer (0-based)", y_title="", present=present)
    fig.update_layout(barmode="stack", height=320 if not present else 360, bargap=0.05,
                      yaxis={"visible": False, "range": [0, 1]},
                      legend={"orientation": "h", "y": -0.55, "yanchor": "top", "traceorder": "normal"}, margin={"b": 110})
    return fig


def section(lm: LayerMap, present: bool = False) -> None:
    """The layer map with the state beside the per-token cache, and the all-full-attention figure."""
    st.subheader("Layer map")
    metric_row([
        Metric("Per-token cache, one sequence", format_bytes(lm.kv_bytes_per_sequence),
               help=f"{lm.kv_bytes_per_sequence:,} B at {lm.context:,} tokens (windows and chunks applied)"),
        Metric("State, one sequence", format_bytes(lm.state_bytes_per_sequence),
               help=f"{lm.state_bytes_per_sequence:,} B (recurrent layers' state, DeepSeek-V4's compressor state), "
                    "the same at every context"),
        Metric("If every layer were full attention", format_bytes(lm.all_full_attention_bytes_per_sequence),
               help=f"{lm.all_full_attention_bytes_per_sequence:,} B: the same attention shape in all "
                    f"{len(lm.cells)} layers, no state")])
    if not lm.uniform:
        charts.show(figure(lm, present), "layer-map")
        return
    # Every layer the same: one sentence says what a chart of identical cells would, and the chart
    # waits in an expander (a changed chart costs the browser two full Plotly draws; benchmarks/browser.py).
    cell = lm.cells[0]
    n = len(lm.cells)
    st.caption((f"All {n} layers hold the same: {cell.label}, {format_bytes(cell.bytes)} each" if n > 1 else
                f"The one layer holds {cell.label}, {format_bytes(cell.bytes)}")
               + f" for one sequence at {format_tokens(lm.context)} ({cell.bytes:,} B).")
    box = layout.lazy_expander("The layer map chart", "_kv_layer_map_open")
    if box.open:
        with box:
            charts.show(figure(lm, present), "layer-map")
