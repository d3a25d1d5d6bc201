import streamlit as st

st.title("benchmark")
st.info("Being built.")
