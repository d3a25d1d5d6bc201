"""Streamlit helpers shared by the pages: state and URL (`state`), model resolution (`models`),
chart styling (`charts`). No arithmetic: every number comes from mla_core."""
