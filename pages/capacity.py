"""Capacity: tokens and whole requests that fit per GPU and per deployment; MLA against MHA/GQA/MQA.

Every number comes from mla_core.capacity (scalars) or mla_core.sweeps (chart arrays); this page
reads the shared state, calls them and draws. Definitions: docs/model.md, "Capacity per GPU".
"""
import html

import pandas as pd
import streamlit as st

from mla_core.capacity import (allocator_waste, capacity, capacity_variants, default_block_size,
                               memory_breakdown)
from mla_core.errors import MLAError
from mla_core.kv import gqa_group_choices, heads_per_gpu, variant_specs
from mla_core.presets import gpu_ids, model_ids
from mla_core.sweeps import concurrent_requests_vs_context, log_contexts
from mla_core.units import (KV_DTYPES, WEIGHT_DTYPES, GiB, format_bytes, format_count, format_tokens,
                            format_tokens_exact, gib_to_bytes)
from ui import charts, models, params, state
from ui.charts import go  # plotly.graph_objects' spelling, built as plain dicts (ui/charts.py)
from ui.text import escape_md

v = state.values()
present = v["present"]
T = v["context"]
BLOCK_CHOICES = [0, 1, 16, 32, 64, 128, 256]
GMU_MIN = 0.01  # the widget's floor; the URL may carry anything in (0, 1]
st.title("Capacity: concurrent requests per GPU")


def _plot_text(text: str) -> str:
    """User-supplied text (an uploaded model's name) for Plotly, which renders a little HTML."""
    return html.escape(str(text)[:60])


def _exact(n: int) -> str:
    return f"{format_bytes(n)} ({n:,} B)"


def _requests(n: int) -> str:
    return f"{n:,}"


def _mode(dp_attention: bool, tp: int) -> str:
    return "DP-attention" if dp_attention else f"TP{tp}"


def _check_parallel(num_gpus: int, tp: int, where: str) -> tuple[int, str | None]:
    """(num_gpus to use, error): tp must divide num_gpus (docs/model.md); else one TP group is shown."""
    if num_gpus % tp:
        return tp, (f"{where}: tp ({tp}) must divide num_gpus ({num_gpus}). "
                    f"Showing num_gpus = {tp} (one TP group) instead.")
    return num_gpus, None


def _no_fit(r: dict, gmu: float | None = None) -> str:
    """Why a capacity result holds no KV cache: the weights, or the weights and the reserve."""
    usable = format_bytes(r["usable_bytes_per_gpu"]) + " usable" + (
        f" (gpu_memory_utilization {gmu:g} × {format_bytes(r['memory_bytes_per_gpu'])})" if gmu else "")
    if r["weights_bytes_per_gpu"] >= r["usable_bytes_per_gpu"] or not r["reserve_bytes"]:
        return f"Weights do not fit: {format_bytes(r['weights_bytes_per_gpu'])} needed per GPU, {usable}."
    return (f"Weights and reserve do not fit: {format_bytes(r['weights_bytes_per_gpu'])} of weights and "
            f"{format_bytes(r['reserve_bytes'])} of reserve per GPU, {usable} "
            f"({format_bytes(memory_breakdown(r)['over'])} short).")


def _example():
    """DeepSeek-V3 on 8 H200 at fp8 KV (TP8), against Llama-3.1-405B on the same GPUs and
    DeepSeek-V3 with DP-attention."""
    state.set_values(model="deepseek-v3", gpu="h200", kv_dtype="fp8", context=131072, num_gpus=8, tp=8,
                     dp_attention=False, gpu_memory_gib=0.0, weights_dtype="auto", block_size=0,
                     cmp2_model="llama-3.1-405b", cmp2_gpu="h200", cmp2_num_gpus=8, cmp2_tp=8,
                     cmp2_dp_attention=False, cmp2_kv_dtype="fp8",
                     cmp3_model="deepseek-v3", cmp3_gpu="h200", cmp3_num_gpus=8, cmp3_tp=8,
                     cmp3_dp_attention=True, cmp3_kv_dtype="fp8")


# --- configuration 1: the shared sidebar state and this page's controls ---------------------------
model = models.current_model()
if v["gpu_memory_utilization"] < GMU_MIN:
    st.warning(f"gpu_memory_utilization {v['gpu_memory_utilization']:g} is below {GMU_MIN}; {GMU_MIN} is used.")
    st.session_state["gpu_memory_utilization"] = v["gpu_memory_utilization"] = GMU_MIN
blocks = sorted({*BLOCK_CHOICES, v["block_size"]})

with st.expander("Deployment: GPUs, parallelism, dtypes and memory (configuration 1)", expanded=not present):
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("GPUs (num_gpus)", 1, 4096, step=1, key="num_gpus")
    c2.number_input("Tensor parallel size (tp)", 1, 4096, step=1, key="tp",
                    help="Weights split tp ways; MHA/GQA KV heads split too (never below one per GPU). "
                         "The MLA latent has no head axis: every TP rank stores all of it.")
    c3.toggle("DP-attention (dp_attention)", key="dp_attention",
              help="Attention data parallelism: each GPU holds whole, distinct sequences with all their KV "
                   "heads; attention weights are whole on every GPU, the rest (experts) split over all GPUs.")
    c4.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], key="weights_dtype",
                 format_func=lambda d: f"auto ({model.default_weights_dtype})" if d == "auto" else d,
                 help="auto = the model's default: fp8 for fp8 checkpoints (quantization_config), else torch_dtype.")
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("gpu_memory_utilization", GMU_MIN, 1.0, step=0.01, format="%.2f", key="gpu_memory_utilization",
                    help="vLLM's meaning: the fraction of each GPU's memory the engine may use for weights, "
                         "KV cache and the reserve. The rest is left alone (headroom).")
    c2.number_input("GPU memory, GiB (0 = the preset's)", 0.0, 1e6, step=1.0, format="%.2f", key="gpu_memory_gib",
                    help="Type what your driver reports (e.g. nvidia-smi's MiB / 1024) to replace the preset's figure.")
    c3.number_input("Reserve per GPU, GiB", 0.0, 1e6, step=0.5, format="%.2f", key="reserve_gib",
                    help="Kept out of the KV budget: activations, CUDA graphs, the sampler, fragmentation.")
    c4.selectbox("Block size (tokens)", blocks, key="block_size",
                 format_func=lambda n: f"default ({default_block_size(model)})" if n == 0 else str(n),
                 help="KV page size. Default: 64 for MLA models (FlashMLA), 16 otherwise (vLLM).")
    st.caption("GPU preset, KV cache dtype and context are in the sidebar; configurations 2 and 3 are set "
               "further down.")

kv_dtype, dtype_warning = models.kv_dtype_for(model, v["kv_dtype"])
if dtype_warning:
    st.warning(escape_md(dtype_warning, 400))
try:
    gpu = models.current_gpu(v)
except MLAError as e:
    st.warning(escape_md(f"{e}; the preset's memory is used.", 400))
    gpu = models.gpu_preset(v["gpu"])
tp = v["tp"]
num_gpus, parallel_error = _check_parallel(v["num_gpus"], tp, "Configuration 1")
if parallel_error:
    st.error(escape_md(parallel_error, 400))
dp = v["dp_attention"]
shared = dict(
    context=T,
    weights_dtype=None if v["weights_dtype"] == "auto" else v["weights_dtype"],
    gpu_memory_utilization=v["gpu_memory_utilization"],
    block_size=v["block_size"] or None,
    reserve_bytes=gib_to_bytes(v["reserve_gib"]),
)
base = dict(shared, gpu=gpu, num_gpus=num_gpus, tp=tp, kv_dtype=kv_dtype)
try:
    by_mode = {mode: capacity(model, dp_attention=mode, **base) for mode in (False, True)}
except MLAError as e:
    st.error(escape_md(str(e), 400))
    st.stop()
main = by_mode[dp]


# --- configurations 2 and 3 (computed here, drawn in the comparison section) ----------------------
def _configuration(i: int) -> dict | None:
    model_id = v[f"cmp{i}_model"]
    if not model_id:
        return None
    out = {"i": i, "messages": []}
    try:
        m = models.preset(model_id)
        g = models.gpu_preset(v[f"cmp{i}_gpu"])
    except MLAError as e:
        out["messages"].append(("error", str(e)))
        return out
    dtype, warning = models.kv_dtype_for(m, v[f"cmp{i}_kv_dtype"])
    if warning:
        out["messages"].append(("warning", warning))
    n, err = _check_parallel(v[f"cmp{i}_num_gpus"], v[f"cmp{i}_tp"], f"Configuration {i}")
    if err:
        out["messages"].append(("error", err))
    out.update(model=m, gpu=g, num_gpus=n, tp=v[f"cmp{i}_tp"], dp=v[f"cmp{i}_dp_attention"])
    try:
        out["result"] = capacity(m, gpu=g, num_gpus=n, tp=out["tp"], dp_attention=out["dp"], kv_dtype=dtype, **shared)
    except MLAError as e:
        out["messages"].append(("error", str(e)))
    return out


configs = [{"i": 1, "messages": [], "model": model, "gpu": gpu, "num_gpus": num_gpus, "tp": tp, "dp": dp,
            "result": main}]
configs += [c for c in (_configuration(2), _configuration(3)) if c is not None]
for c in configs:
    if "result" in c:
        r = c["result"]
        c["label"] = (f"{c['i']}: {c['model'].name}, {c['num_gpus']} × {c['gpu'].name}, "
                      f"{_mode(c['dp'], c['tp'])}, KV {r['kv_dtype']}")
        c["short"] = f"{c['i']}: {str(c['model'].name)[:24]}, {c['num_gpus']} × {c['gpu'].id}, {_mode(c['dp'], c['tp'])}"

# --- the main configuration ---------------------------------------------------------------------
a = model.attention
st.caption(
    f"**{escape_md(model.name)}** ({model.kind.upper()}, {format_count(main['params_total'])} parameters as "
    f"{main['weights_dtype']}) on **{num_gpus} × {escape_md(gpu.name)}** ({format_bytes(main['memory_bytes_per_gpu'])} "
    f"each), {_mode(dp, tp)} ({main['replicas']} replica{'s' if main['replicas'] != 1 else ''}), KV {main['kv_dtype']}, "
    f"blocks of {main['block_size']} tokens, requests of {format_tokens(T)}."
)
with st.expander("Conventions", expanded=not present):
    st.caption(
        "GiB = 2^30 B. A preset's memory is its vendor figure read as GiB (what drivers report is close; "
        "type the exact figure above). KV budget per GPU = floor(gpu_memory_utilization × memory) - weights per GPU - "
        "reserve (vLLM's meaning). Whole requests = replicas × floor(budget / one request's blocks); upper bounds: "
        "activations and fragmentation beyond the reserve are not counted."
    )
if not main["weights_fit"]:
    st.error(_no_fit(main, v["gpu_memory_utilization"]) + " No KV cache fits: the counts below are 0. Add GPUs, "
             "raise tp, use DP-attention's expert split, or a smaller weights dtype.")

m1, m2, m3, m4 = st.columns(4)
m1.metric(f"Whole requests of {format_tokens(T)}", _requests(main["max_concurrent_requests"]),
          help=f"In the deployment, at once: {main['replicas']} replica(s) × floor(KV budget per GPU / one "
               f"request's {main['request_bytes_per_gpu']:,} B per GPU, blocks of {main['block_size']} tokens).")
m2.metric("Max concurrency (engine-style)", f"{main['max_concurrency']:.2f}x",
          help="Max tokens in the deployment / context, as vLLM logs 'Maximum concurrency for T tokens per "
               "request': counts fractions of a request.")
m3.metric("Max tokens per GPU", format_tokens(main["max_tokens_per_gpu"]),
          help=f"{format_tokens_exact(main['max_tokens_per_gpu'])} ({main['blocks_per_gpu']:,} blocks of {main['block_size']})")
m4.metric("Max tokens in the deployment", format_tokens(main["max_tokens_total"]),
          help=f"{main['max_tokens_total']:,} distinct tokens: {main['replicas']} replica(s) × tokens per GPU "
               "(TP ranks of one replica hold the same tokens).")
m1, m2, m3, m4, m5 = st.columns(5)
m5.metric("Recurrent state per request", format_bytes(main["state_bytes_per_request_per_gpu"]),
          help=f"{main['state_bytes_per_request_per_gpu']:,} B per GPU (Mamba, DeltaNet, KDA or lightning layers): "
               "held once per sequence whatever its length, counted in each request's bytes")
m1.metric("Weights per GPU", format_bytes(main["weights_bytes_per_gpu"]),
          help=f"{main['weights_bytes_per_gpu']:,} B: {main['params_total']:,} parameters as {main['weights_dtype']}, "
               + ("attention whole on every GPU, the rest / num_gpus" if dp else f"/ tp = {tp}"))
m2.metric("KV budget per GPU", format_bytes(main["kv_budget_bytes_per_gpu"]),
          help=f"{main['kv_budget_bytes_per_gpu']:,} B")
m3.metric("KV bytes per token per GPU", format_bytes(main["kv_bytes_per_token_per_gpu"]),
          help=f"{main['kv_bytes_per_token_per_gpu']:,} B, all layers"
               + ("; the MLA latent is whole on every TP rank" if model.is_mla and not dp else ""))
m4.metric("Memory per GPU", format_bytes(main["memory_bytes_per_gpu"]),
          help=f"{main['memory_bytes_per_gpu']:,} B; "
               + ("typed above" if v["gpu_memory_gib"] else "the preset's vendor figure read as GiB"))

# TP against DP-attention, side by side: the question a deployment plan starts from.
tp_r, dp_r = by_mode[False], by_mode[True]
st.markdown(
    f"**How many requests of {format_tokens(T)} of {escape_md(model.name)} fit at once on {num_gpus} × "
    f"{escape_md(gpu.name)} at {main['kv_dtype']} KV?** "
    f"With TP{tp}: **{_requests(tp_r['max_concurrent_requests'])}** "
    f"({tp_r['replicas']} replica{'s' if tp_r['replicas'] != 1 else ''}"
    + ("; every rank stores the whole latent" if model.is_mla else "")
    + ("; the weights do not fit" if not tp_r["weights_fit"] else "") + "). "
    f"With DP-attention: **{_requests(dp_r['max_concurrent_requests'])}** "
    f"({dp_r['replicas']} replicas, each GPU holding its own sequences; attention weights whole on every GPU"
    + (f": {format_bytes(dp_r['weights_bytes_per_gpu'])} of weights per GPU, which do not fit"
       if not dp_r["weights_fit"] else "") + ")."
)
t1, t2, _ = st.columns([1, 1, 2])
for col, mode, r in ((t1, False, tp_r), (t2, True, dp_r)):
    col.metric(f"With {_mode(mode, tp)}: whole requests" + (" (as set)" if mode == dp else ""),
               _requests(r["max_concurrent_requests"]),
               help=f"{format_tokens(r['max_tokens_total'])} in the deployment; weights "
                    f"{format_bytes(r['weights_bytes_per_gpu'])} and KV budget "
                    f"{format_bytes(r['kv_budget_bytes_per_gpu'])} per GPU")

# --- memory per GPU -----------------------------------------------------------------------------------
st.subheader("Memory per GPU")
PARTS = [("weights", "weights", "#0072B2"), ("kv_in_use", "KV in use", "#D55E00"),
         ("kv_free", "KV left over", "#F0E442"), ("reserve", "reserve", "#999999"),
         ("headroom", "headroom", "#CCCCCC")]
bars = [(f"1: {_mode(mode, tp)}" + (" (as set)" if mode == dp else ""), by_mode[mode]) for mode in (False, True)]
bars += [(c["short"], c["result"]) for c in configs[1:]
         if "result" in c]
names = [_plot_text(name) for name, _ in bars]
split = [memory_breakdown(r) for _, r in bars]
fig = go.Figure()
for key, label, color in PARTS:
    fig.add_trace(go.Bar(
        x=names, y=[s[key] / GiB for s in split], name=label, marker_color=color,
        customdata=[_exact(s[key]) for s in split],
        hovertemplate=f"%{{x}}<br>{label}: %{{customdata}}<extra></extra>",
    ))
fig.add_trace(go.Scatter(
    x=names, y=[s["memory"] / GiB for s in split], mode="markers", name="memory per GPU",
    marker={"symbol": "line-ew", "size": 60, "line": {"width": 3, "color": "#000000"}},
    customdata=[[_exact(s["memory"]), "" if not s["over"] else f"<br>weights do not fit: over by {_exact(s['over'])}"]
                for s in split],
    hovertemplate="%{x}<br>memory: %{customdata[0]}%{customdata[1]}<extra></extra>",
))
fig.update_layout(barmode="stack")
charts.style(fig, title=f"One GPU's memory, requests of {format_tokens(T)}", x_title="configuration",
             y_title="memory per GPU (GiB)", present=present)
fig.update_xaxes(type="category")
charts.show(fig, "capacity-memory-per-gpu")
st.caption("KV in use = the whole requests of the context that fit; KV left over = less than one more request, "
           "plus block padding; headroom = (1 - gpu_memory_utilization) × memory, left alone by the engine. "
           "A bar above the black mark (memory per GPU) is a configuration whose weights do not fit.")

# --- the same model costed as MHA, GQA, MQA and MLA -----------------------------------------------------
st.subheader("The same model costed as MHA, GQA, MQA and MLA")
groups = v["gqa_groups"] if v["gqa_groups"] in gqa_group_choices(model) else None
try:
    rows = capacity_variants(model, dp_attention=dp, gqa_groups=groups, **base)
    specs = variant_specs(model, kv_dtype, gqa_groups=groups)
except MLAError as e:
    st.error(escape_md(str(e), 400))
    st.stop()
st.caption(
    "Each row is the whole model with that attention: its own projections set its weights and so its KV budget; "
    "same layers, query heads, windows, GPUs, parallelism and dtypes. MHA/GQA/MQA use d_h = "
    + ("qk_nope_head_dim (DeepSeek-V2 Table 1)" if model.is_mla else str(a.head_dim))
    + ("" if model.is_mla else "; the MLA row takes d_c = 4 d_h, d_r = d_h / 2")
    + ". MLA expanded = the per-head K and V an engine without MLA support keeps. Block size: "
    + (f"{v['block_size']} tokens for every row." if v["block_size"] else "each row's default (64 MLA, 16 others).")
    + " GQA groups: the KV page's setting (default: the model's own, else 8)."
)
table = pd.DataFrame([{
    "variant": r["variant"] + (" (this model)" if r["is_model"] else ""),
    "KV dtype": r["kv_dtype"],
    "weights per GPU": format_bytes(r["weights_bytes_per_gpu"]),
    "KV budget per GPU": format_bytes(r["kv_budget_bytes_per_gpu"]),
    "KV per token per GPU": format_bytes(r["kv_bytes_per_token_per_gpu"]),
    "tokens per GPU": format_tokens(r["max_tokens_per_gpu"]),
    f"whole requests of {format_tokens(T)}": r["max_concurrent_requests"],
    "requests / this model's": None if r["requests_vs_model"] is None else round(r["requests_vs_model"], 3),
    "KV bytes / this model's": round(r["kv_bytes_vs_model"], 3),
} for r in rows])
st.dataframe(table, hide_index=True)
CSV_KEYS = ["variant", "is_model", "attention", "cache_layout", "kv_dtype", "weights_dtype", "block_size", "gpu",
            "num_gpus", "tp", "dp_attention", "replicas", "context", "gpu_memory_utilization", "memory_bytes_per_gpu",
            "reserve_bytes", "weights_bytes_per_gpu", "weights_fit", "kv_budget_bytes_per_gpu",
            "kv_bytes_per_token_per_gpu", "max_tokens_per_gpu", "max_tokens_total", "max_concurrent_requests",
            "max_concurrency", "requests_vs_model", "kv_bytes_vs_model"]
st.download_button("Download the table (CSV)", pd.DataFrame([{k: r[k] for k in CSV_KEYS} for r in rows]).to_csv(index=False),
                   file_name="capacity_variants.csv", mime="text/csv")

contexts = log_contexts(min(1024, T), min(params.MAX_UI_CONTEXT, max(1 << 20, 4 * T)), 256)
fig = go.Figure()
dots = []  # (name, colour, requests) at the chosen context: one trace for all, to keep reruns quick
for r, (label, spec, layout, dtype) in zip(rows, specs):
    n_req = concurrent_requests_vs_context(spec, contexts, r["kv_budget_bytes_per_gpu"], replicas=r["replicas"],
                                           kv_dtype=dtype, cache_layout=layout, block_size=r["block_size"],
                                           tp=tp, dp_attention=dp)
    name = label + (" (this model)" if r["is_model"] else "")
    color = charts.color_for(label)
    fig.add_trace(go.Scatter(
        x=contexts, y=[int(n) if n else None for n in n_req], mode="lines", name=name, line_shape="hv",
        line={"color": color, "width": 4 if present else 2.5},
        customdata=[[format_tokens(int(t)), f"{int(t):,}", _requests(int(n))] for t, n in zip(contexts, n_req)],
        hovertemplate=f"{name}<br>%{{customdata[0]}} (%{{customdata[1]}})<br>%{{customdata[2]}} whole requests"
                      "<extra></extra>",
    ))
    if r["max_concurrent_requests"]:
        dots.append((name, color, r["max_concurrent_requests"]))
if dots:
    fig.add_trace(go.Scatter(
        x=[T] * len(dots), y=[n for _, _, n in dots], mode="markers", showlegend=False,
        marker={"color": [c for _, c, _ in dots], "size": 14 if present else 10, "line": {"width": 1, "color": "#333"}},
        customdata=[[name, _requests(n)] for name, _, n in dots],
        hovertemplate=f"%{{customdata[0]}} at {format_tokens(T)} ({T:,})<br>%{{customdata[1]}} whole requests"
                      "<extra></extra>",
    ))
charts.style(fig, title=f"Whole requests that fit at once against context ({num_gpus} × {_plot_text(gpu.name)}, "
                        f"{_mode(dp, tp)})", x_title="context (tokens per request)",
             y_title="whole concurrent requests (count)", log_x=True, log_y=True, present=present,
             x_tokens=(int(contexts[0]), int(contexts[-1])))
charts.show(fig, "capacity-requests-vs-context")
st.caption(f"Dots: the chosen context ({format_tokens(T)}). A line stops where not one whole request fits.")

# --- an allocator that uses the MHA formula -------------------------------------------------------------
st.subheader("An allocator that uses the MHA formula")
if model.is_mla:
    try:
        waste = {mode: allocator_waste(model, dp_attention=mode, **base) for mode in (False, True)}
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        st.stop()
    w = waste[dp]
    heads = heads_per_gpu(a.num_attention_heads, tp, dp)
    st.markdown(
        f"An engine without MLA support sizes {escape_md(model.name)}'s cache with the per-head formula: each of the "
        f"**{heads}** query heads on a GPU keeps a key of d_nope + d_r = {a.qk_head_dim} and a value of d_v = "
        f"{a.v_head_dim} per token per layer, against one latent of d_c + d_r shared by all heads. It reserves "
        f"**{format_bytes(w['expanded']['kv_bytes_per_token_per_gpu'])}** per token per GPU where "
        f"**{format_bytes(w['latent']['kv_bytes_per_token_per_gpu'])}** is needed, and admits "
        f"**{_requests(w['expanded']['max_concurrent_requests'])}** whole requests of {format_tokens(T)} at once "
        f"instead of **{_requests(w['latent']['max_concurrent_requests'])}**."
    )
    w1, w2, w3, w4 = st.columns(4)
    w1.metric("Waste factor (MHA formula / latent)", f"{w['waste_factor']:.1f}x",
              help=f"{w['expanded']['kv_bytes_per_token_per_gpu']:,} B / {w['latent']['kv_bytes_per_token_per_gpu']:,} B "
                   f"per token per GPU, {_mode(dp, tp)}")
    w2.metric("MHA formula, per token per GPU", format_bytes(w["expanded"]["kv_bytes_per_token_per_gpu"]),
              help=f"{w['expanded']['kv_bytes_per_token_per_gpu']:,} B, KV {w['expanded']['kv_dtype']}")
    w3.metric("Requests admitted, MHA formula", _requests(w["expanded"]["max_concurrent_requests"]),
              help=f"{format_tokens(w['expanded']['max_tokens_total'])} in the deployment")
    w4.metric("Requests admitted, latent", _requests(w["latent"]["max_concurrent_requests"]),
              help=f"{format_tokens(w['latent']['max_tokens_total'])} in the deployment")
    st.caption(
        (f"Under TP{tp} the expanded heads split across ranks ({heads_per_gpu(a.num_attention_heads, tp)} per GPU) "
         f"while the latent does not, so the factor is {waste[False]['waste_factor']:.1f}x; with DP-attention, or on "
         f"one GPU, every head stays: {waste[True]['waste_factor']:.1f}x." if tp > 1 else
         f"With TP1 every head stays on its GPU: {waste[False]['waste_factor']:.1f}x. Tensor parallelism splits the "
         "expanded heads across ranks but not the latent, so the factor falls as tp grows.")
        + (" fp8_ds_mla stores the latent only: the MHA-formula cache is costed at fp8." if kv_dtype == "fp8_ds_mla"
           else "")
    )
else:
    st.info(f"{escape_md(model.name)} has {model.kind.upper()} attention: the per-KV-head formula is already its "
            "cache, so nothing is wasted. Pick an MLA model (DeepSeek, Kimi-K2, MiniCPM3) to see the factor.")

# --- across GPU presets ---------------------------------------------------------------------------------
st.subheader("Across GPU presets")
no_gpu = {k: val for k, val in base.items() if k != "gpu"}
presets = []
for gid in gpu_ids():
    g = models.gpu_preset(gid)
    try:
        r = capacity(model, gpu=g, dp_attention=dp, **no_gpu)
        e = allocator_waste(model, gpu=g, dp_attention=dp, **no_gpu)["expanded"] if model.is_mla else None
    except MLAError:
        continue
    presets.append((g, r, e))
x_names = [f"<b>{g.name}</b>" if g.id == v["gpu"] else g.name for g, _, _ in presets]
fig = go.Figure()
traces = [(f"{model.kind.upper()}" + (" latent" if model.is_mla else "") + " (this model)", "MLA" if model.is_mla
           else model.kind.upper(), [r for _, r, _ in presets])]
if model.is_mla:
    traces.append(("MHA-formula allocator", "MLA expanded", [e for _, _, e in presets]))
for k, (name, color_key, results) in enumerate(traces):
    fig.add_trace(go.Bar(
        x=x_names, y=[r["max_concurrent_requests"] for r in results], name=name,
        marker_color=charts.color_for(color_key), textposition="outside", constraintext="none", cliponaxis=False,
        text=[_requests(r["max_concurrent_requests"]) if r["weights_fit"] else ("✗" if k == 0 else "")
              for r in results],
        customdata=[[format_bytes(r["memory_bytes_per_gpu"]), format_bytes(r["weights_bytes_per_gpu"]),
                     _exact(r["kv_budget_bytes_per_gpu"]), format_tokens(r["max_tokens_total"])] for r in results],
        hovertemplate=f"%{{x}}: {name}<br>memory %{{customdata[0]}}, weights %{{customdata[1]}} per GPU"
                      "<br>KV budget %{customdata[2]} per GPU<br>%{customdata[3]} in the deployment"
                      "<br>%{y:,} whole requests<extra></extra>",
    ))
fig.update_layout(barmode="group")
charts.style(fig, title=f"Whole requests of {format_tokens(T)} on {num_gpus} × each GPU ({_mode(dp, tp)}, "
                        f"KV {main['kv_dtype']}, weights {main['weights_dtype']})",
             x_title="GPU preset (memory: vendor figure read as GiB)", y_title="whole concurrent requests (count)",
             present=present)
fig.update_xaxes(type="category")
charts.show(fig, "capacity-across-gpus")
st.caption("Same model, GPU count, parallelism, dtypes, gpu_memory_utilization and reserve; each preset's memory "
           "(a typed memory size applies to configuration 1 only). ✗: the weights do not fit. Capacity needs only "
           "memory, so every preset is shown; the sidebar's GPU is in bold.")

# --- configurations side by side ------------------------------------------------------------------------
st.subheader("Compare configurations")
with st.expander("Configurations 2 and 3: each its own model, GPU and parallelism", expanded=not present):
    st.button("Example: 128K-token requests on 8 H200 at fp8 KV: DeepSeek-V3 with TP8 (1), Llama-3.1-405B with "
              "TP8 (2), DeepSeek-V3 with DP-attention (3)", on_click=_example)
    labels = models.model_labels()
    gpu_labels = models.gpu_labels()
    for i, col in zip((2, 3), st.columns(2)):
        with col:
            st.selectbox(f"Configuration {i}: model", ["", *model_ids()], key=f"cmp{i}_model",
                         format_func=lambda k: "(off)" if not k else labels.get(k, k))
            st.selectbox(f"Configuration {i}: GPU", gpu_ids(), key=f"cmp{i}_gpu",
                         format_func=lambda k: gpu_labels.get(k, k))
            c1, c2 = st.columns(2)
            c1.number_input(f"Configuration {i}: GPUs", 1, 4096, step=1, key=f"cmp{i}_num_gpus")
            c2.number_input(f"Configuration {i}: tp", 1, 4096, step=1, key=f"cmp{i}_tp")
            c1.toggle(f"Configuration {i}: DP-attention", key=f"cmp{i}_dp_attention")
            c2.selectbox(f"Configuration {i}: KV dtype", KV_DTYPES, key=f"cmp{i}_kv_dtype")
    st.caption("Shared with configuration 1: context, gpu_memory_utilization, reserve, weights dtype (auto = each "
               "model's own), block size (default = each model's). Memory is each preset's figure read as GiB.")

cols = st.columns(len(configs))
for c, col in zip(configs, cols):
    with col:
        if "label" in c:
            st.markdown(f"**{escape_md(c['label'])}**")
        else:
            st.markdown(f"**Configuration {c['i']}**")
        for kind, text in c["messages"]:
            (st.error if kind == "error" else st.warning)(escape_md(text, 400))
        if "result" not in c:
            continue
        r = c["result"]
        if not r["weights_fit"]:
            st.error(_no_fit(r))
        i = c["i"]
        st.metric(f"Config {i}: whole requests of {format_tokens(T)}", _requests(r["max_concurrent_requests"]),
                  help=f"{r['replicas']} replica(s); engine-style max concurrency {r['max_concurrency']:.2f}x")
        st.metric(f"Config {i}: max tokens in the deployment", format_tokens(r["max_tokens_total"]),
                  help=format_tokens_exact(r['max_tokens_total']))
        st.metric(f"Config {i}: KV budget per GPU", format_bytes(r["kv_budget_bytes_per_gpu"]),
                  help=f"{r['kv_budget_bytes_per_gpu']:,} B")
        st.metric(f"Config {i}: KV bytes per token per GPU", format_bytes(r["kv_bytes_per_token_per_gpu"]),
                  help=f"{r['kv_bytes_per_token_per_gpu']:,} B")
        st.metric(f"Config {i}: weights per GPU", format_bytes(r["weights_bytes_per_gpu"]),
                  help=f"{r['weights_bytes_per_gpu']:,} B as {r['weights_dtype']}")

ready = [c for c in configs if "result" in c]
if len(ready) > 1:
    cmp_contexts = sorted({4096, 32768, 131072, T})
    fig = go.Figure()
    for c in ready:
        r = c["result"]
        n_req = concurrent_requests_vs_context(c["model"], cmp_contexts, r["kv_budget_bytes_per_gpu"],
                                               replicas=r["replicas"], kv_dtype=r["kv_dtype"], cache_layout="latent",
                                               block_size=r["block_size"], tp=c["tp"], dp_attention=c["dp"])
        fig.add_trace(go.Bar(
            x=[format_tokens(t) for t in cmp_contexts], y=[int(n) if n else None for n in n_req],
            name=_plot_text(c["short"]), marker_color=charts.SEQUENCE[(c["i"] - 1) % len(charts.SEQUENCE)],
            text=[_requests(int(n)) for n in n_req], textposition="outside", constraintext="none", cliponaxis=False,
            hovertemplate=f"{_plot_text(c['label'])}<br>%{{x}}: %{{text}} whole requests<extra></extra>",
        ))
    fig.update_layout(barmode="group")
    charts.style(fig, title="Whole concurrent requests by configuration", x_title="context (tokens per request)",
                 y_title="whole concurrent requests (count)", log_y=True, present=present)
    fig.update_xaxes(type="category")
    charts.show(fig, "capacity-configurations")
    st.caption("A missing bar is 0: the weights do not fit, or not one whole request does.")
else:
    st.caption("Pick a model for configuration 2 or 3 above (or load the example) to compare.")
