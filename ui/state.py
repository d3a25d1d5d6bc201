"""Session state and the URL: read the link once, keep every value across pages, write it back.

- `init()` (top of app.py, every run): on a session's first run the query parameters are parsed
  (`ui.params`); refused values fall back to their defaults and the reasons are kept for
  `show_link_warnings()`. On later runs every key of the one registry (`params.PARAMS`: the
  link's parameters and the session-only widget keys such as the benchmark's settings) is
  re-assigned to itself, because Streamlit drops a widget's key when a page does not draw it.
- `sync_url()` (end of app.py, every run): the URL gets what differs from the defaults, so a
  copied link reopens the same view.
- Every run is counted for the benchmark (ui.bench_runs.note_rerun): other sessions' reruns
  during a run are evidence that it was disturbed.
Widgets use the parameter names as keys and no `value=` (the state seeds them).
"""
from __future__ import annotations

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


def init() -> None:
    from . import bench_runs

    bench_runs.registry().note_rerun(session_id())
    ss = st.session_state
    if not ss.get(_INIT):
        values, warnings = params.parse_query(st.query_params.to_dict())
        if values.get("model") == params.UPLOAD and not values.get("config"):
            warnings.append("The link says model=upload but carries no config; the default model is used.")
            values.pop("model")
        for key, p in params.PARAMS.items():
            if p.url:
                ss[key] = values.get(key, p.default)
        ss[_WARNINGS] = warnings
        ss[_INIT] = True
    else:
        # One look at the state (`key in ss` builds the whole filtered state every time). A key
        # away from its default is re-assigned to itself, so Streamlit keeps it when its widget
        # is not drawn this run; a missing one gets its default. A key at its default needs
        # neither: if Streamlit drops it, the next run seeds the same default.
        have = ss.to_dict()
        for key, p in params.PARAMS.items():
            if key in have:
                if have[key] != p.default:
                    ss[key] = have[key]
            elif p.default is not None:
                ss[key] = p.default


def values() -> dict:
    """Every link parameter's value (its default where the state has none)."""
    ss = st.session_state
    return {k: ss.get(k, p.default) for k, p in params.PARAMS.items() if p.url}


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
    """For callbacks: set state values (before widgets are drawn on the next run)."""
    for key, value in kwargs.items():
        if key not in params.PARAMS:
            raise KeyError(key)
        st.session_state[key] = value
