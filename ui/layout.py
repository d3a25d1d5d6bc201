"""Sections a page draws only while the user has them open.

Every element a page draws is a message the server builds and writes on every rerun (about
0.2-0.6 ms each on a 2-core machine, widgets the most; benchmarks/served.py). A section behind a
`lazy_expander` costs one widget while it is closed.
"""
from __future__ import annotations

import streamlit as st


def lazy_expander(label: str, key: str, *, expanded: bool = False):
    """An expander whose body is drawn only while it is open: `with box:` after checking
    `box.open` (Streamlit's on_change="rerun": opening or closing it reruns the page). A closed
    section's widgets and numbers cost nothing on the page's other reruns; the values its
    widgets hold stay in the session state (ui.state keeps every key). `expanded`: open on the
    session's first look (state key `key` unset), e.g. when the link sets one of its values."""
    return st.expander(label, expanded=expanded, key=key, on_change="rerun")
