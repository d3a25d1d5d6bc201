"""Benchmark: measure this machine with torch (mla_core.bench), import results made elsewhere,
compare devices and keep a history of runs.

torch is imported only inside the handlers that need it (setting up a run: listing devices and
sizing defaults; estimating; the run's thread). The history, imports, validation, comparison and
every chart work without it. Numbers come from the result dicts (mla_core.bench) and from
mla_core.bench.report (shares of the ceilings, model accuracy, roofs); this page formats them.
"""
import os
import sys
import uuid

import pandas as pd
import streamlit as st

from mla_core.bench import history, report, runlock
from mla_core.bench.config import DTYPE_CHOICES, KERNELS, MAX_BATCH, MAX_CONTEXT, MAX_HEADS, MAX_REPS
from mla_core.bench.schema import MAX_RESULT_BYTES, validate_result
from mla_core.errors import MLAError
from mla_core.units import format_bytes, format_count, format_intensity, format_rate, format_seconds
from ui import bench_model, bench_runs, charts, measured, state
from ui.charts import go  # plotly.graph_objects' spelling, built as plain dicts (ui/charts.py)
from ui.text import display_path, escape_md, hide_paths

GB, TFLOP, MiB = 1e9, 1e12, 1 << 20  # display units: B/s per GB/s, flop/s per TFLOP/s, bytes per MiB
POLL_S = 1.0  # the run panel refreshes this often while a benchmark waits or runs
UNSAVED = "unsaved"
MAX_MESSAGES = 10
H200_SCRIPT = "benchmarks/gpu_h200.sh"

v = state.values()
present = v["present"]
ss = st.session_state
reg = bench_runs.registry()
owner = ss.setdefault("_bench_owner", uuid.uuid4().hex)

st.title("Benchmark: measure MLA, MHA, GQA and MQA decode on a real device")
st.caption("Copy and read bandwidth, matmul throughput and one decode step of each attention variant at the same "
           "batch and context, measured with torch, beside the roofline time mla_core predicts from the measured "
           "ceilings. Rates in decimal units (GB/s = 10^9 B/s, TFLOP/s = 10^12 flop/s); memory in binary units "
           "(GiB = 2^30 B). Results from other machines can be imported and compared.")


# --- small helpers ------------------------------------------------------------------------------------
def _say(section: str, level: str, text: str) -> None:
    """Queue a message for a section (shown on the next run, once)."""
    ss.setdefault(f"_bench_msgs_{section}", []).append((level, text))


def _flush(section: str) -> None:
    for level, text in (ss.pop(f"_bench_msgs_{section}", None) or [])[:MAX_MESSAGES]:
        {"error": st.error, "warning": st.warning, "success": st.success}.get(level, st.info)(
            escape_md(hide_paths(text, history.default_path()), 600))


def _restore(key: str) -> None:
    """Streamlit drops a widget's key on pages that do not draw it: bring the kept value back."""
    if key not in ss and f"{key}__kept" in ss:
        ss[key] = ss[f"{key}__kept"]


def _keep(key: str) -> None:
    ss[f"{key}__kept"] = ss.get(key)


def _api_busy() -> bool:
    """The benchmark lock is held in this process. Only asked when mla_core.bench.run (and so
    torch) is already loaded: without it no run can be holding the lock."""
    run_module = sys.modules.get("mla_core.bench.run")
    return bool(run_module is not None and run_module.is_busy())


def _notices() -> None:
    """In-process notices are dropped here: the store keeps them for every session (_history_status)."""
    history.pop_notices()


def _ack(fn, ident: int) -> None:
    try:
        fn(ident)
    except MLAError as e:
        _say("history", "error", f"History: {e}")


def _history_status() -> None:
    """What the store must tell every session until someone acknowledges it: a corrupt store moved
    aside, a run cut short by a server that died; and that a read-only store saves nothing."""
    try:
        for n in history.notices():
            st.warning(escape_md(f"History: {n['text']}", 600))
            if n["id"] is not None:
                st.button("Understood", key=f"_bench_ack_notice_{n['id']}", on_click=_ack,
                          args=(history.acknowledge_notice, n["id"]))
        for r in history.interrupted_runs():
            st.warning(escape_md(f"A benchmark started {r['started_at']} ({r['source']}, pid {r['pid']}: {r['what']}) "
                                 "never finished: its process stopped during the run (a server that was killed or "
                                 "died). Nothing of it was saved.", 600))
            st.button("Understood", key=f"_bench_ack_run_{r['id']}", on_click=_ack,
                      args=(history.acknowledge_interrupted, r["id"]))
        if os.path.exists(history.default_path()) and not history.writable():
            st.warning(escape_md(f"The history store {history.default_path()} is read-only: its runs are shown, but "
                                 f"new runs and imports cannot be saved (set {history.ENV_VAR} to a writable path).",
                                 600))
    except MLAError as e:
        st.error(escape_md(f"History: {e}", 600))


@st.cache_data(show_spinner=False, max_entries=64)
def _sample(name: str, mtime: float):
    """(validated result, None) or (None, reason) for a committed sample (data/samples)."""
    data, error = measured.load_sample(name)
    if error:
        return None, error
    try:
        return validate_result(data), None
    except MLAError as e:
        return None, f"{name}: {e}"


def _sample_mtime(name: str) -> float:
    try:
        return os.path.getmtime(os.path.join(measured.SAMPLES_DIR, name))
    except OSError:
        return 0.0


def _load(key: str):
    """(result, None) or (None, reason) for a key: 'run:<id>', 'sample:<file>' or UNSAVED."""
    if key == UNSAVED:
        return ss.get("bench_result"), None
    kind, _, ref = key.partition(":")
    if kind == "sample":
        return _sample(ref, _sample_mtime(ref))
    try:
        run = history.get_run(int(ref))
        return validate_result(run["result"]), None
    except (MLAError, ValueError) as e:
        return None, f"run {ref}: {e}"
    finally:
        _notices()


def _set_shown(key: str) -> None:
    """Show `key` below and hand it to the Roofline page (st.session_state['bench_result'])."""
    result, error = _load(key)
    if result is None:
        _say("results", "error", error or "that result could not be read")
        return
    ss["bench_result"], ss["_bench_result_key"] = result, key
    ss["_bench_show"] = key


# --- a finished run of this session: save (done by the run's thread), show ---------------------------
finished = reg.take(owner)
if finished is not None:
    if finished.state == "done":
        key = f"run:{finished.run_id}" if finished.run_id else UNSAVED
        ss["bench_result"], ss["_bench_result_key"], ss["_bench_show"] = finished.result, key, key
        wall = finished.result.get("wall_s")
        if finished.run_id:
            _say("run", "success", f"Benchmark finished in {format_seconds(wall) if wall else 'n/a'}; saved in the "
                                   f"history as run #{finished.run_id} and shown below (and on the Roofline page).")
        else:
            _say("run", "warning", f"Benchmark finished, but it could not be saved in the history: "
                                   f"{finished.save_error}. It is shown below for this session only.")
    elif finished.state == "cancelled":
        _say("run", "info", finished.error or "benchmark cancelled; its memory was freed")
    else:
        _say("run", "error", finished.error or "the benchmark failed")


# --- measure this machine ------------------------------------------------------------------------------
def _seed() -> None:
    """The sidebar model's shape at its batch and context for the chosen device and quick setting,
    scaled to fit (mla_core.bench.run.default_config; imports torch)."""
    cfg, error = bench_model.seed_or_error(ss.get("_bench_device", "auto"), bool(ss.get("_bench_quick", True)))
    if cfg is None:
        _say("run", "error", error)
        return
    ss.update(_bench_batch=cfg.batches[0], _bench_context=cfg.contexts[0], _bench_heads=cfg.heads,
              _bench_gqa=cfg.gqa_groups, _bench_kernels=list(cfg.kernels), _bench_reps=cfg.reps,
              _bench_stream_mib=max(1, cfg.stream_bytes // MiB), _bench_matmul_n=cfg.matmul_n,
              _bench_budget_s=float(cfg.budget_s))


def _setup() -> None:
    """Load torch, list this machine's devices and fill the settings with their defaults."""
    try:
        from mla_core.bench import device as bench_device
        devices = [(kind, bench_device.device_info(kind)["name"]) for kind in bench_device.available_devices()]
    except ImportError as e:
        _say("run", "error", f"The benchmark needs torch ({e}); pip install -r requirements.txt. "
                             "Imports, history and comparison work without it.")
        return
    except MLAError as e:
        _say("run", "error", str(e))
        return
    ss["_bench_devices"] = devices
    ss.update(_bench_setup=True, _bench_device=devices[0][0], _bench_quick=True, _bench_dtype="auto",
              _bench_label="")
    _seed()


def _widget_config() -> dict:
    """The run the settings ask for, as BenchConfig fields laid over default_config."""
    return {"device": ss["_bench_device"], "quick": bool(ss["_bench_quick"]), "dtype": ss["_bench_dtype"],
            "batches": [int(ss["_bench_batch"])], "contexts": [int(ss["_bench_context"])],
            "heads": int(ss["_bench_heads"]), "gqa_groups": int(ss["_bench_gqa"]),
            "kernels": list(ss["_bench_kernels"]), "reps": int(ss["_bench_reps"]),
            "stream_bytes": int(ss["_bench_stream_mib"]) * MiB, "matmul_n": int(ss["_bench_matmul_n"]),
            "budget_s": float(ss["_bench_budget_s"]),
            **bench_model.extra_fields(int(ss["_bench_batch"]), int(ss["_bench_context"]), int(ss["_bench_heads"]),
                                       int(ss["_bench_gqa"]))}


def _plan():
    """(config, estimated peak bytes, free bytes, memory check) of the settings; raises MLAError."""
    from mla_core.bench import device as bench_device
    from mla_core.bench import run as bench_run

    cfg = bench_run.resolve_config(_widget_config())
    est = bench_run.estimate_bytes(cfg)
    free = bench_device.device_info(cfg.device, cfg.dtype)["free_memory_bytes"]
    return cfg, est, free, report.memory_check(est, free)


def _start() -> None:
    try:
        cfg, est, free, check = _plan()
        if not check["fits"]:
            raise MLAError(f"this run needs about {format_bytes(est)}, more than {check['headroom']:.0%} of the "
                           f"device's free memory ({format_bytes(check['limit_bytes'])} of {format_bytes(free)}); "
                           "lower the batch, context or heads")
        label = " ".join(str(ss.get("_bench_label") or "").split())[:200] or None
        reg.start(owner, cfg, label, session=state.session_id())
    except MLAError as e:
        _say("run", "error", str(e))


def _run_panel(polling: bool) -> None:
    """Progress of this session's run, or of another session's; re-drawn every POLL_S while polling."""
    mine = reg.job(owner)
    active = reg.active()
    busy = _api_busy() and not (mine is not None and mine.state in bench_runs.ACTIVE)  # another session's run
    holder = runlock.holder()
    if holder is not None and holder.get("pid") == os.getpid():
        holder = None  # this server's own run (a session's, shown above)
    if polling and ((mine is not None and mine.state in bench_runs.FINISHED) or (not active and not busy)):
        st.rerun(scope="app")  # a run ended: redraw the page (results, history, the run button)
    running = next((j for j in active if j.state == "running"), None)
    if mine is not None and mine.state in bench_runs.ACTIVE:
        if mine.state == "running":
            st.progress(report.progress_fraction(mine.done, mine.total),
                        text=f"Your benchmark: {mine.done} of {mine.total} kernels done; now {mine.step}")
        elif (running is not None and running.owner != owner) or (
                _api_busy() and any(j.owner != owner for j in active)):
            other = f", {running.done} of {running.total} kernels done" if running is not None else ""
            st.info(f"A benchmark is running (started by another session){other}; yours will wait and starts "
                    "when it finishes.")
        elif holder is not None:
            st.info(escape_md(f"A benchmark is running on this machine (pid {holder.get('pid')}, started "
                              f"{'from the command line' if holder.get('source') == 'cli' else 'by another server'} "
                              f"{holder.get('started', '')}); yours will wait and starts when it finishes.", 400))
        else:
            st.info("Your benchmark is starting (loading torch and sizing the run).")
        st.button("Cancel my benchmark", key="_bench_cancel", on_click=reg.cancel, args=(owner,),
                  help="The run stops at its next repetition and frees its memory (CUDA/MPS cache included).")
    elif running is not None or busy:
        done = f", {running.done} of {running.total} kernels done" if running is not None else ""
        st.info(f"A benchmark is running (started by another session){done}; yours will wait: one benchmark "
                "runs at a time on this server, so that two runs do not measure each other.")
        if running is not None:
            st.progress(report.progress_fraction(running.done, running.total))
    elif holder is not None:
        st.info(escape_md(f"A benchmark is running on this machine (pid {holder.get('pid')}, started "
                          f"{'from the command line' if holder.get('source') == 'cli' else 'by another server'} "
                          f"{holder.get('started', '')}); a run started here waits for it.", 400))


st.subheader("Measure this machine")
_flush("run")
active_now = reg.active()
busy_now = _api_busy()
mine_now = reg.job(owner)
mine_active = mine_now is not None and mine_now.state in bench_runs.ACTIVE
polling = bool(active_now) or busy_now or mine_active
st.fragment(run_every=POLL_S if polling else None)(_run_panel)(polling)

if not ss.get("_bench_setup"):
    st.button("Set up a run on this machine", key="_bench_setup_button", on_click=_setup,
              help="Loads torch (a few seconds the first time), lists this machine's devices and sizes the "
                   "defaults to the free memory. Nothing runs until you press Run.")
    st.caption("Or measure from a shell: `.venv/bin/python -m mla_core bench --device cpu --quick --out result.json` "
               "and import the file below.")
else:
    devices = dict(ss.get("_bench_devices") or [("cpu", "CPU")])
    for key in ("_bench_device", "_bench_dtype", "_bench_quick", "_bench_batch", "_bench_context", "_bench_heads",
                "_bench_gqa", "_bench_kernels", "_bench_reps", "_bench_stream_mib", "_bench_matmul_n",
                "_bench_budget_s", "_bench_label"):
        _restore(key)
    if ss.get("_bench_device") not in devices:
        ss["_bench_device"] = next(iter(devices))
        _seed()
    elif bench_model.needs_seed():  # the sidebar's model, batch or context changed
        _seed()
    with st.expander("Run settings", expanded=not present):
        c1, c2, c3 = st.columns(3)
        c1.selectbox("Device", list(devices), key="_bench_device", on_change=_seed,
                     format_func=lambda k: f"{k}: {measured.clean_text(devices.get(k, k), 50)}")
        c2.selectbox("dtype", DTYPE_CHOICES, key="_bench_dtype",
                     help="auto: bf16 on CUDA/ROCm (fp16 without bf16), fp16 on MPS, fp32 on CPUs.")
        c3.toggle("Quick (smaller shapes, fewer repetitions)", key="_bench_quick", on_change=_seed)
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("Batch B (sequences)", 1, MAX_BATCH, step=1, key="_bench_batch")
        c2.number_input("Context T (tokens per sequence)", 1, MAX_CONTEXT, step=1024, key="_bench_context")
        c3.number_input("Query heads n_h", 1, MAX_HEADS, step=1, key="_bench_heads")
        gqa_choices = report.gqa_group_choices(int(ss["_bench_heads"]))
        if ss.get("_bench_gqa") not in gqa_choices:
            ss["_bench_gqa"] = report.default_gqa_groups(int(ss["_bench_heads"]))
        c4.selectbox("GQA KV heads (gqa_groups)", gqa_choices, key="_bench_gqa",
                     help="n_kv of gqa_decode: a divisor of the query heads.")
        st.multiselect("Kernels", KERNELS, key="_bench_kernels",
                       help="Predicted times need the read (or copy) and matmul ceilings of the same run.")
        c1, c2, c3, c4 = st.columns(4)
        c1.number_input("Repetitions at most", 1, MAX_REPS, step=1, key="_bench_reps")
        c2.number_input("Bandwidth buffer (MiB)", 1, 1 << 20, step=64, key="_bench_stream_mib",
                        help="One copy/read buffer; far larger than the last-level cache measures memory, not cache.")
        c3.number_input("Matmul n (n x n x n)", 1, 1 << 16, step=256, key="_bench_matmul_n")
        c4.number_input("Time budget per kernel (s)", 0.01, 3600.0, step=0.5, key="_bench_budget_s")
        st.text_input("Label for the history (optional)", key="_bench_label", max_chars=200)
        st.caption("Defaults: the sidebar model's attention shape (n_h, KV heads, d_h, d_c, d_r, d_nope, d_v) at the "
                   "sidebar's batch and context, scaled (batch, then context) by mla_core.bench.default_config to half "
                   "of the device's free memory and, on a CPU, a time budget.")
    bench_model.show()
    for key in ("_bench_device", "_bench_dtype", "_bench_quick", "_bench_batch", "_bench_context", "_bench_heads",
                "_bench_gqa", "_bench_kernels", "_bench_reps", "_bench_stream_mib", "_bench_matmul_n",
                "_bench_budget_s", "_bench_label"):
        _keep(key)
    ready = False
    try:
        cfg, est, free, check = _plan()
        ready = check["fits"]
        if free is None:
            st.caption(f"Peak device memory of this run: about {format_bytes(est)} (free memory unknown).")
        elif check["fits"]:
            st.caption(f"Peak device memory of this run: about {format_bytes(est)} ({est:,} B); the limit is "
                       f"{format_bytes(check['limit_bytes'])}, {check['headroom']:.0%} of the {format_bytes(free)} "
                       "free now. The benchmark refuses anything larger before allocating.")
        else:
            st.error(f"This run needs about {format_bytes(est)}, more than {check['headroom']:.0%} of the device's "
                     f"free memory ({format_bytes(check['limit_bytes'])} of {format_bytes(free)}): lower the batch, "
                     "context or heads, or the bandwidth buffer.")
    except MLAError as e:
        st.error(escape_md(str(e), 400))
    if ss.get("_bench_device") == "cpu":
        st.caption("On a CPU the run shares the cores with this server's other work (pages other sessions load "
                   "meanwhile are not counted in the result's 'other processes' figure); the command line on a quiet "
                   "machine gives the steadiest CPU numbers.")
    others_first = any(j.owner != owner for j in active_now) or (busy_now and not mine_active)
    st.button("Queue the benchmark (it starts when the running one finishes)" if others_first
              else "Run the benchmark", key="_bench_run", type="primary", on_click=_start,
              disabled=not ready or mine_active)


# --- import a result made elsewhere -----------------------------------------------------------------
def _on_upload() -> None:
    f = ss.get("_bench_upload")
    if f is None:
        return
    name = measured.clean_text(f.name, 80) or "the file"
    try:
        if f.size > MAX_RESULT_BYTES:  # refused before reading it
            raise MLAError(f"result JSON is {f.size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
        data = validate_result(f.getvalue())
        label = " ".join(str(ss.get("_bench_import_label") or "").split())[:200] or name[:200]
        run_id = history.save_run(data, source="import", label=label)
    except MLAError as e:
        _say("import", "error", f"{name}: {e}")
        return
    finally:
        _notices()
    key = f"run:{run_id}"
    _say("import", "success", f"Imported {name} ({measured.device_name(data)}) as run #{run_id}; added to the "
                              "comparison below.")
    _restore("_bench_compare")
    chosen = [k for k in (ss.get("_bench_compare") or []) if k != key]
    if not chosen and ss.get("_bench_show"):
        chosen = [ss["_bench_show"]]
    ss["_bench_compare"] = [*chosen, key]
    _keep("_bench_compare")


with st.expander("Import a result from another machine", expanded=not present):
    st.file_uploader("A result JSON written by `python -m mla_core bench --out FILE.json` (at most 1 MiB; Streamlit "
                     "writes its limit as 1MB, meaning 2^20 bytes)", type=["json"], key="_bench_upload",
                     on_change=_on_upload)
    st.text_input("Label for the import (optional; default: the file name)", key="_bench_import_label",
                  max_chars=200)
    st.caption(f"No H200 measurement is committed yet: `bash {H200_SCRIPT}` on an H200 writes one "
               "(out/h200-bench-<time>.json, checked against the schema); import it here to set it beside this "
               "machine. Files are checked against mla_core/bench/result.schema.json: at most 1 MiB, no negative, "
               "zero or non-finite times.")
_flush("import")

# --- the runs there are: history and committed samples ----------------------------------------------------
try:
    # Reading an empty history creates no file: the store is made by the first save.
    runs = history.list_runs(kind="kernels") if os.path.exists(history.default_path()) else []
except MLAError as e:
    _say("history", "error", f"History: {e}")
    runs = []
_notices()
samples = measured.sample_files()
labels: dict[str, str] = {}
short: dict[str, str] = {}
untrusted: set[str] = set()  # disturbed or damaged runs: out of comparisons unless asked
for r in runs:
    key = f"run:{r['id']}"
    device = measured.clean_text(r.get("device_name") or "unknown device", 40)
    extra = f", {measured.clean_text(r['label'], 40)}" if r.get("label") else ""
    flag = bench_runs.run_flag(r)
    labels[key] = f"#{r['id']} {device} ({r['source']}{extra}; {str(r.get('created') or r['saved_at'])[:16]}){flag}"
    # The legend names a run by its label when it has one: two runs of one device stay apart.
    short[key] = (f"#{r['id']} {measured.clean_text(r['label'], 40)}" if r.get("label") else
                  f"#{r['id']} {device}") + flag
    if r.get("disturbed") or r.get("damaged"):
        untrusted.add(key)
for name in samples:
    labels[f"sample:{name}"] = f"sample {measured.clean_text(name, 60)}"
    short[f"sample:{name}"] = f"sample {measured.clean_text(name, 40)}"
if ss.get("_bench_result_key") == UNSAVED and ss.get("bench_result") is not None:
    labels[UNSAVED] = short[UNSAVED] = "this session's run (not saved)"
options = list(labels)

# --- the shown result --------------------------------------------------------------------------------------
st.subheader("Results")
_flush("results")


def _on_show() -> None:
    _keep("_bench_show")
    if ss.get("_bench_show"):
        _set_shown(ss["_bench_show"])


_restore("_bench_show")
if ss.get("_bench_show") not in options:
    fallback = ss.get("_bench_result_key")
    ss["_bench_show"] = fallback if fallback in options else (options[0] if options else None)
if not options:
    st.info("Nothing to show yet: run the benchmark above, or import a result.")
    shown = None
else:
    st.selectbox("Show", options, key="_bench_show", format_func=lambda k: labels.get(k, k), on_change=_on_show,
                 help="Runs in the history (newest first) and the committed samples (data/samples). The one you pick "
                      "is also drawn on the Roofline page.")
    _keep("_bench_show")
    shown, shown_error = _load(ss["_bench_show"])
    if shown is None:
        st.error(escape_md(shown_error or "that result could not be read", 400))

def _render_shown(shown: dict) -> None:
    dev = shown["device"]
    facts = [f"{dev['kind']}" + (f"/{dev['backend']}" if dev.get("backend") not in (None, dev["kind"]) else ""),
             f"torch {dev['torch_version']}", dev["dtype"]]
    if dev.get("threads"):
        facts.append(f"{dev['threads']} threads")
    if dev.get("free_memory_bytes"):
        facts.append(f"{format_bytes(dev['free_memory_bytes'])} free before the run")
    if dev.get("other_cpus_busy"):
        facts.append(f"other processes kept {dev['other_cpus_busy']:.2f} CPUs busy")
    st.caption(f"**{escape_md(dev['name'])}** ({escape_md(', '.join(facts), 400)}); measured "
               f"{escape_md(shown.get('created', ''))}" + (f" in {format_seconds(shown['wall_s'])}"
                                                           if shown.get("wall_s") else "") + ".")
    bench_model.show_result(shown)
    reasons = bench_runs.disturbed_reasons(shown)
    if reasons:
        st.warning(escape_md("This run was disturbed: " + "; ".join(reasons) + ". Its numbers understate the "
                             "machine; comparisons leave it out unless asked.", 800))
    cs = report.ceiling_summary(shown)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Copy bandwidth (measured)", format_rate(cs["copy_GBps"] * GB, "B/s") if cs["copy_GBps"] else "n/a",
              help="dst.copy_(src) on buffers far larger than the last-level cache; counts 2N bytes (read + write).")
    m2.metric("Read bandwidth (measured)", format_rate(cs["read_GBps"] * GB, "B/s") if cs["read_GBps"] else "n/a",
              help="src.sum(): N bytes read. The predictions use this figure (copy's when read was not run).")
    m3.metric("Matmul (measured)", format_rate(cs["matmul_TFLOPs"] * TFLOP, "FLOP/s") if cs["matmul_TFLOPs"]
              else "n/a", help=f"n x n x n at {dev['dtype']}, 2 n^3 flops.")
    m4.metric("Ridge point (measured)", format_intensity(cs["ridge_flop_per_byte"]) if cs["ridge_flop_per_byte"]
              else "n/a", help="matmul throughput / bandwidth: below it a kernel is memory bound on this device.")
    if cs["datasheet"]:
        d1, d2, d3, d4 = st.columns(4)
        d1.metric(f"Datasheet bandwidth ({cs['preset']})", format_rate(cs["peak_bandwidth_GBps"] * GB, "B/s"),
                  help=cs["peak_source"])
        d2.metric("Datasheet peak (dense bf16)", format_rate(cs["peak_TFLOPs"] * TFLOP, "FLOP/s"),
                  help=cs["peak_source"])
        d3.metric("Measured / datasheet bandwidth", f"{cs['bandwidth_share_of_peak']:.0%}"
                  if cs["bandwidth_share_of_peak"] else "n/a")
        d4.metric("Measured / datasheet matmul", f"{cs['compute_share_of_peak']:.0%}"
                  if cs["compute_share_of_peak"] else "n/a")
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
    rows = report.kernel_rows(shown)
    table = pd.DataFrame([{
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
    csv = pd.DataFrame([{k: r[k] for k in (
        "kernel", "dtype", "shape_text", "median_s", "min_s", "reps", "bytes", "flops", "intensity_flop_per_byte",
        "achieved_GBps", "achieved_TFLOPs", "predicted_s", "predicted_bound", "predicted_TFLOPs", "model_accuracy",
        "bandwidth_share", "compute_share", "max_rel_err", "rel_err_tolerance")} for r in rows]).to_csv(index=False)
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

    # Roofline of the measured device: its roof from the measured ceilings, the measured kernels,
    # and where the prediction put each one.
    pts, problems = measured.measured_points(shown)
    decode = [r for r in rows if r["is_decode"] and r["intensity_flop_per_byte"]]
    if pts and cs["bandwidth_GBps"] and cs["matmul_TFLOPs"]:
        intens = [p.intensity_flop_per_byte for p in pts]
        fig = go.Figure()
        try:
            mroof = report.roof(cs["bandwidth_GBps"], cs["matmul_TFLOPs"], intens)
            fig.add_trace(go.Scatter(
                x=mroof["x"], y=mroof["y_TFLOPs"], mode="lines", name="measured roof (read bandwidth, matmul)",
                line={"color": "#777777", "dash": "dot", "width": 3 if present else 2},
                hovertemplate=(f"measured: {format_rate(cs['bandwidth_GBps'] * GB, 'B/s')}, "
                               f"{format_rate(cs['matmul_TFLOPs'] * TFLOP, 'FLOP/s')}; ridge "
                               f"{format_intensity(mroof['ridge'])}<extra></extra>")))
            if cs["datasheet"]:
                droof = report.roof(cs["peak_bandwidth_GBps"], cs["peak_TFLOPs"], intens)
                fig.add_trace(go.Scatter(
                    x=droof["x"], y=droof["y_TFLOPs"], mode="lines", name=f"datasheet roof ({cs['preset']})",
                    line={"color": "#777777", "width": 3 if present else 2},
                    hovertemplate=(f"datasheet: {format_rate(cs['peak_bandwidth_GBps'] * GB, 'B/s')}, "
                                   f"{format_rate(cs['peak_TFLOPs'] * TFLOP, 'FLOP/s')}<extra></extra>")))
        except MLAError as e:
            st.warning(escape_md(str(e), 300))
        for label in dict.fromkeys(p.label for p in pts):
            mine = [p for p in pts if p.label == label]
            fig.add_trace(go.Scatter(
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
                fig.add_trace(go.Scatter(
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
                     log_y=True, present=present)
        fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
                          margin={"b": (45 if present else 30) * 3 + 70})
        charts.show(fig, "benchmark-roofline", key="_bench_roofline_chart")
        st.caption("Crosses: measured (x = counted flops / bytes, y = achieved TFLOP/s at the median time). Open "
                   "circles: the roofline of this run's own measured ceilings, where the model puts each kernel. "
                   "The Roofline page draws the same crosses beside its datasheet predictions.")
    elif problems:
        st.warning(escape_md(f"No decode kernel to draw: {problems[0]}", 300))
    if decode and any(r["predicted_s"] for r in decode):
        cats = [measured.DECODE_KERNELS.get(r["kernel"], r["kernel"]) for r in decode]
        if len(set(cats)) < len(cats):  # a sweep: several shapes per kernel
            cats = [f"{c}<br>{r['shape_text']}" for c, r in zip(cats, decode)]
        fig2 = go.Figure()
        for name, key, color in (("measured (median)", "median_s", charts.color_for("measured")),
                                 ("predicted (measured ceilings)", "predicted_s", charts.color_for("model"))):
            fig2.add_trace(go.Bar(
                x=cats, y=[r[key] * 1e3 if r[key] else None for r in decode], name=name, marker={"color": color},
                customdata=[[format_seconds(r[key]) if r[key] else "n/a", r["shape_text"]] for r in decode],
                hovertemplate=f"{name}<br>%{{x}} (%{{customdata[1]}}): %{{customdata[0]}}<extra></extra>"))
        charts.style(fig2, title=f"Decode step: measured against predicted{bench_runs.run_flag(shown)}",
                     x_title="kernel (shape)",
                     y_title="time (ms)", log_y=True, present=present, height=None if present else 400)
        fig2.update_layout(barmode="group", legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
                           margin={"b": 110})
        charts.show(fig2, "benchmark-predicted-vs-measured", key="_bench_pred_chart")

if shown is not None:
    try:
        _render_shown(shown)
    except (MLAError, ArithmeticError, ValueError, TypeError, KeyError) as e:
        # A stored run that cannot be drawn must not take the page (and its History) down.
        st.error(escape_md(f"This run cannot be shown ({type(e).__name__}: {e}); pick another, or delete it below.", 400))


# --- compare devices -----------------------------------------------------------------------------------------
st.subheader("Compare devices")
_restore("_bench_compare")
_restore("_bench_cmp_disturbed")
cmp_options = [k for k in options if k not in untrusted or ss.get("_bench_cmp_disturbed")]
ss["_bench_compare"] = [k for k in (ss.get("_bench_compare") or []) if k in cmp_options]
with st.expander("Comparison settings", expanded=not present):
    st.toggle(f"Include disturbed runs ({len(untrusted)})", key="_bench_cmp_disturbed",
              help="Runs that other work disturbed (or whose stored copy is damaged) are left out of comparisons "
                   "unless this is on.")
    st.multiselect("Runs to compare (history and samples)", cmp_options, key="_bench_compare",
                   format_func=lambda k: labels.get(k, k),
                   help="e.g. this machine's run and an imported H200 result (made by benchmarks/gpu_h200.sh).")
    c1, c2 = st.columns(2)
    c1.toggle("Match kernels by shape too", key="_bench_cmp_by_shape",
              help="Off: one row per kernel, each run's first shape (devices usually run different shapes). "
                   "On: one row per kernel and shape; runs without that shape leave the cell empty.")
    c2.radio("Chart", ["achieved GB/s", "achieved TFLOP/s", "median time"], key="_bench_cmp_metric", horizontal=True)
_keep("_bench_compare")
_keep("_bench_cmp_disturbed")
chosen = ss["_bench_compare"]
if len(chosen) < 2:
    st.info(f"Pick two or more runs to set them side by side: e.g. a committed sample and a result imported from a "
            f"GPU (`bash {H200_SCRIPT}` makes one on an H200).")
else:
    named, head = [], []
    for key in chosen:
        result, error = _load(key)
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
        st.dataframe(pd.DataFrame(cmp_table), hide_index=True)
        st.download_button("Download the comparison (CSV)", pd.DataFrame([
            {"kernel": row["kernel"], "match_shape": row["shape_text"], "run": name, **(row["runs"][name] or {})}
            for row in cmp_rows for name, _ in named]).to_csv(index=False), file_name="benchmark_comparison.csv",
            mime="text/csv", key="_bench_cmp_csv")
        metric_key, y_title, scale = {
            "achieved GB/s": ("achieved_GBps", "achieved bandwidth (GB/s)", 1),
            "achieved TFLOP/s": ("achieved_TFLOPs", "achieved compute (TFLOP/s)", 1),
            "median time": ("median_s", "median time (ms)", 1e3),  # s -> ms
        }[ss.get("_bench_cmp_metric") or "achieved GB/s"]
        fig3 = go.Figure()
        cats = [row["kernel"] + (f"<br>{row['shape_text']}" if by_shape else "") for row in cmp_rows]
        for i, (name, _) in enumerate(named):
            cells = [row["runs"][name] for row in cmp_rows]
            fig3.add_trace(go.Bar(
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
        st.dataframe(pd.DataFrame(head), hide_index=True)
        st.caption("Each device ran its own shapes (see the shape columns): compare achieved rates across devices; "
                   "compare times only between equal shapes ('Match kernels by shape too').")

# --- history -------------------------------------------------------------------------------------------------
st.subheader("History")
st.caption(f"Every run and import is saved in one SQLite transaction in {escape_md(display_path(history.default_path()), 300)} "
           f"(set {history.ENV_VAR} to keep it elsewhere). A damaged file is moved aside, never deleted.")
_flush("history")
_history_status()


def _selected() -> list[int]:
    return [i for i in (ss.get("_bench_selected") or []) if isinstance(i, int)]


def _show_selected() -> None:
    ids = _selected()
    if ids:
        _set_shown(f"run:{ids[0]}")
        _keep("_bench_show")


def _compare_selected() -> None:
    ss["_bench_compare"] = [f"run:{i}" for i in _selected()]
    _keep("_bench_compare")


def _ask_delete() -> None:
    ss["_bench_confirm_delete"] = _selected()


def _delete() -> None:
    ids = ss.pop("_bench_confirm_delete", None) or []
    gone = []
    for i in ids:
        try:
            if history.delete_run(i):
                gone.append(i)
        except MLAError as e:
            _say("history", "error", f"History: {e}")
    _notices()
    keys = {f"run:{i}" for i in gone}
    if ss.get("_bench_result_key") in keys:
        ss.pop("bench_result", None)
        ss.pop("_bench_result_key", None)
    ss["_bench_selected"] = [i for i in _selected() if i not in gone]
    if gone:
        _say("history", "success", f"Deleted run{'s' if len(gone) > 1 else ''} "
                                   + ", ".join(f"#{i}" for i in gone) + ".")


def _export(fn, ids):
    def make():
        try:
            return fn(ids)
        except MLAError as e:
            return f"error: {e}\n"
    return make


if not runs:
    st.info("No runs saved yet: run the benchmark or import a result.")
else:
    st.dataframe(pd.DataFrame([{
        "id": r["id"], "saved (UTC)": str(r["saved_at"])[:19], "measured (UTC)": str(r.get("created") or "")[:19],
        "device": measured.clean_text(r.get("device_name") or "", 60), "kind": r.get("device_kind") or "",
        "dtype": r.get("dtype") or "", "source": r["source"], "label": measured.clean_text(r.get("label") or "", 80),
        "results": r["n_results"],
        "disturbed": {None: "", False: "no", True: "yes: " + "; ".join(r.get("disturbed_reasons") or [])}[
            r.get("disturbed")],
        "damaged": r.get("damaged") or "",
    } for r in runs]), hide_index=True)
    ids = [r["id"] for r in runs]
    ss["_bench_selected"] = [i for i in _selected() if i in ids]
    st.multiselect("Select runs", ids, key="_bench_selected", format_func=lambda i: labels.get(f"run:{i}", str(i)))
    sel = _selected()
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.button("Show", key="_bench_show_selected", on_click=_show_selected, disabled=not sel,
              help="Show the first selected run above and on the Roofline page.")
    c2.button("Compare", key="_bench_compare_selected", on_click=_compare_selected, disabled=len(sel) < 2)
    c3.download_button("Export JSON", _export(history.export_json, sel) if sel else "", disabled=not sel,
                       file_name="mla-benchmark-runs.json", mime="application/json", key="_bench_export_json")
    c4.download_button("Export CSV", _export(history.export_csv, sel) if sel else "", disabled=not sel,
                       file_name="mla-benchmark-runs.csv", mime="text/csv", key="_bench_export_csv")
    c5.button("Delete…", key="_bench_delete", on_click=_ask_delete, disabled=not sel)
    pending = [i for i in (ss.get("_bench_confirm_delete") or []) if i in ids]
    if pending:
        st.warning(f"Delete run{'s' if len(pending) > 1 else ''} {', '.join(f'#{i}' for i in pending)} from the "
                   "history? This cannot be undone (export them first to keep a copy).")
        d1, d2, _ = st.columns([1, 1, 3])
        d1.button("Yes, delete", key="_bench_delete_yes", on_click=_delete, type="primary")
        d2.button("Keep them", key="_bench_delete_no", on_click=lambda: ss.pop("_bench_confirm_delete", None))

# --- measured beyond one device: collectives and imported engine runs (ui/collectives.py, ui/engine_runs.py) ---
from ui import collectives as ui_collectives, engine_runs as ui_engine_runs  # noqa: E402

ui_collectives.section(present)
ui_engine_runs.section(present)
