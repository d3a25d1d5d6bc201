"""KV-cache bytes: per token, per layer, per sequence and per batch (docs/model.md, "Cache bytes").

Per token per layer, with b the bytes of one cached element:
    MHA / GQA / MQA       n_kv * (d_h + d_h) * b              keys and values
    MLA latent            (d_c + d_r) * b                     one latent serves K and V; the
                                                              decoupled RoPE key is shared
    MLA expanded          n_h * ((d_nope + d_r) + d_v) * b    DeepSeek's naive path
    + indexer (V3.2)      index_head_dim fp8 + 4 B fp32 scale, whatever the KV dtype
Block formats (q8_0, q4_0, fp4) round each row up to whole blocks: a K or V row of d_h per KV
head, the latent row of d_c + d_r, expanded per-head K rows of d_nope + d_r and V rows of d_v.
`fp8_ds_mla` is FlashMLA's FP8 latent: d_c fp8 + 4 B per 128 latent values + d_r bf16
(656 B at d_c 512, d_r 64).

Sliding-window layers hold min(T, window) tokens; with a block size N each sequence's tokens
per layer round up to ceil(min(T, window) / N) * N. Every byte count is a Python int.

Tensor parallelism (per GPU): MHA/GQA KV heads split, max(1, n_kv // tp); expanded MLA heads
split, max(1, n_h // tp); the MLA latent and the indexer have no head axis and are whole on
every rank. With attention data parallelism every head stays on the GPU holding the sequence.
"""
from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass
from dataclasses import field as dc_field

from .errors import MLAError
from .results import Result
from .layers import (FP8_DS_MLA_TILE, INDEXER_SCALE_BYTES, Precision, check_split,  # noqa: F401 (re-exported)
                     full_attention_layer, heads_per_gpu)
from .spec import ModelSpec, as_variant
from .units import KV_DTYPES, STATE_DTYPES, row_bytes
from .validate import MAX_BATCH, MAX_BLOCK, MAX_CONTEXT, MAX_TP, check_choice, check_int

CACHE_LAYOUTS = ("latent", "expanded")


def resolve_kv_dtype(model: ModelSpec, kv_dtype: str = "auto", cache_layout: str = "latent") -> str:
    """The KV dtype actually stored: `auto` is the model's torch_dtype (not its fp8 weights).

    Raises MLAError for an unknown dtype, or `fp8_ds_mla` on a model without MLA or with the
    expanded layout.
    """
    check_choice("kv_dtype", kv_dtype, KV_DTYPES)
    if kv_dtype == "auto":
        return model.torch_dtype
    if kv_dtype == "fp8_ds_mla":
        if not model.is_mla:
            raise MLAError(
                f"kv_dtype fp8_ds_mla is FlashMLA's latent-cache layout; {model.name} has "
                f"{model.kind.upper()} attention, not MLA"
            )
        if cache_layout == "expanded":
            raise MLAError("kv_dtype fp8_ds_mla stores the latent; it cannot hold the expanded cache")
    return kv_dtype


def tp_split_error(model: ModelSpec, tp: int) -> str | None:
    """Why tensor parallelism over `tp` GPUs cannot split `model`'s layers as engines do (vLLM:
    query heads divide by tp; KV heads divide by tp, or tp by them, which replicates them; the
    recurrent heads divide by tp): each cache kind's own rule (`layers.CacheSpec.tp_error`),
    or None when it can."""
    if tp <= 1:
        return None
    err = check_split(model.layers, tp)
    return f"{err} of {model.name}" if err else None


def precision(model: ModelSpec, kv_dtype: str = "auto", cache_layout: str = "latent", state_dtype: str = "auto",
              ssm_state_dtype: str = "auto") -> Precision:
    """The dtypes `model`'s caches are stored at (`layers.Precision`): the kv_cache_dtype (`auto`
    = torch_dtype), the MLA layout, and the recurrent state's two parts (docs/model.md "Layouts
    of 2026": `state_dtype` sets both; `ssm_state_dtype` the recurrent part alone; `auto` = the
    config's mamba_ssm_cache_dtype for the recurrent part when it declares one, torch_dtype
    otherwise). Raises MLAError on an unknown dtype or layout."""
    check_choice("cache_layout", cache_layout, CACHE_LAYOUTS)
    kv = resolve_kv_dtype(model, kv_dtype, cache_layout)
    conv = resolve_state_dtype(model, state_dtype)
    check_choice("ssm_state_dtype", ssm_state_dtype, STATE_DTYPES)
    if ssm_state_dtype != "auto":
        ssm = ssm_state_dtype
    elif state_dtype != "auto":
        ssm = state_dtype
    else:
        ssm = model.ssm_state_dtype or model.torch_dtype
    return Precision(kv, cache_layout if model.is_mla else "latent", conv, ssm, model.torch_dtype)


def _groups(model: ModelSpec):
    return [(g.layer, g.count) for g in model.cache_groups()]


def kv_bytes_per_token_layer(
    model: ModelSpec,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    *,
    tp: int = 1,
    dp_attention: bool = False,
) -> int:
    """Bytes one token adds to one cache of the first layer that holds a per-token cache, on one
    GPU (indexer included); for a model whose per-token layers all share one shape, every
    layer's figure. `kv_bytes_per_token` is the sum over all layers.

    Args: `kv_dtype` from KV_DTYPES; `cache_layout` 'latent' or 'expanded' (MLA only; other
    models have one layout and ignore it); `tp` tensor-parallel ranks; `dp_attention` keeps
    every head on the GPU that holds the sequence.
    Returns bytes (an int; a compressed layer's may be a float). Raises MLAError on a bad
    dtype, layout or tp."""
    check_int("tp", tp, maximum=MAX_TP)
    p = precision(model, kv_dtype, cache_layout)
    for layer, _ in _groups(model):
        for c in layer.caches:
            if c.holds_kv:
                return c.bytes_per_token(p, tp, dp_attention)
    return 0


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "auto", cache_layout: str = "latent", *,
                       tp: int = 1, dp_attention: bool = False) -> int:
    """Bytes one new token adds to one sequence, all layers, before any window or chunk cap:
    the sum of every layer's caches (`layers.CacheSpec.bytes_per_token`; shared-KV, recurrent
    and attention-free layers add none). An int (a float only for DeepSeek-V4's compressed
    layers, one compressed entry per r tokens)."""
    check_int("tp", tp, maximum=MAX_TP)
    p = precision(model, kv_dtype, cache_layout)
    return sum(n * layer.bytes_per_token(p, tp, dp_attention) for layer, n in _groups(model))


def kv_cache_bytes(
    model: ModelSpec,
    context,
    batch: int = 1,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    *,
    block_size: int | None = None,
    tp: int = 1,
    dp_attention: bool = False,
):
    """`B * sum over layers of bytes(layer, T)`: the per-token cache of `batch` sequences of
    `context` tokens (windows, chunks and compression applied; recurrent and compressor state
    not included: see `state_bytes_per_sequence`), on one GPU when `tp` > 1. `context` an int
    (returns an int) or a numpy array of ints (returns an array; the sweeps). Raises MLAError
    on bad inputs."""
    if not hasattr(context, "shape"):
        check_int("context", context, maximum=MAX_CONTEXT)
    check_int("batch", batch, maximum=MAX_BATCH)
    if block_size is not None:
        check_int("block_size", block_size, maximum=MAX_BLOCK)
    p = precision(model, kv_dtype, cache_layout)
    return batch * sum(n * layer.kv_bytes(context, p, tp, dp_attention, block_size) for layer, n in _groups(model))


# ---------------------------------------------------------------------------------------------
# Recurrent and compressor state: constant per sequence.

def resolve_state_dtype(model: ModelSpec, state_dtype: str = "auto") -> str:
    """The recurrent state's dtype: `auto` is the model's torch_dtype (the KV dtype does not
    change it; docs/model.md). Raises MLAError for a dtype outside STATE_DTYPES."""
    check_choice("state_dtype", state_dtype, STATE_DTYPES)
    return model.torch_dtype if state_dtype == "auto" else state_dtype


def state_bytes_per_layer(model: ModelSpec, state_dtype: str = "auto", *, tp: int = 1,
                          dp_attention: bool = False, ssm_state_dtype: str = "auto") -> int:
    """Bytes of one recurrent layer's state for one sequence on one GPU (0 without recurrent
    layers): conv elements x the conv dtype + recurrent elements x the SSM dtype.
    Nemotron-Nano-9B-v2's Mamba-2 layer: 1,347,584 elements = 2,695,168 B at bf16 (vllm#24280)."""
    check_int("tp", tp, maximum=MAX_TP)
    p = precision(model, state_dtype=state_dtype, ssm_state_dtype=ssm_state_dtype)
    rec = model.recurrent
    return rec.state_bytes(p, tp, dp_attention) if rec is not None else 0


def state_bytes_per_sequence(model: ModelSpec, state_dtype: str = "auto", *, tp: int = 1,
                             dp_attention: bool = False, ssm_state_dtype: str = "auto") -> int:
    """The constant part of one sequence, all layers, on one GPU (int bytes): recurrent state and
    DeepSeek-V4's compressor state; it does not grow with the context."""
    check_int("tp", tp, maximum=MAX_TP)
    p = precision(model, state_dtype=state_dtype, ssm_state_dtype=ssm_state_dtype)
    return sum(n * layer.state_bytes(p, tp, dp_attention) for layer, n in _groups(model))


@dataclass(frozen=True)
class LayerGroup(Result):
    """Equal layers of a model, as the KV page's layer map and the JSON `layers` list show them.

    `kind` is the layer's attention kind (full, sliding, chunked, compressed, shared, none)
    joined with its recurrent kind ("full+mamba2" for Falcon-H1; a recurrent layer alone is its
    kind, "gdn"); `label` says it in words; `layer_indices` are 0-based; `shape` its heads and
    widths (`kv_heads`, `k_dim`, `v_dim`, `window`, `compress_ratio`, `index_dim`, ...).
    Bytes are per layer, for one sequence, on one GPU; `tokens_held` counts the entries of its
    per-token cache (a compressed layer: window latents + compressed latents); `index_bytes_per_layer`
    the index keys among them."""

    kind: str
    label: str
    layers: int
    layer_indices: tuple[int, ...]
    draft: bool
    kv_caches_per_layer: int
    bytes_per_token_per_layer: int | float
    tokens_held: int
    kv_bytes_per_layer: int
    state_bytes_per_layer: int
    bytes_per_layer: int  # kv + state, one sequence
    shape: dict = dc_field(default_factory=dict)
    index_bytes_per_layer: int = 0


def layer_groups(model: ModelSpec, context: int, kv_dtype: str = "auto", cache_layout: str = "latent", *,
                 state_dtype: str = "auto", block_size: int | None = None, tp: int = 1,
                 dp_attention: bool = False, ssm_state_dtype: str = "auto") -> list[LayerGroup]:
    """The model's layers grouped by what they cache (first-seen order), each with its bytes
    for one sequence of `context` tokens. Raises MLAError on bad inputs."""
    check_int("context", context, maximum=MAX_CONTEXT)
    p = precision(model, kv_dtype, cache_layout, state_dtype, ssm_state_dtype)
    indices: dict = {}
    for i, layer in enumerate(model.layers):
        indices.setdefault(layer, []).append(i)
    out = []
    for layer, idx in indices.items():
        kv = layer.kv_bytes(context, p, tp, dp_attention, block_size)
        st = layer.state_bytes(p, tp, dp_attention)
        index = sum(_index_bytes(c, context, p, block_size) for c in layer.caches)
        out.append(LayerGroup(layer.kind, layer.label, len(idx), tuple(idx), layer.draft, layer.kv_caches,
                              layer.bytes_per_token(p, tp, dp_attention), layer.tokens_held(context, block_size),
                              kv, st, kv + st, layer.shape(), index))
    return out


def _index_bytes(cache, context: int, p: Precision, block_size: int | None) -> int:
    """The index keys among a cache's bytes at `context` (0 without an indexer)."""
    ix = getattr(cache, "indexer", None)
    if ix is None:
        return 0
    entries = cache.compressed_entries(context, block_size) if hasattr(cache, "compressed_entries") \
        else cache.tokens_held(context, block_size)
    return ix.bytes_per_entry(p) * entries


def all_full_attention_bytes(model: ModelSpec, context: int, kv_dtype: str = "auto", cache_layout: str = "latent",
                             *, block_size: int | None = None) -> int:
    """What one sequence of `context` tokens would hold if every layer (draft layers included)
    were full attention of the model's attention shape (`spec.ModelSpec.attention`, indexer
    included), with no recurrent state (int bytes): the hybrid's counterfactual on the KV page."""
    p = precision(model, kv_dtype, cache_layout)
    plain = full_attention_layer(model.attention, model.indexer)
    return plain.kv_bytes(context, p, block_size=block_size) * len(model.layers)


@dataclass(frozen=True)
class KVReport(Result):
    """Everything the `kv` command and the KV page show for one model (bytes are ints).

    `kv_bytes_per_token`: what one token adds, all per-token layers, before window caps;
    `kv_cache_bytes`: B sequences of T tokens (windows and chunks applied);
    `state_bytes_per_sequence`: the recurrent state of one sequence; `state_bytes` = B x that;
    `cache_bytes` = kv + state; `layers`: one `LayerGroup` per group; `all_full_attention_*`:
    the same model with every layer full attention of its attention shape (for hybrids)."""

    model: str
    attention: str
    cache_layout: str
    kv_dtype: str
    state_dtype: str
    context: int
    batch: int
    block_size: int | None
    num_hidden_layers: int
    draft_layers: int
    kv_layers: int
    recurrent_layers: int
    sliding_window_layers: int
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int
    indexer_bytes_per_token: int
    kv_cache_bytes_per_sequence: int
    kv_cache_bytes: int
    state_bytes_per_sequence: int
    state_bytes: int
    cache_bytes: int
    all_full_attention_kv_bytes_per_token: int
    all_full_attention_cache_bytes: int
    is_hybrid: bool
    layers: tuple[LayerGroup, ...]
    notes: tuple[str, ...]
    ssm_state_dtype: str = ""  # the recurrent part's dtype (`state_dtype` is the conv part's)


def kv_report(
    model: ModelSpec,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    block_size: int | None = None,
    state_dtype: str = "auto",
    ssm_state_dtype: str = "auto",
) -> KVReport:
    """Everything the `kv` command and the KV page print for one model (a `KVReport`).
    Raises MLAError on bad inputs."""
    cache = kv_cache_bytes(model, context, batch, kv_dtype, cache_layout, block_size=block_size)
    p = precision(model, kv_dtype, cache_layout, state_dtype, ssm_state_dtype)
    groups = tuple(layer_groups(model, context, kv_dtype, cache_layout, state_dtype=state_dtype,
                                block_size=block_size, ssm_state_dtype=ssm_state_dtype))
    per_token = sum(g.bytes_per_token_per_layer * g.layers for g in groups)
    state_seq = sum(g.state_bytes_per_layer * g.layers for g in groups)
    index_per_token = sum(_index_bytes(c, 1, p, None) * g.count for g in model.cache_groups()
                          for c in g.layer.caches if not hasattr(c, "compressed_entries"))
    plain = full_attention_layer(model.attention, model.indexer)
    return KVReport(
        model=model.name,
        attention=model.kind,
        cache_layout=cache_layout if model.is_mla else "kv_heads",
        kv_dtype=p.kv,
        state_dtype=p.conv_state,
        context=context,
        batch=batch,
        block_size=block_size,
        num_hidden_layers=model.num_hidden_layers,
        draft_layers=model.draft_layers,
        kv_layers=model.kv_layers,
        recurrent_layers=model.recurrent_layers,
        sliding_window_layers=model.num_sliding_layers,
        kv_bytes_per_token_per_layer=kv_bytes_per_token_layer(model, kv_dtype, cache_layout),
        kv_bytes_per_token=per_token,
        indexer_bytes_per_token=index_per_token,
        kv_cache_bytes_per_sequence=cache // batch,
        kv_cache_bytes=cache,
        state_bytes_per_sequence=state_seq,
        state_bytes=batch * state_seq,
        cache_bytes=cache + batch * state_seq,
        all_full_attention_kv_bytes_per_token=plain.bytes_per_token(p) * len(model.layers),
        all_full_attention_cache_bytes=batch * all_full_attention_bytes(model, context, kv_dtype, cache_layout,
                                                                        block_size=block_size),
        is_hybrid=model.is_hybrid,
        layers=groups,
        notes=model.notes,
        ssm_state_dtype=model.recurrent.ssm_dtype(p) if model.recurrent is not None else p.ssm_state,
    )


# ---------------------------------------------------------------------------------------------
# The same model costed as MHA, GQA, MQA and MLA (the KV page's side-by-side table).

def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: the KV-head counts GQA can take with n query heads."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def largest_divisor_up_to(n: int, wanted: int = 8) -> int:
    """The largest divisor of n not above `wanted` (8: GQA-8)."""
    return max(d for d in divisors(n) if d <= max(1, wanted))


def default_gqa_groups(model: ModelSpec) -> int:
    """The model's own KV heads when it is GQA, else the largest divisor of n_h up to 8."""
    a = model.attention
    if model.kind == "gqa":
        return a.num_key_value_heads
    return largest_divisor_up_to(a.num_attention_heads)


def variant_kv_dtype(kind: str, kv_dtype: str) -> str:
    """fp8_ds_mla only exists for the MLA latent: the other variants store plain fp8 instead."""
    return "fp8" if kv_dtype == "fp8_ds_mla" and kind != "mla" else kv_dtype


def gqa_group_choices(model: ModelSpec) -> list[int]:
    """KV-head counts a GQA variant of `model` can have: the divisors of n_h."""
    return divisors(model.attention.num_attention_heads)


class Variant(namedtuple("Variant", "label spec cache_layout kv_dtype")):
    """One same-width counterfactual of a model (a typed value; unpacks as
    (label: str, spec: ModelSpec, cache_layout: str, kv_dtype: str)). `key` names it for pages
    and links: 'mha', 'gqa', 'mqa', 'mla' (the latent) or 'mla-expanded'; `kind` is the
    attention kind. (collections.namedtuple: typing.NamedTuple would import `typing`, a tenth of
    the command line's start-up.)"""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def key(self) -> str:
        return "mla-expanded" if self.cache_layout == "expanded" else self.spec.kind


VARIANT_KEYS = ("mha", "gqa", "mqa", "mla", "mla-expanded")


def variant_specs(
    model: ModelSpec,
    kv_dtype: str = "auto",
    *,
    gqa_groups: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
) -> list[Variant]:
    """The same-width variants (`Variant`s): MHA, GQA-g, MQA, MLA (latent) and, unless the dtype
    is fp8_ds_mla, MLA expanded (see `spec.as_variant`). `auto` resolves to the model's
    torch_dtype; fp8_ds_mla becomes fp8 for non-MLA variants."""
    resolve_kv_dtype(model, kv_dtype)  # validates the user's choice against the real model
    if kv_dtype == "auto":
        kv_dtype = model.torch_dtype
    groups = default_gqa_groups(model) if gqa_groups is None else gqa_groups
    mla = as_variant(model, "mla", kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim)
    out = [
        ("MHA", as_variant(model, "mha"), "latent"),
        (f"GQA-{groups}", as_variant(model, "gqa", num_key_value_heads=groups), "latent"),
        ("MQA", as_variant(model, "mqa"), "latent"),
        ("MLA (latent)", mla, "latent"),
    ]
    if kv_dtype != "fp8_ds_mla":
        out.append(("MLA expanded", mla, "expanded"))
    return [Variant(label, spec, layout, variant_kv_dtype(spec.kind, kv_dtype)) for label, spec, layout in out]


def compare_variants(
    model: ModelSpec,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    *,
    gqa_groups: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    block_size: int | None = None,
) -> list[dict]:
    """The model's KV cache next to MHA, GQA (`gqa_groups`), MQA, MLA latent and MLA expanded of
    the same width (same layers, heads, d_h, windows; see `variant_specs`).

    Each row: `variant`, `kind`, `is_model` (the row is the model as configured), `kv_heads`
    (KV heads cached: n_kv, n_h for the expanded cache, None for the latent), `kv_dtype` (stored), `kv_bytes_per_token`,
    `kv_cache_bytes`, `vs_mha` (MHA bytes / this), `vs_mla_latent` (this / the MLA latent's
    bytes), `gqa_groups_equivalent` (this cache as a number of GQA groups: bytes / bytes of one
    K+V head of d_h).
    The MHA baseline for an MLA model uses d_h = qk_nope_head_dim (DeepSeek-V2 Table 1).
    """
    rows = []
    mha_bytes = one_head = None
    for label, spec, layout, dtype in variant_specs(model, kv_dtype, gqa_groups=gqa_groups,
                                                    kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim):
        per_token = kv_bytes_per_token(spec, dtype, layout)
        if mha_bytes is None:
            mha_bytes = per_token
            one_head = model.num_hidden_layers * 2 * row_bytes(model.attention.head_dim, dtype)
        rows.append({
            "variant": label,
            "key": "mla-expanded" if layout == "expanded" else spec.kind,
            "kind": spec.kind if layout == "latent" else "mla-expanded",
            "is_model": layout == "latent" and spec.attention == model.attention,
            # KV heads cached per token: none for the latent, every query head for the expanded cache.
            "kv_heads": (spec.attention.num_attention_heads if layout == "expanded" else None) if spec.is_mla
            else spec.attention.num_key_value_heads,
            "kv_dtype": dtype,
            "kv_bytes_per_token": per_token,
            "kv_cache_bytes": kv_cache_bytes(spec, context, batch, dtype, layout, block_size=block_size),
            "vs_mha": mha_bytes / per_token,
            "gqa_groups_equivalent": per_token / one_head,
        })
    latent = next(r["kv_bytes_per_token"] for r in rows if r["key"] == "mla")
    for r in rows:
        r["vs_mla_latent"] = r["kv_bytes_per_token"] / latent
    return rows
