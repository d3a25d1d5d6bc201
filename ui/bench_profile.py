"""The Benchmark page's "Kernel profile" section: `bench --profile` for the sidebar's model at a
TP choice, run in the server's benchmark registry (ui.bench_runs: one run at a time, progress,
cancel, one-line errors), saved in the history as a run of kind "profile", and the stored
profiles listed. What it offers and lists is `mla_core.views.profile_section`; no arithmetic
here. torch is imported by the run's thread only."""
from __future__ import annotations

import streamlit as st

from mla_core import install
from mla_core.errors import MLAError
from mla_core.store import report
from mla_core.units import format_seconds
from mla_core.views import profile_section

from . import bench_runs, models, state
from .bench_common import POLL_S, api_busy, flush, say
from .text import escape_md, frame

ss = st.session_state
SECTION = "profile"


def take_finished(reg, owner: str) -> None:
    """This session's finished profile (saved by its thread): say how it ended."""
    finished = reg.take(bench_runs.profile_owner(owner))
    if finished is None:
        return
    if finished.state == "done":
        meta = (finished.result or {}).get("meta") or {}
        wall, points = meta.get("wall_s"), meta.get("points")
        head = f"Kernel profile finished in {format_seconds(wall) if wall else 'n/a'} ({points} points)"
        if finished.run_id:
            say(SECTION, "success", f"{head}; saved in the history as profile run #{finished.run_id} (listed below; "
                                    "the Roofline page draws its decode points, the Serving plan page can use it).")
        else:
            say(SECTION, "warning", f"{head}, but it could not be saved in the history: {finished.save_error}.")
    elif finished.state == "cancelled":
        say(SECTION, "info", finished.error or "kernel profile cancelled; its memory was freed")
    else:
        say(SECTION, "error", finished.error or "the kernel profile failed")


def _start(reg, owner: str, model, tp: int, families: tuple) -> None:
    try:
        label = " ".join(str(ss.get("_bench_prof_label") or "").split())[:200] or None
        reg.start(bench_runs.profile_owner(owner), bench_runs.ProfileRequest(model, tp, "auto", True, families),
                  label, session=state.session_id())
    except MLAError as e:
        say(SECTION, "error", str(e))


def _panel(reg, owner: str, polling: bool) -> None:
    """This session's profile's progress (or that it waits), re-drawn every POLL_S while polling."""
    key = bench_runs.profile_owner(owner)
    mine = reg.job(key)
    active = reg.active()
    if polling and ((mine is not None and mine.state in bench_runs.FINISHED) or (not active and not api_busy())):
        st.rerun(scope="app")  # the run ended: redraw the page (the message, the list, the button)
    if mine is None or mine.state not in bench_runs.ACTIVE:
        return
    running = next((j for j in active if j.state == "running"), None)
    if mine.state == "running":
        st.progress(report.progress_fraction(mine.done, mine.total),
                    text=f"Your kernel profile: {mine.done} of {mine.total} points done; now {mine.step}")
    elif running is not None and running.owner == owner:
        st.info("Your benchmark is running (above); your kernel profile starts when it finishes.")
    elif running is not None or api_busy():
        done = f", {running.done} of {running.total} done" if running is not None else ""
        st.info(f"A benchmark is running (started by another session){done}; your kernel profile will wait and "
                "starts when it finishes.")
    else:
        st.info("Your kernel profile is starting (loading torch and planning the shapes).")
    st.button("Cancel my kernel profile", key="_bench_prof_cancel", on_click=reg.cancel, args=(key,),
              help="The run stops at its next point and frees its memory; nothing is saved.")


def section(reg, owner: str, present: bool = False) -> None:
    st.subheader("Kernel profile: the model's own op shapes")
    model = models.resolve_model(state.values())[0]
    asked = ss.get("_bench_prof_tp") or state.values()["tp"]
    view = profile_section(model, int(asked), every_family=bool(ss.get("_bench_prof_all")), cli=install.setup().cli)
    if ss.get("_bench_prof_tp") != view.tp:
        ss["_bench_prof_tp"] = view.tp
    st.caption(f"`bench --profile` measures {escape_md(view.model, 100)}'s own op shapes on one GPU of a TP group "
               "with torch on this server's device (CUDA, else MPS, else the CPU), quick sizes: "
               f"{', '.join(view.families)}. The Serving plan page's estimate reads a saved profile first, the "
               "Roofline page draws its attention decode points.")
    here = install.setup()
    if not here.torch_installed:
        st.warning(f"torch is not installed in this copy, so no profile can be measured from here: "
                   f"`{here.torch_install}` adds it (then reload the page). The stored profiles below are listed "
                   "without it.")
    key = bench_runs.profile_owner(owner)
    mine = reg.job(key)
    mine_active = mine is not None and mine.state in bench_runs.ACTIVE
    active = reg.active()
    polling = mine_active or bool(active) or api_busy()
    c1, c2, c3 = st.columns([1, 2, 2])
    c1.selectbox("Tensor parallel (tp)", view.tp_choices, key="_bench_prof_tp",
                 help="The profile measures one GPU's share: query heads, MLP and expert widths / tp.")
    c2.toggle("Also the GEMMs and the MoE block (minutes on a CPU for a large model)", key="_bench_prof_all",
              help="Every op family of `bench --profile` but the collectives (torchrun only). A large model's "
                   "weights are gigabytes: filling them alone takes a CPU a minute or more.")
    c3.text_input("Label for the history (optional)", key="_bench_prof_label", max_chars=200)
    if view.tp_note:
        st.info(escape_md(view.tp_note, 400))
    others_first = any(not bench_runs.same_session(j.owner, owner) or j.owner == owner for j in active) or (
        api_busy() and not mine_active)
    st.button("Queue the kernel profile (it starts when the running benchmark finishes)" if others_first
              else "Run the kernel profile", key="_bench_prof_run", type="primary", on_click=_start,
              args=(reg, owner, model, view.tp, view.families), disabled=not here.torch_installed or mine_active)
    flush(SECTION)
    st.fragment(run_every=POLL_S if polling else None)(_panel)(reg, owner, polling)
    st.caption(f"The same from a shell, every op family: `{escape_md(view.command, 300)}`.")
    if view.error:
        st.error(escape_md(view.error, 600))
    if not view.rows:
        st.caption("No kernel profiles in the history yet.")
        return
    st.dataframe(frame([{
        "id": r.id, "model": r.model, "TP": r.tp, "device": r.device, "measured": r.created, "ops": r.n_ops,
        "label": r.label, "damaged": r.damaged or "",
    } for r in view.rows]), hide_index=True)
