"""What each section of the app's pages draws, from one call each (no streamlit here).

A page section calls one function of this module and draws what it returns: the numbers (from
mla_core.kv / roofline / sweeps), the fallbacks the inputs need (with the warning to show), and
the chart arrays. Pages and `ui/` hold no arithmetic and no rule about a model's kind; the rules
live here, next to the core functions they call. Results are frozen dataclasses with
`to_dict()`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import MLAError
from .kv import (compare_variants, default_gqa_groups, gqa_group_choices, kv_report, resolve_kv_dtype,
                 variant_specs)
from .spec import ModelSpec
from .sweeps import kv_cache_bytes_vs_context, log_contexts
from .units import format_tokens

MAX_SWEEP_CONTEXT = 10**15  # a chart's right end never passes this (exact in a browser)


class _View:
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def context_limit_warning(model: ModelSpec, context: int) -> str | None:
    """A warning when `context` exceeds the config's `max_position_embeddings` (the positions
    the model was configured for; the cache arithmetic still holds, the model may not), else None."""
    limit = model.max_position_embeddings
    if limit and context > limit:
        return (f"{context:,} tokens is beyond {model.name}'s max_position_embeddings ({limit:,} = "
                f"{format_tokens(limit)}): the cache is costed as asked, but the model is not configured "
                "for sequences this long.")
    return None


def kv_dtype_for(model: ModelSpec, kv_dtype: str) -> tuple[str, str | None]:
    """The KV dtype to cost `model` at, and a warning when the shared choice does not apply:
    fp8_ds_mla exists only for an MLA latent, so another model is costed at fp8."""
    if kv_dtype == "fp8_ds_mla" and not model.is_mla:
        return "fp8", f"fp8_ds_mla is an MLA latent layout; {model.name} is costed at fp8."
    return kv_dtype, None


def describe_shape(model: ModelSpec) -> str:
    """'61 layers, 128 query heads, latent d_c 512 + decoupled RoPE key d_r 64' (or the KV heads)."""
    a = model.attention
    return (f"{model.num_hidden_layers} layers, {a.num_attention_heads} query heads, "
            + (f"latent d_c {a.kv_lora_rank} + decoupled RoPE key d_r {a.qk_rope_head_dim}" if model.is_mla
               else f"{a.num_key_value_heads} KV heads of d_h {a.head_dim}"))


def baseline_head_dim_text(model: ModelSpec) -> str:
    """How the MHA/GQA/MQA rows' d_h is chosen for this model (DeepSeek-V2 Table 1's convention)."""
    return ("qk_nope_head_dim (DeepSeek-V2 Table 1's d_h)" if model.is_mla else str(model.attention.head_dim))


@dataclass(frozen=True)
class KVSummary(_View):
    """The KV page's headline for one model: `report` is `kv.kv_report` at the dtype and layout
    used; `kv_dtype` / `cache_layout` what was used; `warnings` the fallbacks taken and the
    context-limit warning; `shape` and `notes` describe the model."""

    model: str
    kind: str
    shape: str
    kv_dtype: str
    cache_layout: str
    report: dict
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    sliding_layers: int = 0


def kv_summary(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto",
               cache_layout: str = "latent", block_size: int | None = None) -> KVSummary:
    """`kv_report` for the page's inputs, after its fallbacks: fp8_ds_mla on a non-MLA model is
    fp8; a non-MLA model has one layout; fp8_ds_mla with the expanded layout shows the latent.
    Raises MLAError for inputs the core refuses (a context or batch out of range)."""
    warnings = []
    dtype, warning = kv_dtype_for(model, kv_dtype)
    if warning:
        warnings.append(warning)
    layout = cache_layout if model.is_mla else "latent"
    if layout == "expanded" and dtype == "fp8_ds_mla":
        warnings.append("fp8_ds_mla stores the latent only; the latent layout is shown.")
        layout = "latent"
    limit = context_limit_warning(model, context)
    if limit:
        warnings.append(limit)
    report = kv_report(model, context, batch, dtype, layout, block_size)
    return KVSummary(model.name, model.kind, describe_shape(model), dtype, layout, report, tuple(warnings),
                     tuple(model.notes), model.num_sliding_layers)


@dataclass(frozen=True)
class KVVariants(_View):
    """The same width as MHA, GQA, MQA, MLA latent and MLA expanded: `rows` from
    `kv.compare_variants`; `gqa_choices` (0 = default first) and `default_gqa_groups`;
    `gqa_groups` in use (0 = default); `warnings`; `mla_as_gqa_groups`, `mla_vs_mha` and
    `expanded_vs_latent` (None without an expanded row) for the sentence above the table;
    `baseline_head_dim` (how d_h is chosen)."""

    rows: tuple[dict, ...]
    gqa_choices: tuple[int, ...]
    default_gqa_groups: int
    gqa_groups: int
    mla_as_gqa_groups: float
    mla_vs_mha: float
    expanded_vs_latent: float | None
    baseline_head_dim: str
    model_is_mla: bool
    warnings: tuple[str, ...] = ()


def kv_variants(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto", *,
                gqa_groups: int = 0, kv_lora_rank: int = 0, qk_rope_head_dim: int = 0,
                block_size: int | None = None) -> KVVariants:
    """`compare_variants` with the page's settings (0 = the default for each); a GQA group count
    that does not divide the query heads falls back to the default with a warning."""
    dtype, _ = kv_dtype_for(model, kv_dtype)
    choices = gqa_group_choices(model)
    warnings = []
    if gqa_groups and gqa_groups not in choices:
        warnings.append(f"GQA groups {gqa_groups} does not divide the {model.attention.num_attention_heads} query "
                        f"heads of {model.name}; the default is used.")
        gqa_groups = 0
    rows = compare_variants(model, context, batch, dtype, gqa_groups=gqa_groups or None,
                            kv_lora_rank=kv_lora_rank or None, qk_rope_head_dim=qk_rope_head_dim or None,
                            block_size=block_size)
    by = {r["variant"]: r for r in rows}
    latent = by["MLA (latent)"]
    expanded = by.get("MLA expanded")
    return KVVariants(tuple(rows), (0, *choices), default_gqa_groups(model), gqa_groups,
                      latent["gqa_groups_equivalent"], latent["vs_mha"],
                      expanded["vs_mla_latent"] if expanded else None, baseline_head_dim_text(model), model.is_mla,
                      tuple(warnings))


@dataclass(frozen=True)
class Series(_View):
    """One line of a chart: `x` and `y` (ints), its `label`, `is_model`, and the value at the
    chosen x (`x_here`, `y_here`)."""

    label: str
    x: tuple[int, ...]
    y: tuple[int, ...]
    x_here: int
    y_here: int
    is_model: bool = False


@dataclass(frozen=True)
class KVSweep(_View):
    """The KV page's main chart: one `Series` of cache bytes against context per same-width
    variant (x: tokens per sequence, y: bytes for `batch` sequences), plus `second` (a second
    model's own cache, or None)."""

    context: int
    batch: int
    series: tuple[Series, ...]
    second: Series | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def sweep_contexts(context: int, points: int = 256):
    """The x values of a chart against context: `points` log-spaced counts from min(1K, T) to
    max(1M, 4 T), capped at 10^15 (numpy int64 array)."""
    return log_contexts(min(1024, context), min(MAX_SWEEP_CONTEXT, max(1 << 20, 4 * context)), points)


def kv_sweep(model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto", *, gqa_groups: int = 0,
             kv_lora_rank: int = 0, qk_rope_head_dim: int = 0, block_size: int | None = None,
             second: ModelSpec | None = None, second_kv_dtype: str | None = None) -> KVSweep:
    """KV cache bytes against context for each same-width variant of `model`
    (`kv.variant_specs`) and for `second`'s own cache when given (`sweeps.kv_cache_bytes_vs_context`).
    Raises MLAError for inputs the core refuses."""
    dtype, _ = kv_dtype_for(model, kv_dtype)
    if gqa_groups and gqa_groups not in gqa_group_choices(model):
        gqa_groups = 0
    xs = sweep_contexts(context)
    x = tuple(int(t) for t in xs)
    out = []
    for label, spec, layout, d in variant_specs(model, dtype, gqa_groups=gqa_groups or None,
                                                kv_lora_rank=kv_lora_rank or None,
                                                qk_rope_head_dim=qk_rope_head_dim or None):
        y = tuple(int(n) for n in kv_cache_bytes_vs_context(spec, xs, batch, d, layout, block_size=block_size))
        here = int(kv_cache_bytes_vs_context(spec, [context], batch, d, layout, block_size=block_size)[0])
        out.append(Series(label, x, y, context, here, layout == "latent" and spec.attention == model.attention))
    two = None
    if second is not None:
        d2, _ = kv_dtype_for(second, second_kv_dtype or kv_dtype)
        y = tuple(int(n) for n in kv_cache_bytes_vs_context(second, xs, batch, d2, block_size=block_size))
        here = int(kv_cache_bytes_vs_context(second, [context], batch, d2, block_size=block_size)[0])
        two = Series(f"{second.name} ({second.kind.upper()}, {resolve_kv_dtype(second, d2)})", x, y, context, here)
    return KVSweep(context, batch, tuple(out), two)


def require(ok: bool, message: str) -> None:
    """Raise MLAError(message) unless `ok` (a guard for view inputs)."""
    if not ok:
        raise MLAError(message)
