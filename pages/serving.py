"""Serving plan: which split of the GPUs (TP, PP, DP-attention, the MoE split) serves a workload
at the TTFT and TPOT objectives, what the engine will do there (the estimate, from kernel
tables) beside what no engine can beat (the bound), at what throughput and cost, the engines'
launch commands, traffic over time and prefill/decode pools.

Every number comes from one call, mla_core.serving.search (docs/model.md, "Serving"). The page is
one section (`serving_page`, rerun alone when one of its inputs changes: they all change the
plan) made of functions that each draw what one core call returns: `inputs` (widgets), `plan_for`
(serving.search), `headline` (views.serving_headline), `breakdown` (views.serving_breakdown),
`frontier` (views.serving_frontier), `splits` (views.serving_split_rows), `launch`
(views.command_lines), and two sections of their own, rerun alone by their widgets: `traffic`
(views.traffic_view) and `pd_pools` (views.disagg_view). The search, the traffic run and the pools
are kept across reruns with the same inputs (ui.memo). A new section is one more such function
called from `serving_page` with the plan."""
import html

from ui.charts import plot  # plotly.graph_objects spelt as plain dicts (ui/charts.py)
import streamlit as st

from mla_core.errors import MLAError
from mla_core.serving import Workload
from mla_core.serving.engines import ENGINES, engine_rules
from mla_core.serving.tables import TABLE_SOURCES
from mla_core.units import WEIGHT_DTYPES, format_bytes, format_count, format_seconds
from mla_core.views import (NOT_SERVED, TRAFFIC_MAX_PROMPTS, TRAFFIC_MODES, TRAFFIC_RATES, command_lines,
                            serving_breakdown, serving_frontier, serving_headline, serving_split_rows)
from ui import charts, layout, memo, models, state
from ui.collectives import LINK_KEY
from ui.metrics import Metric, metric_row
from ui.text import csv_text, escape_md, frame

v = state.values()
present = v["present"]
INTRO = ("Every split of the GPUs into replicas (tensor parallel, pipeline stages, or DP-attention with the experts "
           "sharded or spread by expert parallelism), at every power-of-two batch up to what memory holds. Each point "
           "has an estimate (what the chosen engine will do: its ops timed from kernel tables) and a bound (the "
           "roofline: no queueing, no kernel overheads; no engine beats it). The search ranks and checks the "
           "objectives on the estimate. The sidebar's model, GPU and KV dtype apply; context and batch do not (the "
           "workload sets them).")
TABLE_LABELS = {"auto": "auto (your profile, then aiconfigurator-core, then uncalibrated)",
                "profile": "your profile only (uncalibrated where it has no op)",
                "aiconfigurator": "aiconfigurator-core's measured tables", "uncalibrated": "uncalibrated"}

def _profiles() -> dict:
    """{run id: label} of the stored kernel profiles (0: none), newest first; the state's id is
    set back to none (with a warning) when the store does not hold it."""
    from mla_core.store.profiles import list_profiles

    try:
        rows = [r for r in list_profiles() if not r["damaged"]]
    except MLAError as e:
        st.warning(escape_md(f"The kernel profiles could not be listed: {e}", 300))
        rows = []
    options = {0: "none"}
    for r in rows:
        options[r["id"]] = (f"run {r['id']}: {r['model'] or '?'} tp {r['tp'] or '?'} on {r['device_name'] or '?'}"
                            + (f" ({r['label']})" if r["label"] else ""))
    if st.session_state.get("profile", 0) not in options:
        st.warning(f"Kernel profile run {st.session_state.get('profile')} is not in the store: none is used.")
        state.set_values(profile=0)
        v["profile"] = 0
    return options


# The inputs a plan is usually asked with come first; the rest (the cluster's shape, the weights and
# memory, speculative decoding, the kernel tables, PP) sit in a section drawn only while it is open
# (ui.layout.lazy_expander): ten widgets fewer on every rerun of the page while it is shut. It opens
# at first when the link sets one of them.
MORE_KEYS = ("gpus_per_node", "internode_gbps", "weights_dtype", "prefix_hit", "gpu_memory_utilization",
             "spec_tokens", "acceptance", "kernel_tables", "profile", "pp")
MORE_LABEL = ("More settings: GPUs a node and the network, weights dtype, prefix cache, memory utilization, "
              "speculative decoding, kernel tables and profile, pipeline stages")


def more_settings():
    """The inputs of MORE_KEYS (widgets only), drawn while their section is open."""
    box = layout.lazy_expander(MORE_LABEL, "_serving_more", expanded=state.any_set(v, MORE_KEYS) and not present)
    if not box.open:
        return
    with box:
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("GPUs a node", 1, 4096, step=1, persist_state="session", key=state.seeded("gpus_per_node"),
                        help="Collectives within a node use the GPU's link (NVLink); across nodes, the network beside.")
        c2.number_input("Network per GPU across nodes, Gb/s", 0.001, 1e7, step=100.0, persist_state="session",
                        key=state.seeded("internode_gbps"))
        c3.selectbox("Weights dtype", ["auto", *WEIGHT_DTYPES], persist_state="session", key=state.seeded("weights_dtype"),
                     help="auto: fp8 for fp8-quantized configs, else torch_dtype.")
        c4.number_input("GPU memory utilization", 0.01, 1.0, step=0.01, persist_state="session",
                        key=state.seeded("gpu_memory_utilization"),
                        help="vLLM's gpu_memory_utilization (SGLang's mem_fraction_static).")
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("Prefix-cache hit rate", 0.0, 0.99, step=0.05, persist_state="session", key=state.seeded("prefix_hit"),
                        help="Share of input tokens already cached: prefill computes only the rest.")
        c2.number_input("Speculative tokens a step (k)", 0, 16, step=1, persist_state="session", key=state.seeded("spec_tokens"),
                        help="MTP / EAGLE: a step verifies k + 1 tokens a sequence.")
        c3.number_input("Acceptance rate (a)", 0.0, 0.99, step=0.05, persist_state="session", key=state.seeded("acceptance"),
                        help="Each speculative token's chance to be accepted: (1 - a^(k+1)) / (1 - a) tokens a step.")
        c4.number_input("Pipeline stages, PP (0: every split searched)", 0, 64, step=1, persist_state="session",
                        key=state.seeded("pp"), help="vLLM --pipeline-parallel-size / SGLang --pp-size: the layers split over PP "
                                       "stages of num_gpus / PP GPUs each (TP within a stage).")
        c1, c2 = st.columns(2)
        c1.selectbox("Kernel tables", TABLE_SOURCES, format_func=TABLE_LABELS.get, persist_state="session",
                     key=state.seeded("kernel_tables"), help="Where each op's time comes from, by precedence: your own profile "
                                               "(`python -m mla_core bench --profile`), aiconfigurator-core's "
                                               "measured tables (pip install '.[aic]'), else uncalibrated.")
        profiles = _profiles()
        c2.selectbox("Kernel profile", list(profiles), format_func=profiles.get, persist_state="session",
                     key=state.seeded("profile"), help="A stored `bench --profile` run: first in precedence. 'none' when the "
                                         "store holds none.")


def inputs():
    """The deployment, workload, objectives and estimate settings (widgets only); returns the
    measured link's bandwidth when the user chose to use one (this session only), else None."""
    with st.expander("Deployment, workload and objectives", expanded=not present):
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("GPUs in the deployment", 1, 4096, step=1, persist_state="session", key=state.seeded("num_gpus"))
        c2.number_input("Input tokens a request", 1, 10**7, step=512, persist_state="session", key=state.seeded("input_len"))
        c3.number_input("Output tokens a request", 1, 10**7, step=128, persist_state="session", key=state.seeded("output_len"))
        c4.selectbox("Engine", ENGINES, format_func=lambda e: engine_rules(e).label, persist_state="session",
                     key=state.seeded("engine"), help="The engine whose kernel tables, step overheads and CUDA-graph rules the "
                                        "estimate follows, and whose launch command comes first.")
        c1, c2, c3, _ = st.columns(4)
        c1.number_input("TTFT objective, ms (0: none)", 0.0, 1e9, step=100.0, persist_state="session", key=state.seeded("ttft_ms"))
        c2.number_input("TPOT objective, ms (0: none)", 0.0, 1e9, step=5.0, persist_state="session", key=state.seeded("tpot_ms"))
        c3.number_input("Your price of one GPU hour, $ (0: none; no price is built in)", 0.0, 1e6, step=0.1,
                        persist_state="session", key=state.seeded("usd_per_gpu_hour"))
    if not present:  # a slide draws it below its chart (serving_page)
        more_settings()
    # A collectives run picked on the Benchmark page replaces the datasheet link figures (this session only).
    measured_link = st.session_state.get(LINK_KEY)
    if measured_link and st.toggle(
            f"Use the measured link: {measured_link['link_bandwidth_Bps'] / 1e9:,.2f} GB/s bus bandwidth",
            key="_use_measured_link", value=True, help=escape_md(measured_link.get("source", ""), 300)):
        return measured_link["link_bandwidth_Bps"]
    return None


def deployment_kw(kv_dtype, link_Bps) -> dict:
    """The Deployment fields the plan, the traffic run and the pools share (from the state)."""
    return dict(weights_dtype=None if v["weights_dtype"] == "auto" else v["weights_dtype"], kv_dtype=kv_dtype,
                gpu_memory_utilization=v["gpu_memory_utilization"], internode_gbps=v["internode_gbps"],
                link_bandwidth_Bps=link_Bps)


def estimate_kw() -> dict:
    """The estimate's settings: engine, kernel tables and the chosen profile (None: none)."""
    return dict(engine=v["engine"], kernel_tables=v["kernel_tables"], profile=v["profile"] or None)


def search_kw(dep_kw) -> dict:
    """serving.search's keyword arguments from the state."""
    acceptance = v["acceptance"] if v["spec_tokens"] else 0.0
    return dict(num_gpus=v["num_gpus"], gpus_per_node=v["gpus_per_node"],
                workload=Workload(v["input_len"], v["output_len"], v["prefix_hit"], v["spec_tokens"], acceptance),
                ttft_ms=v["ttft_ms"] or None, tpot_ms=v["tpot_ms"] or None,
                usd_per_gpu_hour=v["usd_per_gpu_hour"] or None, pp=v["pp"] or None, **dep_kw, **estimate_kw())


def plan_for(model, gpu, kw: dict):
    """serving.search with the state's inputs (`kw`: search_kw); None (the error shown) when it
    refuses them."""
    if v["acceptance"] and not v["spec_tokens"]:
        st.info("An acceptance rate needs speculative tokens (k >= 1); it is ignored.")
    try:
        plan = memo.plan(model, gpu, kw)
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
    """The best point's estimate with the bound beside it (views.serving_headline; one row on a slide)."""
    h = serving_headline(plan)
    if h is None:
        st.error(escape_md("No split serves this workload: " + "; ".join(plan.notes), 400))
        return
    what = ("est." if present else "estimate") if h.estimated else ("bound" if present else "lower bound")
    rate = "estimate" if h.estimated else "upper bound"
    bound = {} if (present or not h.estimated) else {  # a slide says the bounds in one line below
        "ttft": f"bound {format_seconds(h.bound_ttft_s)}", "tpot": f"bound {format_seconds(h.bound_tpot_s)}",
        "user": f"bound {h.bound_tokens_per_s_per_user:,.1f}", "gpu": f"bound {h.bound_tokens_per_s_per_gpu:,.1f}"}
    if not present:
        st.caption(f"**{escape_md(model.name)}** on {v['num_gpus']:,} × **{escape_md(gpu_name)}**, "
                   f"{v['input_len']:,} in / {v['output_len']:,} out, {len(plan.points):,} points tried.")
    metric_row([
        Metric("Best split", h.split, help=f"batch {h.batch:,} of the whole deployment (memory holds "
                                           f"{h.max_batch:,}); what binds: {h.limit}"),
        Metric(f"TTFT, {what}", format_seconds(h.ttft_s), delta=bound.get("ttft"),
               help=f"one request's prefill, no queueing; bound {format_seconds(h.bound_ttft_s)} "
                    f"({h.prefill_bound} bound)"),
        Metric(f"TPOT, {what}", format_seconds(h.tpot_s), delta=bound.get("tpot"),
               help=f"a decode step / tokens a step; bound {format_seconds(h.bound_tpot_s)} ({h.bound} bound)"),
        Metric("Tokens/s/user" if present else f"Tokens/s per user, {rate}", f"{h.tokens_per_s_per_user:,.1f}",
               delta=bound.get("user"), help=f"{rate}; bound {h.bound_tokens_per_s_per_user:,.1f}"),
        Metric("Tokens/s/GPU" if present else f"Tokens/s per GPU, {rate}", f"{h.tokens_per_s_per_gpu:,.1f}",
               delta=bound.get("gpu"),
               help=f"decode steps; bound {h.bound_tokens_per_s_per_gpu:,.1f}; "
                    f"{format_count(h.tokens_per_s)} output tokens/s for the deployment")],
        [2.8, 0.9, 0.9, 1, 1] if present else [2, 1, 1, 1, 1])
    if present:  # a slide: the source, confidence and bounds are the frontier's title (slide_title)
        return
    st.caption(escape_md(f"Source: {h.kind}. {h.sentence}", 600))
    metric_row([
        Metric("Output tokens/s per GPU, whole requests",
               "n/a" if h.output_tokens_per_s_per_gpu is None else f"{h.output_tokens_per_s_per_gpu:,.1f}",
               help="Output tokens / wall time at this batch, prefill included (as offline benchmarks count)."),
        Metric("$ per million output tokens", _usd(h.usd_per_million_output_tokens),
               help="Your GPU-hour price x GPUs / output tokens an hour (the bound's rate)."),
        Metric("$ per million input tokens", _usd(h.usd_per_million_input_tokens),
               help="From the prefill throughput (cached prefix tokens count as input)."),
        Metric("Batch (sequences)", f"{h.batch:,}")], [2, 1, 1, 1])


def breakdown(plan):
    """Where one decode step's and one prefill's time goes, by op class (views.serving_breakdown)."""
    b = serving_breakdown(plan)
    if b is None:
        return
    st.subheader("Where the time goes: one decode step and one prefill")
    fig = plot.Figure()
    labels = [f"{p.phase} ({format_seconds(p.time_s)})" for p in b.phases]
    for i, name in enumerate(b.classes):
        parts = [next((x for x in p.parts if x.name == name), None) for p in b.phases]
        fig.add_trace(plot.Bar(
            y=labels, x=[100 * x.share if x else 0 for x in parts], orientation="h", name=html.escape(name),
            marker={"color": charts.SEQUENCE[i % len(charts.SEQUENCE)]},
            customdata=[format_seconds(x.time_s) if x else "0 s" for x in parts],
            hovertemplate=f"{html.escape(name)}: %{{customdata}} (%{{x:.1f}}%)<extra>%{{y}}</extra>"))
    fig.update_layout(barmode="stack")
    charts.style(fig, title="The best point's steps by op class", x_title="share of the phase's time (%)",
                 y_title="", present=present, height=300)
    charts.legend_below(fig, len(b.classes), present=present, per_row=4)
    charts.show(fig, "serving-breakdown", key="_serving_breakdown")
    notes = [f"{p.phase}: {'CUDA graph' if p.captured else 'eager'}"
             + (f", {p.steps} chunks" if p.steps > 1 else "")
             + (f"; {format_seconds(p.hidden_s)} of the ops overlap (second stream or pipeline stages)"
                if p.hidden_s else "") for p in b.phases]
    st.caption(escape_md("; ".join(notes) + f". Source: {b.source}.", 600))
    box = layout.lazy_expander("Every op of the two steps", key="_serving_ops")
    if box.open:
        with box:
            st.dataframe(frame([{"phase": p.phase, "op": n, "class": c, "layers": layer, "time": format_seconds(t)}
                                for p in b.phases for n, c, layer, t in p.ops]), hide_index=True)


def frontier(model, plan):
    """Tokens/s per GPU against tokens/s per user, one curve per split (views.serving_frontier):
    the estimate's, the bound's faint behind. A slide keeps the best few splits."""
    if not present:
        st.subheader("The frontier: tokens/s per GPU against tokens/s per user")
    fr = serving_frontier(plan, max_lines=3 if present else None)
    kind = "estimate" if fr.estimated else "upper bound"
    fig = plot.Figure()
    if fr.tpot_region is not None:  # the TPOT objective is a floor on tokens/s per user: the region right of it
        x0, x1, y0, y1 = fr.tpot_region
        fig.add_trace(plot.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], fill="toself", mode="lines",
                                 line={"width": 0}, fillcolor="rgba(0,158,115,0.12)", showlegend=not present,
                                 name=f"TPOT <= {v['tpot_ms']:g} ms", hoverinfo="skip"))
    for i, line in enumerate(fr.bound_lines):  # the bound's curves, faint, one legend entry for them all
        fig.add_trace(plot.Scatter(x=line.x, y=line.y, mode="lines", legendgroup="bound",
                                 showlegend=i == 0 and not present,
                                 name="bound of each split", opacity=0.35,
                                 line={"color": "#999999", "width": 1}, hoverinfo="skip"))
    if fr.bound_pareto:
        fig.add_trace(plot.Scatter(x=[x for x, _ in fr.bound_pareto], y=[y for _, y in fr.bound_pareto], mode="lines",
                                 name="bound's Pareto front" if not present else "bound", opacity=0.5,
                                 line={"color": "#777777", "width": 2, "dash": "dash"}, hoverinfo="skip"))
    styles = {s.split: charts.series_style(i) for i, s in enumerate(plan.splits)}
    for line in fr.lines:
        name = html.escape(line.label + (f" ({line.same_as})" if line.same_as else ""))
        fig.add_trace(plot.Scatter(
            x=line.x, y=line.y, mode="lines+markers", name=name,
            line={"color": styles[line.label][0], "width": 2, "dash": "dot" if line.same_as else "solid"},
            marker={"symbol": styles[line.label][1], "size": 7},
            customdata=[[p.batch, format_seconds(p.estimate.ttft_s if p.estimate else p.ttft_s),
                         format_seconds(p.estimate.tpot_s if p.estimate else p.tpot_s), format_seconds(p.tpot_s),
                         p.bound, "yes" if p.meets_slo is not False else "no"] for p in line.points],
            hovertemplate=(f"{name}<br>batch %{{customdata[0]:,}}<br>%{{x:,.1f}} tokens/s per user<br>"
                           "%{y:,.1f} tokens/s per GPU<br>TTFT %{customdata[1]}, TPOT %{customdata[2]} "
                           f"({kind})<br>TPOT bound %{{customdata[3]}}, %{{customdata[4]}} bound<br>"
                           "meets the SLOs: %{customdata[5]}<extra></extra>")))
    if fr.pareto:
        fig.add_trace(plot.Scatter(x=[x for x, _ in fr.pareto], y=[y for _, y in fr.pareto], mode="lines",
                                 name="Pareto front" + ("" if present else " (no point beats these on both axes)"),
                                 line={"color": charts.INK, "width": 2, "dash": "dash"}, hoverinfo="skip"))
    if fr.best is not None:
        best = plan.best
        fig.add_trace(plot.Scatter(x=[fr.best[0]], y=[fr.best[1]], mode="markers",
                                 name=f"best: {html.escape(best.split)}" + (
                                     "" if present else f", batch {best.batch:,}"),
                                 marker={"symbol": "star", "size": 22 if present else 16, "color": charts.INK},
                                 hovertemplate="best point<br>%{x:,.1f} tokens/s per user<br>%{y:,.1f} tokens/s per "
                                               "GPU<extra></extra>"))
    h = serving_headline(plan) if present else None
    title = f"{html.escape(model.name)} on {v['num_gpus']:,} × {html.escape(gpu_name)}"
    if h is not None and h.estimated:  # a slide names the estimate's source and the bounds here
        title = f"{html.escape(h.engine)} estimate: {h.kind} tables, {h.confidence} confidence; bound faint"
    charts.style(fig, title=title,
                 x_title=f"tokens/s per user ({kind})", y_title=f"tokens/s per GPU ({kind})",
                 log_x=True, log_y=True, present=present, height=charts.slide_height(present))
    if present:  # a slide: the legend inside the plot, top right (beyond the frontier, where no point lies)
        fig.update_layout(legend={"orientation": "v", "x": 0.99, "xanchor": "right", "y": 0.99, "yanchor": "top",
                                  "bgcolor": "rgba(255,255,255,0.75)", "font": {"size": 15}, "tracegroupgap": 0},
                          margin={"t": 50})
    else:  # the desk puts it below
        charts.legend_below(fig, sum(1 for t in fig.data if t.get("showlegend", True) is not False),
                            present=present, per_row=2)
    charts.show(fig, "serving-frontier", key="_serving_chart")
    if not present:
        st.caption("One curve per split, one marker per batch (powers of two up to the memory cap), at the "
                   f"{kind}'s rates" + ("; the bound's curves faint behind (no engine reaches them)" if fr.estimated
                                        else "") + ". The shaded region meets the TPOT objective; the TTFT objective "
                   "applies per split (see the table). A dotted curve is the same as the one it names: drawn on top "
                   "of each other.")
    elif fr.lines_left_out:
        st.caption(f"The best {len(fr.lines)} splits of {len(fr.lines) + fr.lines_left_out} drawn.")


def splits(plan):
    """Every split's best point (views.serving_split_rows) and every point as CSV."""
    st.subheader("Splits")
    # widths (px) that fit the table in the page at 1440 px (the browser test checks it scrolls not sideways)
    widths = {"split": 170, "pp": 44, "moe_tp": 60, "ep": 44, "TTFT": 72, "TPOT": 72, "batch": 56, "memory holds": 90,
              "tokens/s/user": 96, "tokens/s/GPU": 96, "TPOT bound": 84, "$ per M output": 90, "what binds": 86}
    narrow = {k: st.column_config.Column(width=w) for k, w in widths.items()}
    st.dataframe(frame(serving_split_rows(plan)), hide_index=True, column_config=narrow)
    # Built when clicked (Streamlit's deferred download), not on every rerun: every point of the search as
    # CSV is a third of the page's server time (benchmarks/served.py).
    st.download_button("Download every point (CSV)", lambda: csv_text([p.to_dict() for p in plan.points]),
                       file_name="serving_plan_points.csv", mime="text/csv")
    st.caption(f"tp: GPUs a stage; pp: pipeline stages; moe_tp x ep = tp: the routed experts' split (slices of "
               f"each expert x expert parallelism). TTFT, TPOT and tokens/s are the estimate's, the bound's beside "
               f"them. What binds: capacity (memory holds no larger batch), tpot or ttft (the objective stops the "
               f"batch), or the decode step's bound (memory, compute, communication) when the batch is given. "
               f"{NOT_SERVED}: the split serves no point.")


def _engine_order():
    first = v["engine"]
    return sorted(ENGINES, key=lambda e: e != first)


def launch(plan):
    """The engines' commands for the best point, one flag a line (views.command_lines), the chosen
    engine's first."""
    st.subheader("Launch the best point")
    if plan.best is None:
        st.info("No point to launch.")
        return
    for engine in _engine_order():
        label = engine_rules(engine).label
        command = plan.launch.get(f"{engine}_command")
        st.markdown(f"**{label}**")
        if command:
            st.code(command_lines(command), language="bash")
        else:
            st.info(f"{label} cannot express this setting (see the notes).")
    with layout.slot():  # how many notes depends on the split
        for note in plan.notes:
            st.caption(escape_md(note, 400))


def _ms(x) -> str:
    return "n/a" if x is None else format_seconds(x)


@layout.section
def traffic(model, gpu, plan_kw, dep_kw):
    """Requests over time at the best point (views.traffic_view), behind its toggle: it simulates
    a run per rate of the sweep, so it is off until asked for and reruns alone."""
    global v
    v = state.values()
    st.subheader("Traffic: requests over time at the best point")
    st.toggle("Simulate traffic (a few seconds)", persist_state="session", key=state.seeded("traffic"),
              help="A continuous-batching engine (vLLM's scheduler, its default max_num_seqs and "
                   "max_num_batched_tokens) serving Poisson arrivals or a closed loop of clients, step times from "
                   "the estimate; the SLOs are the objectives above.")
    if not v["traffic"]:
        return
    c1, c2, c3 = st.columns([1, 2, 1])
    c1.radio("Arrivals", TRAFFIC_MODES, persist_state="session", key=state.seeded("traffic_mode"), horizontal=True,
             format_func={"rate": "Poisson rate", "concurrency": "max concurrency"}.get)
    if v["traffic_mode"] == "rate":
        c2.select_slider("Request rate, requests/s (log scale)", TRAFFIC_RATES, persist_state="session", key=state.seeded("rate"),
                         format_func=lambda r: f"{r:g}")
    else:
        c2.number_input("Max concurrency (clients)", 1, 1 << 20, step=8, persist_state="session",
                        key=state.seeded("max_concurrency"))
    c3.number_input("Prompts a run (num_prompts)", 1, TRAFFIC_MAX_PROMPTS, step=100, persist_state="session",
                    key=state.seeded("num_prompts"))
    try:
        t = memo.traffic(model, gpu, plan_kw, mode=v["traffic_mode"], rate=v["rate"],
                         max_concurrency=v["max_concurrency"], num_prompts=v["num_prompts"], **estimate_kw(),
                         **dep_kw)
    except MLAError as e:
        st.error(escape_md(f"No traffic run: {e}", 400))
        return
    if not t.available:
        st.info(escape_md(t.reason, 400))
        return
    r = t.result
    metric_row([
        Metric("p99 TTFT", _ms(r.ttft_s.p99), help=f"p50 {_ms(r.ttft_s.p50)}, mean {_ms(r.ttft_s.mean)}"),
        Metric("p99 TPOT", _ms(r.tpot_s.p99), help=f"p50 {_ms(r.tpot_s.p50)}, mean {_ms(r.tpot_s.mean)}"),
        Metric("Goodput, requests/s", "n/a" if t.goodput_rps is None else f"{t.goodput_rps:,.2f}",
               help="Requests a second meeting every objective (vLLM's --goodput)."),
        Metric("Max rate at SLO, requests/s", "n/a" if t.max_rate_at_slo is None else f"{t.max_rate_at_slo:,.3g}",
               help="The highest Poisson rate whose p99 TTFT and TPOT meet the objectives (bisection). "
                    + t.max_rate_note),
        Metric("Throughput, requests/s", f"{r.request_throughput:,.2f}",
               help=f"{r.output_tokens_per_s:,.1f} output tokens/s; "
                    + ("SATURATED: the queue grows without bound" if r.saturated else "not saturated"))])
    cols = st.columns(2)
    for col, name, p50, p99, slo in ((cols[0], "TTFT", t.ttft_p50, t.ttft_p99, t.ttft_slo_s),
                                     (cols[1], "TPOT", t.tpot_p50, t.tpot_p99, t.tpot_slo_s)):
        fig = plot.Figure()
        for label, ys, dash in (("p50", p50, "dot"), ("p99", p99, "solid")):
            fig.add_trace(plot.Scatter(x=t.rates, y=[None if y is None else y * 1e3 for y in ys], mode="lines+markers",
                                     name=label, line={"dash": dash, "width": 2},
                                     hovertemplate=f"{label} %{{y:,.1f}} ms at %{{x:,.3g}} req/s<extra></extra>"))
        shapes = []
        if slo is not None:
            shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": slo * 1e3, "y1": slo * 1e3,
                           "line": {"color": "#D55E00", "dash": "dash"}})
            fig.add_trace(plot.Scatter(x=[t.rates[0], t.rates[-1]], y=[slo * 1e3] * 2, mode="lines",
                                     name=f"objective {slo * 1e3:g} ms", line={"color": "#D55E00", "dash": "dash"}))
        if t.saturation_rps is not None:
            shapes.append({"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": t.saturation_rps,
                           "x1": t.saturation_rps, "line": {"color": charts.INK, "dash": "dot"}})
            fig.add_trace(plot.Scatter(x=[t.saturation_rps], y=[max(y for y in p99 if y is not None) * 1e3],
                                     mode="markers", name=f"saturated from {t.saturation_rps:,.3g} req/s",
                                     marker={"symbol": "x", "size": 12, "color": charts.INK}))
        fig.update_layout(shapes=shapes)
        charts.style(fig, title=f"{name} against the request rate", x_title="requests/s (Poisson)",
                     y_title=f"{name}, ms", log_x=True, log_y=True, present=present, height=340)
        charts.legend_below(fig, present=present, per_row=2)
        with col:
            charts.show(fig, f"serving-traffic-{name.lower()}", key=f"_serving_traffic_{name.lower()}")
    st.caption(escape_md(f"{t.split}; {r.simulated_requests:,} requests a run ({r.config.mode}), "
                         f"max_num_seqs {r.config.max_num_seqs:,}, max_num_batched_tokens "
                         f"{r.config.max_num_batched_tokens:,}; the sweep spans the throughput of a closed loop "
                         f"({t.capacity_rps:,.3g} req/s) from 1/16 to 4x; step times: {t.step_times}. "
                         + " ".join(t.notes), 900))


@layout.section
def pd_pools(model, gpu, plan_kw, dep_kw):
    """A prefill pool and a decode pool (views.disagg_view), behind its toggle."""
    global v
    v = state.values()
    st.subheader("Prefill/decode disaggregation")
    st.toggle("Split into a prefill pool and a decode pool", persist_state="session", key=state.seeded("disagg"),
              help="SGLang / vLLM / Dynamo PD disaggregation: the prompt's KV cache moves once from a prefill GPU to "
                   "a decode GPU.")
    if not v["disagg"]:
        return
    c1, c2 = st.columns(2)
    c1.number_input("Prefill GPUs (0 and 0: sizes searched)", 0, 4096, step=1, persist_state="session",
                    key=state.seeded("prefill_gpus"))
    c2.number_input("Decode GPUs", 0, 4096, step=1, persist_state="session", key=state.seeded("decode_gpus"))
    d = memo.pools(model, gpu, plan_kw, prefill_gpus=v["prefill_gpus"], decode_gpus=v["decode_gpus"],
                   **estimate_kw(), **dep_kw)
    if not d.available:
        st.error(escape_md(f"No disaggregated pair: {d.reason}", 400))
        return
    r = d.result
    metric_row([
        Metric("TTFT with the KV transfer", format_seconds(r.ttft_s), delta=f"bound {format_seconds(r.bound['ttft_s'])}"),
        Metric("KV transfer", format_seconds(r.kv_transfer_s),
               help=f"{format_bytes(r.kv_transfer_bytes)} a request, {format_bytes(r.kv_transfer_bytes_per_gpu)} "
                    f"on the busiest GPU over {r.link}"),
        Metric("TPOT", format_seconds(r.tpot_s), delta=f"bound {format_seconds(r.bound['tpot_s'])}"),
        Metric("Output tokens/s per GPU", f"{r.output_tokens_per_s_per_gpu:,.1f}",
               delta=f"bound {r.bound['output_tokens_per_s_per_gpu']:,.1f}"),
        Metric("Requests/s", f"{r.request_rate:,.2f}", help=f"what limits it: {r.limit}")])
    st.dataframe(frame([{"pool": p.role, "GPUs": p.num_gpus, "split": p.split, "tp": p.tp, "pp": p.pp,
                         "moe_tp": p.moe_tp, "ep": p.ep, "replicas": p.replicas,
                         "requests/s": f"{p.requests_per_s:,.2f}", "requests/s bound": f"{p.requests_per_s_bound:,.2f}"}
                        for p in (r.prefill, r.decode)]), hide_index=True)
    agg = d.aggregated
    if agg:
        rate = agg["output_tokens_per_s_per_gpu"]
        st.caption(escape_md(f"Aggregated on {agg['num_gpus']:,} GPUs ({agg['split']}): TTFT "
                             f"{format_seconds(agg['ttft_s'])}, TPOT {format_seconds(agg['tpot_s'])}"
                             + (f", {rate:,.1f} output tokens/s per GPU" if rate is not None else "") + ".", 400))
    label = engine_rules(v["engine"]).label
    for engine, role, command in d.commands:
        if engine != label:
            continue
        st.markdown(f"**{engine}, {role} pool**")
        if command:
            st.code(command_lines(command), language="bash")
        else:
            st.info(f"{engine} cannot express this pool (see the notes).")
    for name, command in d.router:
        st.markdown(f"**{name}**")
        st.code(command_lines(command), language="bash")
    for note in r.notes:
        st.caption(escape_md(note, 400))


@layout.section
def serving_page():
    """The page's sections, rerun alone when one of the inputs changes (they all change the plan)."""
    global v
    v = state.values()
    model = models.current_model()
    kv_dtype, dtype_warning = models.kv_dtype_for(model, v["kv_dtype"])
    with layout.slot():
        if dtype_warning:
            st.warning(escape_md(dtype_warning, 400))
    gpu = models.gpu_preset(v["gpu"])
    link_Bps = inputs()
    dep_kw = deployment_kw(kv_dtype, link_Bps)
    plan_kw = search_kw(dep_kw)
    with layout.slot():  # its note on the acceptance rate, or a GPU without a link figure
        plan = plan_for(model, gpu, plan_kw)
    if plan is not None:
        headline(model, plan)
        if not present:
            breakdown(plan)
        frontier(model, plan)
    if present:  # a slide: the rarely changed inputs below its chart
        more_settings()
    if plan is None or present:
        return
    splits(plan)
    launch(plan)
    traffic(model, gpu, plan_kw, dep_kw)
    pd_pools(model, gpu, plan_kw, dep_kw)

gpu_name = models.gpu_labels().get(v["gpu"], v["gpu"])
if present:  # one slide: the title names the model and the GPUs; the best point's numbers; the frontier
    st.markdown(f"## Serving plan: {escape_md(models.resolve_model(v)[0].name, 80)} on {v['num_gpus']:,} × "
                f"{escape_md(gpu_name, 60)}")
else:
    st.title("Serving plan: splits, SLOs, cost and launch commands")
    st.caption(INTRO)
serving_page()
