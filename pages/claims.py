"""Published figures: every numeric claim of the seed documents recomputed by mla_core.

The claims are data (data/claims.json, checked by mla_core.claims): a paraphrase, the stated
figure, the computation from the stated inputs and, where the figure differs, the reason and a
replay of the slip. This page shows them; it computes nothing itself. Sections: `conventions`,
`summary`, `filters`, `table`, `chart` and `details`, drawing what views.claims_view returns; in
presentation mode the slide is the title, the summary numbers and the chart."""
from ui.charts import plot  # plotly.graph_objects spelling, built as plain dicts
import streamlit as st

from mla_core.claims import describe_expr, evaluate_all, format_figure, format_stated
from mla_core.errors import MLAError
from mla_core.views import claims_view
from ui import charts, layout, state
from ui.metrics import Metric, metric_row
from ui.text import csv_text, escape_md, frame, widths

VERDICT_COLORS = {"reproduced": "#009E73", "differs": "#D55E00"}

v = state.values()
present = v["present"]
if present:
    st.markdown("## Published figures, recomputed by the analytic core")
else:
    st.title("Published figures, recomputed")
    st.caption("Every numeric claim of the three seed documents the project grew from: paraphrased, recomputed by the "
               "analytic core from the inputs the document states, and set side by side with a verdict. Where a "
               "figure differs, the reason found is replayed: the slip or convention is recomputed to see whether it "
               "gives the stated figure. The sidebar's model and GPU do not apply here: each claim names its own.")


@st.cache_data(show_spinner=False)
def _claims() -> list[dict]:
    return evaluate_all()


try:
    claims = _claims()
except (MLAError, OSError, ValueError, KeyError, TypeError) as e:
    st.error(escape_md(f"The claims in data/claims.json could not be evaluated: {e}", 400))
    st.stop()

def conventions():
    with st.expander("Conventions this tool uses", expanded=not present):
        st.markdown(
            "- **Bytes**: GB = 10^9 B, GiB = 2^30 B (KB = 10^3 B, KiB = 2^10 B); a figure is recomputed in the unit "
            "its document prints.\n"
            "- **Tokens**: a document's \"million tokens\" is 1,000,000; its 128K is 131,072 unless it names 128,000.\n"
            "- **MHA baseline of an MLA model**: d_h = qk_nope_head_dim (128 for DeepSeek-V2/V3), as in DeepSeek-V2 "
            "Table 1; the expanded per-head cache of DeepSeek's naive path is n_h (d_nope + d_r + d_v) per layer.\n"
            "- **Flops**: 2 per multiply-add; MLA absorbed decode counts the scores on the 576-wide latent+RoPE key "
            "and the output on the 512-wide latent (FlashMLA's convention).\n"
            "- **Bandwidth**: datasheet TB/s = 10^12 B/s; bandwidth-bound figures read the cache once per step.\n"
            "- **Match**: within half a unit of the last printed digit, or 5 % for a figure the document gives as "
            "approximate (shown with ~).")


# --- sections ----------------------------------------------------------------------------------------------
def _filters_state() -> dict:
    return {"topics": v["claims_topic"], "verdicts": v["claims_verdict"], "sources": v["claims_source"]}


def summary(cv):
    """The four counts, then (at a desk) the counts by topic and by source."""
    s = cv.summary
    metric_row([Metric("Claims checked", f"{s['total']}"), Metric("Reproduced", f"{s['reproduced']}"),
                 Metric("Differ", f"{s['differs']}"),
                 Metric("Slips replayed and confirmed", f"{s['reason_confirmed']} of {s['replayed']}",
                        help="Differing claims whose reason is itself recomputed (the slip replayed) and gives the "
                             "stated figure.")])


def breakdown(cv):
    s = cv.summary
    by_topic = frame([{"topic": g["topic"], "claims": g["claims"], "reproduced": g["reproduced"],
                              "differ": g["differs"]} for g in s["by_topic"]])
    by_source = frame([{"source": f'{cv.titles.get(g["source"], g["source"])} ({g["source"][:3]})',
                               "claims": g["claims"], "reproduced": g["reproduced"], "differ": g["differs"]}
                              for g in s["by_source"]])
    st.dataframe(by_topic, hide_index=True)  # one above the other: side by side, the source names clip
    st.dataframe(by_source, hide_index=True)


def filters(cv):
    topics = [g["topic"] for g in cv.summary["by_topic"]]
    sources = [g["source"] for g in cv.summary["by_source"]]
    with st.expander("Filters", expanded=not present):
        f1, f2, f3 = st.columns(3)
        f1.multiselect("Topic", topics, persist_state="session", key=state.seeded("claims_topic"), placeholder="all topics")
        f2.multiselect("Verdict", ["reproduced", "differs"], persist_state="session", key=state.seeded("claims_verdict"), placeholder="both verdicts")
        f3.multiselect("Source document", sources, persist_state="session", key=state.seeded("claims_source"), placeholder="all three documents",
                       format_func=lambda seed: f"{cv.titles.get(seed, seed)} ({seed[:3]})")


def _replay_text(c: dict) -> str:
    return format_figure(c["as_claimed_value"], c["stated"]["unit"]) if "as_claimed_value" in c else ""


def _replay_ok(c: dict) -> str:
    if "as_claimed_value" not in c:
        return ""
    return "yes" if c.get("reason_confirmed") else "no"


COLUMNS = ["verdict", "stated", "recomputed", "claim (paraphrased)", "source", "topic", "reason",
           "replay of the slip gives", "replay reproduces the stated figure", "id"]
SLIDE_COLUMNS = ["verdict", "stated", "recomputed", "claim (paraphrased)"]
# What the desk shows of each row, within the page's width; every column is in the CSV, and the replay of
# each slip in "The differing claims in detail".
DESK_COLUMNS = ["verdict", "stated", "recomputed", "claim (paraphrased)", "reason"]


def table(cv):
    st.caption(f"Showing {len(cv.shown)} of {cv.summary['total']} claims.")
    df = frame([{
        "verdict": c["verdict"],
        "stated": format_stated(c["stated"]),
        "recomputed": format_figure(c["computed"], c["stated"]["unit"]),
        "claim (paraphrased)": c["claim"],
        "source": f'{c["source"].get("title", "")} ({c["source"]["seed"]})',
        "topic": c["topic"],
        "reason": c.get("reason", ""),
        "replay of the slip gives": _replay_text(c),
        "replay reproduces the stated figure": _replay_ok(c),
        "id": c["id"],
    } for c in cv.shown], columns=COLUMNS)
    if present:  # a slide keeps the columns that carry the verdict
        df = df.select(SLIDE_COLUMNS)
    st.dataframe(df, hide_index=True, column_order=SLIDE_COLUMNS if present else DESK_COLUMNS, column_config={
        "claim (paraphrased)": st.column_config.TextColumn(width="large"),
        "reason": st.column_config.TextColumn(width="medium"),
    })
    csv = csv_text([{
        "id": c["id"], "topic": c["topic"], "source": c["source"]["seed"], "claim": c["claim"],
        "inputs": c.get("inputs", ""), "stated_value": c["stated"]["value"], "stated_text": c["stated"].get("text", ""),
        "unit": c["stated"]["unit"], "approx": bool(c["stated"].get("approx")), "recomputed_value": c["computed"],
        "verdict": c["verdict"], "reason": c.get("reason", ""), "computation": describe_expr(c["compute"]),
        "replay_value": c.get("as_claimed_value"), "replay_reproduces_stated": c.get("reason_confirmed"),
        "replay_computation": describe_expr(c["as_claimed"]) if "as_claimed" in c else "",
    } for c in cv.shown])
    st.download_button("Download the claims (CSV)", csv, file_name="published_figures_recomputed.csv",
                       mime="text/csv")


def chart(cv):
    """Stated against recomputed, each in its document's unit."""
    if not cv.plotted:
        return
    lo, hi = cv.diagonal
    fig = plot.Figure()
    fig.add_trace(plot.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="recomputed = stated",
                             line={"color": "#777777", "dash": "dot"}, hoverinfo="skip"))
    for verdict in ("reproduced", "differs"):
        cs = [c for c in cv.plotted if c["verdict"] == verdict]
        if not cs:
            continue
        fig.add_trace(plot.Scatter(
            x=[c["stated"]["value"] for c in cs], y=[c["computed"] for c in cs], mode="markers", name=verdict,
            marker={"color": VERDICT_COLORS[verdict], "size": 14 if present else 10,
                    "symbol": "circle" if verdict == "reproduced" else "x", "line": {"width": 1, "color": "#333333"}},
            customdata=[[c["id"], c["source"]["seed"], format_stated(c["stated"]),
                         format_figure(c["computed"], c["stated"]["unit"])] for c in cs],
            hovertemplate="<b>%{customdata[0]}</b> (%{customdata[1]})<br>stated %{customdata[2]}<br>"
                          "recomputed %{customdata[3]}<extra></extra>"))
    charts.style(fig, title="Stated against recomputed, each in its document's unit",
                 x_title="stated figure (the claim's unit)", y_title="recomputed figure (the claim's unit)",
                 log_x=True, log_y=True, present=present, height=charts.slide_height(present))
    charts.show(fig, "published-figures", key="_claims_chart")


def _fenced(text: str) -> str:
    """`text` as a Markdown code block (a fence longer than any backtick run inside it)."""
    longest = 0
    run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


DETAILS_KEY = "_claims_details_open"


def details(cv):
    """Each differing claim in detail, with the replay of its slip. One expander drawn only
    when opened (on_change="rerun": its text costs nothing on the reruns of a closed page);
    inside it one Markdown block, a heading per claim."""
    if not cv.differing:
        return
    # A constant label (ui.layout.lazy_expander): the count is in the table's caption above.
    box = layout.lazy_expander("The differing claims in detail: the computation and the replay of each slip",
                               DETAILS_KEY)
    if not box.open:
        return
    parts = []
    for c in cv.differing:
        unit = c["stated"]["unit"]
        parts += [f"#### {escape_md(c['id'])}: stated {escape_md(format_stated(c['stated']))}, recomputed "
                  f"{escape_md(format_figure(c['computed'], unit))}",
                  f"**Claim** (paraphrased): {escape_md(c['claim'], 600)}  \n"
                  f"**Source**: {escape_md(c['source'].get('title', ''))} ({escape_md(c['source']['seed'])})  \n"
                  f"**Inputs**: {escape_md(c.get('inputs', ''), 600)}  \n"
                  f"**Reason found**: {escape_md(c.get('reason', ''), 1000)}",
                  "*Recomputed as*",
                  _fenced(f"{describe_expr(c['compute'])}\n= {format_figure(c['computed'], unit)}")]
        if "as_claimed" in c:
            verdict = ("reproduces the stated figure" if c.get("reason_confirmed")
                       else "does not reproduce the stated figure within its printed digits")
            parts += [f"*Replay of the slip ({verdict})*",
                      _fenced(f"{describe_expr(c['as_claimed'])}\n= {format_figure(c['as_claimed_value'], unit)}")]
        else:
            parts.append("No replay: no convention or slip tried gives the stated figure.")
    with box:
        st.markdown("\n\n".join(parts))


@st.cache_data(show_spinner=False)
def _accuracy() -> dict:
    from mla_core.serving import accuracy as serving_accuracy

    return serving_accuracy()


@st.cache_data(show_spinner="Estimating every published setting (the kernel tables load once, about half a minute)")
def _estimate_accuracy() -> dict:
    from mla_core.serving.published import estimate_accuracy

    return estimate_accuracy()


ESTIMATE_KEY = "_claims_estimate_open"


def estimate_section():
    """The estimate (what the engine will do) against the same published figures, beside
    aiconfigurator-core's own estimate: mla_core.serving.published.estimate_accuracy. Drawn only
    when opened (it estimates every setting once a server)."""
    box = layout.lazy_expander("Accuracy of the estimate: published serving figures against the plan's estimate "
                               "and aiconfigurator-core's", ESTIMATE_KEY)
    if not box.open:
        return
    with box:
        try:
            acc = _estimate_accuracy()
        except (MLAError, OSError, ValueError, KeyError, TypeError) as e:
            st.error(escape_md(f"The estimate could not be checked against data/serving_measurements.json: {e}", 400))
            return
        s, goals, aic = acc["summary"], acc["goals"], acc["aic"]
        metric_row([
            Metric("Cases estimated", f"{s['cases']}"),
            Metric("Median |error| of the estimate", f"{s['median_abs_error_pct']:.1f}%",
                   help=f"Goal: at most {goals['median_abs_error_pct']:.0f}%."),
            Metric(f"Within {goals['within_factor']:g}x", f"{s['within_factor']} of {s['cases']}"),
            Metric("aiconfigurator-core's median |error|", f"{aic['aic']['median_abs_error_pct']:.1f}%",
                   help=f"On the {aic['cases']} cases its engine estimates; ours on the same cases: "
                        f"{aic['ours']['median_abs_error_pct']:.1f}%.") if aic["cases"] else None])
        st.caption(
            f"Goals: median |error| at most {goals['median_abs_error_pct']:.0f}% "
            f"({'met' if acc['meets']['median_abs_error_pct'] else 'not met'}), every case within "
            f"{goals['within_factor']:g}x ({'met' if acc['meets']['within_factor'] else 'not met'}); worst "
            f"{escape_md(s['worst']['id'])} ({s['worst']['error_pct']:+.0f}%). Error = (estimate - measured) / "
            "measured. The estimate uses the engine the row names (vLLM's rules where it has none), at the published "
            "batch, or at the batch the plan picks for an offline run. " + " ".join(escape_md(n, 400) for n in acc["notes"]))
        METRIC_UNITS = {"output_tokens_per_s_per_gpu": "output tokens/s per GPU",
                        "input_tokens_per_s_per_gpu": "input tokens/s per GPU", "tpot_s": "s (TPOT)",
                        "ttft_s": "s (TTFT)"}
        # Two tables of one row a figure, so neither is wider than the page: the figures, then how each was set up.
        st.dataframe(frame([{
            "figure": c["id"], "unit": METRIC_UNITS[c["metric"]], "measured": float(f"{c['measured']:.4g}"),
            "estimate": float(f"{c['estimate']:.4g}"), "error (%)": c["error_pct"],
            "estimate from": c["table"],
            "aiconfigurator-core": float(f"{c['aic']['estimate']:.4g}") if c["aic"]["available"] else None,
            "its error (%)": c["aic"]["error_pct"] if c["aic"]["available"] else None,
        } for c in acc["cases"]]), hide_index=True, column_config={
            **widths(figure=205, unit=170, measured=80, estimate=80, **{"estimate from": 120}),
            "error (%)": st.column_config.NumberColumn(format="%+.1f", width=75),
            "its error (%)": st.column_config.NumberColumn(format="%+.1f", width=80)})
        st.dataframe(frame([{
            "figure": c["id"], "GPU": c["gpu"], "split": c["split"], "batch": c["batch"], "counts": c["counts"],
            "engine rules": c["estimate_engine"], "confidence": c["confidence"],
            "why no aiconfigurator-core figure": "" if c["aic"]["available"] else c["aic"]["reason"],
        } for c in acc["cases"]]), hide_index=True, column_config=widths(
            figure=220, GPU=70, split=130, batch=55, counts=90, **{"engine rules": 85, "confidence": 85,
                                                                  "why no aiconfigurator-core figure": 180}))
        st.dataframe(frame([{"by": name.replace("by_", ""), "group": k, "cases": g["cases"],
                             "median |error| (%)": g["median_abs_error_pct"], "worst": g["worst"]["id"],
                             "worst error (%)": g["worst"]["error_pct"], f"within {goals['within_factor']:g}x": g["within_factor"]}
                            for name in ("by_table", "by_engine", "by_metric") for k, g in acc[name].items()]),
                     hide_index=True, column_config={
                         **widths(worst=220),
                         "median |error| (%)": st.column_config.NumberColumn(format="%.1f"),
                         "worst error (%)": st.column_config.NumberColumn(format="%+.1f")})


def accuracy():
    """Published serving figures and the user's engine runs against the serving plan's bound
    (mla_core.serving.accuracy, mla_core.store.engines.accuracy)."""
    # --- accuracy of the serving plan against published serving figures -----------------------------------
    st.subheader("Accuracy: published serving figures against the serving plan's bound")
    st.caption("Each published throughput or latency (data/serving_measurements.json) is set against the bound the "
               "Serving plan computes for the same model, GPUs, split, batch and workload. A bound is what no engine can "
               "beat; a measured rate above it, or a measured time below it, would be a modelling error (a test "
               "fails). Efficiency = measured / bound for a rate, bound / measured for a time.")
    try:
        acc = _accuracy()
    except (MLAError, OSError, ValueError, KeyError, TypeError) as e:
        st.error(escape_md(f"The serving figures in data/serving_measurements.json could not be checked: {e}", 400))
    else:
        metric_row([
            Metric("Published figures checked", f"{acc['cases']}"),
            Metric("At or under their bound", f"{acc['within_bound']} of {acc['cases']}"),
            Metric("Efficiency (measured / bound)", f"{acc['efficiency_min']:.0%} to {acc['efficiency_max']:.0%}")
            if acc["cases"] else None])
        METRIC_UNITS = {"output_tokens_per_s_per_gpu": "output tokens/s per GPU",
                        "input_tokens_per_s_per_gpu": "input tokens/s per GPU",
                        "tpot_s": "s (TPOT)", "ttft_s": "s (TTFT)",
                        "kernel_GBps": "GB/s (kernel)", "kernel_TFLOPS": "TFLOP/s (kernel)"}
        st.dataframe(frame([{
            "figure": r["id"], "efficiency": f"{r['efficiency']:.1%}",
            "measured": float(f"{r['measured_per_gpu']:.4g}"), "bound": float(f"{r['bound_per_gpu']:.4g}"),
            "unit": METRIC_UNITS.get(r["metric"], r["metric"]), "GPU": r["gpu"], "split": r["split"],
            "workload": f"{r['workload']['input_len']:,} in / {r['workload']['output_len']:,} out",
            "bound set by": r["bound_by"],
        } for r in acc["rows"]]), hide_index=True, column_config=widths(
            figure=190, efficiency=75, measured=70, bound=70, unit=140, GPU=70, split=140, workload=120,
            **{"bound set by": 90}))
        sources = layout.lazy_expander("Sources and assumptions", "_claims_sources_open")
        if sources.open:  # drawn only when opened
            sources.markdown("\n".join(f"- **{escape_md(r['title'])}** ({escape_md(r['id'])}, "
                                        f"{escape_md(r['engine'] or 'engine not stated')}): {escape_md(r['source'], 600)}  \n"
                                        f"  _{escape_md(r['assumptions'], 600)}_" for r in acc["rows"]))


    estimate_section()

    # --- accuracy against the user's own engine runs (imported on the Benchmark page) -------------------
    st.markdown("**Your engine runs** (imported on the Benchmark page or with `python -m mla_core bench import`): "
                "each measured TTFT, TPOT and throughput against the plan for the same setting.")
    try:
        from mla_core.store.engines import accuracy as engine_accuracy

        engine_rows = [{
            "run": c.settings.get("run_label") or f"{c.engine} {c.format}", "model": c.model, "GPU": c.gpu,
            "split": p.deployment.get("split", ""), "batch": p.workload.get("batch"),
            "metric": m.name, "measured": m.measured, "predicted (bound)": m.predicted, "error (%)": m.error_pct,
            "modelling error": "YES" if m.beats_bound else "",
        } for c in engine_accuracy() for p in c.points for m in p.metrics]
    except MLAError as e:
        st.error(escape_md(f"Engine runs could not be read: {e}", 400))
    else:
        if engine_rows:
            st.dataframe(frame(engine_rows), hide_index=True,
                         column_config={"error (%)": st.column_config.NumberColumn(format="%+.1f")})
        else:
            st.info("No engine run imported yet: import a `vllm bench serve --save-result` JSON or an SGLang "
                    "bench_serving / bench_one_batch file on the Benchmark page.")


# --- the page ----------------------------------------------------------------------------------------------
cv = claims_view(claims, **_filters_state())
if present:  # the slide: title, the four counts, the chart; the rest follows
    summary(cv)
    chart(cv)
    filters(cv)
    table(cv)
    conventions()
else:
    conventions()
    summary(cv)
    breakdown(cv)
    filters(cv)
    table(cv)
    chart(cv)
details(cv)
accuracy()
