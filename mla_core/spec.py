"""Model specs: frozen dataclasses whose field names are Hugging Face `config.json` names.

Symbols (docs/model.md; DeepSeek-V3 values in brackets):

    l       num_hidden_layers                      [61]
    n_h     num_attention_heads                    [128]
    n_kv    num_key_value_heads (MLA: unused)      [128]
    d_h     head_dim, else hidden_size // n_h      [MLA: qk_nope_head_dim, 128, the paper's d_h]
    d_c     kv_lora_rank (the KV latent)           [512]
    d_r     qk_rope_head_dim (decoupled RoPE key)  [64]
    d_nope  qk_nope_head_dim                       [128]
    d_v     v_head_dim                             [128]
    d_q     q_lora_rank (may be None)              [1536]

A spec is built by `mla_core.config.parse_config` from a config dict (presets go through the
same parser as uploaded files), or by `synthetic_model` for a hand-set architecture, and is
turned into the MHA / GQA / MQA / MLA counterfactuals of the same width by `as_variant`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import MLAError

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")


def model_memo(model, key, make):
    """`make()` computed once per model instance and kept on it (`key`: a hashable name).

    A ModelSpec is frozen and its fields immutable, so anything derived from it alone (layer
    groups, parameter counts) holds for its lifetime; pages ask for them many times a rerun.
    The cache lives in the instance's own `__dict__` (not a field: equality, hashing, repr
    and `dataclasses.replace` ignore it, and a replaced model starts empty)."""
    memo = model.__dict__.get("_memo")
    if memo is None:
        memo = {}
        object.__setattr__(model, "_memo", memo)
    try:
        return memo[key]
    except KeyError:
        value = memo[key] = make()
        return value


@dataclass(frozen=True)
class AttentionSpec:
    """Attention shape of one decoder layer (all layers share it).

    `head_dim` is d_h for MHA/GQA/MQA. For MLA it holds the paper's per-head width d_h
    (= `qk_nope_head_dim`), used only to cost the MHA/GQA/MQA counterfactuals of the same
    width (DeepSeek-V2 Table 1 convention: d_c = 4 d_h, d_r = d_h / 2).
    """

    num_attention_heads: int  # n_h, query heads
    num_key_value_heads: int  # n_kv (MHA: n_h, MQA: 1, GQA: groups); MLA: unused
    head_dim: int  # d_h
    kv_lora_rank: int | None = None  # d_c, the KV latent rank: set only for MLA
    qk_rope_head_dim: int | None = None  # d_r, decoupled RoPE key width, shared by all heads
    qk_nope_head_dim: int | None = None  # d_nope, per-head content q/k width
    v_head_dim: int | None = None  # d_v, per-head value width
    q_lora_rank: int | None = None  # d_q, query latent rank (None: no query compression)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kind(self) -> str:
        """'mla', 'mqa' (one KV head), 'mha' (n_kv == n_h) or 'gqa'."""
        if self.is_mla:
            return "mla"
        if self.num_key_value_heads == self.num_attention_heads:
            return "mha"
        if self.num_key_value_heads == 1:
            return "mqa"
        return "gqa"

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query/key: d_nope + d_r for MLA, d_h otherwise."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim


@dataclass(frozen=True)
class IndexerSpec:
    """DeepSeek-V3.2 lightning indexer (sparse attention): its own small per-token cache."""

    index_head_dim: int  # cached fp8 key width per token per layer (128)
    index_n_heads: int  # indexer query heads (64)
    index_topk: int | None = None  # tokens the main attention keeps (2048)


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts MLP structure (DeepSeek, Kimi, Qwen-MoE, GLM-MoE, gpt-oss)."""

    n_routed_experts: int  # E
    num_experts_per_tok: int  # k, routed experts per token
    moe_intermediate_size: int  # width of one routed expert's MLP
    moe_layers: tuple[bool, ...]  # per decoder layer: True where the MLP is MoE
    n_shared_experts: int = 0  # DeepSeek-style shared experts of moe_intermediate_size
    shared_expert_intermediate_size: int = 0  # Qwen-MoE style single shared expert width
    shared_expert_gate: bool = False  # Qwen-MoE: a 1 x hidden gate on the shared expert
    router_bias: bool = False  # gpt-oss router has a bias
    expert_bias: bool = False  # gpt-oss experts have biases
    zero_experts: int = 0  # LongCat-Flash: identity ("zero-computation") experts the router may pick

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)


# ---------------------------------------------------------------------------------------------
# Per-layer cache kinds (docs/model.md, "Every layer its own cache"). A new kind is one entry here.

# What a layer's attention side holds per token: `tokens` says how many tokens it keeps for a
# sequence of T ("all": T; "window": min(T, window); "none": it holds nothing of its own).
ATTENTION_LAYER_KINDS: dict[str, dict] = {
    "full": {"label": "full attention", "tokens": "all"},
    "sliding": {"label": "sliding-window attention", "tokens": "window"},
    "chunked": {"label": "chunked attention", "tokens": "window"},
    "shared": {"label": "shared KV (reads an earlier layer's cache)", "tokens": "none"},
    "none": {"label": "no attention (MLP / MoE block)", "tokens": "none"},
}

# Recurrent state kinds. Every one fits one shape (docs/model.md): per layer per sequence
#     conv elements  = (K - 1) * (H * P + 2 * G * N)
#     state elements = H * P * N
# with H heads (or channels) of width P, G key groups of width N, K the conv kernel:
#     Mamba-1          H = d_in = expand * hidden, P = 1, G = 0, N = d_state
#     Mamba-2          H = heads, P = head dim, G = n_groups, N = d_state
#     Gated DeltaNet   H = value heads, P = d_v, G = key heads, N = d_k
#     KDA              H = G = heads, P = N = head dim
#     lightning        H = heads, P = N = head dim, G = 0, K = 1 (no conv state)
RECURRENT_KINDS: dict[str, str] = {
    "mamba1": "Mamba-1",
    "mamba2": "Mamba-2",
    "gdn": "Gated DeltaNet",
    "kda": "KDA (Kimi Delta Attention)",
    "lightning": "lightning attention",
}


@dataclass(frozen=True)
class RecurrentSpec:
    """The per-sequence state one recurrent layer holds, in the common shape above.

    Units: element counts (multiply by the state dtype's bytes). `num_heads` H and `num_groups`
    G split over tensor-parallel ranks like KV heads (`state_elements(tp)`).
    """

    kind: str  # key of RECURRENT_KINDS
    num_heads: int  # H (Mamba-1: d_in channels)
    head_dim: int  # P
    num_groups: int  # G (0 when the kind has no separate key groups in its conv)
    state_size: int  # N
    conv_kernel: int  # K (1: no conv state)
    dt_rank: int = 0  # Mamba-1's low-rank time-step projection (parameters only)

    @property
    def label(self) -> str:
        return RECURRENT_KINDS[self.kind]

    def split(self, tp: int = 1, dp_attention: bool = False) -> tuple[int, int]:
        """(heads, groups) on one GPU: heads max(1, H // tp); groups G // tp when G divides by
        tp, else whole (docs/model.md); with attention DP the state stays whole on its GPU."""
        if dp_attention or tp == 1:
            return self.num_heads, self.num_groups
        heads = max(1, self.num_heads // tp)
        groups = self.num_groups // tp if (self.num_groups >= tp and self.num_groups % tp == 0) else self.num_groups
        return heads, groups

    def conv_elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        """Elements of the convolution state of one layer for one sequence on one GPU."""
        h, g = self.split(tp, dp_attention)
        return (self.conv_kernel - 1) * (h * self.head_dim + 2 * g * self.state_size)

    def ssm_elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        """Elements of the recurrent (SSM / delta-rule / linear-attention) state, one layer, one
        sequence, one GPU: H * P * N."""
        h, _ = self.split(tp, dp_attention)
        return h * self.head_dim * self.state_size

    def elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        """All state elements of one layer for one sequence on one GPU (conv + recurrent)."""
        return self.conv_elements(tp, dp_attention) + self.ssm_elements(tp, dp_attention)


@dataclass(frozen=True)
class LayerSpec:
    """What one decoder layer caches for each sequence.

    `attention` is a key of ATTENTION_LAYER_KINDS; `window` the tokens a sliding or chunked
    layer keeps (on a shared-KV layer: the sliding window it attends over, None for full
    attention; it keeps nothing itself); `kv_caches` how many caches of the model's attention
    shape the layer holds (LongCat-Flash: 2 MLA blocks a layer; 0 for shared and attention-free
    layers);
    `recurrent` whether the layer also holds the model's recurrent state (Falcon-H1: both);
    `draft` marks a multi-token-prediction / EAGLE draft layer added after the decoder.
    """

    attention: str = "full"
    window: int | None = None
    kv_caches: int = 1
    recurrent: bool = False
    draft: bool = False

    def tokens_held(self, context: int, block_size: int | None = None) -> int:
        """Tokens one of this layer's caches keeps for a sequence of `context` tokens: T, or
        min(T, window), rounded up to whole blocks of `block_size` when given; 0 for none."""
        rule = ATTENTION_LAYER_KINDS[self.attention]["tokens"]
        if rule == "none" or self.kv_caches == 0:
            return 0
        t = context if (rule == "all" or self.window is None) else min(context, self.window)
        if block_size:
            t = -(-t // block_size) * block_size
        return t


@dataclass(frozen=True)
class CacheGroup:
    """Equal layers grouped, as windows are grouped: `count` layers of one `layer` spec.

    `first_layer` is the 0-based index of the first such layer (first-seen order)."""

    layer: LayerSpec
    count: int
    first_layer: int


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only model, as its config describes it.

    `layers[i]` says what layer i caches (LayerSpec); draft layers, when turned on, follow the
    `num_hidden_layers` decoder layers. Every per-token cache of one model has the shape of
    `attention` (all families handled share one attention shape across layers), so a layer's
    per-token bytes are `kv_caches` x the attention shape's bytes. `recurrent` is the state
    shape of the layers with `recurrent=True`. Architecture flags (`attention_bias`,
    `mlp_gated`, ...) serve the parameter count only.
    """

    name: str
    model_type: str
    num_hidden_layers: int  # l (decoder layers, draft layers not included)
    hidden_size: int
    attention: AttentionSpec
    layers: tuple[LayerSpec, ...]
    recurrent: RecurrentSpec | None = None
    intermediate_size: int | None = None  # dense MLP width (None: no MLP counted)
    vocab_size: int | None = None  # None: no embeddings counted
    tie_word_embeddings: bool = False
    torch_dtype: str = "bf16"  # our name of the config's torch_dtype / dtype (default bf16)
    quant_method: str | None = None  # quantization_config.quant_method
    moe: MoESpec | None = None
    indexer: IndexerSpec | None = None
    # Parameter-count structure (docs/model.md "Parameter count from a config").
    attention_bias: bool = False  # biases on q, k, v
    o_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False
    mlp_gated: bool = True  # gate, up, down (SwiGLU/GeGLU) vs up, down
    norm_with_bias: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    norms_per_layer: int = 2  # Gemma-2/3: 4 (pre/post attention, pre/post MLP)
    qk_norm: bool = False  # Qwen3, Gemma-3: RMSNorm over q and k heads (head_dim each)
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head
    learned_pos_embeddings: int = 0  # rows of a learned absolute position table (GPT-3)
    num_nextn_predict_layers: int = 0  # DeepSeek / GLM MTP draft layers the checkpoint ships
    max_position_embeddings: int | None = None  # the longest context the model was trained for
    quant_modules_not_converted: tuple[str, ...] = ()  # quantization_config.modules_to_not_convert
    extra_dense_mlps: int = 0  # dense MLPs beside each MoE block (LongCat-Flash: 2)
    mlp_layers: tuple[bool, ...] | None = None  # layers with an MLP or MoE block (None: all; Nemotron-H: - and E)
    params_complete: bool = True  # False when a field only the parameter count needs is missing
    notes: tuple[str, ...] = ()  # assumptions the parser made, shown to the user

    @property
    def is_mla(self) -> bool:
        return self.attention.is_mla

    @property
    def kind(self) -> str:
        return self.attention.kind

    @property
    def num_layers(self) -> int:
        """All layers that hold a cache slot, draft layers included."""
        return len(self.layers)

    @property
    def draft_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.draft)

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Per layer: the tokens a sliding or chunked layer keeps, None otherwise."""
        return tuple(layer.window if ATTENTION_LAYER_KINDS[layer.attention]["tokens"] == "window" else None
                     for layer in self.layers)

    @property
    def default_weights_dtype(self) -> str:
        """From `quantization_config.quant_method` (fp8 -> fp8, mxfp4 -> mxfp4), else
        `torch_dtype` (docs/model.md)."""
        if self.quant_method in ("fp8", "mxfp4"):
            return self.quant_method
        return self.torch_dtype

    def cache_groups(self) -> list[CacheGroup]:
        """Equal layers grouped, in first-seen order (`CacheGroup`s)."""
        return list(model_memo(self, "cache_groups", self._cache_groups))

    def _cache_groups(self) -> tuple[CacheGroup, ...]:
        counts: dict[LayerSpec, list[int]] = {}
        for i, layer in enumerate(self.layers):
            if layer in counts:
                counts[layer][0] += 1
            else:
                counts[layer] = [1, i]
        return tuple(CacheGroup(layer, n, first) for layer, (n, first) in counts.items())

    def window_groups(self) -> list[tuple[int | None, int]]:
        """[(window or None, caches of the attention shape)] over layers holding per-token KV,
        in first-seen order: what per-token arithmetic sums over."""
        return list(model_memo(self, "window_groups", self._window_groups))

    def _window_groups(self) -> tuple[tuple[int | None, int], ...]:
        counts: dict[int | None, int] = {}
        for layer in self.layers:
            rule = ATTENTION_LAYER_KINDS[layer.attention]["tokens"]
            if rule == "none" or layer.kv_caches == 0:
                continue
            w = layer.window if rule == "window" else None
            counts[w] = counts.get(w, 0) + layer.kv_caches
        return tuple(counts.items())

    def attending_groups(self) -> list[tuple[str, int | None, int]]:
        """[(kind, window, blocks)] over the layers that compute attention, in first-seen order:
        what prefill attention sums over. A layer counts its caches of the attention shape
        (LongCat: 2 a layer); a shared-KV layer holds none but attends over an earlier layer's
        cache with its own window ("sliding", or "full" without one)."""
        return list(model_memo(self, "attending_groups", self._attending_groups))

    def _attending_groups(self) -> tuple[tuple[str, int | None, int], ...]:
        counts: dict[tuple[str, int | None], int] = {}
        for layer in self.layers:
            if layer.attention == "shared":
                key, n = ("sliding" if layer.window else "full", layer.window), 1
            elif ATTENTION_LAYER_KINDS[layer.attention]["tokens"] == "none":
                continue
            else:
                key = (layer.attention, layer.window if layer.attention in ("sliding", "chunked") else None)
                n = layer.kv_caches
            if n:
                counts[key] = counts.get(key, 0) + n
        return tuple((kind, w, n) for (kind, w), n in counts.items())

    @property
    def kv_layers(self) -> int:
        """Per-token caches of the attention shape, summed over layers (LongCat counts 2 a layer)."""
        return sum(n for _, n in model_memo(self, "window_groups", self._window_groups))

    @property
    def recurrent_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.recurrent)

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for w in self.layer_windows if w is not None)

    @property
    def is_hybrid(self) -> bool:
        """True when some layer is not plain full attention (windows, chunks, shared KV,
        recurrent state or attention-free blocks)."""
        return any(layer.attention != "full" or layer.recurrent or layer.kv_caches != 1 for layer in self.layers)


def with_draft_layers(model: ModelSpec, n: int) -> ModelSpec:
    """`model` with `n` draft (MTP / EAGLE) layers of its own full-attention kind appended
    (docs/model.md: DeepSeek-V3's MTP module is one MLA layer). n = 0 removes them.
    Raises MLAError for a negative or absurd n."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n > 1000:
        raise MLAError(f"draft layers must be a whole number from 0 to 1,000, got {n!r}")
    base = tuple(layer for layer in model.layers if not layer.draft)
    draft = (LayerSpec("full", None, 1, False, True),) * n
    return replace(model, layers=base + draft)


def full_attention(num_layers: int) -> tuple[LayerSpec, ...]:
    return (LayerSpec(),) * num_layers


def as_variant(
    model: ModelSpec,
    kind: str,
    *,
    num_key_value_heads: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
) -> ModelSpec:
    """The same model costed with another attention kind, at the same width.

    Same layers, query heads, d_h, windows and everything else; only the KV projection changes:
      - 'mha': n_kv = n_h; 'mqa': n_kv = 1; 'gqa': n_kv = `num_key_value_heads` (groups);
      - 'mla': d_c = `kv_lora_rank` (default 4 d_h) and d_r = `qk_rope_head_dim` (default
        d_h / 2), d_nope = d_v = d_h: DeepSeek-V2 Table 1's setting. An MLA model keeps its own
        d_c and d_r unless they are given.
    For an MLA model, d_h is `qk_nope_head_dim` (the paper's per-head width).
    Raises MLAError for an unknown kind or a GQA group count that does not divide n_h.
    """
    a = model.attention
    n_h, d_h = a.num_attention_heads, a.head_dim
    if kind == "mha":
        att = AttentionSpec(n_h, n_h, d_h)
    elif kind == "mqa":
        att = AttentionSpec(n_h, 1, d_h)
    elif kind == "gqa":
        g = num_key_value_heads if num_key_value_heads is not None else a.num_key_value_heads
        if not isinstance(g, int) or isinstance(g, bool) or g < 1 or n_h % g:
            raise MLAError(f"GQA groups must be a whole divisor of num_attention_heads={n_h}, got {g!r}")
        att = AttentionSpec(n_h, g, d_h)
    elif kind == "mla":
        d_c = kv_lora_rank if kv_lora_rank is not None else (a.kv_lora_rank or 4 * d_h)
        d_r = qk_rope_head_dim if qk_rope_head_dim is not None else (a.qk_rope_head_dim or max(1, d_h // 2))
        for field, v in (("kv_lora_rank", d_c), ("qk_rope_head_dim", d_r)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise MLAError(f"{field} must be a positive integer, got {v!r}")
        if a.is_mla:
            att = replace(a, kv_lora_rank=d_c, qk_rope_head_dim=d_r)
        else:
            att = AttentionSpec(n_h, n_h, d_h, d_c, d_r, d_h, d_h, None)
    else:
        raise MLAError(f"unknown attention kind {kind!r}; choose one of {', '.join(ATTENTION_KINDS)}")
    return replace(model, attention=att, name=f"{model.name} as {kind.upper()}")
