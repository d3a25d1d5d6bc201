"""Session state and the URL: read the link once, keep every value across pages, write it back.

- `init()` (top of app.py, every full run): on a session's first run the query parameters are
  parsed (`ui.params`: every refused value falls back to its default and the reason is kept for
  `show_link_warnings()`) and the link's values seeded into the session state under the
  parameter names; a parameter the link does not set enters the state with its default when its
  widget is first drawn (`seeded()`), and `values()` gives the default until then.
- Values survive pages that do not draw their widget because every widget the pages key by a
  parameter name is drawn with Streamlit's own `persist_state="session"`. Only the Benchmark
  page's session keys (`params.REASSIGNED`, widgets in ui/bench_*.py that do not persist
  themselves yet) are still re-assigned to themselves on every run.
- `sync_url()` (end of app.py, and at the end of a section's own rerun: ui.layout.section): the
  URL gets what differs from the defaults, so a copied link reopens the same view.
- Every run is counted for the benchmark (ui.bench_runs.note_rerun): other sessions' reruns
  during a run are evidence that it was disturbed.

Why not Streamlit's `bind="query-params"` for the link: a bound widget drops a value it cannot
use without a word (the project's rule is a warning and the default, tests/test_app.py), writes a
select box's formatted label rather than its value (`model=deepseek-v3 (MLA)`), and carries a
page's parameters only while that page is shown, where a link here keeps every setting.
Widgets use the parameter names as keys (through `seeded()`) and no `value=` (the state holds it).
"""
from __future__ import annotations

import collections
import threading

import streamlit as st

from . import params
from .text import escape_md

_INIT = "_ui_state_initialised"
_WARNINGS = "_ui_link_warnings"


def session_id() -> str | None:
    """This Streamlit session's id (None outside a served or AppTest run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


RUN_NO = "_run_no"


def note_rerun() -> None:
    """Count this run (a page's or a section's alone) in the session state (`run_number`) and
    for the benchmark's disturbance evidence (ui.bench_runs)."""
    from . import bench_runs

    st.session_state[RUN_NO] = st.session_state.get(RUN_NO, 0) + 1
    bench_runs.registry().note_rerun(session_id())


def run_number() -> int:
    """This run's number in the session (1 for its first), for a section to tell whether it
    was drawn in the run just before."""
    return int(st.session_state.get(RUN_NO, 0))


def init() -> None:
    note_rerun()
    ss = st.session_state
    if not ss.get(_INIT):
        values, warnings = params.parse_query(st.query_params.to_dict())
        if values.get("model") == params.UPLOAD and not values.get("config"):
            warnings.append("The link says model=upload but carries no config; the default model is used.")
            values.pop("model")
        for key, value in values.items():  # the link's own values only: the rest wait for their widget
            if params.PARAMS[key].url:
                ss[key] = value
        ss[_WARNINGS] = warnings
        ss[_INIT] = True
        _forget_values()
    else:
        # The Benchmark page's widgets do not persist themselves: a key of theirs away from its
        # default is re-assigned to itself, so Streamlit keeps it when its widget is not drawn.
        have = ss.to_dict()
        for key in params.REASSIGNED:
            if key in have and have[key] is not None:
                ss[key] = have[key]


# values() of the run in progress, by session: {session id: (that run's cursors, values)}.
# Streamlit gives every run (a page's or a fragment's) a new `cursors` dict, so a memo made in an
# earlier run is never taken for this one; the memo holds that dict, so no later run's can reuse
# its id. Writes to the state within a run go through set_values() (or init()), which drop it.
# The last _RUN_VALUES_MAX sessions are kept (an older one reads the state again).
_RUN_VALUES: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()
_RUN_VALUES_MAX = 256
_RUN_VALUES_LOCK = threading.Lock()


def _run_ctx():
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    return get_script_run_ctx()


def values() -> dict:
    """Every link parameter's value (its default where the state has none), as a new dict.

    Read once a run: the state is read whole (one `to_dict()`, one pass over its keys, against a
    pass a key for `st.session_state.get`), and the next call of the same run copies that reading.
    A page reads it at its top and again in each section, which reruns alone."""
    ctx = _run_ctx()
    memo = _RUN_VALUES.get(ctx.session_id) if ctx is not None else None
    if memo is not None and memo[0] is ctx.cursors:
        return dict(memo[1])
    have = st.session_state.to_dict()
    out = {k: have.get(k, p.default) for k, p in params.PARAMS.items() if p.url}
    if ctx is not None:
        with _RUN_VALUES_LOCK:
            _RUN_VALUES[ctx.session_id] = (ctx.cursors, out)
            _RUN_VALUES.move_to_end(ctx.session_id)
            while len(_RUN_VALUES) > _RUN_VALUES_MAX:
                _RUN_VALUES.popitem(last=False)
    return dict(out)


def any_set(v: dict, keys) -> bool:
    """True when `v` (from `values()`) holds a value other than its default for one of `keys`:
    a section drawn only while open (ui.layout.lazy_expander) opens at first for such a link."""
    return any(v[k] != params.PARAMS[k].default for k in keys)


def _forget_values() -> None:
    ctx = _run_ctx()
    if ctx is not None:
        with _RUN_VALUES_LOCK:
            _RUN_VALUES.pop(ctx.session_id, None)


def seeded(key: str) -> str:
    """`key`, for the widget that keeps it (`key=state.seeded("tp"), persist_state="session"`):
    a link parameter the state does not hold yet gets its default first, so the widget shows it.

    A session's state starts with the link's own values (init), not every parameter of every
    page: each number box, select box and radio button passes over the whole state when it is
    drawn (Streamlit's SessionState.filtered_state, to see whether its key holds None), so a
    rerun's cost grows with the widgets drawn times the keys held. A key enters the state when
    its widget is first drawn and stays (persist_state). Other keys are returned as they are."""
    p = params.PARAMS.get(key)
    if p is not None and p.url and key not in st.session_state:
        st.session_state[key] = p.default
    return key


def sync_url() -> None:
    wanted = params.to_query(values())
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


def show_link_warnings() -> None:
    warnings = st.session_state.get(_WARNINGS) or []
    if not warnings:
        return
    for text in warnings[:10]:
        st.warning(escape_md(text, 400), icon="⚠️")  # the text quotes the link: escaped
    if len(warnings) > 10:
        st.warning(f"... and {len(warnings) - 10} more link parameters were refused.")
    st.button("Dismiss", key="_dismiss_link_warnings", on_click=lambda: st.session_state.update({_WARNINGS: []}))


def set_values(**kwargs) -> None:
    """Set state values: in callbacks (before widgets are drawn on the next run), or in a run
    before the widget of that key is drawn (values() then reads them)."""
    for key, value in kwargs.items():
        if key not in params.PARAMS:
            raise KeyError(key)
        st.session_state[key] = value
    _forget_values()
