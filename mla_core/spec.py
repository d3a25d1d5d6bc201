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

from dataclasses import dataclass, fields, replace

from .errors import MLAError
from .layers import (RECURRENT_KINDS, CacheSpec, Indexer, LayerSpec, RecurrentState,  # noqa: F401 (re-exported)
                     full_attention_layer)

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
# Per-layer caches: one class per kind in mla_core/layers.py (re-exported here for old imports).

@dataclass(frozen=True)
class CacheGroup:
    """Equal layers grouped, as vLLM's KVCacheGroupSpec groups them: `count` layers of one `layer`
    spec; `first_layer` is the 0-based index of the first such layer (first-seen order)."""

    layer: LayerSpec
    count: int
    first_layer: int


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only model, as its config describes it.

    `layers[i]` says what layer i caches (a `layers.LayerSpec` of typed caches, each with its
    own shape and dtype rule); draft layers, when turned on, follow the `num_hidden_layers`
    decoder layers and hold `mtp_layer`'s caches. `attention` is the model-wide attention shape
    of the config's plain fields: the shape most layers' caches carry, what the MHA / GQA / MQA
    / MLA counterfactuals and the what-if sliders change. Architecture flags (`attention_bias`,
    `mlp_gated`, ...) serve the parameter count only. `ssm_state_dtype` is the recurrent
    state's dtype the config declares (vLLM's `mamba_ssm_cache_dtype`), None when it says none.
    """

    name: str
    model_type: str
    num_hidden_layers: int  # l (decoder layers, draft layers not included)
    hidden_size: int
    attention: AttentionSpec
    layers: tuple[LayerSpec, ...]
    intermediate_size: int | None = None  # dense MLP width (None: no MLP counted)
    vocab_size: int | None = None  # None: no embeddings counted
    tie_word_embeddings: bool = False
    torch_dtype: str = "bf16"  # our name of the config's torch_dtype / dtype (default bf16)
    quant_method: str | None = None  # quantization_config.quant_method
    expert_weights_dtype: str | None = None  # routed experts stored apart (DeepSeek-V4 fp4, Kimi-K2.5 int4)
    moe: MoESpec | None = None
    indexer: Indexer | None = None  # the sparse-attention indexer the config declares (parameters)
    # Parameter-count structure (docs/model.md "Parameter count from a config").
    attention_bias: bool = False  # biases on q, k, v
    o_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False
    mlp_gated: bool = True  # gate, up, down (SwiGLU/GeGLU) vs up, down
    norm_with_bias: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    norms_per_layer: int = 2  # Gemma-2/3: 4 (pre/post attention, pre/post MLP)
    qk_norm: bool = False  # Qwen3, Gemma-3: RMSNorm over q and k heads (head_dim each)
    attn_output_gate: bool = False  # Qwen3.5: q_proj also yields a sigmoid gate on the output (n_h x d_h more)
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head
    learned_pos_embeddings: int = 0  # rows of a learned absolute position table (GPT-3)
    num_nextn_predict_layers: int = 0  # DeepSeek / GLM MTP draft layers the checkpoint ships
    max_position_embeddings: int | None = None  # the longest context the model was trained for
    quant_modules_not_converted: tuple[str, ...] = ()  # quantization_config.modules_to_not_convert
    extra_dense_mlps: int = 0  # dense MLPs beside each MoE block (LongCat-Flash: 2)
    mlp_layers: tuple[bool, ...] | None = None  # layers with an MLP or MoE block (None: all; Nemotron-H: - and E)
    mlp_widths: tuple[int | None, ...] | None = None  # per-layer dense MLP width (DeciLM block_configs)
    ssm_state_dtype: str | None = None  # mamba_ssm_cache_dtype / text_config.mamba_ssm_dtype
    mtp_layer: LayerSpec | None = None  # what one draft layer holds (None: full attention of `attention`)
    params_complete: bool = True  # False when a field only the parameter count needs is missing
    notes: tuple[str, ...] = ()  # assumptions the parser made, shown to the user
    pp_stage: tuple[int, int] = (0, 1)  # (stage, stages): a pipeline stage's slice of the model (`pipeline_stages`)

    def __hash__(self) -> int:
        # The fields' hash, as the dataclass would compute it, kept on the instance (frozen, its
        # fields immutable): the serving search keys its caches by model and pipeline stage.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def holds_embedding(self) -> bool:
        """The first pipeline stage (or the whole model) holds the input embedding."""
        return self.pp_stage[0] == 0

    @property
    def holds_lm_head(self) -> bool:
        """The last pipeline stage (or the whole model) holds the final norm and the LM head."""
        return self.pp_stage[0] == self.pp_stage[1] - 1

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
    def recurrent(self) -> RecurrentState | None:
        """The recurrent state shape of the model's recurrent layers (the first one), or None."""
        return model_memo(self, "recurrent", lambda: next(
            (c for layer in self.layers for c in layer.caches if isinstance(c, RecurrentState)), None))

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Per layer: the tokens a sliding or chunked layer keeps, None otherwise."""
        return tuple(layer.window for layer in self.layers)

    @property
    def default_weights_dtype(self) -> str:
        """From `quantization_config.quant_method` (fp8 -> fp8, mxfp4 -> mxfp4), else
        `torch_dtype` (docs/model.md)."""
        if self.quant_method in ("fp8", "mxfp4"):
            return self.quant_method
        return self.torch_dtype

    def cache_groups(self) -> list[CacheGroup]:
        """Equal layers grouped, in first-seen order (`CacheGroup`s): what every sum runs over."""
        return list(model_memo(self, "cache_groups", self._cache_groups))

    def _cache_groups(self) -> tuple[CacheGroup, ...]:
        counts: dict[LayerSpec, list[int]] = {}
        for i, layer in enumerate(self.layers):
            if layer in counts:
                counts[layer][0] += 1
            else:
                counts[layer] = [1, i]
        return tuple(CacheGroup(layer, n, first) for layer, (n, first) in counts.items())

    @property
    def kv_layers(self) -> int:
        """Per-token caches summed over layers (LongCat counts 2 a layer)."""
        return model_memo(self, "kv_layers", lambda: sum(g.layer.kv_caches * g.count for g in self.cache_groups()))

    @property
    def recurrent_layers(self) -> int:
        return sum(g.count for g in self.cache_groups() if g.layer.recurrent)

    @property
    def num_sliding_layers(self) -> int:
        """Layers holding a per-token cache with a sliding window or a chunk."""
        return sum(g.count for g in self.cache_groups() if any(c.windowed for c in g.layer.caches))

    @property
    def is_hybrid(self) -> bool:
        """True when some layer is not plain full attention of the model's shape (windows, chunks,
        compression, shared KV, recurrent state, attention-free blocks, its own heads)."""
        plain = full_attention_layer(self.attention, self.indexer).caches
        return any(g.layer.caches != plain for g in self.cache_groups() if not g.layer.draft)

    def windows(self) -> tuple[int, ...]:
        """The sliding windows and chunks of its caches, ascending: where per-sequence bytes and
        attention stop growing with the context (a breakpoint for curves over the context)."""
        out = {w for g in self.cache_groups() for c in g.layer.caches
               for w in (getattr(c, "window", None), getattr(c, "chunk", None)) if w}
        return tuple(sorted(out))

    def draft_caches(self) -> tuple[CacheSpec, ...]:
        """What one draft layer holds: `mtp_layer`'s caches, else full attention of the model's shape."""
        if self.mtp_layer is not None:
            return self.mtp_layer.caches
        return full_attention_layer(self.attention, self.indexer).caches


def with_draft_layers(model: ModelSpec, n: int) -> ModelSpec:
    """`model` with `n` draft (MTP / EAGLE) layers appended (docs/model.md: DeepSeek-V3's MTP
    module is one MLA layer; DeepSeek-V4's is a window-only compressed layer, its trailing
    `compress_ratios` entry). n = 0 removes them. Raises MLAError for a negative or absurd n."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n > 1000:
        raise MLAError(f"draft layers must be a whole number from 0 to 1,000, got {n!r}")
    base = tuple(layer for layer in model.layers if not layer.draft)
    draft = (LayerSpec(model.draft_caches(), True),) * n
    return replace(model, layers=base + draft)


def pp_layer_counts(num_layers: int, pp: int) -> tuple[int, ...]:
    """Decoder layers of each of `pp` pipeline stages, as vLLM's `get_pp_indices` splits them
    (vllm/distributed/utils.py; SGLang's distributed/utils.py keeps the same rule): num_layers // pp
    each, the remainder one apiece to the stages before the last, from the second-last back (the
    first and last stages hold the embedding and the LM head). TensorRT-LLM gives the remainder to
    the first stages instead (mapping.pp_layers: torch.tensor_split); the busiest stage holds
    ceil(num_layers / pp) layers under both. Raises MLAError unless 1 <= pp <= num_layers."""
    if isinstance(pp, bool) or not isinstance(pp, int) or not 1 <= pp <= num_layers:
        raise MLAError(f"pipeline stages must be a whole number from 1 to the {num_layers} decoder layers, got {pp!r}")
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        counts[-i] += 1
    return tuple(counts)


def pipeline_stages(model: ModelSpec, pp: int) -> tuple[ModelSpec, ...]:
    """The `pp` pipeline stages of `model`, each a ModelSpec of its own decoder layers
    (`pp_layer_counts`), so that every per-layer sum of the core (cache bytes, parameters, the
    estimate's layer groups) runs over one stage's layers. The first stage holds the input
    embedding (and learned positions), the last the final norm, the LM head (a tied table is
    held there too, as vLLM's last rank keeps it) and any draft (MTP) layers; `pp_stage` says
    which stage. pp = 1 gives (model,). Raises MLAError for a bad pp."""
    if pp == 1:
        return (model,)

    def make():
        counts = pp_layer_counts(model.num_hidden_layers, pp)
        decoder = [layer for layer in model.layers if not layer.draft]
        draft = tuple(layer for layer in model.layers if layer.draft)
        moe = model.moe
        out, start = [], 0
        for i, n in enumerate(counts):
            end = start + n
            last = i == pp - 1
            cut = (lambda t: None if t is None else tuple(t[start:end]))
            out.append(replace(
                model, name=f"{model.name} (stage {i + 1} of {pp})", num_hidden_layers=n,
                layers=tuple(decoder[start:end]) + (draft if last else ()),
                moe=replace(moe, moe_layers=cut(moe.moe_layers)) if moe is not None else None,
                mlp_layers=cut(model.mlp_layers), mlp_widths=cut(model.mlp_widths),
                # the stage's own matrices: the embedding on the first, the LM head (untied) on the last
                tie_word_embeddings=False, learned_pos_embeddings=model.learned_pos_embeddings if i == 0 else 0,
                pp_stage=(i, pp)))
            start = end
        return tuple(out)

    return model_memo(model, ("pipeline_stages", pp), make)


def distinct_stages(model: ModelSpec, pp: int) -> tuple[tuple[ModelSpec, int], ...]:
    """`pipeline_stages` with equal stages counted once: ((stage, how many stages run it), ...) in
    stage order of first appearance. Stages are equal when they hold the same layers, the same
    MoE / MLP pattern and the same ends (embedding, LM head), so every figure of one is every
    other's: a sum over stages is a sum over these weighted by their counts."""
    def make():
        seen: dict[tuple, list] = {}
        for st in pipeline_stages(model, pp):
            key = (st.layers, st.moe.moe_layers if st.moe else None, st.mlp_layers, st.mlp_widths,
                   st.holds_embedding, st.holds_lm_head, st.learned_pos_embeddings)
            if key in seen:
                seen[key][1] += 1
            else:
                seen[key] = [st, 1]
        return tuple((st, n) for st, n in seen.values())

    return model_memo(model, ("distinct_stages", pp), make)


def full_attention(num_layers: int, att: AttentionSpec) -> tuple[LayerSpec, ...]:
    """`num_layers` layers of full attention of the shape `att`."""
    return (full_attention_layer(att),) * num_layers


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
    The variant is kept on `model` (the last VARIANT_MEMO of them), so a rerun that asks again gets
    the same instance, with its own derived figures (`model_memo`) already computed.
    """
    memo = model_memo(model, "as_variant", dict)
    # Each argument with its type: True, 1.0 and numpy's 1 equal 1 but are refused where 1 is not.
    key = (kind,) + tuple((type(x), x) for x in (num_key_value_heads, kv_lora_rank, qk_rope_head_dim))
    try:
        return memo[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument: built (or refused) without the memo
        return _as_variant(model, kind, num_key_value_heads=num_key_value_heads, kv_lora_rank=kv_lora_rank,
                           qk_rope_head_dim=qk_rope_head_dim)
    variant = _as_variant(model, kind, num_key_value_heads=num_key_value_heads, kv_lora_rank=kv_lora_rank,
                          qk_rope_head_dim=qk_rope_head_dim)
    if len(memo) >= VARIANT_MEMO:  # what-if sliders ask for many d_c / d_r: the oldest goes first
        try:
            del memo[next(iter(memo))]
        except (KeyError, RuntimeError, StopIteration):  # another session's rerun got there first
            pass
    memo[key] = variant
    return variant


VARIANT_MEMO = 32


def _as_variant(model: ModelSpec, kind: str, *, num_key_value_heads, kv_lora_rank, qk_rope_head_dim) -> ModelSpec:
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
    return with_attention(model, att, name=f"{model.name} as {kind.upper()}")


def with_attention(model: ModelSpec, att: AttentionSpec, **changes) -> ModelSpec:
    """`model` with the model-wide attention shape `att`: every cache that carries the config's
    plain shape takes `att` (same tokens rule: windows, chunks, shared layers), caches with their
    own shape stay (`layers.CacheSpec.with_attention`); `changes` are further fields."""
    layers = tuple(layer.with_attention(att) for layer in changes.pop("layers", model.layers))
    mtp = model.mtp_layer.with_attention(att) if model.mtp_layer is not None else None
    return replace(model, attention=att, layers=layers, mtp_layer=mtp, **changes)
