import streamlit as st

st.title("capacity")
st.info("Being built.")
