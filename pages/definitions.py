"""Definitions: docs/model.md, the symbols, formulas, units and sources every figure follows,
shown as the app's own page (the About menu links here). No arithmetic."""
import os

import streamlit as st

from ui.text import error

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "model.md")

try:
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
except OSError as e:
    error(f"The definitions (docs/model.md) could not be read: {e.strerror or e}")
else:
    st.markdown(text)
