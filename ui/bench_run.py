"""The benchmark page's "Measure this machine" section: set up (loads torch), settings sized to
the sidebar's model on the device (ui.bench_model), the memory check, the run button and the
live progress panel (ui.bench_runs)."""
from __future__ import annotations

import os

import streamlit as st

from mla_core.store import report, runlock
from mla_core.bench.config import DTYPE_CHOICES, KERNELS, MAX_BATCH, MAX_CONTEXT, MAX_HEADS, MAX_REPS, memory_check
from mla_core import install
from mla_core.errors import MLAError
from mla_core.units import format_bytes, format_seconds

from . import bench_model, bench_runs, measured, state
from .bench_common import MiB, POLL_S, UNSAVED, api_busy, flush, say
from .text import escape_md

ss = st.session_state


def take_finished(reg, owner: str) -> None:
    """A finished run of this session (saved by its thread): show it, say how it ended."""
    finished = reg.take(owner)
    if finished is not None:
        if finished.state == "done":
            key = f"run:{finished.run_id}" if finished.run_id else UNSAVED
            ss["bench_result"], ss["_bench_result_key"], ss["_bench_show"] = finished.result, key, key
            wall = finished.result.get("wall_s")
            if finished.run_id:
                say("run", "success", f"Benchmark finished in {format_seconds(wall) if wall else 'n/a'}; saved in the "
                                       f"history as run #{finished.run_id} and shown below (and on the Roofline page).")
            else:
                say("run", "warning", f"Benchmark finished, but it could not be saved in the history: "
                                       f"{finished.save_error}. It is shown below for this session only.")
        elif finished.state == "cancelled":
            say("run", "info", finished.error or "benchmark cancelled; its memory was freed")
        else:
            say("run", "error", finished.error or "the benchmark failed")


def _seed() -> None:
    """The sidebar model's shape at its batch and context for the chosen device and quick setting,
    scaled to fit (mla_core.bench.run.default_config; imports torch)."""
    cfg, error = bench_model.seed_or_error(ss.get("_bench_device", "auto"), bool(ss.get("_bench_quick", True)))
    if cfg is None:
        say("run", "error", error)
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
        say("run", "error", f"The benchmark needs torch ({e}); `{install.setup().torch_install}` adds it. "
                             "Imports, history and comparison work without it.")
        return
    except MLAError as e:
        say("run", "error", str(e))
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
    return cfg, est, free, memory_check(est, free)


def _start(reg, owner: str) -> None:
    try:
        cfg, est, free, check = _plan()
        if not check["fits"]:
            raise MLAError(f"this run needs about {format_bytes(est)}, more than {check['headroom']:.0%} of the "
                           f"device's free memory ({format_bytes(check['limit_bytes'])} of {format_bytes(free)}); "
                           "lower the batch, context or heads")
        label = " ".join(str(ss.get("_bench_label") or "").split())[:200] or None
        reg.start(owner, cfg, label, session=state.session_id())
    except MLAError as e:
        say("run", "error", str(e))


def _run_panel(reg, owner: str, polling: bool) -> None:
    """Progress of this session's run, or of another session's; re-drawn every POLL_S while polling."""
    mine = reg.job(owner)
    active = reg.active()
    own = [j for j in active if bench_runs.same_session(j.owner, owner)]  # this run, and this session's profile
    busy = api_busy() and not own  # another session's run
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
        elif running is not None and running.owner == bench_runs.profile_owner(owner):
            st.info("Your kernel profile is running (below); your benchmark starts when it finishes.")
        elif (running is not None and running.owner != owner) or (
                api_busy() and any(not bench_runs.same_session(j.owner, owner) for j in active)):
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
    elif (running is not None and not bench_runs.same_session(running.owner, owner)) or busy:
        done = f", {running.done} of {running.total} kernels done" if running is not None else ""
        st.info(f"A benchmark is running (started by another session){done}; yours will wait: one benchmark "
                "runs at a time on this server, so that two runs do not measure each other.")
        if running is not None:
            st.progress(report.progress_fraction(running.done, running.total))
    elif holder is not None:
        st.info(escape_md(f"A benchmark is running on this machine (pid {holder.get('pid')}, started "
                          f"{'from the command line' if holder.get('source') == 'cli' else 'by another server'} "
                          f"{holder.get('started', '')}); a run started here waits for it.", 400))


def _beside_the_button(reg, owner: str, polling: bool) -> None:
    """What a click leads to, drawn right under the button that was clicked: the section's
    messages (finished, failed, cancelled) and the live progress panel."""
    flush("run")
    st.fragment(run_every=POLL_S if polling else None)(_run_panel)(reg, owner, polling)


def measure(reg, owner: str, present: bool) -> None:
    """The section: setup or the settings and the run button, then (beside the button) the
    progress of any run and how the last one ended."""
    st.subheader("Measure this machine")
    active_now = reg.active()
    busy_now = api_busy()
    mine_now = reg.job(owner)
    mine_active = mine_now is not None and mine_now.state in bench_runs.ACTIVE
    polling = bool(active_now) or busy_now or mine_active

    if not ss.get("_bench_setup"):
        here = install.setup()
        if not here.torch_installed:
            st.warning(f"torch is not installed in this copy, so this machine cannot be measured from here: "
                       f"`{here.torch_install}` adds it (then reload the page). Imports, the history and "
                       "comparisons below work without it.")
        st.button("Set up a run on this machine", key="_bench_setup_button", on_click=_setup,
                  disabled=not here.torch_installed,
                  help="Loads torch (a few seconds the first time), lists this machine's devices and sizes the "
                       "defaults to the free memory. Nothing runs until you press Run.")
        _beside_the_button(reg, owner, polling)
        st.caption(f"Or measure from a shell: `{here.cli} bench --device cpu --quick --out result.json` "
                   "and import the file below.")
    else:
        devices = dict(ss.get("_bench_devices") or [("cpu", "CPU")])
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
                  else "Run the benchmark", key="_bench_run", type="primary", on_click=_start, args=(reg, owner),
                  disabled=not ready or mine_active)
        _beside_the_button(reg, owner, polling)

