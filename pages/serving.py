"""Serving plan: which split of the GPUs (TP, DP-attention, expert parallelism) serves a workload
at the TTFT and TPOT objectives, at what throughput and cost, and the engines' launch commands.

Every number comes from one call, mla_core.serving.search (docs/model.md, "Serving"). The page is
one section (`serving_page`, rerun alone when one of its inputs changes: they all change the
plan) made of functions that each draw what one core call returns: `inputs` (widgets), `plan_for`
(serving.search), `headline` (the plan's best point), `frontier` (views.serving_frontier),
`splits` (views.serving_split_rows) and `launch` (views.command_lines). A new section is one
more such function called from `serving_page` with the plan."""
import html

from ui.charts import go  # plotly.graph_objects spelt as plain dicts (ui/charts.py)
import streamlit as st

from mla_core.errors import MLAError
from mla_core.serving import Workload, search
from mla_core.units import WEIGHT_DTYPES, format_count, format_seconds
from mla_core.views import NOT_SERVED, command_lines, serving_frontier, serving_split_rows
from ui import charts, layout, models, state
from ui.collectives import LINK_KEY
from ui.text import csv_text, escape_md, frame

v = state.values()
present = v["present"]
INTRO = ("Every split of the GPUs into replicas (tensor parallel, or DP-attention with the experts sharded or "
           "spread by expert parallelism), at every power-of-two batch up to what memory holds. Times are lower "
           "bounds and rates upper bounds (roofline, no queueing, no kernel overheads): a real engine is slower. "
           "The sidebar's model, GPU and KV dtype apply; context and batch do not (the workload sets them).")

def inputs():
    """The deployment, workload and objectives (widgets only); returns the measured link's
    bandwidth when the user chose to use one (this session only), else None."""
    with st.expander("Deployment, workload and objectives", expanded=not present):
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("GPUs in the deployment", 1, 4096, step=1, persist_state="session", key="num_gpus")
        c2.number_input("GPUs a node", 1, 4096, step=1, persist_state="session", key="gpus_per_node",
                        help="Collectives within a node use the GPU's link (NVLink); across nodes, the network below.")
        c3.number_input("Network per GPU across nodes, Gb/s", 0.001, 1e7, step=100.0, persist_state="session",
                        key="internode_gbps")
        c4.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], persist_state="session", key="weights_dtype",
                     help="auto: fp8 for fp8-quantized configs, else torch_dtype.")
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("Input tokens a request", 1, 10**7, step=512, persist_state="session", key="input_len")
        c2.number_input("Output tokens a request", 1, 10**7, step=128, persist_state="session", key="output_len")
        c3.number_input("Prefix-cache hit rate", 0.0, 0.99, step=0.05, persist_state="session", key="prefix_hit",
                        help="Share of input tokens already cached: prefill computes only the rest.")
        c4.number_input("GPU memory utilization", 0.01, 1.0, step=0.01, persist_state="session",
                        key="gpu_memory_utilization",
                        help="vLLM's gpu_memory_utilization (SGLang's mem_fraction_static).")
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("Speculative tokens a step (k)", 0, 16, step=1, persist_state="session", key="spec_tokens",
                        help="MTP / EAGLE: a step verifies k + 1 tokens a sequence.")
        c2.number_input("Acceptance rate (a)", 0.0, 0.99, step=0.05, persist_state="session", key="acceptance",
                        help="Each speculative token's chance to be accepted: (1 - a^(k+1)) / (1 - a) tokens a step.")
        c3.number_input("TTFT objective, ms (0: none)", 0.0, 1e9, step=100.0, persist_state="session", key="ttft_ms")
        c4.number_input("TPOT objective, ms (0: none)", 0.0, 1e9, step=5.0, persist_state="session", key="tpot_ms")
        st.number_input("Your price of one GPU hour, $ (0: none; no price is built in)", 0.0, 1e6, step=0.1,
                        persist_state="session", key="usd_per_gpu_hour")
    # A collectives run picked on the Benchmark page replaces the datasheet link figures (this session only).
    measured_link = st.session_state.get(LINK_KEY)
    if measured_link and st.toggle(
            f"Use the measured link: {measured_link['link_bandwidth_Bps'] / 1e9:,.2f} GB/s bus bandwidth",
            key="_use_measured_link", value=True, help=escape_md(measured_link.get("source", ""), 300)):
        return measured_link["link_bandwidth_Bps"]
    return None


def plan_for(model, gpu, kv_dtype, link_Bps):
    """serving.search with the state's inputs; None (the error shown) when it refuses them."""
    acceptance = v["acceptance"] if v["spec_tokens"] else 0.0
    if v["acceptance"] and not v["spec_tokens"]:
        st.info("An acceptance rate needs speculative tokens (k >= 1); it is ignored.")
    try:
        plan = search(model, gpu, num_gpus=v["num_gpus"], gpus_per_node=v["gpus_per_node"],
                      workload=Workload(v["input_len"], v["output_len"], v["prefix_hit"], v["spec_tokens"],
                                        acceptance),
                      ttft_ms=v["ttft_ms"] or None, tpot_ms=v["tpot_ms"] or None,
                      usd_per_gpu_hour=v["usd_per_gpu_hour"] or None,
                      weights_dtype=None if v["weights_dtype"] == "auto" else v["weights_dtype"], kv_dtype=kv_dtype,
                      gpu_memory_utilization=v["gpu_memory_utilization"], internode_gbps=v["internode_gbps"],
                      link_bandwidth_Bps=link_Bps)
    except MLAError as e:
        st.error(escape_md(f"No plan: {e}", 400))
        return None
    if gpu.link_GBps is None and v["num_gpus"] > 1:
        st.warning(escape_md(f"{gpu_name} has no published GPU-to-GPU link figure: only one GPU a replica is "
                             "planned.", 400))
    return plan


def _usd(x) -> str:
    return "n/a" if x is None else f"${x:,.3f}"


def headline(model, plan):
    """The best point's numbers (one row on a slide)."""
    best = plan.best
    if best is None:
        st.error(escape_md("No split serves this workload: " + "; ".join(plan.notes), 400))
    elif present:  # a slide keeps one row: the split, its two times and what a GPU serves
        m1, m2, m3, m4 = st.columns([2, 1, 1, 1])
        m1.metric("Best split", best.split, help=f"batch {best.batch:,}; what binds: {best.limit}")
        m2.metric("TTFT, lower bound", format_seconds(best.ttft_s))
        m3.metric("TPOT, lower bound", format_seconds(best.tpot_s))
        m4.metric("Tokens/s per GPU", f"{best.tokens_per_s_per_gpu:,.1f}")
    else:
        st.caption(f"**{escape_md(model.name)}** on {v['num_gpus']:,} × **{escape_md(gpu_name)}**, "
                   f"{v['input_len']:,} in / {v['output_len']:,} out, {len(plan.points):,} points tried.")
        m1, m2, m3, m4 = st.columns([2, 1, 1, 1])
        m1.metric("Best split", best.split, help=f"batch {best.batch:,} of the whole deployment "
                                                 f"(memory holds {best.max_batch:,}); what binds: {best.limit}")
        m2.metric("TTFT, lower bound", format_seconds(best.ttft_s), help=f"prefill, {best.prefill_bound} bound; "
                  f"without overlap {format_seconds(best.ttft_serial_s)}")
        m3.metric("TPOT, lower bound", format_seconds(best.tpot_s), help=f"decode step, {best.bound} bound; "
                  f"without overlap {format_seconds(best.tpot_serial_s)}")
        m4.metric("Tokens/s per user", f"{best.tokens_per_s_per_user:,.1f}")
        m5, m6, m7, m8 = st.columns([2, 1, 1, 1])
        m5.metric("Tokens/s per GPU", f"{best.tokens_per_s_per_gpu:,.1f}",
                  help=f"{format_count(best.tokens_per_s)} output tokens/s for the deployment")
        m6.metric("$ per million output tokens", _usd(best.usd_per_million_output_tokens),
                  help="Your GPU-hour price x GPUs / output tokens an hour.")
        m7.metric("$ per million input tokens", _usd(best.usd_per_million_input_tokens),
                  help="From the prefill throughput (cached prefix tokens count as input).")
        m8.metric("Batch (sequences)", f"{best.batch:,}")


def frontier(model, plan):
    """Tokens/s per GPU against tokens/s per user, one curve per split (views.serving_frontier)."""
    if not present:
        st.subheader("The frontier: tokens/s per GPU against tokens/s per user")
    fr = serving_frontier(plan)
    fig = go.Figure()
    if fr.tpot_region is not None:  # the TPOT objective is a floor on tokens/s per user: the region right of it
        x0, x1, y0, y1 = fr.tpot_region
        fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], fill="toself", mode="lines",
                                 line={"width": 0}, fillcolor="rgba(0,158,115,0.12)",
                                 name=f"TPOT <= {v['tpot_ms']:g} ms", hoverinfo="skip"))
    colors = {s.split: charts.SEQUENCE[i % len(charts.SEQUENCE)] for i, s in enumerate(plan.splits)}
    for line in fr.lines:
        name = html.escape(line.label + (f" ({line.same_as})" if line.same_as else ""))
        fig.add_trace(go.Scatter(
            x=line.x, y=line.y, mode="lines+markers", name=name,
            line={"color": colors[line.label], "width": 2, "dash": "dot" if line.same_as else "solid"},
            customdata=[[p.batch, format_seconds(p.ttft_s), format_seconds(p.tpot_s), p.bound,
                         "yes" if p.meets_slo is not False else "no"] for p in line.points],
            hovertemplate=(f"{name}<br>batch %{{customdata[0]:,}}<br>%{{x:,.1f}} tokens/s per user<br>"
                           "%{y:,.1f} tokens/s per GPU<br>TTFT %{customdata[1]}, TPOT %{customdata[2]}<br>"
                           "%{customdata[3]} bound; meets the SLOs: %{customdata[4]}<extra></extra>")))
    if fr.pareto:
        fig.add_trace(go.Scatter(x=[x for x, _ in fr.pareto], y=[y for _, y in fr.pareto], mode="lines",
                                 name="Pareto front" + ("" if present else " (no point beats these on both axes)"),
                                 line={"color": "#333333", "width": 2, "dash": "dash"}, hoverinfo="skip"))
    if fr.best is not None:
        best = plan.best
        fig.add_trace(go.Scatter(x=[fr.best[0]], y=[fr.best[1]], mode="markers",
                                 name=f"best: {html.escape(best.split)}" + ("" if present else f", batch {best.batch:,}"),
                                 marker={"symbol": "star", "size": 22 if present else 16, "color": "#000000"},
                                 hovertemplate="best point<br>%{x:,.1f} tokens/s per user<br>%{y:,.1f} tokens/s per "
                                               "GPU<extra></extra>"))
    charts.style(fig, title=f"{html.escape(model.name)} on {v['num_gpus']:,} × {html.escape(gpu_name)}",
                 x_title="tokens/s per user (upper bound)", y_title="tokens/s per GPU (upper bound)",
                 log_x=True, log_y=True, present=present, height=charts.slide_height(present))
    if not present:  # a slide keeps the legend above the plot (the base layout); the desk puts it below
        charts.legend_below(fig, len(fig.data), present=present, per_row=2)
    charts.show(fig, "serving-frontier", key="_serving_chart")
    if not present:
        st.caption("One curve per split, one marker per batch (powers of two up to the memory cap). The shaded "
                   "region meets the TPOT objective; the TTFT objective applies per split (see the table). A dotted "
                   "curve is the same as the one it names: drawn on top of each other.")


def splits(plan):
    """Every split's best point (views.serving_split_rows) and every point as CSV."""
    st.subheader("Splits")
    st.dataframe(frame(serving_split_rows(plan)), hide_index=True)
    st.download_button("Download every point (CSV)", csv_text([p.to_dict() for p in plan.points]),
                       file_name="serving_plan_points.csv", mime="text/csv")
    st.caption(f"What binds: capacity (memory holds no larger batch), tpot or ttft (the objective stops the batch), "
               f"or the decode step's bound (memory, compute, communication) when the batch is given. "
               f"{NOT_SERVED}: the split serves no point.")


def launch(plan):
    """The engines' commands for the best point, one flag a line (views.command_lines)."""
    st.subheader("Launch the best point")
    if plan.best is None:
        st.info("No point to launch.")
        return
    for engine, command in (("vLLM", plan.vllm_command), ("SGLang", plan.sglang_command)):
        st.markdown(f"**{engine}**")
        if command:
            st.code(command_lines(command), language="bash")
        else:
            st.info(f"{engine} cannot express this setting (see the notes).")
    for note in plan.notes:
        st.caption(escape_md(note, 400))


@layout.section
def serving_page():
    """The page's sections, rerun alone when one of the inputs changes (they all change the plan)."""
    global v
    v = state.values()
    model = models.current_model()
    kv_dtype, dtype_warning = models.kv_dtype_for(model, v["kv_dtype"])
    if dtype_warning:
        st.warning(escape_md(dtype_warning, 400))
    gpu = models.gpu_preset(v["gpu"])
    link_Bps = inputs()
    plan = plan_for(model, gpu, kv_dtype, link_Bps)
    if plan is None:
        return
    headline(model, plan)
    frontier(model, plan)
    splits(plan)
    launch(plan)


gpu_name = models.gpu_labels().get(v["gpu"], v["gpu"])
if present:  # one slide: the title names the model and the GPUs; the best point's numbers; the frontier
    st.markdown(f"## Serving plan: {escape_md(models.resolve_model(v)[0].name, 80)} on {v['num_gpus']:,} × "
                f"{escape_md(gpu_name, 60)}")
else:
    st.title("Serving plan: splits, SLOs, cost and launch commands")
    st.caption(INTRO)
serving_page()
