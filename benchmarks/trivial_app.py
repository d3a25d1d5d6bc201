"""The floor the speed benchmarks compare the explorer with: one slider, one number box, one metric
and one Plotly chart, served by the same Streamlit, config and machine as the explorer
(benchmarks/served.py and benchmarks/browser.py serve it through ui.serve, as `make app` serves
the explorer). Plain Streamlit and plain plotly.graph_objects: what a small app would write."""
import plotly.graph_objects as go
import streamlit as st

scale = st.slider("Scale", min_value=1, max_value=64, value=8, key="scale")
x = st.number_input("Context, tokens per sequence", min_value=1, value=32768, step=1024, key="context")
st.metric("Tokens", f"{x * scale:,}")
fig = go.Figure(go.Scatter(x=list(range(1, 61)), y=[x * scale * i for i in range(1, 61)], mode="lines",
                           name="tokens"))
fig.update_layout(title="Tokens against step", xaxis_title="step", yaxis_title="tokens", height=360)
st.plotly_chart(fig)
