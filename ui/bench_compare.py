"""The benchmark page's comparison of devices: runs side by side per kernel (mla_core.store.report)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from mla_core import install
from mla_core.store import report
from mla_core.errors import MLAError
from mla_core.units import format_rate, format_seconds

from . import charts, measured
from .bench_common import GB, TFLOP, load
from .charts import plot
from .text import escape_md, frame

ss = st.session_state


def compare(cat, present: bool) -> None:
    """The section: pick runs, then a table, a CSV and a chart of each kernel across them."""
    options, labels, short, untrusted = cat.options, cat.labels, cat.short, cat.untrusted
    st.subheader("Compare devices")
    cmp_options = [k for k in options if k not in untrusted or ss.get("_bench_cmp_disturbed")]
    ss["_bench_compare"] = [k for k in (ss.get("_bench_compare") or []) if k in cmp_options]
    with st.expander("Comparison settings", expanded=not present):
        st.toggle(f"Include disturbed runs ({len(untrusted)})", key="_bench_cmp_disturbed",
                  help="Runs that other work disturbed (or whose stored copy is damaged) are left out of comparisons "
                       "unless this is on.")
        st.multiselect("Runs to compare (history and samples)", cmp_options, key="_bench_compare",
                       format_func=lambda k: labels.get(k, k),
                       help="e.g. this machine's run and an imported H200 result (made by "
                            f"`{install.setup().measure_elsewhere}` on an H200).")
        c1, c2 = st.columns(2)
        c1.toggle("Match kernels by shape too", key="_bench_cmp_by_shape",
                  help="Off: one row per kernel, each run's first shape (devices usually run different shapes). "
                       "On: one row per kernel and shape; runs without that shape leave the cell empty.")
        c2.radio("Chart", ["achieved GB/s", "achieved TFLOP/s", "median time"], key="_bench_cmp_metric", horizontal=True)
    chosen = ss["_bench_compare"]
    if len(chosen) < 2:
        st.info(f"Pick two or more runs to set them side by side: e.g. a committed sample and a result imported from a "
                f"GPU (`{install.setup().measure_elsewhere}` makes one on an H200).")
    else:
        named, head = [], []
        for key in chosen:
            result, error = load(key)
            if result is None:
                st.error(escape_md(error or "a result could not be read", 400))
                continue
            named.append((short[key], result))
            head.append({"run": short[key], "device": measured.device_name(result), "dtype": result["device"]["dtype"],
                         "measured (UTC)": str(result.get("created", ""))[:19], "what": labels.get(key, "")})
        by_shape = bool(ss.get("_bench_cmp_by_shape"))
        try:
            cmp_rows = report.compare_rows(named, by_shape=by_shape)
        except MLAError as e:
            st.error(escape_md(str(e), 300))
            cmp_rows = []
        if cmp_rows:
            cmp_table = []
            for row in cmp_rows:
                line = {"kernel": row["kernel"]}
                if by_shape:
                    line["shape"] = row["shape_text"]
                for name, _ in named:
                    cell = row["runs"][name]
                    if not by_shape:
                        line[f"{name}: shape"] = cell["shape_text"] if cell else ""
                    line[f"{name}: median"] = format_seconds(cell["median_s"]) if cell else ""
                    line[f"{name}: achieved"] = ((format_rate(cell["achieved_GBps"] * GB, "B/s") + ", "
                                                  + format_rate(cell["achieved_TFLOPs"] * TFLOP, "FLOP/s")) if cell else "")
                    line[f"{name}: predicted / measured"] = (f"{cell['model_accuracy']:.2f}"
                                                             if cell and cell["model_accuracy"] else "")
                cmp_table.append(line)
            st.dataframe(frame(cmp_table), hide_index=True)
            st.download_button("Download the comparison (CSV)", pd.DataFrame([
                {"kernel": row["kernel"], "match_shape": row["shape_text"], "run": name, **(row["runs"][name] or {})}
                for row in cmp_rows for name, _ in named]).to_csv(index=False), file_name="benchmark_comparison.csv",
                mime="text/csv", key="_bench_cmp_csv")
            metric_key, y_title, scale = {
                "achieved GB/s": ("achieved_GBps", "achieved bandwidth (GB/s)", 1),
                "achieved TFLOP/s": ("achieved_TFLOPs", "achieved compute (TFLOP/s)", 1),
                "median time": ("median_s", "median time (ms)", 1e3),  # s -> ms
            }[ss.get("_bench_cmp_metric") or "achieved GB/s"]
            fig3 = plot.Figure()
            cats = [row["kernel"] + (f"<br>{row['shape_text']}" if by_shape else "") for row in cmp_rows]
            for i, (name, _) in enumerate(named):
                cells = [row["runs"][name] for row in cmp_rows]
                fig3.add_trace(plot.Bar(
                    x=cats, y=[c[metric_key] * scale if c and c[metric_key] else None for c in cells], name=name,
                    marker={"color": charts.SEQUENCE[i % len(charts.SEQUENCE)]},
                    customdata=[[c["shape_text"], format_seconds(c["median_s"]),
                                 format_rate(c["achieved_GBps"] * GB, "B/s"),
                                 format_rate(c["achieved_TFLOPs"] * TFLOP, "FLOP/s")] if c else ["", "", "", ""]
                                for c in cells],
                    hovertemplate=(f"{name}<br>%{{x}} (%{{customdata[0]}})<br>median %{{customdata[1]}}<br>"
                                   "%{customdata[2]}, %{customdata[3]}<extra></extra>")))
            charts.style(fig3, title=f"Per kernel, side by side: {y_title}", x_title="kernel", y_title=y_title,
                         log_y=True, present=present)
            fig3.update_layout(barmode="group")
            charts.show(fig3, "benchmark-comparison", key="_bench_cmp_chart")
            st.dataframe(frame(head), hide_index=True)
            st.caption("Each device ran its own shapes (see the shape columns): compare achieved rates across devices; "
                       "compare times only between equal shapes ('Match kernels by shape too').")
