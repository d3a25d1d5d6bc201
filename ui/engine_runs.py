"""Benchmark page section: imported engine runs (vLLM, SGLang) against the serving model.

Importing is `mla_core.store.engines.load_engine_file` + `history.save_run`; every figure drawn
comes from `engines.compare(run)` (measured, predicted, error in percent, the bound flag). No
arithmetic here. The measured link bandwidth chosen in the collectives section
(`ui.collectives.LINK_KEY`) feeds the comparison's communication terms when it is set.
"""
from __future__ import annotations

import os

from ui.charts import plot  # plotly.graph_objects spelt as plain dicts (ui/charts.py)
import streamlit as st

from mla_core import install
from mla_core.store import engines, history
from mla_core.store.schema import validate_result
from mla_core.errors import MLAError
from mla_core.presets import gpu_ids, model_ids
from mla_core.units import format_seconds

from . import charts, layout
from .collectives import LINK_KEY
from .state import values
from .text import escape_md, frame

METRIC_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "output_tokens_per_s": "output tokens/s"}


def _fmt(name: str, v) -> str:
    if not isinstance(v, (int, float)):
        return ""
    return f"{v:,.1f} tok/s" if name == "output_tokens_per_s" else format_seconds(v)


def _import() -> None:
    ss = st.session_state
    f = ss.get("_eng_upload")
    if f is None:
        ss["_eng_message"] = ("error", "choose a file first")
        return
    try:
        if f.size > engines.MAX_ENGINE_FILE_BYTES:
            raise MLAError(f"{f.name} is {f.size:,} bytes; the limit is {engines.MAX_ENGINE_FILE_BYTES:,}")
        result = engines.load_engine_file(
            f.getvalue(), f.name, model=ss.get("_eng_model"), gpu=ss.get("_eng_gpu"), tp=int(ss.get("_eng_tp") or 1),
            num_gpus=int(ss.get("_eng_num_gpus") or 1), ep=int(ss.get("_eng_ep") or 1),
            dp_attention=bool(ss.get("_eng_dp")), kv_dtype=ss.get("_eng_kv") or "auto")
        run_id = history.save_run(result, source="import", label=(ss.get("_eng_label") or f.name or "")[:200] or None)
    except MLAError as e:
        ss["_eng_message"] = ("error", f"{f.name}: {e}")
        return
    ss["_eng_message"] = ("success", f"Imported {f.name} ({engines.FORMAT_LABELS[result['format']]}, "
                                     f"{len(result['points'])} point(s)) as run #{run_id}.")
    ss["_eng_show"] = run_id


IMPORT_KEY = "_eng_import_open"
REPLAY_KEY = "_eng_replay_open"


def _defaults() -> None:
    ss = st.session_state
    v = values()
    ss.setdefault("_eng_model", v["model"] if v["model"] in model_ids() else "deepseek-v3")
    ss.setdefault("_eng_gpu", v["gpu"] if v["gpu"] in gpu_ids() else "h200")
    ss.setdefault("_eng_tp", 8)
    ss.setdefault("_eng_num_gpus", 8)
    ss.setdefault("_eng_ep", 1)
    ss.setdefault("_eng_kv", "auto")


def section(present: bool = False) -> None:
    ss = st.session_state
    st.subheader("Engine runs: predicted against measured")
    st.caption("Results of `vllm bench serve --save-result` (JSON), `python -m sglang.bench_serving --output-file` and "
               "`python -m sglang.bench_one_batch --result-filename` (JSONL), each point set beside the serving "
               "model's plan at the same model, GPU, split, lengths and batch (or concurrency). The model's times are "
               "lower bounds and its rates upper bounds: a measured figure that beats one is a modelling error. Or "
               f"from a shell: `{install.setup().cli} bench import FILE --model M --gpu G --tp N`.")
    # Drawn while open (its ten widgets were a quarter of the Benchmark page's server time when
    # closed); the settings keep their values meanwhile (persist_state).
    box = layout.lazy_expander("Import an engine result", IMPORT_KEY)
    if box.open:
        _defaults()
        with box:
            st.file_uploader("The engine's output file (at most 1 MiB here; larger ones with `bench import FILE`)",
                             type=["json", "jsonl"], key="_eng_upload")
            c1, c2, c3, c4 = st.columns(4)
            c1.selectbox("Model (vLLM files name it)", model_ids(), persist_state="session", key="_eng_model")
            c2.selectbox("GPU", gpu_ids(), persist_state="session", key="_eng_gpu")
            c3.number_input("GPUs (num_gpus)", 1, 4096, step=1, persist_state="session", key="_eng_num_gpus")
            c4.number_input("Tensor parallel (--tensor-parallel-size / --tp-size)", 1, 4096, step=1,
                            persist_state="session", key="_eng_tp")
            c1, c2, c3, c4 = st.columns(4)
            c1.number_input("Expert parallel (--ep-size)", 1, 4096, step=1, persist_state="session", key="_eng_ep")
            c2.toggle("DP attention (--enable-dp-attention)", persist_state="session", key="_eng_dp")
            c3.selectbox("kv_cache_dtype", engines.KV_DTYPES, persist_state="session", key="_eng_kv")
            c4.text_input("Label (optional)", persist_state="session", key="_eng_label", max_chars=200)
            st.button("Import", key="_eng_import", on_click=_import)
    msg = ss.pop("_eng_message", None)
    if msg:
        (st.error if msg[0] == "error" else st.success)(escape_md(msg[1], 400))
    try:
        runs = history.list_runs(kind="engine") if os.path.exists(history.default_path()) else []
    except MLAError as e:
        st.error(escape_md(f"History: {e}", 400))
        return
    if not runs:
        samples = install.setup().engine_samples
        st.info("No engine run imported yet" + (f" (samples of each format: {samples})." if samples else
                                                 ": import the file your engine's benchmark wrote."))
        return
    ids = [r["id"] for r in runs]
    labels = {r["id"]: f"#{r['id']} {r.get('label') or ''} ({r.get('device_name') or ''})" for r in runs}
    if ss.get("_eng_show") not in ids:
        ss["_eng_show"] = ids[0]
    run_id = st.selectbox("Engine run", ids, key="_eng_show", format_func=lambda i: labels.get(i, str(i)))
    link = ss.get(LINK_KEY)
    try:
        result = validate_result(history.get_run(int(run_id))["result"], kind="engine")
        cmp = engines.compare(result, link_bandwidth_Bps=link["link_bandwidth_Bps"] if link else None)
    except MLAError as e:
        st.error(escape_md(f"run {run_id}: {e}", 400))
        return
    s = cmp.settings
    st.caption(f"{escape_md(engines.FORMAT_LABELS[result['format']])}: **{escape_md(s['model'])}** on "
               f"{s['num_gpus']} x {escape_md(s['gpu'])}, tp {s['tp']}, ep {s['ep']}"
               + (", DP attention" if s["dp_attention"] else "") + f", kv_cache_dtype {escape_md(s['kv_dtype'])}"
               + (f"; communication at the measured {link['link_bandwidth_Bps'] / 1e9:,.1f} GB/s busbw"
                  if link else "; communication at the datasheet link figures") + ".")
    if not cmp.available:
        st.warning(escape_md("; ".join(cmp.notes), 500))
        return
    if cmp.any_modelling_error:
        st.error("A measured figure beats the model's bound (marked below): a modelling error to investigate, "
                 "not a fast machine.")
    rows = []
    for p in cmp.points:
        w = p.workload
        for m in p.metrics:
            rows.append({"batch": w["batch"], "batch from": w.get("batch_from", ""), "input": w["input_len"],
                         "output": w["output_len"], "metric": METRIC_LABELS.get(m.name, m.name),
                         "measured": _fmt(m.name, m.measured), "predicted": _fmt(m.name, m.predicted),
                         "error (%)": m.error_pct, "beats the bound": "MODELLING ERROR" if m.beats_bound else "",
                         "plan bound": p.bound or ""})
    st.dataframe(frame(rows), hide_index=True,
                 column_config={"error (%)": st.column_config.NumberColumn(format="%+.1f")})
    st.caption("error = (predicted - measured) / measured. " + " ".join(
        escape_md(n, 300) for n in dict.fromkeys([p.ttft_basis for p in cmp.points] + list(cmp.notes))))
    fig = plot.Figure()
    cats = [f"B={p.workload['batch']}<br>{p.workload['input_len']}/{p.workload['output_len']}" for p in cmp.points]
    for i, (which, label) in enumerate((("measured", "measured"), ("predicted", "predicted (bound)"))):
        fig.add_trace(plot.Bar(x=cats, y=[next(getattr(m, which) for m in p.metrics if m.name == "tpot_s")
                                        for p in cmp.points], name=label,
                             marker={"color": charts.SEQUENCE[i]}))
    charts.style(fig, title="TPOT per point: measured against the model's bound", x_title="batch, input/output tokens",
                 y_title="TPOT (s)", log_y=True, present=present)
    fig.update_layout(barmode="group")
    charts.show(fig, "engine-tpot", key="_eng_chart")
    replayed(result)


def replayed(result: dict) -> None:
    """The run replayed through the traffic simulation with its own settings and the estimate's
    step times (`mla_core.traffic.replay`): every figure the file has, measured against simulated.
    Drawn only when opened (a replay takes a second or two)."""
    from mla_core.traffic import replay

    box = layout.lazy_expander("Replayed through the traffic simulation (estimate step times): error per metric",
                               REPLAY_KEY)
    if not box.open:
        return
    with box:
        try:
            rep = replay(result)
        except MLAError as e:
            st.info(escape_md(f"No replay: {e}", 400))
            return
        st.caption(f"Step times: {escape_md(rep.step_times)}. " + " ".join(escape_md(n, 300) for n in rep.notes))
        st.dataframe(frame([{
            "clients": p.settings["max_concurrency"], "rate (req/s)": p.settings["rate"],
            "prompts": p.settings["num_prompts"], "metric": e["metric"], "measured": e["measured"],
            "simulated": e["simulated"], "error (%)": e["error_pct"],
        } for p in rep.points for e in p.errors]), hide_index=True,
            column_config={"error (%)": st.column_config.NumberColumn(format="%+.1f")})
        st.dataframe(frame([{"metric": k, "median |error| (%)": v} for k, v in rep.median_abs_error_pct.items()]),
                     hide_index=True, column_config={"median |error| (%)": st.column_config.NumberColumn(format="%.1f")})
