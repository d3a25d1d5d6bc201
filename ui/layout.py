"""Rows of elements side by side, for less than st.columns costs on every rerun.

`st.columns(n)` sends n + 1 layout blocks to the browser, each a message the server builds and
writes on every rerun (about 0.2 ms each on a 2-core machine, benchmarks/served.py); a row of
metrics needs only one horizontal container, whose elements share the width equally as the
columns did. Use `row(n)` where each slot receives exactly one element, in slot order; keep
st.columns where a column stacks several elements or the widths differ.
"""
from __future__ import annotations

import streamlit as st


def row(n: int, *, gap: str = "small") -> list:
    """`n` slots of one horizontal container (a list of the same container `n` times): draw
    one element into each, first slot first."""
    box = st.container(horizontal=True, gap=gap)
    return [box] * n


def lazy_expander(label: str, key: str, *, expanded: bool = False):
    """An expander whose body is drawn only while it is open: `with box:` after checking
    `box.open` (Streamlit's on_change="rerun": opening or closing it reruns the page). A closed
    section's widgets and numbers cost nothing on the page's other reruns; the values its
    widgets hold stay in the session state (ui.state keeps every key). `expanded`: open on the
    session's first look (state key `key` unset), e.g. when the link sets one of its values."""
    return st.expander(label, expanded=expanded, key=key, on_change="rerun")
