"""KV cache: the chosen model's cache, and the same width costed as MHA, GQA, MQA and MLA."""
import pandas as pd
import streamlit as st

from mla_core.config import loads_config, parse_config
from mla_core.errors import MLAError
from mla_core.kv import (compare_variants, default_gqa_groups, gqa_group_choices, kv_report, variant_specs)
from mla_core.kv import layer_map as kv_layer_map
from mla_core.sweeps import kv_cache_bytes_vs_context, log_contexts
from mla_core.units import GiB, format_bytes, format_tokens, format_tokens_exact
from ui import charts, layer_map, models, params, state, text
from ui.charts import go  # plotly.graph_objects' spelling, built as plain dicts (ui/charts.py)
from ui.text import escape_md

v = state.values()
present = v["present"]
st.title("KV cache: MLA against MHA, GQA and MQA")


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
    if text.strip():
        _use_config_bytes(text, "pasted config")


def _use_by_hand():
    state.set_values(model=params.CUSTOM)


def _start_from_current():
    m, _ = models.resolve_model(state.values())
    a = m.attention
    kw = dict(attention=m.kind, layers=min(m.num_hidden_layers, 1000), heads=min(a.num_attention_heads, 1024),
              head_dim=min(a.head_dim, 1024))
    if m.kind == "gqa":
        kw["kv_heads"] = a.num_key_value_heads
    if m.is_mla:
        kw.update(kv_lora_rank=a.kv_lora_rank, rope_dim=a.qk_rope_head_dim)
    state.set_values(model=params.CUSTOM, **kw)


with st.expander("Model: upload or paste a config.json, or set the architecture by hand",
                 expanded=(v["model"] in (params.CUSTOM, params.UPLOAD)) and not present):
    tab_up, tab_paste, tab_hand = st.tabs(["Upload config.json", "Paste config.json", "Set by hand"])
    with tab_up:
        st.file_uploader("A Hugging Face config.json (at most 1 MiB)", type=["json"], key="_upload",
                         on_change=_on_upload)
    with tab_paste:
        st.text_area("config.json text (at most 1 MiB)", key="_paste", height=160, max_chars=params.MAX_PASTE_CHARS)
        st.button("Use the pasted config", on_click=_on_paste)
    with tab_hand:
        c1, c2, c3, c4 = st.columns(4)
        c1.selectbox("Attention", ["mha", "gqa", "mqa", "mla"], key="attention", format_func=str.upper)
        c2.number_input("Layers", 1, 1000, step=1, key="layers")
        c3.number_input("Query heads", 1, 1024, step=1, key="heads")
        c4.number_input("Head dim d_h", 1, 1024, step=1, key="head_dim")
        c1, c2, c3, _ = st.columns(4)
        c1.number_input("KV heads (GQA)", 1, 1024, step=1, key="kv_heads", disabled=v["attention"] != "gqa")
        c2.number_input("MLA latent d_c (kv_lora_rank)", 1, 16384, step=64, key="kv_lora_rank",
                        disabled=v["attention"] != "mla")
        c3.number_input("MLA RoPE key d_r (qk_rope_head_dim)", 1, 1024, step=16, key="rope_dim",
                        disabled=v["attention"] != "mla")
        b1, b2 = st.columns(2)
        b1.button("Use this architecture", on_click=_use_by_hand, type="primary")
        b2.button("Start from the current model", on_click=_start_from_current)

if st.session_state.get("_model_error"):
    text.error(st.session_state["_model_error"])
if v["model"] == params.UPLOAD and len(v["config"]) > params.MAX_PARAM_CHARS:
    st.info(f"This config is too large for a link ({len(v['config']):,} characters encoded; links carry "
            f"{params.MAX_PARAM_CHARS:,}): it works in this session, but a copied link opens the default model.")

model = models.current_model()
kv_dtype, dtype_warning = models.kv_dtype_for(model, v["kv_dtype"])
if dtype_warning:
    text.warning(dtype_warning)
layout = v["cache_layout"] if model.is_mla else "latent"
if layout == "expanded" and kv_dtype == "fp8_ds_mla":
    st.warning("fp8_ds_mla stores the latent only; the latent layout is shown.")
    layout = "latent"
block = v["block_size"] or None
T, B = v["context"], v["batch"]

try:
    report = kv_report(model, T, B, kv_dtype, layout, block)
except MLAError as e:
    text.error(e)
    st.stop()

a = model.attention
shape = (f"{model.num_hidden_layers} layers, {a.num_attention_heads} query heads, "
         + (f"latent d_c {a.kv_lora_rank} + decoupled RoPE key d_r {a.qk_rope_head_dim}" if model.is_mla
            else f"{a.num_key_value_heads} KV heads of d_h {a.head_dim}"))
st.caption(f"**{escape_md(model.name)}**: {model.kind.upper()}, {shape}; KV stored as {report['kv_dtype']}"
           + (f", {model.num_sliding_layers} sliding-window layers" if model.num_sliding_layers else ""))
for note in model.notes:
    st.caption(f"Note: {escape_md(note, 200)}")

m1, m2, m3, m4 = st.columns(4)
m1.metric("KV bytes per token", format_bytes(report["kv_bytes_per_token"]),
          help=f"{report['kv_bytes_per_token']:,} B: one new token, all layers, before any window cap")
m2.metric("Per token per layer", format_bytes(report["kv_bytes_per_token_per_layer"]),
          help=f"{report['kv_bytes_per_token_per_layer']:,} B")
m3.metric("Per sequence", format_bytes(report["kv_cache_bytes_per_sequence"]),
          help=f"{report['kv_cache_bytes_per_sequence']:,} B for one sequence of {format_tokens_exact(T)}")
m4.metric(f"Batch of {B:,}", format_bytes(report["kv_cache_bytes"]), help=f"{report['kv_cache_bytes']:,} B")

# --- the layer map: what each layer holds ---------------------------------------------------------
try:
    layer_map.section(kv_layer_map(model, T, kv_dtype, layout, block_size=block), present)
except MLAError as e:
    text.error(e)

# --- the same width as MHA, GQA, MQA and MLA ----------------------------------------------------
st.subheader("The same width, four ways")
with st.expander("Comparison settings", expanded=not present):
    c1, c2, c3, c4, c5 = st.columns(5)
    choices = gqa_group_choices(model)
    if v["gqa_groups"] not in (0, *choices):
        text.warning(f"GQA groups {v['gqa_groups']} does not divide the {a.num_attention_heads} query heads of "
                     f"{model.name}; the default is used.")
        st.session_state["gqa_groups"] = 0
    v["gqa_groups"] = c1.selectbox("GQA groups (KV heads)", [0, *choices], key="gqa_groups",
                                   format_func=lambda g: f"default ({default_gqa_groups(model)})" if g == 0 else str(g))
    c2.number_input("MLA d_c (0 = model's / 4 d_h)", 0, 16384, step=64, key="cmp_kv_lora_rank")
    c3.number_input("MLA d_r (0 = model's / d_h/2)", 0, 1024, step=16, key="cmp_rope_dim")
    c4.selectbox("Block size (tokens)", sorted({0, 1, 16, 32, 64, 128, 256, v["block_size"]}), key="block_size",
                 format_func=lambda n: "no rounding" if n == 0 else str(n))
    if model.is_mla:
        c5.radio("MLA cache layout", ["latent", "expanded"], key="cache_layout",
                 help="latent: (d_c + d_r) per token per layer (absorbed path, MLA-aware engines). "
                      "expanded: per-head K and V (the naive path; engines without MLA support).")

cmp_kw = dict(gqa_groups=v["gqa_groups"] or None, kv_lora_rank=v["cmp_kv_lora_rank"] or None,
              qk_rope_head_dim=v["cmp_rope_dim"] or None, block_size=block)
try:
    rows = compare_variants(model, T, B, kv_dtype, **cmp_kw)
    specs = variant_specs(model, kv_dtype, gqa_groups=cmp_kw["gqa_groups"], kv_lora_rank=cmp_kw["kv_lora_rank"],
                          qk_rope_head_dim=cmp_kw["qk_rope_head_dim"])
except MLAError as e:
    text.error(e)
    st.stop()

by_key = {r["key"]: r for r in rows}
mla_row = by_key["mla"]
sentence = (f"**MLA = GQA with {mla_row['gqa_groups_equivalent']:.3g} groups**: the latent is "
            f"{mla_row['vs_mha']:.1f}x smaller than MHA")
if "mla-expanded" in by_key:
    sentence += (f", and {by_key['mla-expanded']['vs_mla_latent']:.1f}x "
                 "smaller than the expanded per-head cache an MLA-unaware engine keeps")
st.markdown(sentence + ".")
st.caption("Convention: same layers, query heads and windows; the MHA, GQA and MQA rows use d_h "
           + ("= qk_nope_head_dim (DeepSeek-V2 Table 1's d_h)" if model.is_mla else f"= {a.head_dim}")
           + "; an MLA row for a non-MLA model takes d_c = 4 d_h and d_r = d_h / 2 (Table 1's setting) "
             "unless set above. Bytes in binary units (KiB = 1024 B).")

table = pd.DataFrame([{
    "variant": r["variant"] + (" (this model)" if r["is_model"] else ""),
    "KV heads": str(r["kv_heads"]) if r["kv_heads"] is not None else "latent",
    "KV dtype": r["kv_dtype"],
    "per token": format_bytes(r["kv_bytes_per_token"]),
    f"batch x {format_tokens(T)}": format_bytes(r["kv_cache_bytes"]),
    "MHA / this": round(r["vs_mha"], 2),
    "as GQA groups": round(r["gqa_groups_equivalent"], 3),
} for r in rows])
st.dataframe(table, hide_index=True)
csv = pd.DataFrame([{
    "variant": r["variant"], "is_model": r["is_model"], "kv_heads": r["kv_heads"], "kv_dtype": r["kv_dtype"],
    "kv_bytes_per_token": r["kv_bytes_per_token"], "context": T, "batch": B, "kv_cache_bytes": r["kv_cache_bytes"],
    "vs_mha": r["vs_mha"], "gqa_groups_equivalent": r["gqa_groups_equivalent"],
} for r in rows]).astype({"kv_heads": "Int64"}).to_csv(index=False)
st.download_button("Download the table (CSV)", csv, file_name="kv_cache_variants.csv", mime="text/csv")

# --- cache against context ------------------------------------------------------------------------
hi = min(params.MAX_UI_CONTEXT, max(1 << 20, 4 * T))
contexts = log_contexts(min(1024, T), hi, 256)
fig = go.Figure()
for var in specs:
    label, spec, lay, dtype = var
    nbytes = kv_cache_bytes_vs_context(spec, contexts, B, dtype, lay, block_size=block)
    exact = [format_bytes(int(n)) + f" ({int(n):,} B)" for n in nbytes]
    fig.add_trace(go.Scatter(
        x=contexts, y=[int(n) / GiB for n in nbytes], mode="lines", name=label,
        line={"color": charts.color_for(label), "width": 4 if present else 2.5},
        customdata=[[e, format_tokens(int(t))] for e, t in zip(exact, contexts)],
        hovertemplate=f"{label}<br>%{{customdata[1]}}<br>%{{customdata[0]}}<extra></extra>",
    ))
    here = by_key[var.key]["kv_cache_bytes"]
    fig.add_trace(go.Scatter(x=[T], y=[here / GiB], mode="markers", showlegend=False,
                             marker={"color": charts.color_for(label), "size": 14 if present else 10,
                                     "line": {"width": 1, "color": "#333"}},
                             hovertemplate=f"{label} at {format_tokens(T)}<br>{format_bytes(here)} "
                                           f"({here:,} B)<extra></extra>"))
charts.style(fig, title=f"KV cache of {B:,} sequence(s) against context", x_title="context (tokens per sequence)",
             y_title="KV cache (GiB)", log_x=True, log_y=True, present=present,
             x_tokens=(int(contexts[0]), int(contexts[-1])))
charts.show(fig, "kv-cache-vs-context")
