"""The floor the served benchmark compares each page with: one widget and one metric, served by
the same Streamlit, config and machine as the explorer (benchmarks/served.py starts it with
`streamlit run benchmarks/trivial_app.py`)."""
import streamlit as st

x = st.number_input("Context, tokens per sequence", min_value=1, value=32768, step=1024, key="context")
st.metric("Tokens", f"{x:,}")
