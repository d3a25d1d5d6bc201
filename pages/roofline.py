"""Decode roofline: each attention variant's decode on the chosen GPU's roofline, the whole
decode step against batch, and MLA's intensity per GPU under TP against DP-attention.

Every number comes from mla_core.roofline / mla_core.sweeps (docs/model.md, "Decode step roofline");
measured points come from the benchmark page's result (ui.measured)."""
import pandas as pd
import streamlit as st

from mla_core.errors import MLAError
from mla_core.hardware import custom_gpu
from mla_core.kv import default_gqa_groups, gqa_group_choices, resolve_kv_dtype
from mla_core.roofline import MLA_PATHS, attainable_flops, attention_roofline, decode_variants, roofline
from mla_core.serving import largest_batch_that_fits
from mla_core.sweeps import decode_step_vs_batch, log_contexts
from mla_core.units import (WEIGHT_DTYPES, format_bytes, format_count, format_intensity, format_rate,
                            format_seconds, format_token_rate, format_tokens)
from mla_core.validate import MAX_BATCH
from ui import charts, measured, models, params, state
from ui.charts import go  # plotly.graph_objects' spelling, built as plain dicts (ui/charts.py)
from ui.text import escape_md

TFLOPS = 1e12  # flop/s per TFLOP/s (display only)
TP_DEGREES = (1, 2, 4, 8, 16)
STEP_BATCH_MAX = 1024


def _legend_below(fig, present: bool, rows: int = 2) -> None:
    """Many traces: the legend goes under the plot, where it cannot run into the title."""
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2 - (0.05 if present else 0), "x": 0},
                      margin={"b": (45 if present else 30) * rows + 70})


v = state.values()
present = v["present"]
st.title("Decode roofline: MLA against MHA, GQA and MQA")

model = models.current_model()
kv_dtype, dtype_warning = models.kv_dtype_for(model, v["kv_dtype"])
if dtype_warning:
    st.warning(escape_md(dtype_warning, 400))
gpu_labels = models.gpu_labels()


# --- the GPU: a preset, or an Apple part with a typed peak -----------------------------------------
def _has_figures(g) -> bool:
    return bool(g.bandwidth_TBps) and bool(g.bf16_TFLOPS)


preset_gpu = models.gpu_preset(v["gpu"])
gpu_name = gpu_labels.get(v["gpu"], v["gpu"])
needs_peak = not _has_figures(preset_gpu)
gpu = preset_gpu
if needs_peak:
    fallback_id = params.PARAMS["gpu"].default
    fallback = models.gpu_preset(fallback_id)
    if preset_gpu.bandwidth_TBps and v["peak_tflops"] > 0:
        try:
            gpu = custom_gpu(preset_gpu.memory_GB, bf16_TFLOPS=v["peak_tflops"], base=preset_gpu)
            st.info(f"{gpu_name}: no published tensor peak; using the {v['peak_tflops']:g} TFLOP/s typed below "
                    f"with its {format_rate(preset_gpu.bandwidth_Bps, 'B/s')} bandwidth.")
        except MLAError as e:
            st.warning(escape_md(f"{e}; showing {gpu_labels.get(fallback_id, fallback_id)} instead.", 400))
            gpu, gpu_name = fallback, gpu_labels.get(fallback_id, fallback_id)
    else:
        st.warning(f"{gpu_name} has no published dense tensor peak, so it has no roofline. Type a peak "
                   f"(bf16 TFLOP/s) under Roofline settings; until then the page shows "
                   f"{gpu_labels.get(fallback_id, fallback_id)}.")
        gpu, gpu_name = fallback, gpu_labels.get(fallback_id, fallback_id)

# --- controls ---------------------------------------------------------------------------------------
with st.expander("Roofline settings", expanded=not present):
    c1, c2, c3, c4 = st.columns(4)
    c1.radio("MLA path (decode step, TP chart)", MLA_PATHS, key="mla_path", horizontal=True,
             help="absorbed: attention on the latent (FlashMLA). recompute: latent cached, K and V rebuilt every "
                  "step. expanded: reads the per-head cache of an MLA-unaware engine.")
    c2.number_input("Tensor parallel size (TP)", 1, 4096, step=1, key="tp",
                    help="The decode step shows one GPU's share: weights / TP, query heads / TP, the MLA latent whole.")
    c3.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], key="weights_dtype",
                 help="auto: fp8 for fp8-quantized configs, else torch_dtype. The step's peak is the weights' dtype's.")
    choices = gqa_group_choices(model)
    if v["gqa_groups"] not in [0, *choices]:
        st.warning(escape_md(f"GQA groups {v['gqa_groups']} does not divide the query heads of {model.name}; "
                             "the default is used.", 400))
        st.session_state["gqa_groups"] = 0
    v["gqa_groups"] = c4.selectbox("GQA groups (KV heads)", [0, *choices], key="gqa_groups",
                                   format_func=lambda g: f"default ({default_gqa_groups(model)})" if g == 0 else str(g))
    c1, c2, c3, _ = st.columns(4)
    c1.number_input("MLA d_c (0 = model's / 4 d_h)", 0, 16384, step=64, key="cmp_kv_lora_rank")
    c2.number_input("MLA d_r (0 = model's / d_h/2)", 0, 1024, step=16, key="cmp_rope_dim")
    if needs_peak:
        c3.number_input(f"Peak of {preset_gpu.name}, dense bf16 TFLOP/s", 0.0, 1e6, step=1.0, key="peak_tflops",
                        help="Apple publishes no tensor peak; the benchmark page measures one (matmul TFLOP/s).")

T, B, tp = v["context"], v["batch"], v["tp"]
wdtype = None if v["weights_dtype"] == "auto" else v["weights_dtype"]
mla_path = v["mla_path"]
if model.is_mla and mla_path == "expanded" and kv_dtype == "fp8_ds_mla":
    st.warning("fp8_ds_mla stores the latent only; the decode step uses the absorbed path.")
    mla_path = "absorbed"

# --- the variants' attention on the roofline (all heads on one GPU) -------------------------------
try:
    variants = decode_variants(model, kv_dtype, gqa_groups=v["gqa_groups"] or None,
                               kv_lora_rank=v["cmp_kv_lora_rank"] or None, qk_rope_head_dim=v["cmp_rope_dim"] or None)
    points = [(label, spec, dtype, path,
               attention_roofline(spec, gpu, context=T, batch=B, kv_dtype=dtype, mla_path=path))
              for label, spec, dtype, path in variants]
    step = roofline(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, weights_dtype=wdtype, mla_path=mla_path, tp=tp)
    own_all = attention_roofline(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, mla_path=mla_path)
    own_tp = attention_roofline(model, gpu, context=T, batch=B, kv_dtype=kv_dtype, mla_path=mla_path, tp=tp)
except MLAError as e:
    st.error(escape_md(str(e), 400))
    st.stop()


def _is_model(label: str, spec) -> bool:
    if model.is_mla:
        return label == f"MLA {mla_path}"
    return not label.startswith("MLA") and spec.attention == model.attention


own_label = next((label for label, spec, _, _, _ in points if _is_model(label, spec)), None)
own_name = own_label or f"{model.kind.upper()} (this model)"

a = model.attention
shape = (f"{model.num_hidden_layers} layers, {a.num_attention_heads} query heads, "
         + (f"latent d_c {a.kv_lora_rank} + decoupled RoPE key d_r {a.qk_rope_head_dim}" if model.is_mla
            else f"{a.num_key_value_heads} KV heads of d_h {a.head_dim}"))
st.caption(f"**{escape_md(model.name)}** ({model.kind.upper()}, {shape}) on **{escape_md(gpu_name)}**: "
           f"{format_rate(gpu.bandwidth_Bps, 'B/s')}, {format_rate(gpu.peak_flops('bf16'), 'FLOP/s')} dense bf16; "
           f"{B:,} sequence(s) x {format_tokens(T)}, KV cache {resolve_kv_dtype(model, kv_dtype)}.")

m1, m2, m3 = st.columns(3)
m1.metric(f"Attention intensity, {own_name}, all heads", format_intensity(own_all["attention_intensity_flop_per_byte"]),
          help="Attention flops / KV bytes read with every query head on one GPU (TP 1, or DP-attention).")
m2.metric(f"Per GPU at TP {tp}", format_intensity(own_tp["attention_intensity_flop_per_byte"]),
          help="Query heads split over the TP ranks; the MLA latent is read whole by every rank.")
m3.metric("Ridge point (bf16 peak)", format_intensity(step["attention_ridge_flop_per_byte"]),
          help="bf16 peak / bandwidth: below it attention is memory bound. The whole step's ridge at the "
               f"weights' {step['weights_dtype']} peak is {format_intensity(step['ridge_flop_per_byte'])}.")
m4, m5, m6 = st.columns(3)
m4.metric(f"Decode step at TP {tp}, time lower bound", format_seconds(step["step_time_s"]),
          help=f"One GPU's share at TP {tp}: max(bytes / bandwidth, flops / peak); {step['bound']} bound.")
m5.metric("Tokens/s upper bound", format_token_rate(step['tokens_per_s']),
          help=f"batch / step time = {step['tokens_per_s']:,.2f} tokens/s, the {B:,} sequence(s) together.")
m6.metric(f"Weights held per GPU at TP {tp}", format_bytes(step["weights_resident_bytes_per_gpu"]),
          help=f"All parameters as {step['weights_dtype']}, / TP; one GPU has {format_bytes(gpu.memory_bytes)}.")
if not step["weights_fit_in_memory"]:
    st.warning(escape_md(f"At TP {tp} one GPU would hold {format_bytes(step['weights_resident_bytes_per_gpu'])} of "
                         f"weights, more than its {format_bytes(gpu.memory_bytes)}: this step cannot run as set; "
                         "raise TP (Roofline settings) to see a deployment that fits.", 400))

try:
    own_cap = largest_batch_that_fits(model, gpu, context=T, tp=tp, kv_dtype=kv_dtype, weights_dtype=wdtype,
                                      cache_layout="expanded" if (model.is_mla and mla_path == "expanded") else "latent")
except MLAError:
    own_cap = None
m7, m8, _ = st.columns(3)
m7.metric("Whole-step intensity", format_intensity(step["step_intensity_flop_per_byte"]),
          help=f"Step flops / step bytes (weights + KV) on one GPU at TP {tp}; the ridge at the weights' "
               f"{step['weights_dtype']} peak is {format_intensity(step['ridge_flop_per_byte'])}.")
if own_cap is not None:
    m8.metric(f"Largest batch that fits at TP {tp}", f"{own_cap:,} sequences",
              help=f"Whole {format_tokens(T)} sequences the {tp} GPU(s) hold at gpu_memory_utilization 0.9 "
                   "(the Capacity page's rule); the step charts grey out past it.")
if own_cap is not None and B > own_cap:
    st.info(f"Batch {B:,} does not fit: at TP {tp} memory holds {own_cap:,} sequences of {format_tokens(T)} "
            "(gpu_memory_utilization 0.9); the figures above are for a step that cannot run as set.")

# --- roofline chart ---------------------------------------------------------------------------------
st.subheader("Attention on the roofline")
ridge = gpu.ridge_flop_per_byte
peak_t = gpu.peak_flops("bf16") / TFLOPS


def _load_measured():
    """[(legend name, points, result dict)] from the session's benchmark result and the chosen samples."""
    out = []
    result = st.session_state.get("bench_result")
    if result is not None:
        pts, problems = measured.measured_points(result)
        if not pts and problems:
            st.warning(escape_md(f"Ignored the benchmark result in this session: {problems[0]}.", 400))
        elif problems:
            st.warning(escape_md(f"Skipped {len(problems)} malformed measured result(s) ({problems[0]}).", 400))
        if pts:
            out.append((f"measured: {measured.device_name(result)}", pts, result))
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
            out.append((f"measured: {measured.device_name(data)} ({measured.clean_text(name, 40)})", pts, data))
    return out


samples = measured.sample_files()
if samples:
    st.multiselect("Add committed measurements (data/samples)", samples, key="_measured_samples",
                   help="Results of `python -m mla_core bench` kept in the repository.")
measured_sets = _load_measured()

intensities = [r["attention_intensity_flop_per_byte"] for *_, r in points]
intensities += [own_tp["attention_intensity_flop_per_byte"]]
intensities += [p.intensity_flop_per_byte for _, pts, _ in measured_sets for p in pts]
x_lo = min(0.1, min(intensities) / 3)
x_hi = max(10 * ridge, 3 * max(intensities))

fig = go.Figure()
roof_x = [x_lo, ridge, x_hi]
fig.add_trace(go.Scatter(
    x=roof_x, y=[attainable_flops(x, gpu, "bf16") / TFLOPS for x in roof_x], mode="lines",
    name=f"roof: {gpu_name}", line={"color": "#777777", "width": 3 if present else 2},
    hovertemplate="min(peak, bandwidth x intensity)<br>%{x:.3g} flop/B -> %{y:.4g} TFLOP/s<extra></extra>"))
fig.add_trace(go.Scatter(
    x=[ridge], y=[peak_t], mode="markers+text", name="ridge point", showlegend=False,
    marker={"symbol": "diamond", "size": 14 if present else 11, "color": "#777777"},
    text=[f"ridge {format_intensity(ridge)}"], textposition="bottom right",
    hovertemplate=(f"ridge point: {format_intensity(ridge)}<br>peak {format_rate(gpu.peak_flops('bf16'), 'FLOP/s')}, "
                   f"bandwidth {format_rate(gpu.bandwidth_Bps, 'B/s')}<extra></extra>")))


def _hover(label: str, r: dict, note: str = "") -> str:
    return (f"<b>{label}</b>{note}<br>intensity {format_intensity(r['attention_intensity_flop_per_byte'])}<br>"
            f"at the roofline {format_rate(r['attainable_flops'], 'FLOP/s')} ({r['bound']} bound)<br>"
            f"attention time lower bound {format_seconds(r['attention_time_s'])}<br>"
            f"KV read {format_bytes(r['attention_bytes'])} ({r['attention_bytes']:,} B), "
            f"{format_count(r['attention_flops'])} flop")


# MLA expanded sits on MHA (both 1 flop/B at 16-bit): a larger diamond drawn first stays visible behind it.
SYMBOLS = {"MLA recompute": ("square", 0), "MLA expanded": ("diamond", 8)}
for label, spec, dtype, path, r in sorted(points, key=lambda p: p[0] != "MLA expanded"):
    mine = label == own_label
    symbol, extra = SYMBOLS.get(label, ("circle", 0))
    fig.add_trace(go.Scatter(
        x=[r["attention_intensity_flop_per_byte"]], y=[r["attainable_flops"] / TFLOPS], mode="markers",
        name=label + (" (this model)" if mine else ""),
        marker={"color": charts.color_for(label), "symbol": symbol,
                "size": ((22 if present else 16) if mine else (16 if present else 12)) + extra,
                "line": {"width": 2 if mine else 1, "color": "#333333"}},
        hovertemplate=_hover(label, r, f", KV {dtype}") + "<extra></extra>"))
if own_tp["heads_per_gpu"] != own_all["heads_per_gpu"]:
    fig.add_trace(go.Scatter(
        x=[own_tp["attention_intensity_flop_per_byte"]], y=[own_tp["attainable_flops"] / TFLOPS], mode="markers",
        name=f"{own_name}, one GPU at TP {tp}",
        marker={"color": charts.color_for(own_name), "size": 16 if present else 12, "symbol": "circle-open",
                "line": {"width": 3}},
        hovertemplate=_hover(own_name, own_tp, f", one GPU at TP {tp} ({own_tp['heads_per_gpu']} query heads)")
        + "<extra></extra>"))

for name, pts, result in measured_sets:
    fig.add_trace(go.Scatter(
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
    if bw_GBps and mm_TFLOPs:
        try:
            mgpu = custom_gpu(1.0, bandwidth_TBps=bw_GBps / 1000, bf16_TFLOPS=mm_TFLOPs)
            mx = [x_lo, mgpu.ridge_flop_per_byte, x_hi]
            fig.add_trace(go.Scatter(
                x=mx, y=[attainable_flops(x, mgpu, "bf16") / TFLOPS for x in mx], mode="lines",
                name=f"measured roof: {name.removeprefix('measured: ')}",
                line={"color": "#777777", "dash": "dot", "width": 2},
                hovertemplate=(f"measured read {format_rate(bw_GBps * 1e9, 'B/s')}, matmul "
                               f"{format_rate(mm_TFLOPs * TFLOPS, 'FLOP/s')}<extra></extra>")))
        except MLAError:
            pass

charts.style(fig, title=f"Decode attention on the {gpu_name} roofline ({format_tokens(T)}, batch {B:,})",
             x_title="arithmetic intensity (flop/B)", y_title="attainable performance (TFLOP/s)",
             log_x=True, log_y=True, present=present)
_legend_below(fig, present, rows=3)
charts.show(fig, "decode-roofline", key="_roofline_chart")
st.caption("Filled markers: every query head on one GPU (TP 1, or DP-attention); the hollow marker is one GPU's "
           "share at the chosen TP. Flops count 2 per multiply-add; attention runs at the dense bf16 peak; "
           "bandwidth and peak are datasheet figures (TB/s = 10^12 B/s, TFLOP/s = 10^12 flop/s). A point's height "
           "is what the roofline allows, an upper bound; its time is a lower bound. Variants share the model's "
           "layers and query heads; MHA/GQA/MQA use d_h = "
           + ("qk_nope_head_dim (DeepSeek-V2 Table 1)" if model.is_mla else f"{a.head_dim}") + ".")
if measured_sets:
    st.caption("Crosses: measured kernels (benchmark page) at their own shapes and device; "
               "x = counted flops / bytes, y = achieved TFLOP/s. The solid roof is the chosen GPU's datasheet.")

table = pd.DataFrame([{
    "variant": label + (" (this model)" if label == own_label else ""),
    "KV dtype": dtype,
    "heads on the GPU": r["heads_per_gpu"],
    "intensity (flop/B)": round(r["attention_intensity_flop_per_byte"], 2),
    "KV read": format_bytes(r["attention_bytes"]),
    "flops": f"{format_count(r['attention_flops'])} flop",
    "at the roofline": format_rate(r["attainable_flops"], "FLOP/s"),
    "time lower bound": format_seconds(r["attention_time_s"]),
    "bound": r["bound"],
} for label, spec, dtype, path, r in points])
st.dataframe(table, hide_index=True)
csv = pd.DataFrame([{
    "variant": label, "is_model": label == own_label, "kv_dtype": dtype,
    "mla_path": path if label.startswith("MLA") else "",
    "gpu": gpu.id, "context": T, "batch": B, "heads_per_gpu": r["heads_per_gpu"],
    "attention_bytes": r["attention_bytes"], "attention_flops": r["attention_flops"],
    "intensity_flop_per_byte": r["attention_intensity_flop_per_byte"], "attainable_flops": r["attainable_flops"],
    "attention_time_s": r["attention_time_s"], "bound": r["bound"],
} for label, spec, dtype, path, r in points]).to_csv(index=False)
st.download_button("Download the table (CSV)", csv, file_name="decode_roofline_variants.csv", mime="text/csv")

# --- the whole decode step against batch ------------------------------------------------------------
st.subheader("The whole decode step against batch (weights + KV)")
st.toggle("Add the same-width variants", key="_step_variants")
hi = STEP_BATCH_MAX if B <= STEP_BATCH_MAX else min(MAX_BATCH, 4 * B)
# The crossover is found on every whole batch up to 1,024 (or a fine log grid beyond); the lines
# are drawn on ~200 log-spaced batches plus the sidebar's batch and the two batches either side
# of the crossover (fewer points keep the page quick).
fine = sorted({*(range(1, STEP_BATCH_MAX + 1) if hi == STEP_BATCH_MAX
                 else (int(b) for b in log_contexts(1, hi, 2000))), B})
step_models = [(own_label or model.kind.upper(), model, kv_dtype, mla_path)]  # the model itself first
try:
    own_fine = decode_step_vs_batch(model, gpu, fine, context=T, kv_dtype=kv_dtype, weights_dtype=wdtype,
                                    mla_path=mla_path, tp=tp)
except MLAError as e:
    st.error(escape_md(str(e), 400))
    st.stop()
crossover_at = next((i for i, c in enumerate(own_fine["compute_bound"]) if c), None)
crossover = fine[crossover_at] if crossover_at is not None else None
batches = sorted({*(int(b) for b in log_contexts(1, hi, 200)), B,
                  *((fine[crossover_at - 1], crossover) if crossover_at else ())})
if st.session_state.get("_step_variants"):
    step_models += [(label, spec, dtype, path) for label, spec, dtype, path in variants
                    if label != own_label and (not label.startswith("MLA") or path != "recompute")]
try:
    sweeps = [(label, decode_step_vs_batch(spec, gpu, batches, context=T, kv_dtype=dtype, weights_dtype=wdtype,
                                           mla_path=path, tp=tp))
              for label, spec, dtype, path in step_models]
    step_caps = [largest_batch_that_fits(spec, gpu, context=T, tp=tp, kv_dtype=dtype, weights_dtype=wdtype,
                                         cache_layout="expanded" if path == "expanded" else "latent")
                 for label, spec, dtype, path in step_models]
except MLAError as e:
    st.error(escape_md(str(e), 400))
    st.stop()

fig_t, fig_r = go.Figure(), go.Figure()
bx = [int(b) for b in batches]
for i, (label, s) in enumerate(sweeps):
    mine = i == 0
    name = label + (" (this model)" if mine else "")
    width = (4 if present else 3) if mine else (3 if present else 1.8)
    custom = [[format_seconds(t), format_token_rate(r), "compute" if c else "memory"]
              for t, r, c in zip(s["step_time_s"], s["tokens_per_s"], s["compute_bound"])]
    hover = (f"{name}<br>batch %{{x:,}}<br>step %{{customdata[0]}}<br>%{{customdata[1]}}<br>"
             "%{customdata[2]} bound<extra></extra>")
    # Past the largest batch that fits in memory the curve goes on grey and dotted.
    fit = [j for j, b in enumerate(bx) if b <= step_caps[i]]
    over = [j for j, b in enumerate(bx) if b > step_caps[i]]
    parts = [(fit, name, {"color": charts.color_for(label), "width": width}, True)]
    if over:
        parts.append(([*fit[-1:], *over], f"{label}: does not fit in memory",
                      {"color": "#aaaaaa", "width": width, "dash": "dot"}, mine))
    for idx, trace_name, line, legend in parts:
        if not idx:
            continue
        cd = [custom[j] for j in idx]
        fig_t.add_trace(go.Scatter(x=[bx[j] for j in idx], y=s["step_time_s"][idx] * 1e3, mode="lines",
                                   name=trace_name, customdata=cd, line=line, hovertemplate=hover, showlegend=legend))
        fig_r.add_trace(go.Scatter(x=[bx[j] for j in idx], y=s["tokens_per_s"][idx], mode="lines",
                                   name=trace_name, customdata=cd, line=line, hovertemplate=hover, showlegend=legend))
    if mine:
        for part, key, dash in (("memory time (bytes / bandwidth)", "memory_time_s", "dash"),
                                ("compute time (flops / peak)", "compute_time_s", "dot")):
            fig_t.add_trace(go.Scatter(x=bx, y=s[key] * 1e3, mode="lines", name=part,
                                       line={"color": "#777777", "dash": dash, "width": 2},
                                       hovertemplate=f"{part}<br>batch %{{x:,}}: %{{y:.4g}} ms<extra></extra>"))
# Vertical markers as traces: on log axes Plotly puts shape labels (annotations) in log units.
for f, key in ((fig_t, "step_time_s"), (fig_r, "tokens_per_s")):
    scale = 1e3 if key == "step_time_s" else 1
    ys = [float(y) * scale for _, s in sweeps for y in (s[key].min(), s[key].max())]
    span = [min(ys), max(ys)]
    if crossover is not None:
        f.add_trace(go.Scatter(x=[crossover, crossover], y=span, mode="lines",
                               name=f"compute bound from batch {crossover:,}",
                               line={"dash": "dash", "color": "#777777", "width": 1.5},
                               hovertemplate=f"memory/compute crossover: batch {crossover:,}<extra></extra>"))
    if 1 <= step_caps[0] <= bx[-1]:
        f.add_trace(go.Scatter(x=[step_caps[0], step_caps[0]], y=span, mode="lines",
                               name=f"memory holds {step_caps[0]:,} sequences",
                               line={"dash": "dashdot", "color": "#D55E00", "width": 1.5},
                               hovertemplate=f"largest batch that fits at TP {tp}: {step_caps[0]:,}<extra></extra>"))
    f.add_trace(go.Scatter(x=[B, B], y=span, mode="lines", name=f"batch {B:,} (sidebar)", showlegend=False,
                           line={"dash": "dot", "color": "#777777", "width": 1.5},
                           hovertemplate=f"batch {B:,} (sidebar)<extra></extra>"))
charts.style(fig_t, title=f"Step time, lower bound ({format_tokens(T)}, TP {tp} share)", x_title="batch (sequences)",
             y_title="step time, lower bound (ms)", log_x=True, log_y=True, present=present)
charts.style(fig_r, title="Tokens/s, upper bound (all sequences)", x_title="batch (sequences)",
             y_title="tokens/s, upper bound (tokens/s)", log_x=True, log_y=True, present=present)
for f in (fig_t, fig_r):
    _legend_below(f, present, rows=2 + len(sweeps) // 2)
if present:
    charts.show(fig_t, "decode-step-time", key="_step_time_chart")
    charts.show(fig_r, "decode-tokens-per-s", key="_step_rate_chart")
else:
    c1, c2 = st.columns(2)
    with c1:
        charts.show(fig_t, "decode-step-time", key="_step_time_chart")
    with c2:
        charts.show(fig_r, "decode-tokens-per-s", key="_step_rate_chart")
st.caption(
    f"One GPU's share of a decode step at TP {tp}: weights streamed ({format_bytes(step['weights_bytes_per_step'])} "
    f"at batch {B:,}, {step['weights_dtype']}; MoE experts touched under uniform routing) plus the KV cache read "
    f"({format_bytes(step['attention_bytes'])}); step time = max(bytes / bandwidth, flops / peak at the weights' "
    f"dtype, {format_rate(step['peak_flops'], 'FLOP/s')}). Bounds, not an engine's speed: activations, kernel "
    "launches and communication are left out. "
    + (f"The step turns compute bound at batch {crossover:,}." if crossover is not None
       else f"Memory bound at every batch shown (up to {bx[-1]:,})."))

# --- TP against DP-attention ------------------------------------------------------------------------
st.subheader("Tensor parallelism against DP-attention: MLA's intensity per GPU")
mla_entry = next(((label, spec, dtype) for label, spec, dtype, path in variants if label == "MLA absorbed"), None)
gqa_entry = next(((label, spec, dtype) for label, spec, dtype, path in variants if label.startswith("GQA")), None)
degrees = sorted({*TP_DEGREES, tp})
try:
    _, mla_spec, mla_dtype = mla_entry
    tp_path = "absorbed" if (mla_path == "expanded" and mla_dtype == "fp8_ds_mla") else mla_path
    mla_label = f"MLA {tp_path}" + ("" if model.is_mla else " (same-width variant)")
    tp_rows = [(t, attention_roofline(mla_spec, gpu, context=T, batch=B, kv_dtype=mla_dtype, mla_path=tp_path, tp=t),
                attention_roofline(mla_spec, gpu, context=T, batch=B, kv_dtype=mla_dtype, mla_path=tp_path, tp=t,
                                   dp_attention=True),
                attention_roofline(gqa_entry[1], gpu, context=T, batch=B, kv_dtype=gqa_entry[2], tp=t))
               for t in degrees]
except (MLAError, TypeError) as e:
    st.error(escape_md(f"TP comparison unavailable: {e}", 400))
    st.stop()

fig_tp = go.Figure()
TP_LINES = ((f"{mla_label}, TP (heads split, latent replicated)", 1, charts.color_for(mla_label), "solid"),
            (f"{mla_label}, DP-attention (all heads, whole sequences)", 2, charts.color_for(mla_label), "dash"),
            (f"{gqa_entry[0]}, TP (heads and KV heads split)", 3, charts.color_for(gqa_entry[0]), "solid"))
for name, idx, color, dash in TP_LINES:
    rs = [row[idx] for row in tp_rows]
    fig_tp.add_trace(go.Scatter(
        x=degrees, y=[r["attention_intensity_flop_per_byte"] for r in rs], mode="lines+markers", name=name,
        line={"color": color, "dash": dash, "width": 4 if present else 2.5},
        customdata=[[format_intensity(r["attention_intensity_flop_per_byte"]), r["heads_per_gpu"], r["bound"]]
                    for r in rs],
        hovertemplate=f"{name}<br>TP %{{x}}: %{{customdata[0]}}, %{{customdata[1]}} query heads per GPU, "
                      "%{customdata[2]} bound<extra></extra>"))
fig_tp.add_trace(go.Scatter(x=[degrees[0], degrees[-1]], y=[ridge, ridge], mode="lines",
                            name=f"ridge point ({format_intensity(ridge)})", line={"dash": "dot", "color": "#777777"},
                            hovertemplate=f"ridge {format_intensity(ridge)}: below it, memory bound<extra></extra>"))
charts.style(fig_tp, title="Attention intensity per GPU against TP degree", x_title="TP degree (GPUs)",
             y_title="attention intensity per GPU (flop/B)", log_x=True, log_y=True, present=present,
             height=420 if not present else None)
fig_tp.update_xaxes(tickvals=degrees, ticktext=[str(t) for t in degrees])
_legend_below(fig_tp, present, rows=2)
charts.show(fig_tp, "tp-vs-dp-attention", key="_tp_chart")
tp_table = pd.DataFrame([{
    "TP": t,
    "query heads per GPU (TP)": r_tp["heads_per_gpu"],
    f"{mla_label}, TP (flop/B)": round(r_tp["attention_intensity_flop_per_byte"], 2),
    f"{mla_label}, DP-attention (flop/B)": round(r_dp["attention_intensity_flop_per_byte"], 2),
    f"{gqa_entry[0]}, TP (flop/B)": round(r_g["attention_intensity_flop_per_byte"], 2),
    "MLA bound under TP": r_tp["bound"],
} for t, r_tp, r_dp, r_g in tp_rows])
st.dataframe(tp_table, hide_index=True)
st.download_button("Download the TP table (CSV)", pd.DataFrame([{
    "tp": t, "heads_per_gpu_tp": r_tp["heads_per_gpu"],
    "mla_intensity_tp": r_tp["attention_intensity_flop_per_byte"],
    "mla_intensity_dp_attention": r_dp["attention_intensity_flop_per_byte"],
    "gqa_intensity_tp": r_g["attention_intensity_flop_per_byte"], "mla_bound_tp": r_tp["bound"],
} for t, r_tp, r_dp, r_g in tp_rows]).to_csv(index=False), file_name="mla_tp_vs_dp_attention.csv", mime="text/csv")
st.caption("Under TP each GPU runs n_h / TP query heads but reads the whole latent (it has no head axis), so its "
           "attention flops fall with TP and its bytes do not: intensity falls by the TP degree. With DP-attention "
           "each GPU holds whole sequences with every head, and the intensity stays at its TP-1 value. GQA's KV heads "
           "split with its query heads until TP exceeds the group count, after which they are replicated.")
