"""The what-if sliders of the KV and Roofline pages, and the sidebar's context slider.

What-if: the chosen model with its query heads, KV heads, head dim, d_c, d_r, layers or KV dtype
changed (`mla_core.whatif.what_if_panel` builds and validates it; nothing is computed here). The
URL keeps `wi_<name>` (0 / empty: the model's own value); each slider has a widget key of its
own (`_wi_<name>`) that is set from the URL value before it is drawn, so a slider always starts
from the model's value, a new model starts clean, and Reset puts every slider back.

Context and batch: a `select_slider` over `CONTEXT_STOPS` / `BATCH_STOPS` (a log scale: each
step doubles) and a number box for any count, kept consistent: the slider sets the count, a
typed count moves the slider to its nearest stop.
"""
from __future__ import annotations

import streamlit as st

from mla_core.spec import ModelSpec
from mla_core.units import TOKEN_RULE, format_tokens, token_label
from mla_core.whatif import (BATCH_STOPS, CONTEXT_STOPS, WHAT_IF_FIELDS, WhatIfPanel, nearest_stop,
                            what_if_panel)

from . import layout, params, state
from .text import escape_md

KEYS = {field: f"wi_{short}" for field, short, _, _ in WHAT_IF_FIELDS}
DTYPE_KEY = "wi_kv_dtype"
ALL_KEYS = (*KEYS.values(), DTYPE_KEY)
CONTEXT_SLIDER = "_context_stop"
BATCH_SLIDER = "_batch_stop"


def overrides(v: dict) -> dict[str, int | None]:
    """The what-if fields set in the state (HF names; None: the model's own)."""
    return {field: (v[key] or None) for field, key in KEYS.items()}


def reset() -> None:
    """Every what-if slider back to the model's value (a callback)."""
    state.set_values(**{k: params.PARAMS[k].default for k in ALL_KEYS})


def _seed(key: str, value, kept: bool = True) -> None:
    """Put `value` in the slider `key` before it is drawn, only when it holds another or the
    slider is new to the browser (`kept` False). Streamlit marks a widget whose key was assigned
    in the run as changed (set_value, a one-shot effect), and the browser then draws it anew
    instead of keeping it: ten sliders drawn anew on every rerun cost the Roofline page's context
    slider ~35 ms in chromium (benchmarks/browser.py)."""
    if not kept or key not in st.session_state or st.session_state[key] != value:
        st.session_state[key] = value


DRAWN = "_wi_drawn"  # (page, run number) of the last run that drew the what-if sliders


def _kept() -> bool:
    """Whether the what-if sliders the browser holds are this page's from the run just before.
    Otherwise they are new widgets (Streamlit's widget ids differ by page, and a widget not drawn
    in a run is dropped), which start from their first option unless their key is assigned."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    page = ctx.page_script_hash if ctx is not None else ""
    n = state.run_number()
    kept = st.session_state.get(DRAWN) == (page, n - 1)
    st.session_state[DRAWN] = (page, n)
    return kept


def _moved(key: str, own) -> None:
    value = st.session_state.get("_" + key)
    state.set_values(**{key: params.PARAMS[key].default if value == own else value})


def panel_state(model: ModelSpec, v: dict) -> WhatIfPanel:
    """The core's what-if panel for `model` and the state `v`: `.model` and `.kv_dtype` are
    what the page costs (the sidebar's `kv_dtype` unless the dtype slider moved)."""
    return what_if_panel(model, v["kv_dtype"], v[DTYPE_KEY], **overrides(v))


def draw(model: ModelSpec, p: WhatIfPanel, v: dict, *, expanded: bool = True) -> None:
    """The sliders of `p` (from `panel_state`), a reset button and the refusal, if any."""
    label = "What if: drag the architecture" + (f" ({len(p.changed)} changed)" if p.changed else "")
    kept = _kept()
    with st.expander(label, expanded=expanded):
        cols = st.columns(4)
        for i, c in enumerate(p.controls):
            key = KEYS[c.field]
            with cols[i % 4]:
                if not c.enabled:
                    st.caption(f"{c.label}: {c.note}.")
                    continue
                _seed("_" + key, c.value, kept)
                st.select_slider(c.label, c.options, key="_" + key, on_change=_moved, args=(key, c.own),
                                 help=f"{c.field}; the model's own: {c.own:,}.")
        _seed("_" + DTYPE_KEY, p.kv_dtype, kept)
        with cols[len(p.controls) % 4]:
            st.select_slider("KV dtype (kv_cache_dtype)", p.kv_dtypes, key="_" + DTYPE_KEY, on_change=_moved,
                             args=(DTYPE_KEY, p.own_kv_dtype), help="Widest first; the sidebar's choice until moved.")
        c1, c2 = st.columns([1, 3])
        c1.button("Reset to the model", key="_wi_reset", on_click=reset, disabled=not p.changed,
                  help="Every slider back to the chosen model's value.")
        c2.caption("The sliders start from the chosen model and hold on the KV and Roofline pages; the rest of the "
                   "model (hidden size, MLP, experts, windows) is kept. The link carries what you moved.")
    with layout.slot():  # the refusal comes and goes as the sliders move
        if p.error:
            st.warning(escape_md(f"What-if not applied: {p.error}", 400))


def _from_slider(key: str, slider: str) -> None:
    state.set_values(**{key: int(st.session_state[slider])})


def context_control() -> None:
    """The sidebar's context: a log-scale slider that snaps to CONTEXT_STOPS, the exact count
    beside it and a number box for any value (state key `context`)."""
    context = int(state.values()["context"])
    _seed(CONTEXT_SLIDER, nearest_stop(context, CONTEXT_STOPS))
    st.select_slider("Context, on a log scale", CONTEXT_STOPS, key=CONTEXT_SLIDER,
                     on_change=_from_slider, args=("context", CONTEXT_SLIDER),
                     format_func=token_label,
                     help="Each step doubles (a log scale), then 2M, 4M and 10M; type any count below. " + TOKEN_RULE)
    st.number_input("Context, tokens per sequence", min_value=1, max_value=params.MAX_UI_CONTEXT, step=1024,
                    persist_state="session", key=state.seeded("context"),
                    help="T: tokens held per sequence. Any whole number up to 10^15. " + TOKEN_RULE)
    st.caption(f"T = **{context:,}** tokens ({format_tokens(context)})"
               + ("" if context in CONTEXT_STOPS else "; the slider shows the nearest stop"))


def batch_control() -> None:
    """The sidebar's batch: a log-scale slider over BATCH_STOPS and a number box for any count
    (state key `batch`)."""
    batch = int(state.values()["batch"])
    _seed(BATCH_SLIDER, nearest_stop(batch, BATCH_STOPS, "batch"))
    st.select_slider("Batch, on a log scale", BATCH_STOPS, key=BATCH_SLIDER, on_change=_from_slider,
                     args=("batch", BATCH_SLIDER), format_func=lambda b: f"{b:,}",
                     help="Each step doubles; type any count below.")
    st.number_input("Batch, sequences", min_value=1, max_value=params.MAX_UI_BATCH, step=1, persist_state="session", key=state.seeded("batch"))
