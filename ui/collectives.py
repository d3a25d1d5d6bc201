"""Benchmark page section: collective bandwidth (torch.distributed under torchrun), from the history.

Everything drawn comes from `mla_core.bench.comm.collectives_view(result)` (table and chart
series) and `comm.link_bandwidth(result)` (the figure the serving model can use); no arithmetic
here. The chosen measured bus bandwidth is kept in `st.session_state["bench_link_bandwidth"]`
(a `LinkBandwidth.to_dict()`, or None) for the serving pages to pass as
`Deployment(link_bandwidth_Bps=...)`.
"""
from __future__ import annotations

import os

from ui.charts import plot  # plotly.graph_objects spelt as plain dicts (ui/charts.py)
import streamlit as st

from mla_core.bench import comm
from mla_core.store import history
from mla_core.store.schema import MAX_RESULT_BYTES, validate_result
from mla_core.errors import MLAError
from mla_core.units import format_bytes, format_seconds

from . import charts
from .metrics import Metric, metric_row
from .text import escape_md, frame

LINK_KEY = "bench_link_bandwidth"  # what the serving pages read
COMMAND = "torchrun --nproc-per-node 8 -m mla_core bench collectives --save"


def _runs() -> list[dict]:
    if not os.path.exists(history.default_path()):
        return []
    return history.list_runs(kind="collectives")


def _on_upload() -> None:
    ss = st.session_state
    f = ss.get("_coll_upload")
    if f is None:
        return
    try:
        if f.size > MAX_RESULT_BYTES:
            raise MLAError(f"result JSON is {f.size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
        data = validate_result(f.getvalue(), kind="collectives")
        run_id = history.save_run(data, source="import", label=(f.name or "")[:200] or None)
    except MLAError as e:
        ss["_coll_message"] = ("error", f"{f.name}: {e}")
        return
    ss["_coll_message"] = ("success", f"Imported {f.name} as run #{run_id}.")
    ss["_coll_show"] = run_id


def section(present: bool = False) -> None:
    ss = st.session_state
    st.subheader("Collectives: bus bandwidth between GPUs")
    st.caption("all_reduce, all_gather, reduce_scatter and all_to_all with torch.distributed (NCCL on GPUs, gloo on "
               f"CPUs). Measure from a shell on the machines, e.g. `{COMMAND}` (across nodes add torchrun's "
               "`--nnodes` and `--rdzv-endpoint`): the result lands in this history. busbw = algbw x 2(n-1)/n for "
               "all_reduce and (n-1)/n for the others (nccl-tests); GB/s = 10^9 B/s, sizes in binary units.")
    with st.expander("Import a collectives result JSON", expanded=False):
        st.file_uploader("A file written by `... bench collectives --out FILE.json` (at most 1 MiB)", type=["json"],
                         key="_coll_upload", on_change=_on_upload)
    msg = ss.pop("_coll_message", None)
    if msg:
        (st.error if msg[0] == "error" else st.success)(escape_md(msg[1], 400))
    try:
        runs = _runs()
    except MLAError as e:
        st.error(escape_md(f"History: {e}", 400))
        return
    if not runs:
        st.info(f"No collectives measured yet: `{COMMAND}` on a GPU server (or `torchrun --nproc-per-node 2 -m "
                "mla_core bench collectives --device cpu --quick --save` here) stores one.")
        return
    ids = [r["id"] for r in runs]
    labels = {r["id"]: f"#{r['id']} {r.get('device_name') or ''}"
                        + (f" ({r['label']})" if r.get("label") else "") + f", {str(r.get('created') or '')[:16]}"
              for r in runs}
    if ss.get("_coll_show") not in ids:
        ss["_coll_show"] = ids[0]
    run_id = st.selectbox("Collectives run", ids, key="_coll_show", format_func=lambda i: labels.get(i, str(i)))
    try:
        result = validate_result(history.get_run(int(run_id))["result"], kind="collectives")
        view = comm.collectives_view(result)
    except MLAError as e:
        st.error(escape_md(f"run {run_id}: {e}", 400))
        return
    st.caption(f"{view.world_size} ranks on {view.nodes} node(s), {escape_md(view.backend)} on "
               f"**{escape_md(view.device_name, 100)}**, {escape_md(view.dtype)}.")
    st.dataframe(frame([{
        "op": r.op, "size": r.size_text, "median": format_seconds(r.median_s), "best": format_seconds(r.min_s),
        "algbw (GB/s)": r.algbw_GBps, "busbw (GB/s)": r.busbw_GBps, "busbw best (GB/s)": r.busbw_best_GBps,
        "reps": r.reps} for r in view.rows]), hide_index=True,
        column_config={k: st.column_config.NumberColumn(format="%.3f")
                       for k in ("algbw (GB/s)", "busbw (GB/s)", "busbw best (GB/s)")})
    fig = plot.Figure()
    for i, (op, s) in enumerate(view.series.items()):
        fig.add_trace(plot.Scatter(x=s["size_bytes"], y=s["busbw_GBps"], mode="lines+markers", name=op,
                                 line={"color": charts.SEQUENCE[i % len(charts.SEQUENCE)]},
                                 customdata=[format_bytes(b) for b in s["size_bytes"]],
                                 hovertemplate=f"{op}<br>%{{customdata}}: %{{y:.3f}} GB/s busbw<extra></extra>"))
    charts.style(fig, title="Bus bandwidth by message size (median)", x_title="size S (bytes)",
                 y_title="busbw (GB/s)", log_x=True, log_y=True, present=present)
    charts.show(fig, "collectives-busbw", key="_coll_chart")
    for note in view.notes:
        st.caption(escape_md(note, 500))
    options = [op for op in comm.OPS if op in view.series]
    c1, c2 = st.columns([1, 2])
    op = c1.selectbox("Link figure from", options, key="_coll_op",
                      help="all_reduce: tensor parallelism; all_to_all: expert parallelism's dispatch and combine.")
    try:
        link = comm.link_bandwidth(result, op)
    except MLAError as e:
        c2.warning(escape_md(str(e), 300))
        return
    metric_row([Metric(f"{op} busbw at {format_bytes(link.size_bytes)}", f"{link.link_bandwidth_Bps / 1e9:,.1f} GB/s")],
                container=c2)
    chosen = ss.get(LINK_KEY)
    using = bool(chosen) and chosen.get("source") == link.source
    if st.toggle("Use this measured bus bandwidth for the serving model's communication (instead of the datasheet "
                 "NVLink / network figure)", value=using, key=f"_coll_use_{run_id}_{op}"):
        ss[LINK_KEY] = link.to_dict()
    elif using:
        ss[LINK_KEY] = None
