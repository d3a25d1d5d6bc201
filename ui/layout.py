"""Sections a page draws only while the user has them open.

Every element a page draws is a message the server builds and writes on every rerun: about
0.25 ms a text or metric, 0.35-0.5 ms a widget, about 1 ms a table or a chart on a 2-core machine
(benchmarks/element_costs.py). A section behind a `lazy_expander` costs one widget while closed.
"""
from __future__ import annotations

import streamlit as st


def lazy_expander(label: str, key: str, *, expanded: bool = False):
    """An expander whose body is drawn only while it is open: `with box:` after checking
    `box.open` (Streamlit's on_change="rerun": opening or closing it reruns the page). A closed
    section's widgets and numbers cost nothing on the page's other reruns; the values its
    widgets hold stay in the session state (ui.state keeps every key).

    `expanded`: whether it opens when the state has no `key` yet (a session's first look, or
    back from another page), e.g. because the link sets one of its values. It seeds the state
    rather than going to st.expander, and `label` must not change between reruns: Streamlit
    1.67 builds the expander's identity from both, so a change would make it a new widget that
    snaps shut while the user works in it."""
    if key not in st.session_state:
        st.session_state[key] = bool(expanded)
    return st.expander(label, expanded=False, key=key, on_change="rerun")
