"""Capacity: tokens and whole requests that fit per GPU and per deployment; MLA against MHA/GQA/MQA.

Sections, each drawing what one core call returns (mla_core.views over mla_core.capacity and
mla_core.sweeps): `deployment` (widgets), `headline` (views.capacity_view), `memory_chart`
(views.memory_bars), `variants` (views.capacity_variants_view), `allocator` (views.allocator_waste_view),
`across_gpus` (views.capacity_across_gpus) and `compare` (views.configuration,
views.configurations_by_context). Definitions: MODEL.md, "Capacity per GPU". In presentation
mode the page is one slide: title, key numbers and requests against context first.
"""
import html

from ui.charts import plot  # plotly.graph_objects spelling, built as plain dicts
import streamlit as st

from mla_core.capacity import default_block_size
from mla_core.errors import MLAError
from mla_core.presets import gpu_ids, model_ids
from mla_core.units import (KV_DTYPES, WEIGHT_DTYPES, GiB, format_bytes, format_count, format_tokens,
                            format_tokens_exact, gib_to_bytes)
from mla_core.views import (GMU_MIN, Configuration, allocator_waste_view, capacity_across_gpus, capacity_variants_view,
                            capacity_view, configuration, configurations_by_context, legend_name, memory_bars,
                            mode_name)
from ui import charts, layout, models, state
from ui.metrics import Metric, metric_row
from ui.text import csv_text, escape_md, frame, widths

v = state.values()
present = v["present"]
T = v["context"]
BLOCK_CHOICES = [0, 1, 16, 32, 64, 128, 256]
_plot_text = charts.plot_text


def _exact(n: int) -> str:
    return f"{format_bytes(n)} ({n:,} B)"


def _requests(n: int) -> str:
    return f"{n:,}"


def _example():
    """DeepSeek-V3 on 8 H200 at fp8 KV (TP8), against Llama-3.1-405B on the same GPUs and
    DeepSeek-V3 with DP-attention."""
    state.set_values(model="deepseek-v3", gpu="h200", kv_dtype="fp8", context=131072, num_gpus=8, tp=8,
                     dp_attention=False, gpu_memory_gib=0.0, weights_dtype="auto", block_size=0,
                     cmp2_model="llama-3.1-405b", cmp2_gpu="h200", cmp2_num_gpus=8, cmp2_tp=8,
                     cmp2_dp_attention=False, cmp2_kv_dtype="fp8",
                     cmp3_model="deepseek-v3", cmp3_gpu="h200", cmp3_num_gpus=8, cmp3_tp=8,
                     cmp3_dp_attention=True, cmp3_kv_dtype="fp8")


def deployment(model):
    """Configuration 1's own controls (widgets only)."""
    if v["gpu_memory_utilization"] < GMU_MIN:  # the widget's floor (views.capacity_view warns)
        state.set_values(gpu_memory_utilization=GMU_MIN)
    blocks = sorted({*BLOCK_CHOICES, v["block_size"]})
    with st.expander("Deployment: GPUs, parallelism, dtypes and memory (configuration 1)", expanded=not present):
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("GPUs (num_gpus)", 1, 4096, step=1, persist_state="session", key=state.seeded("num_gpus"))
        c2.number_input("Tensor parallel size (tp), shared with the Roofline page", 1, 4096, step=1, persist_state="session", key=state.seeded("tp"),
                        help="One setting for both pages. Weights split tp ways; MHA/GQA KV heads split too (never "
                             "below one per GPU). The MLA latent has no head axis: every TP rank stores all of it.")
        c3.toggle("DP-attention (dp_attention)", persist_state="session", key=state.seeded("dp_attention"),
                  help="Attention data parallelism: each GPU holds whole, distinct sequences with all their KV "
                       "heads; attention weights are whole on every GPU, the rest (experts) split over all GPUs.")
        c4.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], persist_state="session", key=state.seeded("weights_dtype"),
                     format_func=lambda d: f"auto ({model.default_weights_dtype})" if d == "auto" else d,
                     help="auto = the model's default: fp8 for fp8 checkpoints (quantization_config), else "
                          "torch_dtype.")
        c1, c2, c3, c4 = st.columns(4)
        c1.slider("gpu_memory_utilization", GMU_MIN, 1.0, step=0.01, format="%.2f", persist_state="session", key=state.seeded("gpu_memory_utilization"),
                        help="vLLM's meaning: the fraction of each GPU's memory the engine may use for weights, "
                             "KV cache and the reserve. The rest is left alone (headroom).")
        c2.number_input("GPU memory, GiB (0 = the preset's)", 0.0, 1e6, step=1.0, format="%.2f", persist_state="session", key=state.seeded("gpu_memory_gib"),
                        help="Type what your driver reports (e.g. nvidia-smi's MiB / 1024) to replace the preset's "
                             "figure.")
        c3.number_input("Reserve per GPU, GiB", 0.0, 1e6, step=0.5, format="%.2f", persist_state="session", key=state.seeded("reserve_gib"),
                        help="Kept out of the KV budget: activations, CUDA graphs, the sampler, fragmentation.")
        c4.selectbox("Block size (tokens)", blocks, persist_state="session", key=state.seeded("block_size"),
                     format_func=lambda n: f"default ({default_block_size(model)})" if n == 0 else str(n),
                     help="KV page size. Default: 64 for MLA models (FlashMLA), 16 otherwise (vLLM).")
        st.caption("GPU preset, KV cache dtype and context are in the sidebar; configurations 2 and 3 are set "
                   "further down.")


def headline(model, gpu):
    """The deployment's numbers (views.capacity_view); None when the core refuses the inputs."""
    try:
        cv = capacity_view(model, gpu, context=T, num_gpus=v["num_gpus"], tp=v["tp"], dp_attention=v["dp_attention"],
                           kv_dtype=v["kv_dtype"], weights_dtype=None if v["weights_dtype"] == "auto"
                           else v["weights_dtype"], gpu_memory_utilization=v["gpu_memory_utilization"],
                           block_size=v["block_size"] or None, reserve_bytes=gib_to_bytes(v["reserve_gib"]))
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        return None
    if not present:  # a slide shows them below its chart
        with layout.slot():
            messages(cv)
    main, tp, dp, num_gpus = cv.main, cv.tp, cv.dp_attention, cv.num_gpus
    mode = mode_name(dp, tp)
    if present:  # one line on a slide
        st.caption(f"{num_gpus} × {escape_md(gpu.name)}, {mode}, KV {main['kv_dtype']}, weights "
                   f"{main['weights_dtype']}, gpu_memory_utilization {cv.gpu_memory_utilization:g}")
    else:
        st.caption(
            f"**{escape_md(model.name)}** ({model.kind.upper()}, {format_count(main['params_total'])} parameters as "
            f"{main['weights_dtype']}) on **{num_gpus} × {escape_md(gpu.name)}** "
            f"({format_bytes(main['memory_bytes_per_gpu'])} each), {mode} ({main['replicas']} "
            f"replica{'s' if main['replicas'] != 1 else ''}), KV {main['kv_dtype']}, blocks of {main['block_size']} "
            f"tokens, requests of {format_tokens(T)}.")
        with st.expander("Conventions", expanded=False):
            st.caption(
                "GiB = 2^30 B. A preset's memory is its vendor figure read as GiB (what drivers report is close; "
                "type the exact figure above). KV budget per GPU = floor(gpu_memory_utilization × memory) - weights "
                "per GPU - reserve (vLLM's meaning). Whole requests = replicas × floor(budget / one request's "
                "blocks); upper bounds: activations and fragmentation beyond the reserve are not counted.")
    with layout.slot():
        if cv.no_fit:
            st.error(escape_md(cv.no_fit, 400) + " No KV cache fits: the counts below are 0. Add GPUs, raise tp, use "
                     "DP-attention's expert split, or a smaller weights dtype.")
    metric_row([
        Metric(f"Whole requests of {format_tokens(T)}", _requests(main["max_concurrent_requests"]),
               help=f"In the deployment, at once: {main['replicas']} replica(s) × floor(KV budget per GPU / one "
                    f"request's {main['request_bytes_per_gpu']:,} B per GPU, blocks of {main['block_size']} tokens)."),
        Metric("Max concurrency (engine-style)", f"{main['max_concurrency']:.2f}x",
               help="Max tokens in the deployment / context, as vLLM logs 'Maximum concurrency for T tokens per "
                    "request': counts fractions of a request."),
        Metric("Max tokens per GPU", format_tokens(main["max_tokens_per_gpu"]),
               help=f"{format_tokens_exact(main['max_tokens_per_gpu'])} ({main['blocks_per_gpu']:,} blocks of "
                    f"{main['block_size']})"),
        Metric("Max tokens in the deployment", format_tokens(main["max_tokens_total"]),
               help=f"{main['max_tokens_total']:,} distinct tokens: {main['replicas']} replica(s) × tokens per GPU "
                    "(TP ranks of one replica hold the same tokens).")])
    with layout.slot():
        if cv.fp8_note and not present:  # a slide shows it below its chart
            st.info(escape_md(cv.fp8_note, 400))
    return cv


def messages(cv):
    for w in cv.warnings:
        st.warning(escape_md(w, 400))
    for e in cv.errors:
        st.error(escape_md(e, 400))
    if present and cv.fp8_note:
        st.info(escape_md(cv.fp8_note, 400))


def details(model, gpu, cv):
    """The second row of numbers and TP against DP-attention (from the headline's view)."""
    main, tp, dp, num_gpus = cv.main, cv.tp, cv.dp_attention, cv.num_gpus
    metric_row([
        Metric("Weights per GPU", format_bytes(main["weights_bytes_per_gpu"]),
               help=f"{main['weights_bytes_per_gpu']:,} B: {main['params_total']:,} parameters as "
                    f"{main['weights_dtype']}, " + ("attention whole on every GPU, the rest / num_gpus" if dp
                                                    else f"/ tp = {tp}")),
        Metric("KV budget per GPU", format_bytes(main["kv_budget_bytes_per_gpu"]),
               help=f"{main['kv_budget_bytes_per_gpu']:,} B"),
        Metric("KV bytes per token per GPU", format_bytes(main["kv_bytes_per_token_per_gpu"]),
               help=f"{main['kv_bytes_per_token_per_gpu']:,} B, all layers"
                    + ("; the MLA latent is whole on every TP rank" if model.is_mla and not dp else "")),
        Metric("Memory per GPU", format_bytes(main["memory_bytes_per_gpu"]),
               help=f"{main['memory_bytes_per_gpu']:,} B; "
                    + ("typed above" if v["gpu_memory_gib"] else "the preset's vendor figure read as GiB")),
        Metric("Recurrent state per request", format_bytes(main["state_bytes_per_request_per_gpu"]),
               help=f"{main['state_bytes_per_request_per_gpu']:,} B per GPU (Mamba, DeltaNet, KDA or lightning "
                    "layers): held once per sequence whatever its length, counted in each request's bytes")])
    tp_r, dp_r = cv.by_mode["tp"], cv.by_mode["dp"]
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
           if not dp_r["weights_fit"] else "") + ").")
    metric_row([Metric(f"With {mode_name(mode, tp)}: whole requests" + (" (as set)" if mode == dp else ""),
                        _requests(r["max_concurrent_requests"]),
                        help=f"{format_tokens(r['max_tokens_total'])} in the deployment; weights "
                             f"{format_bytes(r['weights_bytes_per_gpu'])} and KV budget "
                             f"{format_bytes(r['kv_budget_bytes_per_gpu'])} per GPU")
                 for mode, r in ((False, tp_r), (True, dp_r))] + [None], [1, 1, 2])


PARTS = [("weights", "weights", "#0072B2"), ("kv_in_use", "KV in use", "#D55E00"),
         ("kv_free", "KV left over", "#F0E442"), ("reserve", "reserve", "#999999"),
         ("headroom", "headroom", "#CCCCCC")]


def memory_chart(cv, configs):
    """One GPU's memory, stacked, for TP and DP-attention and the other configurations (views.memory_bars)."""
    st.subheader("Memory per GPU")
    tp, dp = cv.tp, cv.dp_attention
    bars = [(f"1: {mode_name(mode, tp)}" + (" (as set)" if mode == dp else ""), cv.by_mode["dp" if mode else "tp"])
            for mode in (False, True)]
    bars += [(_short(c), c.result) for c in configs if c.result is not None]
    split = memory_bars(bars)
    names = [_plot_text(name) for name, _ in split]
    fig = plot.Figure()
    for key, label, color in PARTS:
        fig.add_trace(plot.Bar(
            x=names, y=[s[key] / GiB for _, s in split], name=label, marker_color=color,
            customdata=[_exact(s[key]) for _, s in split],
            hovertemplate=f"%{{x}}<br>{label}: %{{customdata}}<extra></extra>"))
    fig.add_trace(plot.Scatter(
        x=names, y=[s["memory"] / GiB for _, s in split], mode="markers", name="memory per GPU",
        marker={"symbol": "line-ew", "size": 60, "line": {"width": 3, "color": charts.INK}},
        customdata=[[_exact(s["memory"]), "" if not s["over"] else f"<br>weights do not fit: over by {_exact(s['over'])}"]
                    for _, s in split],
        hovertemplate="%{x}<br>memory: %{customdata[0]}%{customdata[1]}<extra></extra>"))
    fig.update_layout(barmode="stack")
    charts.style(fig, title=f"One GPU's memory, requests of {format_tokens(T)}", x_title="configuration",
                 y_title="memory per GPU (GiB)", present=present)
    fig.update_xaxes(type="category")
    charts.show(fig, "capacity-memory-per-gpu")
    st.caption("KV in use = the whole requests of the context that fit; KV left over = less than one more request, "
               "plus block padding; headroom = (1 - gpu_memory_utilization) × memory, left alone by the engine. "
               "A bar above the flat mark (memory per GPU) is a configuration whose weights do not fit.")


def variants(model, gpu, cv, *, chart_only: bool = False, table_only: bool = False):
    """The same model costed as MHA, GQA, MQA and MLA (views.capacity_variants_view): table and
    whole requests against context (the slide's chart)."""
    try:
        cvv = capacity_variants_view(model, cv, gqa_groups=v["gqa_groups"])
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        return
    a = model.attention
    if not chart_only:
        # The heading says the context, so the columns keep their names as it moves: a renamed column
        # makes the browser's table rebuild itself (benchmarks/browser.py).
        st.subheader(f"The same model costed {len(cvv.rows)} ways, requests of {format_tokens(T)}: MHA, GQA, MQA "
                     "and MLA")
        if not present:
            st.caption(
                "Each row is the whole model with that attention: its own projections set its weights and so its KV "
                "budget; same layers, query heads, windows, GPUs, parallelism and dtypes. MHA/GQA/MQA use d_h = "
                + ("qk_nope_head_dim (DeepSeek-V2 Table 1)" if model.is_mla else str(a.head_dim))
                + ("" if model.is_mla else "; the MLA row takes d_c = 4 d_h, d_r = d_h / 2")
                + ". MLA expanded = the per-head K and V an engine without MLA support keeps. Block size: "
                + (f"{v['block_size']} tokens for every row." if v["block_size"]
                   else "each row's default (64 MLA, 16 others).")
                + " GQA groups: the KV page's setting (default: the model's own, else 8).")
        req_col = "whole requests"
        table = frame([{
            "variant": r["variant"] + (" (this model)" if r["is_model"] else ""),
            "KV dtype": r["kv_dtype"],
            "weights per GPU": format_bytes(r["weights_bytes_per_gpu"]),
            "KV budget per GPU": format_bytes(r["kv_budget_bytes_per_gpu"]),
            "KV per token per GPU": format_bytes(r["kv_bytes_per_token_per_gpu"]),
            "tokens per GPU": format_tokens(r["max_tokens_per_gpu"]),
            req_col: r["max_concurrent_requests"],
            "requests / this model's": None if r["requests_vs_model"] is None else round(r["requests_vs_model"], 3),
            "KV bytes / this model's": round(r["kv_bytes_vs_model"], 3),
        } for r in cvv.rows])
        if present:  # a slide keeps the columns that carry the comparison
            table = table.select(["variant", "KV per token per GPU", req_col, "requests / this model's"])
        st.dataframe(table, hide_index=True, column_config=None if present else widths(
            variant=165, **{"KV dtype": 65, "weights per GPU": 90, "KV budget per GPU": 100, "KV per token per GPU": 105,
                            "tokens per GPU": 90, req_col: 115, "requests / this model's": 100,
                            "KV bytes / this model's": 100}))
        keys = ["variant", "is_model", "attention", "cache_layout", "kv_dtype", "weights_dtype", "block_size", "gpu",
                "num_gpus", "tp", "dp_attention", "replicas", "context", "gpu_memory_utilization",
                "memory_bytes_per_gpu", "reserve_bytes", "weights_bytes_per_gpu", "weights_fit",
                "kv_budget_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "max_tokens_per_gpu", "max_tokens_total",
                "max_concurrent_requests", "max_concurrency", "requests_vs_model", "kv_bytes_vs_model"]
        st.download_button("Download the table (CSV)",
                           csv_text([{k: r[k] for k in keys} for r in cvv.rows]),
                           file_name="capacity_variants.csv", mime="text/csv")
    if table_only:
        return
    fig = plot.Figure()
    for s in cvv.series:
        name = legend_name(s.label, cvv.same_as) + (" (this model)" if s.is_model else "")
        y = [n if n else None for n in s.y]  # a log axis cannot show 0: the line stops where not one request fits
        fig.add_trace(dict(
            type="scatter", x=list(s.x), y=y, mode="lines", name=name,
            line={"color": charts.color_for(s.label), "width": 4 if present else 2.5, "shape": "hv"},
            customdata=[[format_tokens(t), f"{t:,}", _requests(n)] for t, n in zip(s.x, s.y)],
            hovertemplate=f"{name}<br>%{{customdata[0]}} (%{{customdata[1]}})<br>%{{customdata[2]}} whole requests"
                          "<extra></extra>"))
    dots = [s for s in cvv.series if s.y_here]
    if dots:
        fig.add_trace(dict(
            type="scatter", x=[T] * len(dots), y=[s.y_here for s in dots], mode="markers", showlegend=False,
            marker={"color": [charts.color_for(s.label) for s in dots], "size": 14 if present else 10,
                    "line": {"width": 1, "color": "#333"}},
            customdata=[[s.label, _requests(s.y_here)] for s in dots],
            hovertemplate=f"%{{customdata[0]}} at {format_tokens(T)} ({T:,})<br>%{{customdata[1]}} whole requests"
                          "<extra></extra>"))
    charts.style(fig, title=f"Whole requests that fit at once against context ({cv.num_gpus} × "
                            f"{_plot_text(gpu.name)}, {mode_name(cv.dp_attention, cv.tp)})",
                 x_title="context (tokens per request)", y_title="whole concurrent requests (count)",
                 log_x=True, log_y=True, present=present, height=charts.slide_height(present),
                 x_tokens=(cvv.series[0].x[0], cvv.series[0].x[-1]) if cvv.series else None)
    charts.show(fig, "capacity-requests-vs-context")
    if not present:
        st.caption(f"Dots: the chosen context ({format_tokens(T)}). A line stops where not one whole request fits.")


def allocator(model, cv):
    """An allocator that uses the MHA formula (views.allocator_waste_view)."""
    st.subheader("An allocator that uses the MHA formula")
    try:
        aw = allocator_waste_view(model, cv)
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        return
    if aw is None:
        st.info(f"{escape_md(model.name)} has {model.kind.upper()} attention: the per-KV-head formula is already its "
                "cache, so nothing is wasted. Pick an MLA model (DeepSeek, Kimi-K2, MiniCPM3) to see the factor.")
        return
    a, w, tp, dp = model.attention, aw.main, cv.tp, cv.dp_attention
    heads = aw.heads_dp if dp else aw.heads_tp
    st.markdown(
        f"An engine without MLA support sizes {escape_md(model.name)}'s cache with the per-head formula: each of the "
        f"**{heads}** query heads on a GPU keeps a key of d_nope + d_r = {a.qk_head_dim} and a value of d_v = "
        f"{a.v_head_dim} per token per layer, against one latent of d_c + d_r shared by all heads. It reserves "
        f"**{format_bytes(w['expanded']['kv_bytes_per_token_per_gpu'])}** per token per GPU where "
        f"**{format_bytes(w['latent']['kv_bytes_per_token_per_gpu'])}** is needed, and admits "
        f"**{_requests(w['expanded']['max_concurrent_requests'])}** whole requests of {format_tokens(T)} at once "
        f"instead of **{_requests(w['latent']['max_concurrent_requests'])}**.")
    metric_row([
        Metric("Waste factor (MHA formula / latent)", f"{w['waste_factor']:.1f}x",
               help=f"{w['expanded']['kv_bytes_per_token_per_gpu']:,} B / "
                    f"{w['latent']['kv_bytes_per_token_per_gpu']:,} B per token per GPU, {mode_name(dp, tp)}"),
        Metric("MHA formula, per token per GPU", format_bytes(w["expanded"]["kv_bytes_per_token_per_gpu"]),
               help=f"{w['expanded']['kv_bytes_per_token_per_gpu']:,} B, KV {w['expanded']['kv_dtype']}"),
        Metric("Requests admitted, MHA formula", _requests(w["expanded"]["max_concurrent_requests"]),
               help=f"{format_tokens(w['expanded']['max_tokens_total'])} in the deployment"),
        Metric("Requests admitted, latent", _requests(w["latent"]["max_concurrent_requests"]),
               help=f"{format_tokens(w['latent']['max_tokens_total'])} in the deployment")])
    by = aw.by_mode
    st.caption(
        (f"Under TP{tp} the expanded heads split across ranks ({aw.heads_tp} per GPU) while the latent does not, so "
         f"the factor is {by['tp']['waste_factor']:.1f}x; with DP-attention, or on one GPU, every head stays: "
         f"{by['dp']['waste_factor']:.1f}x." if tp > 1 else
         f"With TP1 every head stays on its GPU: {by['tp']['waste_factor']:.1f}x. Tensor parallelism splits the "
         "expanded heads across ranks but not the latent, so the factor falls as tp grows.")
        + (" fp8_ds_mla stores the latent only: the MHA-formula cache is costed at fp8."
           if cv.kv_dtype == "fp8_ds_mla" else ""))


ACROSS_KEY = "_capacity_across_open"


def across_gpus(model, cv):
    """The same deployment on every GPU preset (views.capacity_across_gpus), drawn while its
    expander is open: two dozen presets and a chart cost every other rerun of the page when drawn
    always (benchmarks/browser.py)."""
    box = layout.lazy_expander("Across GPU presets: the same deployment on every preset", ACROSS_KEY)
    if box.open:
        with box:
            _across_gpus(model, cv)


def _across_gpus(model, cv):
    presets = capacity_across_gpus(model, cv, [models.gpu_preset(g) for g in gpu_ids()])
    main, tp, dp = cv.main, cv.tp, cv.dp_attention
    # The presets' ids (h200, mi355x) as ticks: two dozen full names turned on end would take most of the
    # chart's height; the name is in the hover.
    x_names = [f"<b>{g.id}</b>" if g.id == v["gpu"] else g.id for g, _, _ in presets]
    fig = plot.Figure()
    traces = [(f"{model.kind.upper()}" + (" latent" if model.is_mla else "") + " (this model)",
               model.kind.upper(), [r for _, r, _ in presets])]
    if presets and presets[0][2] is not None:  # an MLA model: what the MHA formula would admit
        traces.append(("MHA-formula allocator", "MLA expanded", [e for _, _, e in presets]))
    for k, (name, color_key, results) in enumerate(traces):
        fig.add_trace(plot.Bar(
            x=x_names, y=[r["max_concurrent_requests"] for r in results], name=name,
            marker={"color": charts.color_for(color_key)}, textposition="outside", constraintext="none", cliponaxis=False,
            text=[_requests(r["max_concurrent_requests"]) if r["weights_fit"] else ("✗" if k == 0 else "")
                  for r in results],
            customdata=[[format_bytes(r["memory_bytes_per_gpu"]), format_bytes(r["weights_bytes_per_gpu"]),
                         _exact(r["kv_budget_bytes_per_gpu"]), format_tokens(r["max_tokens_total"]), html.escape(g.name)]
                        for (g, _, _), r in zip(presets, results)],
            hovertemplate=f"%{{customdata[4]}}: {name}<br>memory %{{customdata[0]}}, weights %{{customdata[1]}} per GPU"
                          "<br>KV budget %{customdata[2]} per GPU<br>%{customdata[3]} in the deployment"
                          "<br>%{y:,} whole requests<extra></extra>"))
    fig.update_layout(barmode="group")
    charts.style(fig, title=f"Whole requests of {format_tokens(T)} on {cv.num_gpus} × each GPU ({mode_name(dp, tp)}, "
                            f"KV {main['kv_dtype']}, weights {main['weights_dtype']})",
                 x_title="GPU preset id (memory: vendor figure read as GiB)", y_title="whole concurrent requests (count)",
                 present=present)
    fig.update_xaxes(type="category")
    charts.show(fig, "capacity-across-gpus")
    st.caption("Same model, GPU count, parallelism, dtypes, gpu_memory_utilization and reserve; each preset's memory "
               "(a typed memory size applies to configuration 1 only). ✗: the weights do not fit. Capacity needs only "
               "memory, so every preset is shown; the sidebar's GPU is in bold.")


def _label(c) -> str:
    return (f"{c.i}: {c.model.name}, {c.num_gpus} × {c.gpu.name}, {mode_name(c.dp_attention, c.tp)}, "
            f"KV {c.result['kv_dtype']}")


def _short(c) -> str:
    return f"{c.i}: {str(c.model.name)[:24]}, {c.num_gpus} × {c.gpu.id}, {mode_name(c.dp_attention, c.tp)}"


def other_configurations(cv):
    """Configurations 2 and 3 (views.configuration), from the state."""
    out = []
    for i in (2, 3):
        model_id = v[f"cmp{i}_model"]
        if not model_id:
            continue
        try:
            m, g = models.preset(model_id), models.gpu_preset(v[f"cmp{i}_gpu"])
        except MLAError as e:
            st.error(escape_md(f"Configuration {i}: {e}", 400))
            continue
        out.append(configuration(i, m, g, cv, num_gpus=v[f"cmp{i}_num_gpus"], tp=v[f"cmp{i}_tp"],
                                 dp_attention=v[f"cmp{i}_dp_attention"], kv_dtype=v[f"cmp{i}_kv_dtype"]))
    return out


CONFIGS_KEY = "_capacity_configs_open"


def compare(model, gpu, cv, configs):
    """Configurations side by side (views.configurations_by_context). Their controls are drawn
    while their expander is open (open at first when the link sets configuration 2 or 3)."""
    st.subheader("Compare configurations")
    box = layout.lazy_expander("Configurations 2 and 3: each its own model, GPU and parallelism", CONFIGS_KEY,
                               expanded=bool(configs) and not present)
    if box.open:
        with box:
            st.button("Example: 128K-token requests on 8 H200 at fp8 KV: DeepSeek-V3 with TP8 (1), Llama-3.1-405B "
                      "with TP8 (2), DeepSeek-V3 with DP-attention (3)", on_click=_example)
            labels, gpu_labels = models.model_labels(), models.gpu_labels()
            for i, col in zip((2, 3), st.columns(2)):
                with col:
                    st.selectbox(f"Configuration {i}: model", ["", *model_ids()], persist_state="session", key=state.seeded(f"cmp{i}_model"),
                                 format_func=lambda k: "(off)" if not k else labels.get(k, k))
                    st.selectbox(f"Configuration {i}: GPU", gpu_ids(), persist_state="session", key=state.seeded(f"cmp{i}_gpu"),
                                 format_func=lambda k: gpu_labels.get(k, k))
                    c1, c2 = st.columns(2)
                    c1.number_input(f"Configuration {i}: GPUs", 1, 4096, step=1, persist_state="session", key=state.seeded(f"cmp{i}_num_gpus"))
                    c2.number_input(f"Configuration {i}: tp", 1, 4096, step=1, persist_state="session", key=state.seeded(f"cmp{i}_tp"))
                    c1.toggle(f"Configuration {i}: DP-attention", persist_state="session", key=state.seeded(f"cmp{i}_dp_attention"))
                    c2.selectbox(f"Configuration {i}: KV dtype", KV_DTYPES, persist_state="session", key=state.seeded(f"cmp{i}_kv_dtype"))
            st.caption("Shared with configuration 1: context, gpu_memory_utilization, reserve, weights dtype (auto = "
                       "each model's own), block size (default = each model's). Memory is each preset's figure read "
                       "as GiB.")
    _compare_results(model, gpu, cv, configs)


def _compare_results(model, gpu, cv, configs):
    """Each configuration's numbers side by side, and the chart of all of them."""
    every = [Configuration(1, model, gpu, cv.num_gpus, cv.tp, cv.dp_attention, cv.main, (), cv.no_fit), *configs]
    for c, col in zip(every, st.columns(len(every))):
        with col:
            st.markdown(f"**{escape_md(_label(c))}**" if c.result else f"**Configuration {c.i}**")
            with layout.slot():
                for kind, text in c.messages:
                    (st.error if kind == "error" else st.warning)(escape_md(text, 400))
                if c.no_fit and c.result is not None:
                    st.error(escape_md(c.no_fit, 400))
            if c.result is None:
                continue
            r, i = c.result, c.i
            metric_row([
                    Metric(f"Config {i}: whole requests of {format_tokens(T)}", _requests(r["max_concurrent_requests"]),
                           help=f"{r['replicas']} replica(s); engine-style max concurrency {r['max_concurrency']:.2f}x"),
                    Metric(f"Config {i}: max tokens in the deployment", format_tokens(r["max_tokens_total"]),
                           help=format_tokens_exact(r["max_tokens_total"])),
                    Metric(f"Config {i}: KV budget per GPU", format_bytes(r["kv_budget_bytes_per_gpu"]),
                           help=f"{r['kv_budget_bytes_per_gpu']:,} B"),
                    Metric(f"Config {i}: KV bytes per token per GPU", format_bytes(r["kv_bytes_per_token_per_gpu"]),
                           help=f"{r['kv_bytes_per_token_per_gpu']:,} B"),
                    Metric(f"Config {i}: weights per GPU", format_bytes(r["weights_bytes_per_gpu"]),
                           help=f"{r['weights_bytes_per_gpu']:,} B as {r['weights_dtype']}")], stack=True)
    ready = [c for c in every if c.result is not None]
    if len(ready) < 2:
        st.caption("Open \"Configurations 2 and 3\" above and pick a model for either (or load the example) to "
                   "compare.")
        return
    contexts, counts = configurations_by_context(ready, T)
    fig = plot.Figure()
    for c, n_req in counts:
        fig.add_trace(plot.Bar(
            x=[format_tokens(t) for t in contexts], y=[n if n else None for n in n_req],
            name=_plot_text(_short(c)), marker={"color": charts.SEQUENCE[(c.i - 1) % len(charts.SEQUENCE)]},
            text=[_requests(n) for n in n_req], textposition="outside", constraintext="none", cliponaxis=False,
            hovertemplate=f"{_plot_text(_label(c))}<br>%{{x}}: %{{text}} whole requests<extra></extra>"))
    fig.update_layout(barmode="group")
    charts.style(fig, title="Whole concurrent requests by configuration", x_title="context (tokens per request)",
                 y_title="whole concurrent requests (count)", log_y=True, present=present)
    fig.update_xaxes(type="category")
    charts.show(fig, "capacity-configurations")
    st.caption("A missing bar is 0: the weights do not fit, or not one whole request does.")


# --- the page -------------------------------------------------------------------------------------------
@layout.section
def capacity_page():
    """Every section of the page: the deployment's controls change them all, so one section holds
    them; a change in it reruns it without the sidebar."""
    global v
    v = state.values()
    model = models.current_model()
    if not present:
        deployment(model)
    try:
        gpu = models.current_gpu(v)
    except MLAError as e:
        st.warning(escape_md(f"{e}; the preset's memory is used.", 400))
        gpu = models.gpu_preset(v["gpu"])
    cv = headline(model, gpu)
    if cv is None:
        return
    with layout.slot():  # a configuration the core refuses says so here
        configs = other_configurations(cv)
    if present:  # the slide: title, key numbers, requests against context; the rest follows
        variants(model, gpu, cv, chart_only=True)
        with layout.slot():
            messages(cv)
        deployment(model)
        details(model, gpu, cv)
        variants(model, gpu, cv, table_only=True)
        memory_chart(cv, configs)
    else:
        details(model, gpu, cv)
        memory_chart(cv, configs)
        variants(model, gpu, cv)
    allocator(model, cv)
    across_gpus(model, cv)
    compare(model, gpu, cv, configs)


charts.page_title("Capacity", "concurrent requests per GPU", models.resolve_model(v)[0].name, T, present=present)
capacity_page()
