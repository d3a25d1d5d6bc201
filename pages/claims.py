import streamlit as st

st.title("claims")
st.info("Being built.")
