"""How a page is put together: sections that rerun on their own (`section`), sections drawn
only while the user has them open (`lazy_expander`), and places for what a rerun may or may not
draw (`slot`).

Every element a page draws is a message the server builds and writes, and the browser lays out
and paints, on every rerun that draws it: about 0.25 ms of server time a text or metric,
0.35-0.5 ms a widget, about 1 ms a table or a chart on a 2-core machine
(benchmarks/element_costs.py), and in the browser tens of milliseconds a chart
(benchmarks/browser.py). So a control reruns only the section it changes, and a section nobody
opened costs one widget.
"""
from __future__ import annotations

import functools

import streamlit as st


def _fragment_run() -> bool:
    """True while Streamlit reruns a fragment alone (a widget inside it changed)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def section(fn):
    """A page section as a Streamlit fragment (`st.fragment`): a widget inside it reruns this
    function alone, not the page, the sidebar and the other sections. The sidebar's shared
    settings still rerun the whole page (and so every section). Write a section as a function
    that reads the state itself (`ui.state.values()`), calls one core function
    (mla_core.views) and draws what it returns: on its own reruns Streamlit calls it with the
    arguments of the last full run, so an argument must not depend on the section's own widgets.
    On its own reruns the URL is brought up to date at its end, as app.py does after a page;
    the rerun is counted for the benchmark's disturbance evidence (ui.state.init)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        alone = _fragment_run()
        if alone:
            from . import state

            state.note_rerun()
        try:
            return fn(*args, **kwargs)
        finally:
            if alone:
                from . import state

                state.sync_url()

    return st.fragment(run)


def slot():
    """A place for what a rerun may or may not draw (warnings, notes, an error): one element of its
    block whether it holds some or none, so that what comes or goes does not move the elements
    after it. Streamlit's browser matches a block's elements by position: a warning that appears
    shifts every later element to a position that held another kind, and React mounts each anew
    (a table's grid, an expander, every heading) instead of updating it. On the Capacity page the
    sidebar's context slider, between 16K and 512K tokens (where DeepSeek-V3's
    max_position_embeddings warning comes and goes), remounted about 20 elements on every move;
    with slots it went from 4.1x to 2.8x the trivial app's p50 (benchmarks/browser_20261207_base.json
    against browser_20261207.json). Use as `with layout.slot(): ...`; an empty slot takes no space."""
    return st.container()


def lazy_expander(label: str, key: str, *, expanded: bool = False):
    """An expander whose body is drawn only while it is open: `with box:` after checking
    `box.open` (Streamlit's on_change="rerun": opening or closing it reruns the page, or the
    section it is in). A closed section's widgets and numbers cost nothing on the page's other
    reruns; the values its widgets hold stay in the session state (persist_state="session").

    Open or shut, it stays as the user left it across reruns that do not draw it (another page,
    a model whose section has no expander): Streamlit drops an undrawn widget's state, so the
    last state is kept beside it under `key + KEPT`. `expanded`: whether it opens the first time
    (e.g. because the link sets one of its values). It seeds the state rather than going to
    st.expander, and `label` must not change between reruns: Streamlit 1.67 builds the
    expander's identity from both, so a change would make it a new widget that snaps shut while
    the user works in it."""
    if key not in st.session_state:
        st.session_state[key] = bool(st.session_state.get(key + KEPT, expanded))
    box = st.expander(label, expanded=False, key=key, on_change="rerun")
    st.session_state[key + KEPT] = box.open
    return box


KEPT = "__kept"  # lazy_expander: the expander's last state, kept while it is not drawn


COPY_LINK_HTML = """<button type="button" data-mla-copy-link title="Copy this view's link (the URL carries every setting)"
 style="font: inherit; font-size: 0.9rem; color: inherit; background: transparent; cursor: pointer;
        border: 1px solid rgba(128, 128, 128, 0.45); border-radius: 0.5rem; padding: 0.3rem 0.8rem;">Copy link</button>
<script>
if (!window.__mlaCopyLink) {
  window.__mlaCopyLink = true;
  const copy = async (text) => {
    if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); return; }
    const area = Object.assign(document.createElement("textarea"), {value: text});
    area.style.position = "fixed"; area.style.opacity = "0";
    document.body.appendChild(area); area.select(); document.execCommand("copy"); area.remove();
  };
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-mla-copy-link]");
    if (!button) return;
    try { await copy(window.location.href); button.textContent = "Link copied"; }
    catch (e) { button.textContent = "Copy failed: select the address bar"; }
    setTimeout(() => { button.textContent = "Copy link"; }, 2000);
  });
  // The key numbers' tooltips (ui.metrics): Escape closes the one shown until the pointer or the
  // keyboard's focus moves to another "?" (WCAG 1.4.13: dismissible without moving the pointer).
  const root = document.documentElement;
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    root.setAttribute("data-mla-tips-off", "");
    const help = document.activeElement && document.activeElement.closest && document.activeElement.closest(".mla-help");
    if (help) help.blur();  // else it would show again once another "?" is hovered (Tab goes on from it)
  });
  const reopen = (event) => {
    if (event.target.closest && event.target.closest(".mla-help")) root.removeAttribute("data-mla-tips-off");
  };
  document.addEventListener("pointerover", reopen);
  document.addEventListener("focusin", reopen);
}
</script>"""


def copy_link_button() -> None:
    """A "Copy link" button: the browser's address (the page and every setting that differs from
    its default, ui.state.sync_url) to the clipboard. Its script, drawn once a page in the
    sidebar, also lets Escape close a key number's tooltip (ui.metrics). A constant snippet: no
    user text goes through it."""
    st.html(COPY_LINK_HTML, width="content", unsafe_allow_javascript=True)
