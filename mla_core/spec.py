"""Model specs: frozen dataclasses whose field names are Hugging Face `config.json` names.

Symbols (MODEL.md; DeepSeek-V3 values in brackets):

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

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only model, as its config describes it.

    `layer_windows[i]` is the sliding window of layer i in tokens, or None for full attention.
    Architecture flags (`attention_bias`, `mlp_gated`, ...) serve the parameter count only.
    """

    name: str
    model_type: str
    num_hidden_layers: int  # l
    hidden_size: int
    attention: AttentionSpec
    layer_windows: tuple[int | None, ...]
    intermediate_size: int | None = None  # dense MLP width (None: no MLP counted)
    vocab_size: int | None = None  # None: no embeddings counted
    tie_word_embeddings: bool = False
    torch_dtype: str = "bf16"  # our name of the config's torch_dtype / dtype (default bf16)
    quant_method: str | None = None  # quantization_config.quant_method
    moe: MoESpec | None = None
    indexer: IndexerSpec | None = None
    # Parameter-count structure (MODEL.md "Parameter count from a config").
    attention_bias: bool = False  # biases on q, k, v
    o_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False
    mlp_gated: bool = True  # gate, up, down (SwiGLU/GeGLU) vs up, down
    norm_with_bias: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    norms_per_layer: int = 2  # Gemma-2/3: 4 (pre/post attention, pre/post MLP)
    qk_norm: bool = False  # Qwen3, Gemma-3: RMSNorm over q and k heads (head_dim each)
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head
    learned_pos_embeddings: int = 0  # rows of a learned absolute position table (GPT-3)
    num_nextn_predict_layers: int = 0  # DeepSeek MTP module: not counted (MODEL.md)
    max_position_embeddings: int | None = None  # the config's context limit, tokens (None: not stated)
    notes: tuple[str, ...] = ()  # assumptions the parser made, shown to the user

    @property
    def is_mla(self) -> bool:
        return self.attention.is_mla

    @property
    def kind(self) -> str:
        return self.attention.kind

    @property
    def default_weights_dtype(self) -> str:
        """fp8 when `quantization_config.quant_method` is fp8, else `torch_dtype` (MODEL.md)."""
        if self.quant_method == "fp8":
            return "fp8"
        return self.torch_dtype

    def window_groups(self) -> list[tuple[int | None, int]]:
        """[(window or None, number of layers)] in first-seen order."""
        counts: dict[int | None, int] = {}
        for w in self.layer_windows:
            counts[w] = counts.get(w, 0) + 1
        return list(counts.items())

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for w in self.layer_windows if w is not None)


def full_attention(num_layers: int) -> tuple[None, ...]:
    return (None,) * num_layers


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


def synthetic_model(
    attention: str,
    *,
    layers: int,
    heads: int,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    kv_lora_rank: int | None = None,
    rope_dim: int | None = None,
    nope_dim: int | None = None,
    v_dim: int | None = None,
    hidden_size: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int | None = None,
    torch_dtype: str = "bf16",
) -> ModelSpec:
    """A hand-set architecture (CLI `--attention ...`, the KV page's manual mode).

    Defaults: head_dim 128; MLA d_c = 4 d_h, d_r = d_h / 2, d_nope = d_h, d_v = d_nope
    (DeepSeek-V2 Table 1); hidden size = heads * head_dim. Counts what it is given: attention
    projections always, the MLP only with `intermediate_size`, embeddings only with
    `vocab_size` (MODEL.md, "Synthetic models"). Built through `parse_config`, so the same
    validation applies. Raises MLAError on bad or inconsistent sizes.
    """
    from .config import parse_config

    if attention not in ATTENTION_KINDS:
        raise MLAError(f"unknown --attention {attention!r}; choose one of {', '.join(ATTENTION_KINDS)}")
    if attention != "mla":
        given = [n for n, x in (("kv_lora_rank", kv_lora_rank), ("rope_dim", rope_dim), ("nope_dim", nope_dim),
                                ("v_dim", v_dim)) if x is not None]
        if given:
            raise MLAError(f"{', '.join(given)} set the MLA latent: use them with --attention mla, not {attention}")
    from .config import MAX_WIDTH

    for n, x in (("heads", heads), ("head_dim", head_dim)):
        if isinstance(x, int) and not isinstance(x, bool) and x > MAX_WIDTH:
            raise MLAError(f"{n} = {x:,} is larger than any model this tool accepts (max {MAX_WIDTH:,})")
    d_h = head_dim if head_dim is not None else 128
    cfg: dict = {
        "model_type": f"synthetic_{attention}",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "head_dim": d_h,
        "hidden_size": hidden_size if hidden_size is not None else _mul(heads, d_h),
        "torch_dtype": torch_dtype,
    }
    if attention == "mha":
        if kv_heads is not None and kv_heads != heads:
            raise MLAError(f"MHA has as many KV heads as heads ({heads}); got --kv-heads {kv_heads}")
        cfg["num_key_value_heads"] = heads
    elif attention == "mqa":
        if kv_heads is not None and kv_heads != 1:
            raise MLAError(f"MQA has one KV head; got --kv-heads {kv_heads}")
        cfg["num_key_value_heads"] = 1
    elif attention == "gqa":
        if kv_heads is None:
            raise MLAError("GQA needs --kv-heads (the number of KV groups)")
        cfg["num_key_value_heads"] = kv_heads
    else:
        nope = nope_dim if nope_dim is not None else d_h
        cfg.update(
            num_key_value_heads=heads,
            kv_lora_rank=kv_lora_rank if kv_lora_rank is not None else _mul(4, d_h),
            qk_rope_head_dim=rope_dim if rope_dim is not None else (d_h // 2 if isinstance(d_h, int) else d_h),
            qk_nope_head_dim=nope,
            v_head_dim=v_dim if v_dim is not None else nope,
        )
        cfg.pop("head_dim")
    if intermediate_size is not None:
        cfg["intermediate_size"] = intermediate_size
    if vocab_size is not None:
        cfg["vocab_size"] = vocab_size
    name = f"synthetic {attention.upper()}"
    return parse_config(cfg, name=name)


def _mul(a, b):
    # Multiply only well-typed ints; leave anything else for the parser to reject by name.
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a * b
    return None
