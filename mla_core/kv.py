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

from .errors import MLAError
from .results import Result
from .spec import ATTENTION_LAYER_KINDS, ModelSpec, as_variant
from .units import KV_DTYPES, STATE_DTYPES, row_bytes
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


def tp_split_error(model: ModelSpec, tp: int) -> str | None:
    """Why tensor parallelism over `tp` GPUs cannot split `model`'s heads as engines do (vLLM:
    query heads divide by tp; KV heads divide by tp, or tp by them, which replicates them; the
    recurrent heads divide by tp), or None when it can."""
    a = model.attention
    if tp <= 1:
        return None
    if a.num_attention_heads % tp:
        return f"tp {tp} does not divide the {a.num_attention_heads} query heads of {model.name}"
    if not a.is_mla:
        n_kv = a.num_key_value_heads
        if (n_kv >= tp and n_kv % tp) or (n_kv < tp and tp % n_kv):
            return f"tp {tp} does not split the {n_kv} KV heads of {model.name} evenly (nor replicate them)"
    rec = model.recurrent
    if rec is not None and model.recurrent_layers and rec.num_heads % tp:
        return f"tp {tp} does not divide the {rec.num_heads} {rec.label} heads of {model.name}"
    return None


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
    """Bytes one new token adds to one sequence, all per-token layers, before any window or
    chunk cap (int): the attention shape's bytes x the caches the layers hold (`kv_layers`;
    shared-KV, recurrent and attention-free layers hold none)."""
    return model.kv_layers * kv_bytes_per_token_layer(
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
    """Sum over the per-token caches of the tokens each holds for one sequence (int)."""
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
    """`B * sum over layers of bytes(layer, T)`: the per-token cache of `batch` sequences of
    `context` tokens (recurrent state not included: see `state_bytes_per_sequence`), on one
    GPU when `tp` > 1. Returns an int. Raises MLAError on bad inputs."""
    check_int("context", context, maximum=MAX_CONTEXT)
    check_int("batch", batch, maximum=MAX_BATCH)
    if block_size is not None:
        check_int("block_size", block_size, maximum=MAX_BLOCK)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    return batch * per_layer * sequence_tokens_all_layers(model, context, block_size)


# ---------------------------------------------------------------------------------------------
# Recurrent state (Mamba-1/2, Gated DeltaNet, KDA, lightning): constant per sequence.

def resolve_state_dtype(model: ModelSpec, state_dtype: str = "auto") -> str:
    """The recurrent state's dtype: `auto` is the model's torch_dtype (the KV dtype does not
    change it; docs/model.md). Raises MLAError for a dtype outside STATE_DTYPES."""
    check_choice("state_dtype", state_dtype, STATE_DTYPES)
    return model.torch_dtype if state_dtype == "auto" else state_dtype


def state_bytes_per_layer(model: ModelSpec, state_dtype: str = "auto", *, tp: int = 1,
                          dp_attention: bool = False) -> int:
    """Bytes of one recurrent layer's state for one sequence on one GPU (0 without recurrent
    layers): elements (`spec.RecurrentSpec.elements`) x the state dtype's bytes.
    Nemotron-Nano-9B-v2's Mamba-2 layer: 1,347,584 elements = 2,695,168 B at bf16 (vllm#24280)."""
    check_int("tp", tp, maximum=MAX_TP)
    dtype = resolve_state_dtype(model, state_dtype)
    if model.recurrent is None:
        return 0
    return model.recurrent.elements(tp, dp_attention) * row_bytes(1, dtype)


def state_bytes_per_sequence(model: ModelSpec, state_dtype: str = "auto", *, tp: int = 1,
                             dp_attention: bool = False) -> int:
    """Recurrent state of one sequence, all recurrent layers, on one GPU (int bytes); it does
    not grow with the context."""
    return model.recurrent_layers * state_bytes_per_layer(model, state_dtype, tp=tp, dp_attention=dp_attention)


@dataclass(frozen=True)
class LayerGroup(Result):
    """Equal layers of a model, as the KV page's layer map and the JSON `layers` list show them.

    `kind` is the layer's attention kind (full, sliding, chunked, shared, none) joined with its
    recurrent kind ("full+mamba2" for Falcon-H1, "none+gdn" shown as "gdn"); `label` says it in
    words; `layer_indices` are 0-based. Bytes are per layer, for one sequence, on one GPU."""

    kind: str
    label: str
    layers: int
    layer_indices: tuple[int, ...]
    draft: bool
    kv_caches_per_layer: int
    bytes_per_token_per_layer: int
    tokens_held: int
    kv_bytes_per_layer: int
    state_bytes_per_layer: int
    bytes_per_layer: int  # kv + state, one sequence


def layer_groups(model: ModelSpec, context: int, kv_dtype: str = "auto", cache_layout: str = "latent", *,
                 state_dtype: str = "auto", block_size: int | None = None, tp: int = 1,
                 dp_attention: bool = False) -> list[LayerGroup]:
    """The model's layers grouped by what they cache (first-seen order), each with its bytes
    for one sequence of `context` tokens. Raises MLAError on bad inputs."""
    check_int("context", context, maximum=MAX_CONTEXT)
    per_token = kv_bytes_per_token_layer(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    state = state_bytes_per_layer(model, state_dtype, tp=tp, dp_attention=dp_attention)
    indices: dict = {}
    for i, layer in enumerate(model.layers):
        indices.setdefault(layer, []).append(i)
    out = []
    for layer, idx in indices.items():
        held = layer.tokens_held(context, block_size)
        kv = layer.kv_caches * per_token * held
        st = state if layer.recurrent else 0
        kind, label = layer_kind(model, layer)
        out.append(LayerGroup(kind, label, len(idx), tuple(idx), layer.draft, layer.kv_caches,
                              layer.kv_caches * per_token, held, kv, st, kv + st))
    return out


def layer_kind(model: ModelSpec, layer) -> tuple[str, str]:
    """(kind, label) of one layer of `model`: e.g. ("full", "full attention (MLA latent)"),
    ("sliding", "sliding-window attention (4,096 tokens)"), ("mamba2", "Mamba-2 state"),
    ("full+mamba2", "full attention (GQA) + Mamba-2 state")."""
    att = ATTENTION_LAYER_KINDS[layer.attention]
    attn_label = att["label"]
    if att["tokens"] != "none":
        shape = "MLA latent" if model.is_mla else model.kind.upper()
        extra = f", {layer.window:,} tokens" if att["tokens"] == "window" and layer.window else ""
        twice = f", {layer.kv_caches} caches" if layer.kv_caches > 1 else ""
        attn_label = f"{attn_label} ({shape}{extra}{twice})"
    elif layer.attention == "shared":  # it attends, over the cache it reads, as its own kind does
        attn_label += f", {layer.window:,}-token window" if layer.window else ", full attention"
    if layer.draft:
        attn_label = f"draft layer: {attn_label}"
    if not layer.recurrent:
        return layer.attention, attn_label
    rec = model.recurrent.kind if model.recurrent else "recurrent"
    rec_label = f"{model.recurrent.label if model.recurrent else 'recurrent'} state"
    if layer.attention == "none":
        return rec, rec_label
    return f"{layer.attention}+{rec}", f"{attn_label} + {rec_label}"


def all_full_attention_bytes(model: ModelSpec, context: int, kv_dtype: str = "auto", cache_layout: str = "latent",
                             *, block_size: int | None = None) -> int:
    """What one sequence of `context` tokens would hold if every layer (draft layers included)
    were full attention of the model's attention shape, with no recurrent state (int bytes):
    the hybrid's counterfactual on the KV page."""
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout)
    return per_layer * len(model.layers) * tokens_held(context, None, block_size)


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


def kv_report(
    model: ModelSpec,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    block_size: int | None = None,
    state_dtype: str = "auto",
) -> KVReport:
    """Everything the `kv` command and the KV page print for one model (a `KVReport`).
    Raises MLAError on bad inputs."""
    cache = kv_cache_bytes(model, context, batch, kv_dtype, cache_layout, block_size=block_size)
    dtype = resolve_kv_dtype(model, kv_dtype, cache_layout)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout)
    state_seq = state_bytes_per_sequence(model, state_dtype)
    layout = cache_layout if model.is_mla else "kv_heads"
    all_layers = len(model.layers)
    return KVReport(
        model=model.name,
        attention=model.kind,
        cache_layout=layout,
        kv_dtype=dtype,
        state_dtype=resolve_state_dtype(model, state_dtype),
        context=context,
        batch=batch,
        block_size=block_size,
        num_hidden_layers=model.num_hidden_layers,
        draft_layers=model.draft_layers,
        kv_layers=model.kv_layers,
        recurrent_layers=model.recurrent_layers,
        sliding_window_layers=model.num_sliding_layers,
        kv_bytes_per_token_per_layer=per_layer,
        kv_bytes_per_token=per_layer * model.kv_layers,
        indexer_bytes_per_token=(
            (model.indexer.index_head_dim + INDEXER_SCALE_BYTES) * model.kv_layers if model.indexer else 0
        ),
        kv_cache_bytes_per_sequence=cache // batch,
        kv_cache_bytes=cache,
        state_bytes_per_sequence=state_seq,
        state_bytes=batch * state_seq,
        cache_bytes=cache + batch * state_seq,
        all_full_attention_kv_bytes_per_token=per_layer * all_layers,
        all_full_attention_cache_bytes=batch * all_full_attention_bytes(model, context, kv_dtype, cache_layout,
                                                                        block_size=block_size),
        is_hybrid=model.is_hybrid,
        layers=tuple(layer_groups(model, context, kv_dtype, cache_layout, state_dtype=state_dtype,
                                  block_size=block_size)),
        notes=model.notes,
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
