"""The MLA explorer: entry point. Page config, the shared sidebar state, st.navigation.

Run with `make app` (README). Every number on every page comes from mla_core; the pages draw.
"""
import streamlit as st

from mla_core.units import KV_DTYPES, TOKEN_RULE
from ui import charts, layout, metrics, models, params, state, whatif

state.init()
present = bool(state.values()["present"])
st.set_page_config(
    page_title="MLA explorer",
    page_icon="🧮",
    layout="wide",
    initial_sidebar_state="collapsed" if present else "auto",  # auto: closed on a phone-sized window
    menu_items={"About": "The MLA explorer: KV cache, capacity and decode roofline of Multi-head Latent "
                         "Attention against MHA, GQA and MQA. Every figure follows the definitions in the "
                         "project's docs/model.md, shown on the [Definitions](/definitions) page (symbols, "
                         "formulas, units, sources). "
                         + TOKEN_RULE},
)

# URL paths differ from the file names on purpose: AppTest otherwise mistakes a page for a
# pages/-folder page on reruns and skips this script (and the shared sidebar) altogether.
# The default page is served at "/" whatever its url_path. Built once per session (st.Page
# resolves its file on the disk: a millisecond of every rerun); one session reruns one at a time.
PAGES = st.session_state.get("_ui_pages")
if PAGES is None:
    PAGES = st.session_state["_ui_pages"] = [
        st.Page("pages/kv_cache.py", title="KV cache", icon=":material/database:", url_path="kv", default=True),
        st.Page("pages/capacity.py", title="Capacity", icon=":material/stacks:", url_path="concurrency"),
        st.Page("pages/roofline.py", title="Roofline", icon=":material/show_chart:", url_path="decode-roofline"),
        st.Page("pages/serving.py", title="Serving plan", icon=":material/dns:", url_path="serving-plan"),
        st.Page("pages/benchmark.py", title="Benchmark", icon=":material/timer:", url_path="measure"),
        st.Page("pages/claims.py", title="Published figures", icon=":material/fact_check:",
                url_path="published-figures"),
        st.Page("pages/definitions.py", title="Definitions", icon=":material/menu_book:", url_path="definitions"),
    ]
page = st.navigation(PAGES)


with st.sidebar:
    st.header("Shared settings")
    st.caption("They hold on every page, and the URL carries them: copy it to share this view.")
    layout.copy_link_button()
    options = params.model_options()
    if not st.session_state.get("config"):
        options = [o for o in options if o != params.UPLOAD]
    labels = models.sidebar_labels(options)  # fixed for this run (AppTest formats later)
    st.selectbox("Model", options, persist_state="session", key=state.seeded("model"), format_func=lambda k: labels.get(k, k),
                 on_change=whatif.reset,
                 help="A preset, a config.json uploaded on the KV page, or an architecture set by hand there. "
                      "A new model starts the what-if sliders from its own values.")
    st.selectbox("KV cache dtype (kv_cache_dtype)", KV_DTYPES, persist_state="session", key=state.seeded("kv_dtype"),
                 help="auto = the model's torch_dtype. fp8_ds_mla = FlashMLA's FP8 latent (656 B per token "
                      "per layer for DeepSeek-V3); q8_0 / q4_0 / fp4 are block formats.")
    whatif.context_control()
    whatif.batch_control()
    gpu_labels = models.gpu_labels()
    st.selectbox("GPU", list(gpu_labels), persist_state="session", key=state.seeded("gpu"), format_func=lambda k: gpu_labels.get(k, k))
    st.toggle("Presentation mode", persist_state="session", key=state.seeded("present"),
              help="Larger type and charts for a projector; page controls start collapsed.")

metrics.stylesheet()  # the key numbers' CSS, once a rerun (ui.metrics)
if present:
    charts.presentation_css()
state.show_link_warnings()
page.run()
state.sync_url()
