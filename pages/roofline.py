import streamlit as st

st.title("roofline")
st.info("Being built.")
