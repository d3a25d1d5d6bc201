"""Decode roofline: each attention variant's decode on the chosen GPU's roofline, the whole
decode step against batch, and MLA's intensity per GPU under TP against DP-attention.

Sections, each drawing what one core call returns (mla_core.views, over mla_core.roofline and
mla_core.sweeps; docs/model.md, "Decode step roofline"): `gpu_choice` (views.roofline_gpu), `settings`,
`what_if` (mla_core.whatif), `summary` and `roofline_chart` (views.roofline_view), `step_chart`
(views.step_sweep) and `tp_chart` (views.tp_comparison). Measured points come from the benchmark
page's result (ui.measured) and from a stored kernel profile (`profile_picker`,
views.roofline_profiles: its attention decode calls, counted as the predictions are). In presentation mode the page is one slide: title, key numbers and
the roofline chart first."""
from ui.charts import plot  # plotly.graph_objects spelling, built as plain dicts
import streamlit as st

from mla_core.store import disturbance
from mla_core.errors import MLAError
from mla_core.kv import default_gqa_groups, gqa_group_choices
from mla_core.roofline import MLA_PATHS
from mla_core.units import (WEIGHT_DTYPES, format_bytes, format_count, format_intensity, format_rate,
                            format_seconds, format_token_rate, format_tokens)
from mla_core.views import (measured_roof, roofline_gpu, roofline_profiles, roofline_variants, roofline_view,
                            step_sweep, tp_comparison, variant_dims_settable)
from ui import charts, layout, measured, models, params, state, whatif
from ui.metrics import Metric, metric_row
from ui.text import csv_text, escape_md, frame

TFLOPS = 1e12  # flop/s per TFLOP/s (display only)

v = state.values()
present = v["present"]
T, B, tp = v["context"], v["batch"], v["tp"]
wdtype = None if v["weights_dtype"] == "auto" else v["weights_dtype"]


def _legend_below(fig, per_row: int = 3) -> None:
    """Many traces: the legend goes under the plot (charts.legend_below), clear of the axis title."""
    charts.legend_below(fig, present=present, per_row=per_row)


def _warn(text: str) -> None:
    st.warning(escape_md(text, 400))


def gpu_choice():
    """The sidebar's GPU, or the part with a typed peak, or the fallback (views.roofline_gpu)."""
    labels = models.gpu_labels()
    fallback_id = params.PARAMS["gpu"].default
    g = roofline_gpu(models.gpu_preset(v["gpu"]), labels.get(v["gpu"], v["gpu"]), v["peak_tflops"],
                     models.gpu_preset(fallback_id), labels.get(fallback_id, fallback_id))
    if g.message:
        (st.info if g.level == "info" else st.warning)(escape_md(g.message, 400))
    return g


def settings(model, g):
    """The page's own controls (widgets only)."""
    with st.expander("Roofline settings", expanded=not present):
        c1, c2, c3, c4 = st.columns(4)
        c1.radio("MLA path (decode step, TP chart)", MLA_PATHS, persist_state="session", key=state.seeded("mla_path"), horizontal=True,
                 help="absorbed: attention on the latent (FlashMLA). recompute: latent cached, K and V rebuilt every "
                      "step. expanded: reads the per-head cache of an MLA-unaware engine.")
        c2.number_input("Tensor parallel size (tp), shared with the Capacity page", 1, 4096, step=1, persist_state="session", key=state.seeded("tp"),
                        help="One setting for both pages. The decode step shows one GPU's share: weights / TP, query "
                             "heads / TP, the MLA latent whole.")
        c3.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], persist_state="session", key=state.seeded("weights_dtype"),
                     help="auto: fp8 for fp8-quantized configs, else torch_dtype. The step's peak is the weights' "
                          "dtype's.")
        choices = [0, *gqa_group_choices(model)]
        if v["gqa_groups"] not in choices:  # refused (views.roofline_view warns): the widget shows the default
            state.set_values(gqa_groups=0)
        default = default_gqa_groups(model)
        c4.selectbox("GQA groups (KV heads)", choices, persist_state="session", key=state.seeded("gqa_groups"),
                     format_func=lambda n: f"default ({default})" if n == 0 else str(n))
        c1, c2, c3, _ = st.columns(4)
        if variant_dims_settable(model):  # an MLA model's d_c and d_r: the what-if sliders below, the one control
            c1.number_input("MLA variant's d_c (0 = 4 d_h)", 0, 16384, step=64, persist_state="session",
                            key=state.seeded("cmp_kv_lora_rank"), help="The latent width of the same-width MLA variant of this "
                                                         "model, which has no MLA of its own.")
            c2.number_input("MLA variant's d_r (0 = d_h / 2)", 0, 1024, step=16, persist_state="session",
                            key=state.seeded("cmp_rope_dim"), help="The decoupled RoPE key of the same-width MLA variant.")
        if g.needs_peak:
            c3.number_input(f"Peak of {g.name}, dense bf16 TFLOP/s", 0.0, 1e6, step=1.0, persist_state="session", key=state.seeded("peak_tflops"),
                            help="Apple publishes no tensor peak; the benchmark page measures one (matmul TFLOP/s).")


def _disturbed_name(name: str, result: dict, what: str) -> str:
    """`name` marked "(disturbed)" when the run says it was (mla_core.store.disturbance), with
    the reasons shown once above the chart; as the Benchmark page's lists and exports mark it."""
    if not disturbance.is_disturbed(result):
        return name
    block = result.get("disturbed") if isinstance(result.get("disturbed"), dict) else {}
    listed = block.get("reasons") if isinstance(block.get("reasons"), list) else []
    reasons = "; ".join(measured.clean_text(r, 200) for r in listed[:3] if isinstance(r, str))
    _warn(f"{what} was disturbed while it ran ({reasons or 'no reason recorded'}): its points are marked "
          "\"disturbed\" and may sit below what the machine can do.")
    return name + " (disturbed)"


def _load_measured():
    """[(legend name, points, result dict)] from the session's benchmark result and the chosen
    samples; a disturbed run's legend name says so."""
    out = []
    result = st.session_state.get("bench_result")
    if result is not None:
        pts, problems = measured.measured_points(result)
        if not pts and problems:
            st.warning(escape_md(f"Ignored the benchmark result in this session: {problems[0]}.", 400))
        elif problems:
            st.warning(escape_md(f"Skipped {len(problems)} malformed measured result(s) ({problems[0]}).", 400))
        if pts:
            out.append((_disturbed_name(f"measured: {measured.device_name(result)}", result,
                                        "This session's benchmark run"), pts, result))
    for name in st.session_state.get("_measured_samples") or []:
        data, error = measured.load_sample(name)
        if error:
            st.warning(escape_md(f"Sample {error}.", 400))
            continue
        pts, problems = measured.measured_points(data)
        if problems:
            st.warning(escape_md(f"Sample {measured.clean_text(name)}: skipped {len(problems)} result(s) "
                                 f"({problems[0]}).", 400))
        if pts:
            out.append((_disturbed_name(f"measured: {measured.device_name(data)} ({measured.clean_text(name, 40)})",
                                        data, f"Sample {measured.clean_text(name, 40)}"), pts, data))
    return out



def _hover(label: str, r: dict, note: str = "") -> str:
    return (f"<b>{label}</b>{note}<br>intensity {format_intensity(r['attention_intensity_flop_per_byte'])}<br>"
            f"at the roofline {format_rate(r['attainable_flops'], 'FLOP/s')} ({r['bound']} bound)<br>"
            f"attention time lower bound {format_seconds(r['attention_time_s'])}<br>"
            f"KV read {format_bytes(r['attention_bytes'])} ({r['attention_bytes']:,} B), "
            f"{format_count(r['attention_flops'])} flop")




def summary(model, gpu, gpu_name, kv_dtype, measured_sets, profile=None):
    """The model's place on the roofline and its decode step (views.roofline_view); None when
    the core refuses the inputs."""
    extra = [p.intensity_flop_per_byte for _, pts, _ in measured_sets for p in pts]
    if profile is not None and profile.roofline is not None:
        extra += [p.intensity_flop_per_byte for p in profile.roofline.points]
    try:
        rv = roofline_view(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, weights_dtype=wdtype,
                           mla_path=v["mla_path"], tp=tp, gqa_groups=v["gqa_groups"],
                           kv_lora_rank=v["cmp_kv_lora_rank"], qk_rope_head_dim=v["cmp_rope_dim"],
                           extra_intensities=extra)
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        return None
    with layout.slot():
        if not present:  # a slide shows them below its chart
            for w in rv.warnings:
                _warn(w)
    step = rv.step
    if not present:
        st.caption(f"**{escape_md(model.name)}** ({model.kind.upper()}) on **{escape_md(gpu_name)}**: "
                   f"{format_rate(gpu.bandwidth_Bps, 'B/s')}, {format_rate(gpu.peak_flops('bf16'), 'FLOP/s')} dense "
                   f"bf16; {B:,} sequence(s) x {format_tokens(T)}, KV cache {rv.kv_dtype}.")
    ridge_help = ("bf16 peak / bandwidth: below it attention is memory bound. The whole step's ridge at the "
                  f"weights' {step['weights_dtype']} peak is {format_intensity(step['ridge_flop_per_byte'])}.")
    metrics = [
        (f"Attention intensity, {rv.own_label}, all heads", format_intensity(rv.own_all["attention_intensity_flop_per_byte"]),
         "Attention flops / KV bytes read with every query head on one GPU (TP 1, or DP-attention)."),
        (f"Per GPU at TP {tp}", format_intensity(rv.own_tp["attention_intensity_flop_per_byte"]),
         "Query heads split over the TP ranks; the MLA latent is read whole by every rank."),
        (f"Decode step at TP {tp}, time lower bound", format_seconds(step["step_time_s"]),
         f"One GPU's share at TP {tp}: max(bytes / bandwidth, flops / peak); {step['bound']} bound."),
        ("Tokens/s upper bound", format_token_rate(step["tokens_per_s"]),
         f"batch / step time = {step['tokens_per_s']:,.2f} tokens/s, the {B:,} sequence(s) together."),
        ("Ridge point (bf16 peak)", format_intensity(step["attention_ridge_flop_per_byte"]), ridge_help),
        (f"Weights held per GPU at TP {tp}", format_bytes(step["weights_resident_bytes_per_gpu"]),
         f"All parameters as {step['weights_dtype']}, / TP; one GPU has {format_bytes(gpu.memory_bytes)}."),
    ]
    extra = [("Whole-step intensity", format_intensity(step["step_intensity_flop_per_byte"]),
              f"Step flops / step bytes (weights + KV) on one GPU at TP {tp}; the ridge at the weights' "
              f"{step['weights_dtype']} peak is {format_intensity(step['ridge_flop_per_byte'])}.")]
    if rv.largest_batch is not None:
        extra.append((f"Largest batch that fits at TP {tp}", f"{rv.largest_batch:,} sequences",
                      f"Whole {format_tokens(T)} sequences the {tp} GPU(s) hold at gpu_memory_utilization 0.9 "
                      "(the Capacity page's rule); the step charts grey out past it."))
    # A slide shows one row of four (the ridge is drawn on the chart); the desk view shows them all.
    rows = [metrics[:4]] if present else [[metrics[0], metrics[1], metrics[4]], [metrics[2], metrics[3], metrics[5]],
                                          extra]
    for row in rows:
        metric_row([Metric(label, value, help=help_text) for label, value, help_text in row])
    with layout.slot():
        if rv.batch_note:
            st.info(escape_md(rv.batch_note, 400))
        if not step["weights_fit_in_memory"]:
            _warn(f"At TP {tp} one GPU would hold {format_bytes(step['weights_resident_bytes_per_gpu'])} of weights, "
                  f"more than its {format_bytes(gpu.memory_bytes)}: this step cannot run as set; raise TP (Roofline "
                  "settings) to see a deployment that fits.")
    return rv


# MLA expanded sits on MHA (both 1 flop/B at 16-bit): a larger diamond drawn first stays visible behind it.
SYMBOLS = {"MLA recompute": ("square", 0), "MLA expanded": ("diamond", 8)}


def _profile_trace(fig, profile) -> None:
    """The chosen kernel profile's decode calls (views.roofline_profiles): x = counted flops / bytes,
    y = flops / measured latency."""
    pts = profile.roofline.points
    fig.add_trace(plot.Scatter(
        x=[p.intensity_flop_per_byte for p in pts], y=[p.achieved_flops / TFLOPS for p in pts], mode="markers",
        name=charts.plot_text(profile.name),
        marker={"symbol": "star", "size": 15 if present else 12, "color": [charts.color_for(p.label) for p in pts],
                "line": {"width": 1, "color": "#333333"}},
        customdata=[[p.label, p.kv_dtype, f"B={p.batch:,} T={p.context:,} h={p.num_heads} kv={p.num_kv_heads} "
                     f"k={p.k_dim} v={p.v_dim}", format_seconds(p.latency_s), format_rate(p.achieved_Bps, "B/s"),
                     format_intensity(p.intensity_flop_per_byte), format_rate(p.achieved_flops, "FLOP/s")]
                    for p in pts],
        hovertemplate=(f"{charts.plot_text(profile.name)}<br><b>%{{customdata[0]}}</b> %{{customdata[1]}} "
                       "(%{customdata[2]})<br>intensity %{customdata[5]}<br>achieved %{customdata[6]}, "
                       "%{customdata[4]}<br>measured %{customdata[3]}<extra></extra>")))


def roofline_chart(rv, gpu, gpu_name, measured_sets, profile=None):
    """The main chart: the roof, each variant's point, the model's share at TP, measured points."""
    if not present:
        st.subheader("Attention on the roofline")
    ridge = rv.ridge
    fig = plot.Figure()
    fig.add_trace(plot.Scatter(
        x=rv.roof_x, y=[y / TFLOPS for y in rv.roof_y], mode="lines",
        name=f"roof: {charts.plot_text(gpu_name)}", line={"color": "#777777", "width": 3 if present else 2},
        hovertemplate="min(peak, bandwidth x intensity)<br>%{x:.3g} flop/B -> %{y:.4g} TFLOP/s<extra></extra>"))
    fig.add_trace(plot.Scatter(
        x=[ridge], y=[rv.roof_y[1] / TFLOPS], mode="markers+text", name="ridge point", showlegend=False,
        marker={"symbol": "diamond", "size": 14 if present else 11, "color": "#777777"},
        text=[f"ridge {format_intensity(ridge)}"], textposition="bottom right",
        hovertemplate=(f"ridge point: {format_intensity(ridge)}<br>peak {format_rate(gpu.peak_flops('bf16'), 'FLOP/s')}, "
                       f"bandwidth {format_rate(gpu.bandwidth_Bps, 'B/s')}<extra></extra>")))
    for p in sorted(rv.points, key=lambda p: p.label != "MLA expanded"):
        r = p.result
        symbol, extra = SYMBOLS.get(p.label, ("circle", 0))
        fig.add_trace(plot.Scatter(
            x=[r["attention_intensity_flop_per_byte"]], y=[r["attainable_flops"] / TFLOPS], mode="markers",
            name=p.label + (" (this model)" if p.is_model else ""),
            marker={"color": charts.color_for(p.label), "symbol": symbol,
                    "size": ((22 if present else 16) if p.is_model else (16 if present else 12)) + extra,
                    "line": {"width": 2 if p.is_model else 1, "color": "#333333"}},
            hovertemplate=_hover(p.label, r, f", KV {p.kv_dtype}") + "<extra></extra>"))
    own_tp, own_name = rv.own_tp, rv.own_label
    if own_tp["heads_per_gpu"] != rv.own_all["heads_per_gpu"]:
        fig.add_trace(plot.Scatter(
            x=[own_tp["attention_intensity_flop_per_byte"]], y=[own_tp["attainable_flops"] / TFLOPS], mode="markers",
            name=f"{own_name}, one GPU at TP {tp}",
            marker={"color": charts.color_for(own_name), "size": 16 if present else 12, "symbol": "circle-open",
                    "line": {"width": 3}},
            hovertemplate=_hover(own_name, own_tp, f", one GPU at TP {tp} ({own_tp['heads_per_gpu']} query heads)")
            + "<extra></extra>"))
    for name, pts, result in measured_sets:
        fig.add_trace(plot.Scatter(
            x=[p.intensity_flop_per_byte for p in pts], y=[p.achieved_TFLOPs for p in pts], mode="markers", name=name,
            marker={"symbol": "x", "size": 14 if present else 11, "color": [charts.color_for(p.label) for p in pts],
                    "line": {"width": 1, "color": "#333333"}},
            customdata=[[p.label, p.dtype, ", ".join(f"{k}={val:,}" for k, val in p.shape.items()),
                         format_seconds(p.median_s), format_rate(p.achieved_GBps * 1e9, "B/s"),
                         format_seconds(p.predicted_s) if p.predicted_s else "n/a",
                         format_intensity(p.intensity_flop_per_byte),
                         format_rate(p.achieved_TFLOPs * TFLOPS, "FLOP/s")] for p in pts],
            hovertemplate=(f"{name}<br><b>%{{customdata[0]}}</b> %{{customdata[1]}} (%{{customdata[2]}})<br>"
                           "intensity %{customdata[6]}<br>achieved %{customdata[7]}, %{customdata[4]}<br>"
                           "median %{customdata[3]}, roofline prediction %{customdata[5]}<extra></extra>")))
        bw_GBps, mm_TFLOPs = measured.ceilings(result)
        mroof = measured_roof(bw_GBps, mm_TFLOPs, rv.roof_x[0], rv.roof_x[-1]) if bw_GBps and mm_TFLOPs else None
        if mroof:
            fig.add_trace(plot.Scatter(
                x=mroof[0], y=[y / TFLOPS for y in mroof[1]], mode="lines",
                name=f"measured roof: {name.removeprefix('measured: ')}",
                line={"color": "#777777", "dash": "dot", "width": 2},
                hovertemplate=(f"measured read {format_rate(bw_GBps * 1e9, 'B/s')}, matmul "
                               f"{format_rate(mm_TFLOPs * TFLOPS, 'FLOP/s')}<extra></extra>")))
    if profile is not None and profile.roofline is not None and profile.roofline.points:
        _profile_trace(fig, profile)
    charts.style(fig, title=f"Decode attention on the {charts.plot_text(gpu_name)} roofline ({format_tokens(T)}, "
                            f"batch {B:,})",
                 x_title="arithmetic intensity (flop/B)", y_title="attainable performance (TFLOP/s)",
                 log_x=True, log_y=True, present=present, height=charts.slide_height(present))
    if present:  # on a slide the legend sits beside the plot, not under it
        fig.update_layout(legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top", "font": {"size": 13},
                                      "tracegroupgap": 2},
                          margin={"t": 60, "b": 10})
    else:
        _legend_below(fig)
    charts.show(fig, "decode-roofline", key="_roofline_chart")
    if not present:
        st.caption("Filled markers: every query head on one GPU (TP 1, or DP-attention); the hollow marker is one "
                   "GPU's share at the chosen TP. Flops count 2 per multiply-add; attention runs at the dense bf16 "
                   "peak; bandwidth and peak are datasheet figures (TB/s = 10^12 B/s, TFLOP/s = 10^12 flop/s). A "
                   "point's height is what the roofline allows, an upper bound; its time is a lower bound. Variants "
                   f"share the model's layers and query heads; MHA/GQA/MQA use d_h = {rv.baseline_head_dim}.")
        if profile is not None and profile.roofline is not None and profile.roofline.points:
            st.caption(f"Stars: the decode calls of {escape_md(profile.name, 100)} (Benchmark page, Kernel profile) at "
                       "their own shapes and device; x = flops / KV bytes counted as the predicted points are, y = "
                       "those flops / the measured latency.")
        if measured_sets:
            st.caption("Crosses: measured kernels (benchmark page) at their own shapes and device; x = counted flops "
                       "/ bytes, y = achieved TFLOP/s. The solid roof is the chosen GPU's datasheet.")


def variants_table(rv, gpu):
    """The points as a table and a CSV of the core's raw numbers."""
    rows = [{
        "variant": p.label + (" (this model)" if p.is_model else ""),
        "KV dtype": p.kv_dtype,
        "heads on the GPU": p.result["heads_per_gpu"],
        "intensity (flop/B)": round(p.result["attention_intensity_flop_per_byte"], 2),
        "KV read": format_bytes(p.result["attention_bytes"]),
        "flops": f"{format_count(p.result['attention_flops'])} flop",
        "at the roofline": format_rate(p.result["attainable_flops"], "FLOP/s"),
        "time lower bound": format_seconds(p.result["attention_time_s"]),
        "bound": p.result["bound"],
    } for p in rv.points]
    table = frame(rows)
    if present:  # a slide keeps the columns that carry the comparison
        table = table.select(["variant", "intensity (flop/B)", "time lower bound", "bound"])
    st.dataframe(table, hide_index=True)
    csv = csv_text([{
        "variant": p.label, "is_model": p.is_model, "kv_dtype": p.kv_dtype,
        "mla_path": p.mla_path if p.label.startswith("MLA") else "",
        "gpu": gpu.id, "context": T, "batch": B, "heads_per_gpu": p.result["heads_per_gpu"],
        "attention_bytes": p.result["attention_bytes"], "attention_flops": p.result["attention_flops"],
        "intensity_flop_per_byte": p.result["attention_intensity_flop_per_byte"],
        "attainable_flops": p.result["attainable_flops"], "attention_time_s": p.result["attention_time_s"],
        "bound": p.result["bound"],
    } for p in rv.points])
    st.download_button("Download the table (CSV)", csv, file_name="decode_roofline_variants.csv", mime="text/csv")


def step_chart(model, gpu, kv_dtype, rv):
    """The whole decode step against batch (views.step_sweep)."""
    st.toggle("Add the same-width variants", persist_state="session", key="_step_variants")
    variants = None
    if st.session_state.get("_step_variants"):
        variants = roofline_variants(model, rv.kv_dtype, gqa_groups=v["gqa_groups"],
                                     kv_lora_rank=v["cmp_kv_lora_rank"], qk_rope_head_dim=v["cmp_rope_dim"])
    try:
        sw = step_sweep(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, weights_dtype=wdtype,
                        mla_path=rv.mla_path, tp=tp, own_label=rv.own_label, variants=variants)
    except MLAError as e:
        st.error(escape_md(str(e), 400))
        return
    crossover, bx = sw.crossover, list(sw.batches)
    fig_t, fig_r = plot.Figure(), plot.Figure()
    for label, mine, s in sw.lines:
        name = label + (" (this model)" if mine else "")
        width = (4 if present else 3) if mine else (3 if present else 1.8)
        custom = [[format_seconds(t), format_token_rate(r), "compute" if c else "memory"]
                  for t, r, c in zip(s["step_time_s"], s["tokens_per_s"], s["compute_bound"])]
        hover = (f"{name}<br>batch %{{x:,}}<br>step %{{customdata[0]}}<br>%{{customdata[1]}}<br>"
                 "%{customdata[2]} bound<extra></extra>")
        # Past the largest batch that fits in memory the curve goes on grey and dotted (views.step_sweep's `fits`).
        fit = [j for j, ok in enumerate(s["fits"]) if ok]
        over = [j for j, ok in enumerate(s["fits"]) if not ok]
        parts = [(fit, name, {"color": charts.color_for(label), "width": width}, True)]
        if over:
            parts.append(([*fit[-1:], *over], f"{label}: does not fit in memory",
                          {"color": "#aaaaaa", "width": width, "dash": "dot"}, mine))
        for idx, trace_name, line, legend in parts:
            if not idx:
                continue
            cd = [custom[j] for j in idx]
            fig_t.add_trace(plot.Scatter(x=[bx[j] for j in idx], y=[s["step_time_s"][j] * 1e3 for j in idx],
                                 mode="lines", name=trace_name, customdata=cd, line=line, hovertemplate=hover,
                                 showlegend=legend))
            fig_r.add_trace(plot.Scatter(x=[bx[j] for j in idx], y=[s["tokens_per_s"][j] for j in idx],
                                 mode="lines", name=trace_name, customdata=cd, line=line, hovertemplate=hover,
                                 showlegend=legend))
        if mine:
            for part, key, dash in (("memory time (bytes / bandwidth)", "memory_time_s", "dash"),
                                    ("compute time (flops / peak)", "compute_time_s", "dot")):
                fig_t.add_trace(plot.Scatter(x=bx, y=[t * 1e3 for t in s[key]], mode="lines", name=part,
                                     line={"color": "#777777", "dash": dash, "width": 2},
                                     hovertemplate=f"{part}<br>batch %{{x:,}}: %{{y:.4g}} ms<extra></extra>"))
    # Vertical markers as traces: on log axes Plotly puts shape labels (annotations) in log units.
    for f, key, scale in ((fig_t, "step_time_s", 1e3), (fig_r, "tokens_per_s", 1)):
        ys = [y * scale for _, _, s in sw.lines for y in (min(s[key]), max(s[key]))]
        span = [min(ys), max(ys)]
        if crossover is not None:
            f.add_trace(plot.Scatter(x=[crossover, crossover], y=span, mode="lines",
                                   name=f"compute bound from batch {crossover:,}",
                                   line={"dash": "dash", "color": "#777777", "width": 1.5},
                                   hovertemplate=f"memory/compute crossover: batch {crossover:,}<extra></extra>"))
        if sw.cap is not None and 1 <= sw.cap <= bx[-1]:
            f.add_trace(plot.Scatter(x=[sw.cap, sw.cap], y=span, mode="lines",
                             name=f"memory holds {sw.cap:,} sequences",
                             line={"dash": "dashdot", "color": "#D55E00", "width": 1.5},
                             hovertemplate=f"largest batch that fits at TP {tp}: {sw.cap:,}<extra></extra>"))
        f.add_trace(plot.Scatter(x=[B, B], y=span, mode="lines", name=f"batch {B:,} (sidebar)", showlegend=False,
                               line={"dash": "dot", "color": "#777777", "width": 1.5},
                               hovertemplate=f"batch {B:,} (sidebar)<extra></extra>"))
    charts.style(fig_t, title=f"Step time, lower bound ({format_tokens(T)}, TP {tp} share)",
                 x_title="batch (sequences)", y_title="step time, lower bound (ms)", log_x=True, log_y=True,
                 present=present)
    charts.style(fig_r, title="Tokens/s, upper bound (all sequences)", x_title="batch (sequences)",
                 y_title="tokens/s, upper bound (tokens/s)", log_x=True, log_y=True, present=present)
    for f in (fig_t, fig_r):
        _legend_below(f, per_row=2)
    if present:
        charts.show(fig_t, "decode-step-time", key="_step_time_chart")
        charts.show(fig_r, "decode-tokens-per-s", key="_step_rate_chart")
    else:
        c1, c2 = st.columns(2)
        with c1:
            charts.show(fig_t, "decode-step-time", key="_step_time_chart")
        with c2:
            charts.show(fig_r, "decode-tokens-per-s", key="_step_rate_chart")
    step = rv.step
    st.caption(
        f"One GPU's share of a decode step at TP {tp}: weights streamed "
        f"({format_bytes(step['weights_bytes_per_step'])} at batch {B:,}, {step['weights_dtype']}; MoE experts "
        f"touched under uniform routing) plus the KV cache read ({format_bytes(step['attention_bytes'])}); step time "
        f"= max(bytes / bandwidth, flops / peak at the weights' dtype, {format_rate(step['peak_flops'], 'FLOP/s')}). "
        "Bounds, not an engine's speed: activations, kernel launches and communication are left out. "
        + (f"The step turns compute bound at batch {crossover:,}." if crossover is not None
           else f"Memory bound at every batch shown (up to {bx[-1]:,})."))


def tp_chart(model, gpu, kv_dtype, rv):
    """MLA's intensity per GPU under TP against DP-attention (views.tp_comparison)."""
    try:
        tc = tp_comparison(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, mla_path=rv.mla_path, tp=tp,
                           gqa_groups=v["gqa_groups"], kv_lora_rank=v["cmp_kv_lora_rank"],
                           qk_rope_head_dim=v["cmp_rope_dim"])
    except MLAError as e:
        st.error(escape_md(f"TP comparison unavailable: {e}", 400))
        return
    degrees, ridge, mla_label, gqa_label = list(tc.degrees), tc.ridge, tc.mla_label, tc.gqa_label
    fig_tp = plot.Figure()
    lines = ((f"{mla_label}, TP (heads split, latent replicated)", 1, charts.color_for(mla_label), "solid"),
             (f"{mla_label}, DP-attention (all heads, whole sequences)", 2, charts.color_for(mla_label), "dash"),
             (f"{gqa_label}, TP (heads and KV heads split)", 3, charts.color_for(gqa_label), "solid"))
    for name, idx, color, dash in lines:
        rs = [row[idx] for row in tc.rows]
        fig_tp.add_trace(plot.Scatter(
            x=degrees, y=[r["attention_intensity_flop_per_byte"] for r in rs], mode="lines+markers", name=name,
            line={"color": color, "dash": dash, "width": 4 if present else 2.5},
            customdata=[[format_intensity(r["attention_intensity_flop_per_byte"]), r["heads_per_gpu"], r["bound"]]
                        for r in rs],
            hovertemplate=f"{name}<br>TP %{{x}}: %{{customdata[0]}}, %{{customdata[1]}} query heads per GPU, "
                          "%{customdata[2]} bound<extra></extra>"))
    fig_tp.add_trace(plot.Scatter(x=[degrees[0], degrees[-1]], y=[ridge, ridge], mode="lines",
                                name=f"ridge point ({format_intensity(ridge)})",
                                line={"dash": "dot", "color": "#777777"},
                                hovertemplate=f"ridge {format_intensity(ridge)}: below it, memory bound<extra></extra>"))
    charts.style(fig_tp, title="Attention intensity per GPU against TP degree", x_title="TP degree (GPUs)",
                 y_title="attention intensity per GPU (flop/B)", log_x=True, log_y=True, present=present,
                 height=420 if not present else None)
    fig_tp.update_xaxes(tickvals=degrees, ticktext=[str(t) for t in degrees])
    _legend_below(fig_tp, per_row=2)
    charts.show(fig_tp, "tp-vs-dp-attention", key="_tp_chart")
    tp_table = frame([{
        "TP": t,
        "query heads per GPU (TP)": r_tp["heads_per_gpu"],
        f"{mla_label}, TP (flop/B)": round(r_tp["attention_intensity_flop_per_byte"], 2),
        f"{mla_label}, DP-attention (flop/B)": round(r_dp["attention_intensity_flop_per_byte"], 2),
        f"{gqa_label}, TP (flop/B)": round(r_g["attention_intensity_flop_per_byte"], 2),
        "MLA bound under TP": r_tp["bound"],
    } for t, r_tp, r_dp, r_g in tc.rows])
    st.dataframe(tp_table, hide_index=True)
    st.download_button("Download the TP table (CSV)", csv_text([{
        "tp": t, "heads_per_gpu_tp": r_tp["heads_per_gpu"],
        "mla_intensity_tp": r_tp["attention_intensity_flop_per_byte"],
        "mla_intensity_dp_attention": r_dp["attention_intensity_flop_per_byte"],
        "gqa_intensity_tp": r_g["attention_intensity_flop_per_byte"], "mla_bound_tp": r_tp["bound"],
    } for t, r_tp, r_dp, r_g in tc.rows]), file_name="mla_tp_vs_dp_attention.csv",
        mime="text/csv")
    st.caption("Under TP each GPU runs n_h / TP query heads but reads the whole latent (it has no head axis), so its "
               "attention flops fall with TP and its bytes do not: intensity falls by the TP degree. With DP-attention "
               "each GPU holds whole sequences with every head, and the intensity stays at its TP-1 value. GQA's KV "
               "heads split with its query heads until TP exceeds the group count, after which they are replicated.")


# --- the page -------------------------------------------------------------------------------------------
def sample_picker():
    samples = measured.sample_files()
    if samples:
        st.multiselect("Add committed measurements (data/samples)", samples, persist_state="session",
                       key="_measured_samples", help="Results of `python -m mla_core bench` kept in the repository.")


def profile_picker(base):
    """The stored kernel profiles of the sidebar's model (views.roofline_profiles); 'none' by default."""
    ss = st.session_state
    pv = roofline_profiles(base.name, int(ss.get("roofline_profile") or 0))
    if ss.get("roofline_profile") != pv.chosen:
        state.set_values(roofline_profile=pv.chosen)  # an id this history does not hold for the model: none
    if len(pv.options) > 1 or pv.chosen:
        st.selectbox("Measured kernel profile (Benchmark page)", pv.options, persist_state="session",
                     key=state.seeded("roofline_profile"), format_func=lambda i: pv.labels.get(i, str(i)),
                     help="A stored `bench --profile` run of this model: its attention decode calls are drawn as "
                          "stars beside the predictions.")
    if pv.message:
        st.info(escape_md(pv.message, 400))
    return pv


STEP_KEY, TP_KEY = "_roofline_step_open", "_roofline_tp_open"


@layout.section
def step_section(model, gpu, kv_dtype, rv):
    """The step charts, rerun alone when their toggle moves (their inputs come from the page's run).
    Drawn while their expander is open (open at first in a link that adds the variants): two charts
    redrawn on every change of the page cost more than the roofline itself (benchmarks/browser.py)."""
    box = layout.lazy_expander("The whole decode step against batch: step time and tokens/s", STEP_KEY,
                               expanded=bool(st.session_state.get("_step_variants")))
    if box.open:
        with box:
            step_chart(model, gpu, kv_dtype, rv)


def tp_section(model, gpu, kv_dtype, rv):
    """MLA's intensity per GPU under TP against DP-attention, drawn while its expander is open."""
    box = layout.lazy_expander("Tensor parallelism against DP-attention: MLA's intensity per GPU", TP_KEY)
    if box.open:
        with box:
            tp_chart(model, gpu, kv_dtype, rv)


@layout.section
def roofline_page():
    """Every section of the page: the settings, the what-if sliders and the samples change them
    all, so one section holds them; a change in it reruns it without the sidebar."""
    global v, tp, wdtype
    v = state.values()
    tp = v["tp"]
    wdtype = None if v["weights_dtype"] == "auto" else v["weights_dtype"]
    base = models.current_model()
    wi = whatif.panel_state(base, v)
    model, kv_dtype = wi.model, wi.kv_dtype
    with layout.slot():  # its note on a typed peak or the fallback GPU
        g = gpu_choice()
    gpu, gpu_name = g.gpu, g.name
    if not present:
        settings(model, g)
        whatif.draw(base, wi, v)
        sample_picker()
        with layout.slot():
            profile = profile_picker(base)
    else:
        profile = roofline_profiles(base.name, int(st.session_state.get("roofline_profile") or 0))
    with layout.slot():  # what it skipped
        measured_sets = _load_measured()
    rv = summary(model, gpu, gpu_name, kv_dtype, measured_sets, profile)
    if rv is None:
        return
    roofline_chart(rv, gpu, gpu_name, measured_sets, profile)
    if present:  # the slide is above; its warnings and controls follow
        with layout.slot():
            for w in rv.warnings:
                _warn(w)
        settings(model, g)
        whatif.draw(base, wi, v, expanded=False)
        sample_picker()
        with layout.slot():
            profile_picker(base)
    variants_table(rv, gpu)
    step_section(model, gpu, kv_dtype, rv)
    tp_section(model, gpu, kv_dtype, rv)


charts.page_title("Decode roofline", "MLA against MHA, GQA and MQA", models.resolve_model(v)[0].name, T,
                  extra=f"batch {B:,}, TP {tp}", present=present)
roofline_page()
