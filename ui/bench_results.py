"""The benchmark page's results section: the shown run's ceilings against the datasheet, every
kernel with its prediction (mla_core.store.report), and the measured roofline."""
from __future__ import annotations

import streamlit as st

from mla_core.store import report
from mla_core.errors import MLAError
from mla_core.units import format_bytes, format_count, format_intensity, format_rate, format_seconds

from . import bench_model, bench_runs, charts, measured
from .bench_common import GB, MAX_MESSAGES, TFLOP, flush, load, set_shown
from .charts import plot
from .metrics import Metric, metric_row
from .text import csv_text, escape_md, frame

ss = st.session_state


def render(shown: dict, present: bool, *, slide: bool = False) -> None:
    dev = shown["device"]
    facts = [f"{dev['kind']}" + (f"/{dev['backend']}" if dev.get("backend") not in (None, dev["kind"]) else ""),
             f"torch {dev['torch_version']}", dev["dtype"]]
    if dev.get("threads"):
        facts.append(f"{dev['threads']} threads")
    if dev.get("free_memory_bytes"):
        facts.append(f"{format_bytes(dev['free_memory_bytes'])} free before the run")
    if dev.get("other_cpus_busy"):
        facts.append(f"other processes kept {dev['other_cpus_busy']:.2f} CPUs busy")
    if slide:  # one line on a slide
        st.caption(f"**{escape_md(dev['name'])}** ({escape_md(', '.join(facts[:3]), 200)}); measured "
                   f"{escape_md(str(shown.get('created', ''))[:10])}")
    else:
        st.caption(f"**{escape_md(dev['name'])}** ({escape_md(', '.join(facts), 400)}); measured "
                   f"{escape_md(shown.get('created', ''))}" + (f" in {format_seconds(shown['wall_s'])}"
                                                               if shown.get("wall_s") else "") + ".")
    bench_model.show_result(shown)
    reasons = bench_runs.disturbed_reasons(shown)
    if reasons:
        st.warning(escape_md("This run was disturbed: " + "; ".join(reasons) + ". Its numbers understate the "
                             "machine; comparisons leave it out unless asked.", 800))
    cs = report.ceiling_summary(shown)
    metric_row([
        Metric("Copy bandwidth (measured)", format_rate(cs["copy_GBps"] * GB, "B/s") if cs["copy_GBps"] else "n/a",
               help="dst.copy_(src) on buffers far larger than the last-level cache; counts 2N bytes (read + write)."),
        Metric("Read bandwidth (measured)", format_rate(cs["read_GBps"] * GB, "B/s") if cs["read_GBps"] else "n/a",
               help="src.sum(): N bytes read. The predictions use this figure (copy's when read was not run)."),
        Metric("Matmul (measured)", format_rate(cs["matmul_TFLOPs"] * TFLOP, "FLOP/s") if cs["matmul_TFLOPs"]
               else "n/a", help=f"n x n x n at {dev['dtype']}, 2 n^3 flops."),
        Metric("Ridge point (measured)", format_intensity(cs["ridge_flop_per_byte"]) if cs["ridge_flop_per_byte"]
               else "n/a", help="matmul throughput / bandwidth: below it a kernel is memory bound on this device.")])
    rows = report.kernel_rows(shown)
    if slide:  # the slide: the measured roofline right under the ceilings
        _roofline(shown, rows, cs, present, slide=True)
        _details(shown, rows, cs, present)
    else:
        _details(shown, rows, cs, present)
        _roofline(shown, rows, cs, present)
    _predicted(shown, rows, present)


def _details(shown: dict, rows: list, cs: dict, present: bool) -> None:
    """The datasheet comparison, the MLA accuracy checks, the kernel table and the run's notes."""
    dev = shown["device"]
    if cs["datasheet"]:
        metric_row([
            Metric(f"Datasheet bandwidth ({cs['preset']})", format_rate(cs["peak_bandwidth_GBps"] * GB, "B/s"),
                   help=cs["peak_source"]),
            Metric("Datasheet peak (dense bf16)", format_rate(cs["peak_TFLOPs"] * TFLOP, "FLOP/s"),
                   help=cs["peak_source"]),
            Metric("Measured / datasheet bandwidth", f"{cs['bandwidth_share_of_peak']:.0%}"
                   if cs["bandwidth_share_of_peak"] else "n/a"),
            Metric("Measured / datasheet matmul", f"{cs['compute_share_of_peak']:.0%}"
                   if cs["compute_share_of_peak"] else "n/a")])
    elif cs["peak_bandwidth_GBps"] and cs["peak_TFLOPs"]:
        st.caption(f"No datasheet for this device: its bounds ({format_rate(cs['peak_bandwidth_GBps'] * GB, 'B/s')}, "
                   f"{format_rate(cs['peak_TFLOPs'] * TFLOP, 'FLOP/s')}) are sanity limits that only flag timing "
                   f"errors ({escape_md(cs['peak_source'], 300)}).")
    for chk in report.mla_checks(shown):
        err, tol = chk["max_rel_err"], chk["rel_err_tolerance"]
        text = (f"MLA absorbed against recompute at {chk['shape_text']}: max relative error "
                f"{'n/a' if err is None else format(err, '.1e')}"
                + (f" (tolerance {tol:g} at {dev['dtype']})." if tol is not None else " (no tolerance recorded)."))
        (st.success if chk["ok"] else st.warning)(escape_md(text, 300))

    # The table: every kernel, with the prediction and the shares of the measured ceilings.
    table = frame([{
        "kernel": r["kernel"],
        "dtype": r["dtype"],
        "shape": r["shape_text"],
        "median": format_seconds(r["median_s"]),
        "best": format_seconds(r["min_s"]),
        "bytes": format_bytes(r["bytes"]),
        "flops": f"{format_count(r['flops'])} flop",
        "achieved bandwidth": format_rate(r["achieved_GBps"] * GB, "B/s"),
        "achieved compute": format_rate(r["achieved_TFLOPs"] * TFLOP, "FLOP/s"),
        "predicted": format_seconds(r["predicted_s"]) if r["predicted_s"] else "",
        "bound": r["predicted_bound"] or "",
        "model accuracy (predicted / measured)": r["model_accuracy"],
        "share of measured bandwidth": r["bandwidth_share"],
        "share of measured matmul": r["compute_share"],
    } for r in rows])
    st.dataframe(table, hide_index=True, column_config={
        "model accuracy (predicted / measured)": st.column_config.NumberColumn(format="%.2f"),
        "share of measured bandwidth": st.column_config.NumberColumn(format="percent"),
        "share of measured matmul": st.column_config.NumberColumn(format="percent"),
    })
    csv = csv_text([{k: r[k] for k in (
        "kernel", "dtype", "shape_text", "median_s", "min_s", "reps", "bytes", "flops", "intensity_flop_per_byte",
        "achieved_GBps", "achieved_TFLOPs", "predicted_s", "predicted_bound", "predicted_TFLOPs", "model_accuracy",
        "bandwidth_share", "compute_share", "max_rel_err", "rel_err_tolerance")} for r in rows])
    st.download_button("Download the table (CSV)", csv, file_name="benchmark_result.csv", mime="text/csv",
                       key="_bench_table_csv")
    st.caption("Model accuracy = predicted / measured time, the prediction being max(bytes / measured bandwidth, "
               "flops / measured matmul) of the same run: 1.00 is exact, below 1 the kernel is slower than its "
               "roofline. It equals the larger of the two shares of the measured ceilings. Decode bytes are the KV "
               "cache read (mla_core.kv); flops count 2 per multiply-add (mla_core.roofline).")
    notes = [*shown.get("notes", []), *(f"{r['kernel']} {report.shape_summary(r['shape'])}: {n}"
                                        for r in shown["results"] for n in r.get("notes", []))]
    for e in shown.get("timing_errors", [])[:MAX_MESSAGES]:
        st.warning(escape_md(f"Not shown: {e['kernel']} {report.shape_summary(e['shape'])}: {e['reason']}", 600))
    for s in shown.get("skipped", [])[:MAX_MESSAGES]:
        st.warning(escape_md(f"Skipped: {s['kernel']} {report.shape_summary(s['shape'])}: {s['reason']}", 600))
    if notes:
        st.warning("\n".join(f"- {escape_md(n, 400)}" for n in notes[:20]))


def _roofline(shown: dict, rows: list, cs: dict, present: bool, *, slide: bool = False) -> None:
    """The measured device's roofline: its roof from the measured ceilings, the measured
    kernels, and where the prediction put each one."""
    # Roofline of the measured device: its roof from the measured ceilings, the measured kernels,
    # and where the prediction put each one.
    pts, problems = measured.measured_points(shown)
    decode = [r for r in rows if r["is_decode"] and r["intensity_flop_per_byte"]]
    if pts and cs["bandwidth_GBps"] and cs["matmul_TFLOPs"]:
        intens = [p.intensity_flop_per_byte for p in pts]
        fig = plot.Figure()
        try:
            mroof = report.roof(cs["bandwidth_GBps"], cs["matmul_TFLOPs"], intens)
            fig.add_trace(plot.Scatter(
                x=mroof["x"], y=mroof["y_TFLOPs"], mode="lines", name="measured roof (read bandwidth, matmul)",
                line={"color": "#777777", "dash": "dot", "width": 3 if present else 2},
                hovertemplate=(f"measured: {format_rate(cs['bandwidth_GBps'] * GB, 'B/s')}, "
                               f"{format_rate(cs['matmul_TFLOPs'] * TFLOP, 'FLOP/s')}; ridge "
                               f"{format_intensity(mroof['ridge'])}<extra></extra>")))
            if cs["datasheet"]:
                droof = report.roof(cs["peak_bandwidth_GBps"], cs["peak_TFLOPs"], intens)
                fig.add_trace(plot.Scatter(
                    x=droof["x"], y=droof["y_TFLOPs"], mode="lines", name=f"datasheet roof ({cs['preset']})",
                    line={"color": "#777777", "width": 3 if present else 2},
                    hovertemplate=(f"datasheet: {format_rate(cs['peak_bandwidth_GBps'] * GB, 'B/s')}, "
                                   f"{format_rate(cs['peak_TFLOPs'] * TFLOP, 'FLOP/s')}<extra></extra>")))
        except MLAError as e:
            st.warning(escape_md(str(e), 300))
        for label in dict.fromkeys(p.label for p in pts):
            mine = [p for p in pts if p.label == label]
            fig.add_trace(plot.Scatter(
                x=[p.intensity_flop_per_byte for p in mine], y=[p.achieved_TFLOPs for p in mine], mode="markers",
                name=f"{label} measured", legendgroup=label,
                marker={"symbol": "x", "size": 15 if present else 12, "color": charts.color_for(label),
                        "line": {"width": 1, "color": "#333333"}},
                customdata=[[report.shape_summary(p.shape), format_seconds(p.median_s),
                             format_rate(p.achieved_TFLOPs * TFLOP, "FLOP/s"),
                             format_rate(p.achieved_GBps * GB, "B/s"), format_intensity(p.intensity_flop_per_byte)]
                            for p in mine],
                hovertemplate=(f"<b>{label}</b> measured (%{{customdata[0]}})<br>intensity %{{customdata[4]}}<br>"
                               "median %{customdata[1]}: %{customdata[2]}, %{customdata[3]}<extra></extra>")))
            preds = [r for r in decode if measured.DECODE_KERNELS.get(r["kernel"]) == label and r["predicted_TFLOPs"]]
            if preds:
                fig.add_trace(plot.Scatter(
                    x=[r["intensity_flop_per_byte"] for r in preds], y=[r["predicted_TFLOPs"] for r in preds],
                    mode="markers", name=f"{label} predicted", legendgroup=label,
                    marker={"symbol": "circle-open", "size": 15 if present else 12, "color": charts.color_for(label),
                            "line": {"width": 2}},
                    customdata=[[r["shape_text"], format_seconds(r["predicted_s"]), r["predicted_bound"] or "",
                                 f"{r['model_accuracy']:.2f}" if r["model_accuracy"] else "n/a"] for r in preds],
                    hovertemplate=(f"<b>{label}</b> predicted (%{{customdata[0]}})<br>%{{customdata[1]}}, "
                                   "%{customdata[2]} bound<br>predicted / measured %{customdata[3]}"
                                   "<extra></extra>")))
        charts.style(fig, title=f"Decode kernels on the measured roofline of {measured.device_name(shown)}"
                           f"{bench_runs.run_flag(shown)}",
                     x_title="arithmetic intensity (flop/B)", y_title="performance (TFLOP/s)", log_x=True,
                     log_y=True, present=present, height=charts.slide_height(slide))
        if slide:  # on a slide the legend sits beside the plot
            fig.update_layout(legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top", "font": {"size": 13},
                                      "tracegroupgap": 2},
                              margin={"t": 60, "b": 10})
        else:
            fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
                              margin={"b": (45 if present else 30) * 3 + 70})
        charts.show(fig, "benchmark-roofline", key="_bench_roofline_chart")
        st.caption("Crosses: measured (x = counted flops / bytes, y = achieved TFLOP/s at the median time). Open "
                   "circles: the roofline of this run's own measured ceilings, where the model puts each kernel. "
                   "The Roofline page draws the same crosses beside its datasheet predictions.")
    elif problems:
        st.warning(escape_md(f"No decode kernel to draw: {problems[0]}", 300))

def _predicted(shown: dict, rows: list, present: bool) -> None:
    """Decode step: measured against predicted, per kernel."""
    decode = [r for r in rows if r["is_decode"] and r["intensity_flop_per_byte"]]
    if decode and any(r["predicted_s"] for r in decode):
        cats = [measured.DECODE_KERNELS.get(r["kernel"], r["kernel"]) for r in decode]
        if len(set(cats)) < len(cats):  # a sweep: several shapes per kernel
            cats = [f"{c}<br>{r['shape_text']}" for c, r in zip(cats, decode)]
        fig2 = plot.Figure()
        for name, key, color in (("measured (median)", "median_s", charts.color_for("measured")),
                                 ("predicted (measured ceilings)", "predicted_s", charts.color_for("model"))):
            fig2.add_trace(plot.Bar(
                x=cats, y=[r[key] * 1e3 if r[key] else None for r in decode], name=name, marker={"color": color},
                customdata=[[format_seconds(r[key]) if r[key] else "n/a", r["shape_text"]] for r in decode],
                hovertemplate=f"{name}<br>%{{x}} (%{{customdata[1]}}): %{{customdata[0]}}<extra></extra>"))
        charts.style(fig2, title=f"Decode step: measured against predicted{bench_runs.run_flag(shown)}",
                     x_title="kernel (shape)",
                     y_title="time (ms)", log_y=True, present=present, height=None if present else 400)
        fig2.update_layout(barmode="group", legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
                           margin={"b": 110})
        charts.show(fig2, "benchmark-predicted-vs-measured", key="_bench_pred_chart")


def _on_show() -> None:
    if ss.get("_bench_show"):
        set_shown(ss["_bench_show"])


def results(cat, present: bool, *, slide: bool = False) -> None:
    """The section: a picker (state key `_bench_show`) and the shown run; a run that cannot be
    drawn is one error."""
    if not slide:
        st.subheader("Results")
    flush("results")
    options = cat.options
    if ss.get("_bench_show") not in options:
        fallback = ss.get("_bench_result_key")
        ss["_bench_show"] = fallback if fallback in options else (options[0] if options else None)
    if not options:
        st.info("Nothing to show yet: run the benchmark above, or import a result.")
        return
    if not slide:
        _picker(cat)
    shown, error = load(ss["_bench_show"])
    if shown is None:
        st.error(escape_md(error or "that result could not be read", 400))
    else:
        try:
            render(shown, present, slide=slide)
        except (MLAError, ArithmeticError, ValueError, TypeError, KeyError) as e:
            # A stored run that cannot be drawn must not take the page (and its History) down.
            st.error(escape_md(f"This run cannot be shown ({type(e).__name__}: {e}); pick another, or delete it "
                               "below.", 400))
    if slide:  # the picker follows the slide
        _picker(cat)


def _picker(cat) -> None:
    st.selectbox("Show", cat.options, key="_bench_show", format_func=lambda k: cat.labels.get(k, k),
                 on_change=_on_show,
                 help="Runs in the history (newest first) and the committed samples (data/samples). The one you pick "
                      "is also drawn on the Roofline page.")
