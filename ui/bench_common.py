"""The benchmark page's shared pieces: messages per section, the store's standing notices, loading
a result by its key (history run, committed sample, this session's unsaved run), and the
catalogue of runs. No torch here: mla_core.bench.run (and torch) is looked at only when loaded."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import streamlit as st

from mla_core.store import history
from mla_core.store.schema import validate_result
from mla_core.errors import MLAError

from . import bench_runs, measured
from .text import escape_md, hide_paths

GB, TFLOP, MiB = 1e9, 1e12, 1 << 20  # display units: B/s per GB/s, flop/s per TFLOP/s, bytes per MiB
POLL_S = 1.0  # the run panel refreshes this often while a benchmark waits or runs
UNSAVED = "unsaved"
MAX_MESSAGES = 10
ss = st.session_state


def say(section: str, level: str, text: str) -> None:
    """Queue a message for a section (shown on the next run, once)."""
    st.session_state.setdefault(f"_bench_msgs_{section}", []).append((level, text))


def flush(section: str) -> None:
    for level, text in (ss.pop(f"_bench_msgs_{section}", None) or [])[:MAX_MESSAGES]:
        {"error": st.error, "warning": st.warning, "success": st.success}.get(level, st.info)(
            escape_md(hide_paths(text, history.default_path()), 600))


def api_busy() -> bool:
    """The benchmark lock is held in this process. Only asked when mla_core.bench.run (and so
    torch) is already loaded: without it no run can be holding the lock."""
    run_module = sys.modules.get("mla_core.bench.run")
    # A run's thread may be importing it right now (a profile imports it there first): not busy yet.
    is_busy = getattr(run_module, "is_busy", None)
    return bool(is_busy is not None and is_busy())


def notices() -> None:
    """In-process notices are dropped here: the store keeps them for every session (_history_status)."""
    history.pop_notices()


def ack(fn, ident: int) -> None:
    try:
        fn(ident)
    except MLAError as e:
        say("history", "error", f"History: {e}")


def history_status() -> None:
    """What the store must tell every session until someone acknowledges it: a corrupt store moved
    aside, a run cut short by a server that died; and that a read-only store saves nothing."""
    try:
        for n in history.notices():
            st.warning(escape_md(f"History: {n['text']}", 600))
            if n["id"] is not None:
                st.button("Understood", key=f"_bench_ack_notice_{n['id']}", on_click=ack,
                          args=(history.acknowledge_notice, n["id"]))
        for r in history.interrupted_runs():
            st.warning(escape_md(f"A benchmark started {r['started_at']} ({r['source']}, pid {r['pid']}: {r['what']}) "
                                 "never finished: its process stopped during the run (a server that was killed or "
                                 "died). Nothing of it was saved.", 600))
            st.button("Understood", key=f"_bench_ack_run_{r['id']}", on_click=ack,
                      args=(history.acknowledge_interrupted, r["id"]))
        if os.path.exists(history.default_path()) and not history.writable():
            st.warning(escape_md(f"The history store {history.default_path()} is read-only: its runs are shown, but "
                                 f"new runs and imports cannot be saved (set {history.ENV_VAR} to a writable path).",
                                 600))
        elif os.path.exists(history.default_path()) and history.disk_full():
            st.warning(escape_md(f"The disk holding the history store {history.default_path()} is full: its runs are "
                                 "shown, but new runs and imports cannot be saved until some space is freed (or "
                                 f"{history.ENV_VAR} points at another disk). Nothing in the store is moved or lost.",
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


def load(key: str):
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
        notices()


def set_shown(key: str) -> None:
    """Show `key` below and hand it to the Roofline page (st.session_state['bench_result'])."""
    result, error = load(key)
    if result is None:
        say("results", "error", error or "that result could not be read")
        return
    ss["bench_result"], ss["_bench_result_key"] = result, key
    ss["_bench_show"] = key


@dataclass
class Catalogue:
    """The runs there are: `runs` (history rows, newest first), `labels` and `short` names by key
    ('run:<id>', 'sample:<file>', UNSAVED), `untrusted` (disturbed or damaged runs: out of
    comparisons unless asked), `options` (the keys, in order)."""

    runs: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)
    short: dict = field(default_factory=dict)
    untrusted: set = field(default_factory=set)

    @property
    def options(self) -> list[str]:
        return list(self.labels)


def catalogue() -> Catalogue:
    try:
        # Reading an empty history creates no file: the store is made by the first save.
        runs = history.list_runs(kind="kernels") if os.path.exists(history.default_path()) else []
    except MLAError as e:
        say("history", "error", f"History: {e}")
        runs = []
    notices()
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
    return Catalogue(runs, labels, short, untrusted)
