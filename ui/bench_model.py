"""The Benchmark page's run settings follow the sidebar's model (issue 11, part 2).

`mla_core.bench.run.default_config(model=..., target_batch=..., target_context=...)` does the
work: the model's attention shape kept exactly, batch and context (the sidebar's) scaled to fit
the device, and the scaling stated. This module only carries its answer through the session:
`seed(device, quick)` returns the widget values and keeps the fields no widget shows (the MLA
widths, the model's name, the targets, the scaling text); `extra_fields()` gives them back for
the run request; `show()` draws the statement. No arithmetic here.
"""
from __future__ import annotations

import streamlit as st

from mla_core.errors import MLAError

from . import models
from .state import values
from .text import escape_md

_KEY = "_bench_model_fields"
HIDDEN = ("model", "head_dim", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
          "target_batches", "target_contexts", "scaling")


def _sidebar() -> tuple:
    v = values()
    model, _error = models.resolve_model(v)
    return model, int(v["batch"]), int(v["context"])


def wanted() -> tuple:
    """What the settings were sized for: (model name, batch, context) of the sidebar now."""
    model, batch, context = _sidebar()
    return model.name, batch, context


def seed(device: str, quick: bool):
    """The BenchConfig for the sidebar's model at its batch and context, sized to `device`
    (imports torch). Keeps the hidden fields for `extra_fields`. Raises MLAError."""
    from mla_core.bench import run as bench_run

    model, batch, context = _sidebar()
    cfg = bench_run.default_config(device, quick, model=model, target_batch=batch, target_context=context)
    st.session_state[_KEY] = {"fields": {k: getattr(cfg, k) for k in HIDDEN}, "for": (model.name, batch, context),
                              "batch": cfg.batches[0], "context": cfg.contexts[0], "heads": cfg.heads,
                              "gqa": cfg.gqa_groups}
    return cfg


def needs_seed() -> bool:
    """The sidebar's model, batch or context changed since the settings were sized."""
    kept = st.session_state.get(_KEY)
    return kept is None or kept["for"] != wanted()


def extra_fields(batch: int, context: int, heads: int, gqa: int) -> dict:
    """The hidden fields for the run request. A batch, context or head count set by hand drops
    the seeded scaling statement (the benchmark then states the scaling from the targets)."""
    kept = st.session_state.get(_KEY)
    if not kept:
        return {}
    fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kept["fields"].items()}
    if (batch, context) != (kept["batch"], kept["context"]) or (heads, gqa) != (kept["heads"], kept["gqa"]):
        fields.pop("scaling", None)
        if (heads, gqa) != (kept["heads"], kept["gqa"]):
            fields["model"] = f"{kept['for'][0]} (heads set by hand)"
    return fields


def show() -> None:
    """The model whose shape the run measures, and how it was scaled."""
    kept = st.session_state.get(_KEY)
    if not kept:
        return
    name, batch, context = kept["for"]
    text = kept["fields"].get("scaling")
    if text:
        st.info(f"Scaled to fit this device: {escape_md(text, 600)}.")
    else:
        st.caption(f"{escape_md(name, 100)}'s attention shape at the sidebar's batch {batch:,} and context "
                   f"{context:,}, not scaled.")


def seed_or_error(device: str, quick: bool):
    """`seed`, or (None, reason) when the model cannot be sized."""
    try:
        return seed(device, quick), None
    except MLAError as e:
        return None, str(e)


def show_result(result: dict) -> None:
    """Which model's shape a shown result measured, and its scaling (the result's own statement)."""
    cfg = result.get("config") if isinstance(result, dict) else None
    if not isinstance(cfg, dict) or not cfg.get("model"):
        return
    if cfg.get("scaling"):
        st.info(f"Shape: {escape_md(cfg['scaling'], 600)}.")
    else:
        st.caption(f"Shape: {escape_md(cfg['model'], 100)}'s attention, at the batch and context asked for.")
