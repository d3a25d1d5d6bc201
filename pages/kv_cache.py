"""KV cache: the chosen model's cache, and the same width costed as MHA, GQA, MQA and MLA.

Sections, each drawing what one core call returns: `model_source` (upload, paste or by hand),
`what_if` (mla_core.whatif.what_if_panel), `summary` (mla_core.views.kv_summary, once per
model column), `variants` (views.kv_variants) and `context_chart` (views.kv_sweep). In
presentation mode the page is one slide: title, key numbers, the chart; controls follow.
"""
from ui.charts import plot  # plotly.graph_objects spelling, built as plain dicts
import streamlit as st

from mla_core.config import loads_config, parse_config
from mla_core.errors import MLAError
from mla_core.layermap import layer_map as kv_layer_map
from mla_core.presets import model_ids
from mla_core.units import GiB, format_bytes, format_tokens
from mla_core.views import kv_ratio, kv_summary, kv_sweep, kv_variants, legend_name
from mla_core.whatif import hand_set_values
from ui import charts, layer_map, layout, models, params, state, text, whatif
from ui.metrics import Metric, metric_row
from ui.text import csv_text, escape_md, frame

v = state.values()
present = v["present"]
T, B = v["context"], v["batch"]
block = v["block_size"] or None


# --- where the model comes from: preset (sidebar), upload, paste, or by hand ----------------------
def _use_config_bytes(data, source: str, name: str | None = None):
    try:
        cfg = loads_config(data, source=name or "config.json")
        if name and not isinstance(cfg.get("_name_or_path"), str):
            cfg["_name_or_path"] = name  # the file's name names the model, as on the command line
        parse_config(cfg)
        encoded = params.encode_config(cfg)
        params.decode_config(encoded)  # what the link will carry must read back
    except MLAError as e:
        st.session_state["_model_error"] = f"{source}: {e}"
        return
    st.session_state["_model_error"] = None
    whatif.reset()
    state.set_values(config=encoded, model=params.UPLOAD)


def _on_upload():
    f = st.session_state.get("_upload")
    if f is not None:
        stem = f.name.rsplit(".", 1)[0] if f.name.lower().endswith(".json") else f.name
        _use_config_bytes(f.getvalue(), f"uploaded {f.name!r}", stem if stem != "config" else None)


def _on_paste():
    text = st.session_state.get("_paste") or ""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > params.MAX_CONFIG_BYTES_UI:
        st.session_state["_model_error"] = (f"pasted config: the text is {size:,} bytes; a config.json may be at most "
                                            f"{params.MAX_CONFIG_BYTES_UI:,} bytes (1 MiB). Nothing was changed.")
        st.session_state["_paste"] = ""  # not re-sent with every rerun
        return
    _use_config_bytes(text, "pasted config")  # an empty box is refused with its own message


def _use_by_hand():
    whatif.reset()
    state.set_values(model=params.CUSTOM)


def _start_from_current():
    m, _ = models.resolve_model(state.values())
    whatif.reset()
    state.set_values(model=params.CUSTOM, **hand_set_values(m))


def _rerun_page():
    """A callback: the whole page reruns (the title names the second model), not only its section."""
    st.rerun(scope="app")


def model_source():
    """Where the model comes from besides the sidebar's presets (widgets only). Drawn when the
    toggle is on (or the model already is an upload or set by hand): the uploader, the text box
    and the ten inputs cost a fifth of a rerun, so a slider move does not pay for them."""
    if v["model"] in (params.CUSTOM, params.UPLOAD) and st.session_state.get("_own_model") is None:
        st.session_state["_own_model"] = True
    if not st.toggle("Bring your own model: upload or paste a config.json, or set the architecture by hand",
                     persist_state="session", key="_own_model"):
        return
    with st.container(border=True):
        tab_up, tab_paste, tab_hand = st.tabs(["Upload config.json", "Paste config.json", "Set by hand"])
        with tab_up:
            st.file_uploader("A Hugging Face config.json (at most 1 MiB)", type=["json"], key="_upload",
                             on_change=_on_upload)
        with tab_paste:
            st.text_area("config.json text (at most 1 MiB)", persist_state="session", key="_paste", height=160,
                         max_chars=params.MAX_PASTE_CHARS)
            st.button("Use the pasted config", on_click=_on_paste)
        with tab_hand:
            c1, c2, c3, c4 = st.columns(4)
            c1.selectbox("Attention", ["mha", "gqa", "mqa", "mla"], persist_state="session", key=state.seeded("attention"), format_func=str.upper)
            c2.number_input("Layers", 1, 1000, step=1, persist_state="session", key=state.seeded("layers"))
            c3.number_input("Query heads", 1, 1024, step=1, persist_state="session", key=state.seeded("heads"))
            c4.number_input("Head dim d_h", 1, 1024, step=1, persist_state="session", key=state.seeded("head_dim"))
            c1, c2, c3, _ = st.columns(4)
            c1.number_input("KV heads (GQA)", 1, 1024, step=1, persist_state="session", key=state.seeded("kv_heads"), disabled=v["attention"] != "gqa")
            c2.number_input("MLA latent d_c (kv_lora_rank)", 1, 16384, step=64, persist_state="session", key=state.seeded("kv_lora_rank"),
                            disabled=v["attention"] != "mla")
            c3.number_input("MLA RoPE key d_r (qk_rope_head_dim)", 1, 1024, step=16, persist_state="session", key=state.seeded("rope_dim"),
                            disabled=v["attention"] != "mla")
            b1, b2 = st.columns(2)
            b1.button("Use this architecture", on_click=_use_by_hand, type="primary")
            b2.button("Start from the current model", on_click=_start_from_current)


def model_messages():
    """The upload/paste error kept for this run, and the too-large-for-a-link note."""
    if st.session_state.get("_model_error"):
        text.error(st.session_state["_model_error"])
    if v["model"] == params.UPLOAD and len(v["config"]) > params.MAX_PARAM_CHARS:
        st.info(f"This config is too large for a link ({len(v['config']):,} characters encoded; links carry "
                f"{params.MAX_PARAM_CHARS:,}): it works in this session, but a copied link opens the default model.")


def second_model_picker():
    """A second preset beside the first (state key `kv_model2`); returns it or None."""
    labels = models.model_labels()
    st.selectbox("Second model, in its own column", ["", *model_ids()], persist_state="session", key=state.seeded("kv_model2"),
                 format_func=lambda k: "(none)" if not k else labels.get(k, k), on_change=_rerun_page,
                 help="A preset costed at the sidebar's context, batch and KV dtype beside the first model; "
                      "its cache is drawn on the chart too.")
    return models.preset(v["kv_model2"]) if v["kv_model2"] else None


def summary(model, kv_dtype, *, columns: int = 4, tag: str = "", only: tuple[int, ...] = (0, 1, 2, 3),
            deferred: list | None = None):
    """The model's headline numbers (views.kv_summary); returns the summary, or None when the
    core refuses the inputs (the error is shown)."""
    try:
        s = kv_summary(model, T, B, kv_dtype, v["cache_layout"], block)
    except MLAError as e:
        text.error(e)
        return None
    if present and deferred is not None:  # on a slide the warnings follow the chart
        deferred.extend(s.warnings)
    else:
        with layout.slot():
            for w in s.warnings:
                text.warning(w)
    r = s.report
    st.caption(f"**{escape_md(s.model)}**: {s.kind.upper()}, {s.shape}; KV stored as {r['kv_dtype']}"
               + (f", {s.sliding_layers} sliding-window layers" if s.sliding_layers else ""))
    if not present:
        with layout.slot():
            for note in s.notes:
                st.caption(f"Note: {escape_md(note, 200)}")
    metrics = [
        ("KV bytes per token", r["kv_bytes_per_token"], "one new token, all layers, before any window cap"),
        ("Per token per layer", r["kv_bytes_per_token_per_layer"], "one token in one layer"),
        ("Per sequence", r["kv_cache_bytes_per_sequence"], f"one sequence of {T:,} tokens"),
        (f"Batch of {B:,}", r["kv_cache_bytes"], f"{B:,} sequences of {T:,} tokens"),
    ]
    metrics = [metrics[i] for i in only]
    for i in range(0, len(metrics), columns):
        cells = [Metric(label + tag, format_bytes(n), help=f"{n:,} B: {what}") for label, n, what in metrics[i:i + columns]]
        metric_row(cells + [None] * (columns - len(cells)))
    return s


COMPARISON_KEYS = ("gqa_groups", "cmp_kv_lora_rank", "cmp_rope_dim", "block_size", "cache_layout")


def comparison_settings(box, k):
    """The comparison's own widgets (state keys COMPARISON_KEYS) in `box`."""
    with box:
        c1, c2, c3, c4, c5 = st.columns(5)
        c1.selectbox("GQA groups (KV heads)", k.gqa_choices, persist_state="session", key=state.seeded("gqa_groups"),
                     format_func=lambda g: f"default ({k.default_gqa_groups})" if g == 0 else str(g))
        c2.number_input("MLA d_c (0 = model's / 4 d_h)", 0, 16384, step=64, persist_state="session", key=state.seeded("cmp_kv_lora_rank"))
        c3.number_input("MLA d_r (0 = model's / d_h/2)", 0, 1024, step=16, persist_state="session", key=state.seeded("cmp_rope_dim"))
        c4.selectbox("Block size (tokens)", sorted({0, 1, 16, 32, 64, 128, 256, v["block_size"]}), persist_state="session", key=state.seeded("block_size"),
                     format_func=lambda n: "no rounding" if n == 0 else str(n))
        if k.model_is_mla:
            c5.radio("MLA cache layout", ["latent", "expanded"], persist_state="session", key=state.seeded("cache_layout"),
                     help="latent: (d_c + d_r) per token per layer (absorbed path, MLA-aware engines). "
                          "expanded: per-head K and V (the naive path; engines without MLA support).")


def variants(model, kv_dtype):
    """The same width as MHA, GQA, MQA and MLA (views.kv_variants): sentence, table, CSV."""
    try:
        k = kv_variants(model, T, B, kv_dtype, gqa_groups=v["gqa_groups"], kv_lora_rank=v["cmp_kv_lora_rank"],
                        qk_rope_head_dim=v["cmp_rope_dim"], block_size=block)
    except MLAError as e:
        text.error(e)
        return
    with layout.slot():
        for w in k.warnings:
            text.warning(w)
    if v["gqa_groups"] != k.gqa_groups:  # refused: the widget shows the default used
        state.set_values(gqa_groups=k.gqa_groups)
    # Drawn while open: open at first on a desk when the link sets one of them (else closed,
    # so a slider move does not pay for five widgets nobody looks at).
    changed = state.any_set(v, COMPARISON_KEYS)
    box = layout.lazy_expander("Comparison settings: GQA groups, MLA d_c and d_r, block size, cache layout",
                               "_kv_comparison_open", expanded=changed and not present)
    if box.open:
        comparison_settings(box, k)
    # The columns keep their names as context and batch move (the heading says them): a renamed
    # column makes the browser's table rebuild itself, about 0.2 s after the numbers (benchmarks/browser.py).
    st.subheader(f"The same width, {len(k.rows)} ways, at {format_tokens(T)}, batch {B:,}")
    sentence = (f"**MLA = GQA with {k.mla_as_gqa_groups:.3g} groups**: the latent is {k.mla_vs_mha:.1f}x smaller "
                "than MHA")
    if k.expanded_vs_latent is not None:
        sentence += (f", and {k.expanded_vs_latent:.1f}x smaller than the expanded per-head cache an MLA-unaware "
                     "engine keeps")
    st.markdown(sentence + ".")
    if not present:
        st.caption(f"Convention: same layers, query heads and windows; the MHA, GQA and MQA rows use d_h = "
                   f"{k.baseline_head_dim}; an MLA row for a non-MLA model takes d_c = 4 d_h and d_r = d_h / 2 "
                   "(Table 1's setting) unless set above. Bytes in binary units (KiB = 1024 B).")
    rows = [{
        "variant": r["variant"] + (" (this model)" if r["is_model"] else ""),
        "KV heads": str(r["kv_heads"]) if r["kv_heads"] is not None else "latent",
        "KV dtype": r["kv_dtype"],
        "per token": format_bytes(r["kv_bytes_per_token"]),
        "whole batch": format_bytes(r["kv_cache_bytes"]),
        "MHA / this": round(r["vs_mha"], 2),
        "as GQA groups": round(r["gqa_groups_equivalent"], 3),
    } for r in k.rows]
    table = frame(rows)
    if present:  # a slide keeps the columns that carry the comparison
        table = table.select(["variant", "per token", "whole batch", "MHA / this"])
    st.dataframe(table, hide_index=True)
    csv = csv_text([{
        "variant": r["variant"], "is_model": r["is_model"], "kv_heads": r["kv_heads"], "kv_dtype": r["kv_dtype"],
        "kv_bytes_per_token": r["kv_bytes_per_token"], "context": T, "batch": B, "kv_cache_bytes": r["kv_cache_bytes"],
        "vs_mha": r["vs_mha"], "gqa_groups_equivalent": r["gqa_groups_equivalent"],
    } for r in k.rows])
    st.download_button("Download the table (CSV)", csv, file_name="kv_cache_variants.csv", mime="text/csv")


def context_chart(model, kv_dtype, second=None):
    """KV cache against context for each variant and the second model (views.kv_sweep)."""
    try:
        sw = kv_sweep(model, T, B, kv_dtype, gqa_groups=v["gqa_groups"], kv_lora_rank=v["cmp_kv_lora_rank"],
                      qk_rope_head_dim=v["cmp_rope_dim"], block_size=block, second=second)
    except MLAError as e:
        text.error(e)
        return
    fig = plot.Figure()
    lines = [*sw.series, *([sw.second] if sw.second else [])]
    for s in lines:
        name = charts.plot_text(legend_name(s.label, sw.same_as) + (" (this model)" if s.is_model else ""))
        fig.add_trace(dict(
            type="scatter", x=list(s.x), y=[n / GiB for n in s.y], mode="lines", name=name,
            line={"color": charts.INK if s is sw.second else charts.color_for(s.label), "width": 4 if present else 2.5,
                  "dash": "dash" if s is sw.second else "solid"},
            customdata=[[f"{format_bytes(n)} ({n:,} B)", format_tokens(t)] for n, t in zip(s.y, s.x)],
            hovertemplate=f"{name}<br>%{{customdata[1]}}<br>%{{customdata[0]}}<extra></extra>"))
    fig.add_trace(dict(
        type="scatter", x=[s.x_here for s in lines], y=[s.y_here / GiB for s in lines], mode="markers",
        showlegend=False,
        marker={"color": [charts.color_for(s.label) if s is not sw.second else charts.INK for s in lines],
                "size": 14 if present else 10, "line": {"width": 1, "color": "#333"}},
        customdata=[[charts.plot_text(s.label), format_bytes(s.y_here), f"{s.y_here:,}"] for s in lines],
        hovertemplate=f"%{{customdata[0]}} at {format_tokens(T)}<br>%{{customdata[1]}} (%{{customdata[2]}} B)"
                      "<extra></extra>"))
    charts.style(fig, title=f"KV cache of {B:,} sequence(s) against context", x_title="context (tokens per sequence)",
                 y_title="KV cache (GiB)", log_x=True, log_y=True, present=present, height=charts.slide_height(present),
                 x_tokens=(sw.series[0].x[0], sw.series[0].x[-1]))
    charts.show(fig, "kv-cache-vs-context", key="_kv_chart")


def layers(model, s):
    """What each layer holds (mla_core.layermap.layer_map), at the dtype and layout the summary used."""
    if s is None:
        return
    try:
        layer_map.section(kv_layer_map(model, T, s.kv_dtype, s.cache_layout, block_size=block), present)
    except MLAError as e:
        text.error(e)


# --- the page -------------------------------------------------------------------------------------------
def summaries(model, kv_dtype, second, deferred: list):
    """One column per model: the chosen (what-if) model, and the second model when picked, with
    the second's cache against the first's (views.kv_ratio)."""
    if second is None:
        return summary(model, kv_dtype, deferred=deferred)
    only = (0, 2) if present else (0, 1, 2, 3)  # a slide keeps one row: per token and per sequence
    c1, c2 = st.columns(2)
    with c1:
        first = summary(model, kv_dtype, columns=2, only=only, deferred=deferred)
    with c2:
        other = summary(second, v["kv_dtype"], columns=2, tag="" if present else ", second model", only=only,
                        deferred=deferred)
    if first is not None and other is not None:
        st.markdown(f"**{escape_md(kv_ratio(first, other).sentence, 300)}**")
    return first


@layout.section
def model_numbers():
    """Everything the what-if sliders, the second model and the comparison settings change: one
    section (they all change the model the numbers are of), rerun alone when one of them moves."""
    global v, block
    v = state.values()
    block = v["block_size"] or None
    base = models.current_model()
    wi = whatif.panel_state(base, v)
    model, kv_dtype = wi.model, wi.kv_dtype
    second = models.preset(v["kv_model2"]) if v["kv_model2"] else None
    deferred: list[str] = []  # warnings a slide shows below its chart
    if present:  # one slide: key numbers and the chart first, the controls below it
        s = summaries(model, kv_dtype, second, deferred)
        context_chart(model, kv_dtype, second)
        with layout.slot():
            for w in dict.fromkeys(deferred):
                text.warning(w)
        whatif.draw(base, wi, v, expanded=False)
        layers(model, s)
        variants(model, kv_dtype)
        with st.expander("Second model", expanded=False):
            second_model_picker()
    else:
        whatif.draw(base, wi, v)
        second_model_picker()
        s = summaries(model, kv_dtype, second, deferred)
        layers(model, s)
        variants(model, kv_dtype)
        context_chart(model, kv_dtype, second)


charts.page_title("KV cache", "MLA against MHA, GQA and MQA", models.resolve_model(v)[0].name, T,
                  extra=(f"beside {models.preset(v['kv_model2']).name}" if v["kv_model2"] else None), present=present)
if present:
    model_numbers()
    model_source()
    with layout.slot():
        model_messages()
else:
    model_source()
    with layout.slot():
        model_messages()
    model_numbers()
