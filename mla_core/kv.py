"""KV-cache bytes: per token, per layer, per sequence and per batch (MODEL.md, "Cache bytes").

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

from .errors import MLAError
from .spec import ModelSpec, as_variant
from .units import KV_DTYPES, row_bytes
from .validate import MAX_BATCH, MAX_BLOCK, MAX_CONTEXT, MAX_TP, check_choice, check_int

CACHE_LAYOUTS = ("latent", "expanded")
INDEXER_SCALE_BYTES = 4  # one fp32 scale per token per layer (DeepSeek-V3.2 inference/model.py)
FP8_DS_MLA_TILE = 128  # FlashMLA: one fp32 scale per 128 latent values


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


def heads_per_gpu(heads: int, tp: int, dp_attention: bool = False) -> int:
    """Heads one GPU holds: all with attention DP, else max(1, heads // tp) (replicated, never split)."""
    if dp_attention or tp == 1:
        return heads
    return max(1, heads // tp)


def kv_bytes_per_token_layer(
    model: ModelSpec,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    *,
    tp: int = 1,
    dp_attention: bool = False,
) -> int:
    """Bytes one token adds to one layer's cache on one GPU (indexer included).

    Args: `kv_dtype` from KV_DTYPES; `cache_layout` 'latent' or 'expanded' (MLA only; other
    models have one layout and ignore it); `tp` tensor-parallel ranks; `dp_attention` keeps
    every head on the GPU that holds the sequence.
    Returns an int (bytes). Raises MLAError on a bad dtype, layout or tp.
    """
    check_choice("cache_layout", cache_layout, CACHE_LAYOUTS)
    check_int("tp", tp, maximum=MAX_TP)
    dtype = resolve_kv_dtype(model, kv_dtype, cache_layout)
    a = model.attention
    if a.is_mla:
        if cache_layout == "expanded":
            h = heads_per_gpu(a.num_attention_heads, tp, dp_attention)
            per_layer = h * (row_bytes(a.qk_nope_head_dim + a.qk_rope_head_dim, dtype) + row_bytes(a.v_head_dim, dtype))
        elif dtype == "fp8_ds_mla":
            tiles = -(-a.kv_lora_rank // FP8_DS_MLA_TILE)
            per_layer = a.kv_lora_rank + 4 * tiles + 2 * a.qk_rope_head_dim
        else:
            per_layer = row_bytes(a.kv_lora_rank + a.qk_rope_head_dim, dtype)
    else:
        n_kv = heads_per_gpu(a.num_key_value_heads, tp, dp_attention)
        per_layer = n_kv * 2 * row_bytes(a.head_dim, dtype)
    if model.indexer is not None:
        per_layer += model.indexer.index_head_dim + INDEXER_SCALE_BYTES
    return per_layer


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "auto", cache_layout: str = "latent", *,
                       tp: int = 1, dp_attention: bool = False) -> int:
    """Bytes one new token adds to one sequence, all layers, before any window cap (int)."""
    return model.num_hidden_layers * kv_bytes_per_token_layer(
        model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention
    )


def tokens_held(context: int, window: int | None, block_size: int | None = None) -> int:
    """Tokens one layer holds for one sequence of `context` tokens: min(T, window), rounded up
    to whole blocks of `block_size` when given."""
    t = context if window is None else min(context, window)
    if block_size:
        t = -(-t // block_size) * block_size
    return t


def sequence_tokens_all_layers(model: ModelSpec, context: int, block_size: int | None = None) -> int:
    """Sum over layers of the tokens held for one sequence (int)."""
    return sum(n * tokens_held(context, w, block_size) for w, n in model.window_groups())


def kv_cache_bytes(
    model: ModelSpec,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    *,
    block_size: int | None = None,
    tp: int = 1,
    dp_attention: bool = False,
) -> int:
    """`B * sum over layers of bytes(layer, T)`: the cache of `batch` sequences of `context`
    tokens, on one GPU when `tp` > 1. Returns an int. Raises MLAError on bad inputs."""
    check_int("context", context, maximum=MAX_CONTEXT)
    check_int("batch", batch, maximum=MAX_BATCH)
    if block_size is not None:
        check_int("block_size", block_size, maximum=MAX_BLOCK)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    return batch * per_layer * sequence_tokens_all_layers(model, context, block_size)


def kv_report(
    model: ModelSpec,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    block_size: int | None = None,
) -> dict:
    """Everything the `kv` command and the KV page print for one model, as a JSON-able dict.

    Keys: `kv_bytes_per_token` (all layers, before window caps), `kv_bytes_per_token_per_layer`,
    `kv_cache_bytes` (B sequences of T tokens), `kv_cache_bytes_per_sequence`, `kv_dtype`
    (resolved), and the inputs. Bytes are ints.
    """
    cache = kv_cache_bytes(model, context, batch, kv_dtype, cache_layout, block_size=block_size)
    dtype = resolve_kv_dtype(model, kv_dtype, cache_layout)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout)
    layout = cache_layout if model.is_mla else "kv_heads"
    return {
        "model": model.name,
        "attention": model.kind,
        "cache_layout": layout,
        "kv_dtype": dtype,
        "context": context,
        "batch": batch,
        "block_size": block_size,
        "num_hidden_layers": model.num_hidden_layers,
        "sliding_window_layers": model.num_sliding_layers,
        "kv_bytes_per_token_per_layer": per_layer,
        "kv_bytes_per_token": per_layer * model.num_hidden_layers,
        "indexer_bytes_per_token": (
            (model.indexer.index_head_dim + INDEXER_SCALE_BYTES) * model.num_hidden_layers if model.indexer else 0
        ),
        "kv_cache_bytes_per_sequence": cache // batch,
        "kv_cache_bytes": cache,
    }


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


def variant_specs(
    model: ModelSpec,
    kv_dtype: str = "auto",
    *,
    gqa_groups: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
) -> list[tuple[str, ModelSpec, str, str]]:
    """[(label, spec, cache_layout, kv_dtype)] of the same-width variants: MHA, GQA-g, MQA,
    MLA (latent) and, unless the dtype is fp8_ds_mla, MLA expanded (see `spec.as_variant`).
    `auto` resolves to the model's torch_dtype; fp8_ds_mla becomes fp8 for non-MLA variants."""
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
    return [(label, spec, layout, variant_kv_dtype(spec.kind, kv_dtype)) for label, spec, layout in out]


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
    latent = next(r["kv_bytes_per_token"] for r in rows if r["variant"] == "MLA (latent)")
    for r in rows:
        r["vs_mla_latent"] = r["kv_bytes_per_token"] / latent
    return rows
