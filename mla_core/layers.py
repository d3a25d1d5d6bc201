"""One frozen class per cache kind: what one layer holds for one sequence, and what it costs.

The model of vLLM's `vllm/v1/kv_cache_interface.py` (`FullAttentionSpec`, `SlidingWindowSpec`,
`ChunkedLocalAttentionSpec`, `MLAAttentionSpec`, `MambaSpec`): each kind carries its own shape
(query heads, KV heads, K and V widths, latent widths, state shape) and answers for itself,
so kv, capacity, roofline, sweeps, params and the serving plan sum over a model's layers and
never branch on a kind's name (docs/model.md, "Every layer its own cache").

Kinds (symbols of docs/model.md; b = bytes of one cached value):

    FullAttention(n_h, n_kv, d_k, d_v)   n_kv (d_k + d_v) b a token             every token
    SlidingWindow(..., window)           the same                                min(T, window)
    ChunkedLocal(..., chunk)             the same                                min(T, chunk)
    MLAttention(n_h, d_c, d_r, ...)      (d_c + d_r) b a token (latent),         every token, or a
                                         n_h ((d_nope + d_r) + d_v) b expanded   window / chunk
    CompressedMLA(n_h, d, d_r, w, r)     DeepSeek-V4: the last w tokens as latents of d, plus
                                         floor(T / r) compressed latents, plus (r = 4) one
                                         indexer key per compressed entry; a float32
                                         compressor state per sequence
    SharedKV(source, window)             nothing of its own (reads an earlier layer's cache)
    NoCache()                            MLP or MoE block
    RecurrentState(kind, H, P, G, N, K)  conv (K - 1)(H P + 2 G N) + state H P N elements a
                                         sequence (Mamba-1/2, Gated DeltaNet, KDA, lightning,
                                         LFM2's short convolution)

An attention cache may carry an `Indexer` (sparse attention: DeepSeek-V3.2, GLM-5.2,
MiniMax-M3), whose key per token follows its own dtype rule.

Every method takes the resolved dtypes (`Precision`) and the split of one GPU (`tp` ranks,
`dp_attention`); token counts may be Python ints or numpy arrays (the sweeps pass arrays), and
the one tokens-held rule is `held_tokens`. Bytes are ints (a compressed layer's bytes per token
before caps may be a float: one compressed entry per r tokens).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .errors import MLAError
from .units import row_bytes

FP8_DS_MLA_TILE = 128  # FlashMLA: one fp32 scale per 128 latent values (DeepSeek-V3.2 / FlashMLA FP8 layout)
INDEXER_SCALE_BYTES = 4  # one fp32 scale per 128 index values (DeepSeek-V3.2 inference/model.py Indexer)
V4_SCALE_VALUES = 64  # DeepSeek-V4 fp8_ds_mla entry: one 1-byte (ue8m0) scale per 64 fp8 values
V4_ENTRY_ALIGN = 8  # ... padded to 8 bytes: 448 fp8 + 64 bf16 RoPE + 7 scales + 1 pad = 584 (vLLM, SGLang)
COMPRESSOR_STATE_BYTES = 4  # DeepSeek-V4's compressor keeps its running state in float32
ONE_BYTE_KV = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")


# --- dtypes and splits ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Precision:
    """The dtypes one model's caches are stored at, resolved (names of units.KV_DTYPES and
    STATE_DTYPES): `kv` the kv_cache_dtype, `layout` the MLA cache ('latent' or 'expanded'),
    `conv_state` the recurrent conv part, `ssm_state` the recurrent (SSM / delta-rule) part,
    `model` the model's torch_dtype (what index keys at "the model dtype" use)."""

    kv: str = "bf16"
    layout: str = "latent"
    conv_state: str = "bf16"
    ssm_state: str = "bf16"
    model: str = "bf16"


def value_bytes(dtype: str) -> int | float:
    """Bytes of one value of a plain dtype (fp32 4, bf16 2, fp8 1); block formats give their
    average (q8_0: 34/32)."""
    if dtype == "fp8_ds_mla":
        return 1
    per_32 = row_bytes(32, dtype)
    return per_32 // 32 if per_32 % 32 == 0 else per_32 / 32


def heads_per_gpu(heads: int, tp: int = 1, dp_attention: bool = False) -> int:
    """Heads one GPU holds: all with attention DP, else max(1, heads // tp) (replicated, never
    split below one; docs/model.md "Capacity per GPU")."""
    if dp_attention or tp == 1:
        return heads
    return max(1, heads // tp)


def held_tokens(context, window: int | None = None, chunk: int | None = None, block_size: int | None = None):
    """THE tokens-held rule (docs/model.md): entries one per-token cache keeps for a sequence of
    `context` tokens: T, min(T, window) on a sliding layer, min(T, chunk) on a chunked one,
    rounded up to whole blocks of `block_size` when given. `context` an int or a numpy array."""
    cap = window if window is not None else chunk
    t = context if cap is None else _minimum(context, cap)
    if block_size:
        t = -(-t // block_size) * block_size
    return t


def _minimum(t, cap: int):
    return t.clip(max=cap) if hasattr(t, "clip") else min(t, cap)


def keys_before(n: int, window: int | None = None, chunk: int | None = None) -> int:
    """Keys summed over the queries at positions 0..n-1 of one attention block (prefill's causal
    pairs): p + 1 with full attention, min(p + 1, window) on a sliding layer, (p mod chunk) + 1
    on a chunked one (Llama 4 attends within its chunk)."""
    if chunk is not None and n > chunk:
        whole, rest = divmod(n, chunk)
        return whole * (chunk * (chunk + 1) // 2) + rest * (rest + 1) // 2
    if window is None or n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


# --- indexers ----------------------------------------------------------------------------------

INDEXER_RULES = ("fp8_scaled", "kv", "key", "key_value")


@dataclass(frozen=True)
class Indexer:
    """A sparse-attention index key kept beside a layer's cache, one per cached entry.

    `rule` says how it is stored (docs/model.md, "Layouts of 2026"):
      fp8_scaled  `head_dim` fp8 values + a 4-byte fp32 scale per 128, whatever the KV dtype
                  (DeepSeek-V3.2 lightning indexer, GLM-5.2: 132 B at 128)
      kv          at the KV dtype; 1-byte KV dtypes store it as fp8_scaled (DeepSeek-V4)
      key         one key head of `head_dim` at the KV dtype (MiniMax-M3 with
                  `sparse_disable_index_value`; SGLang MiniMaxSparseKVPool's MHATokenToKOnlyPool,
                  index_dtype defaulting to the KV dtype)
      key_value   the same with its value head (MiniMax-M3 otherwise)
    `n_heads` the indexer's query heads (flops and parameters), `topk` the entries it keeps."""

    head_dim: int
    n_heads: int = 0
    topk: int | None = None
    rule: str = "fp8_scaled"

    def bytes_per_entry(self, p: Precision) -> int:
        """Bytes of one index entry (int)."""
        fp8 = self.head_dim + INDEXER_SCALE_BYTES * -(-self.head_dim // 128)
        if self.rule == "fp8_scaled" or (self.rule == "kv" and p.kv in ONE_BYTE_KV):
            return fp8
        if self.rule == "kv":
            return row_bytes(self.head_dim, p.kv)
        return row_bytes(self.head_dim, "fp8" if p.kv == "fp8_ds_mla" else p.kv) * (2 if self.rule == "key_value" else 1)

    def flops_per_entry(self) -> int:
        """Flops one query spends scoring one cached entry: 2 x heads x head_dim."""
        return 2 * self.n_heads * self.head_dim

    def params(self, hidden: int, q_in: int) -> int:
        """Its parameters. fp8_scaled / kv (DeepSeek-V3.2 lightning indexer: wq_b from the query
        latent `q_in`, wk, k_norm LayerNorm, weights_proj); key / key_value (MiniMax-M3: a
        query projection of `n_heads` heads and one key (and value) head from the hidden state)."""
        d, n = self.head_dim, self.n_heads
        if self.rule in ("key", "key_value"):
            return hidden * n * d + hidden * d * (2 if self.rule == "key_value" else 1) + 2 * d
        return q_in * n * d + hidden * d + 2 * d + hidden * n


# --- the base class ------------------------------------------------------------------------------

class CacheSpec:
    """What one layer holds for one sequence. Subclasses are frozen dataclasses; the defaults here
    are those of a layer that holds nothing and computes no attention (an MLP / MoE block)."""

    kind = "none"  # the JSON `kind` of a layer group
    holds_kv = False  # a per-token cache of its own
    attends = False  # computes attention (prefill pairs, decode flops)
    own_shape: bool = False  # True: its heads / widths are its own, not the config's plain fields

    @property
    def windowed(self) -> bool:
        """True for a per-token cache that keeps a sliding window or a chunk of the tokens."""
        return self.holds_kv and (getattr(self, "window", None) is not None or getattr(self, "chunk", None) is not None)

    # What it holds
    def tokens_held(self, context, block_size: int | None = None):
        """Entries of its per-token cache held for a sequence of `context` tokens (0: none)."""
        return 0 * context

    def bytes_per_token(self, p: Precision, tp: int = 1, dp_attention: bool = False) -> int | float:
        """Bytes one new token adds to one sequence on one GPU, before any window cap."""
        return 0

    def kv_bytes(self, context, p: Precision, tp: int = 1, dp_attention: bool = False,
                 block_size: int | None = None):
        """Bytes of the per-token cache of one sequence of `context` tokens on one GPU."""
        return 0 * context

    def state_elements(self, tp: int = 1, dp_attention: bool = False) -> tuple[int, int]:
        """(conv, recurrent) state elements of one sequence on one GPU; (0, 0) for none."""
        return 0, 0

    def state_bytes(self, p: Precision, tp: int = 1, dp_attention: bool = False) -> int:
        """The constant per-sequence part (recurrent state, compressor state) on one GPU."""
        return 0

    # What it costs
    def prefill_pairs(self, input_len: int, new_tokens: int) -> int:
        """(query, key) pairs a prefill of the last `new_tokens` of `input_len` computes."""
        return 0

    def prefill_flops_per_pair(self, tp: int = 1, dp_attention: bool = False) -> int:
        """Flops of one (query, key) pair in prefill on one GPU (MLA runs as MHA: expanded)."""
        return 0

    def decode_bytes(self, context, p: Precision, tp: int = 1, dp_attention: bool = False,
                     mla_path: str = "absorbed"):
        """Bytes one decode step reads and writes for one sequence at `context` on one GPU:
        the per-token cache read once, a state read and written (docs/model.md)."""
        return self.kv_bytes(context, p, tp, dp_attention) + 2 * self.state_bytes(p, tp, dp_attention)

    def decode_flops(self, context, tp: int = 1, dp_attention: bool = False, mla_path: str = "absorbed"):
        """Flops one decode step spends for one sequence at `context` on one GPU."""
        return 0 * context

    def attention_heads(self, tp: int = 1, dp_attention: bool = False) -> int:
        """Query heads of its attention on one GPU (0 without attention)."""
        return 0

    def op_shape(self, model, p: Precision, tp: int = 1, dp_attention: bool = False) -> dict:
        """The shape the estimate's attention ops take on one GPU (serving/step.py AttentionShape's
        fields): `mla` (a latent cache), query `heads` and `kv_heads` on the GPU, `head_dim` (K) and
        `v_dim`, the latent's `d_c`, `d_r`, `d_nope`, `d_v`, `q_lora`, `qk_norm`, `kv_token_bytes`
        one cached entry on the GPU, `decode_flops` per query head per entry (absorbed) and
        `prefill_flops` per head per pair. Only kinds that attend have one."""
        raise NotImplementedError(f"{type(self).__name__} has no attention")

    def projection_params(self, model) -> int:
        """Parameters of its attention block (projections, their biases and norms, its indexer),
        for `model`'s hidden size and flags (`spec.ModelSpec`); 0 without attention."""
        return 0

    def mixer_params(self, model) -> int:
        """Parameters of a recurrent mixer (Mamba, DeltaNet, KDA, lightning, short conv); 0 otherwise."""
        return 0

    def indexer_params(self, model) -> int:
        """The sparse-attention indexer's part of `projection_params` (0 without one)."""
        ix = getattr(self, "indexer", None)
        return ix.params(model.hidden_size, model.attention.q_lora_rank or model.hidden_size) if ix else 0

    # How it splits
    def tp_error(self, tp: int) -> str | None:
        """Why `tp` ranks cannot split it as the engines do, or None."""
        return None

    # How it is shown
    @property
    def label(self) -> str:
        return "no attention (MLP / MoE block)"

    def shape(self) -> dict:
        """Its shape as plain fields for the layer map and the JSON (`kv_heads`, `k_dim`, ...)."""
        return {}

    def with_attention(self, att) -> "CacheSpec":
        """The same tokens rule with the model's attention shape `att` (a `spec.AttentionSpec`):
        what-if changes and the MHA / GQA / MQA / MLA counterfactuals. A kind with its own
        shape, or none, is returned unchanged."""
        return self


def _attention_cache_for(att, window: int | None = None, chunk: int | None = None,
                         indexer: Indexer | None = None) -> CacheSpec:
    """The per-token cache of the model-wide attention shape `att` with a tokens rule."""
    if att.is_mla:
        return MLAttention(att.num_attention_heads, att.kv_lora_rank, att.qk_rope_head_dim, att.qk_nope_head_dim,
                           att.v_head_dim, indexer=indexer, window=window, chunk=chunk)
    base = dict(num_heads=att.num_attention_heads, num_kv_heads=att.num_key_value_heads, k_dim=att.head_dim,
                v_dim=att.v_head_dim or att.head_dim, indexer=indexer)
    if window is not None:
        return SlidingWindow(**base, window=window)
    if chunk is not None:
        return ChunkedLocal(**base, chunk=chunk)
    return FullAttention(**base)


def attention_cache(att, window: int | None = None, chunk: int | None = None,
                    indexer: Indexer | None = None) -> CacheSpec:
    """Public: the cache a layer of the model-wide shape `att` holds (full, or with a window or a
    chunk); see `_attention_cache_for`."""
    return _attention_cache_for(att, window, chunk, indexer)


# --- MHA / GQA / MQA ----------------------------------------------------------------------------

class _PerTokenAttention(CacheSpec):
    """What every per-token attention cache of one entry a token shares (full, sliding, chunked,
    MLA): entries held by the one tokens-held rule, bytes = `entry_bytes` x entries, causal prefill
    pairs with its window or chunk, `num_heads` query heads split over TP."""

    def tokens_held(self, context, block_size=None):
        return held_tokens(context, self.window, self.chunk, block_size)

    def bytes_per_token(self, p, tp=1, dp_attention=False):
        return self.entry_bytes(p, tp, dp_attention)

    def kv_bytes(self, context, p, tp=1, dp_attention=False, block_size=None):
        return self.entry_bytes(p, tp, dp_attention) * self.tokens_held(context, block_size)

    def prefill_pairs(self, input_len, new_tokens):
        cached = input_len - new_tokens
        return keys_before(input_len, self.window, self.chunk) - keys_before(cached, self.window, self.chunk)

    def attention_heads(self, tp=1, dp_attention=False):
        return heads_per_gpu(self.num_heads, tp, dp_attention)


@dataclass(frozen=True)
class FullAttention(_PerTokenAttention):
    """Full attention over every token: `num_kv_heads` K heads of `k_dim` and V heads of `v_dim`
    (K and V may differ: MiMo-V2), queried by `num_heads` heads.
    Per token: n_kv (row(d_k) + row(d_v)) bytes (+ the indexer's key)."""

    num_heads: int
    num_kv_heads: int
    k_dim: int
    v_dim: int
    indexer: Indexer | None = None
    own_shape: bool = False

    kind = "full"
    holds_kv = True
    attends = True
    window = None
    chunk = None


    def entry_bytes(self, p: Precision, tp: int = 1, dp_attention: bool = False) -> int:
        """Bytes of one cached token on one GPU: K and V rows of its KV heads + the index key."""
        n_kv = heads_per_gpu(self.num_kv_heads, tp, dp_attention)
        out = n_kv * (row_bytes(self.k_dim, p.kv) + row_bytes(self.v_dim, p.kv))
        return out + (self.indexer.bytes_per_entry(p) if self.indexer else 0)


    def op_shape(self, model, p, tp=1, dp_attention=False):
        per_head = self.flops_per_key() // self.num_heads
        return dict(mla=False, heads=self.attention_heads(tp, dp_attention),
                    kv_heads=heads_per_gpu(self.num_kv_heads, tp, dp_attention), head_dim=self.k_dim, d_c=0, d_r=0,
                    d_nope=0, d_v=0, q_lora=0, qk_norm=model.qk_norm, kv_token_bytes=self.entry_bytes(p, tp, dp_attention),
                    decode_flops=per_head, prefill_flops=per_head, v_dim=self.v_dim)

    def flops_per_key(self, tp: int = 1, dp_attention: bool = False, mla_path: str = "absorbed") -> int:
        """QK^T and PV: h (2 d_k + 2 d_v) a cached token, h query heads on the GPU (+ the indexer);
        `mla_path` does not apply."""
        h = self.attention_heads(tp, dp_attention)
        return h * (2 * self.k_dim + 2 * self.v_dim) + (self.indexer.flops_per_entry() if self.indexer else 0)

    def prefill_flops_per_pair(self, tp=1, dp_attention=False):
        return self.flops_per_key(tp, dp_attention)

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        return self.flops_per_key(tp, dp_attention) * self.tokens_held(context)

    def projection_params(self, model) -> int:
        """q, k, v, o (+ biases where the architecture has them, Qwen3 / Gemma q_norm and k_norm,
        gpt-oss sinks) + the indexer's (docs/model.md "Parameter count")."""
        h, n_h, n_kv, d_k, d_v = model.hidden_size, self.num_heads, self.num_kv_heads, self.k_dim, self.v_dim
        total = h * n_h * d_k + h * n_kv * (d_k + d_v) + n_h * d_v * h
        if getattr(model, "attn_output_gate", False):
            total += h * n_h * d_v
        if model.attention_bias:
            total += n_h * d_k + n_kv * (d_k + d_v)
        if model.qk_norm:
            total += 2 * d_k
        if model.o_bias:
            total += h
        if model.attn_sinks:
            total += n_h
        return total + self.indexer_params(model)

    def tp_error(self, tp):
        if tp <= 1:
            return None
        if self.num_heads % tp:
            return f"tp {tp} does not divide the {self.num_heads} query heads"
        n_kv = self.num_kv_heads
        if (n_kv >= tp and n_kv % tp) or (n_kv < tp and tp % n_kv):
            return f"tp {tp} does not split the {n_kv} KV heads evenly (nor replicate them)"
        return None

    @property
    def variant(self) -> str:
        """'mha', 'mqa' or 'gqa' by its heads."""
        if self.num_kv_heads == self.num_heads:
            return "mha"
        return "mqa" if self.num_kv_heads == 1 else "gqa"

    def _shape_text(self) -> str:
        widths = f"d {self.k_dim}" if self.k_dim == self.v_dim else f"K {self.k_dim} + V {self.v_dim}"
        heads = f"{self.num_kv_heads} KV head{'s' if self.num_kv_heads != 1 else ''}"
        text = f"{self.variant.upper()}, {heads}, {widths}"
        return text + (f", index key {self.indexer.head_dim}" if self.indexer else "")

    @property
    def label(self) -> str:
        return f"full attention ({self._shape_text()})"

    def shape(self):
        out = {"attention": self.variant, "num_heads": self.num_heads, "kv_heads": self.num_kv_heads,
               "k_dim": self.k_dim, "v_dim": self.v_dim}
        if self.window is not None:
            out["window"] = self.window
        if self.chunk is not None:
            out["chunk"] = self.chunk
        if self.indexer:
            out["index_dim"] = self.indexer.head_dim
        return out

    def with_attention(self, att):
        if self.own_shape:
            return self
        return _attention_cache_for(att, self.window, self.chunk, self.indexer)


@dataclass(frozen=True)
class SlidingWindow(FullAttention):
    """Sliding-window attention: the same per-token bytes, holding min(T, window) tokens."""

    window: int = 0

    kind = "sliding"

    @property
    def label(self):
        return f"sliding-window attention ({self._shape_text()}, {self.window:,} tokens)"


@dataclass(frozen=True)
class ChunkedLocal(FullAttention):
    """Chunked local attention (Llama 4's RoPE layers): min(T, chunk) tokens held, each query
    attends within its chunk of `attention_chunk_size` tokens."""

    chunk: int = 0

    kind = "chunked"

    @property
    def label(self):
        return f"chunked attention ({self._shape_text()}, {self.chunk:,} tokens)"


# --- MLA -----------------------------------------------------------------------------------------

MLA_PATHS = ("absorbed", "recompute", "expanded")


@dataclass(frozen=True)
class MLAttention(_PerTokenAttention):
    """Multi-head latent attention (DeepSeek-V2 section 2.1): the latent c_KV of d_c and the
    decoupled RoPE key of d_r per token, shared by all `num_heads` heads (no head axis: whole on
    every TP rank); `layout` 'expanded' caches per-head K (d_nope + d_r) and V (d_v) instead.
    fp8_ds_mla (FlashMLA): d_c fp8 + 4 B per 128 latent values + d_r bf16 (656 B at 512 / 64).
    A window or chunk (an MLA counterfactual of a sliding model) caps the tokens held."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    indexer: Indexer | None = None
    window: int | None = None
    chunk: int | None = None
    own_shape: bool = False

    holds_kv = True
    attends = True

    @property
    def kind(self) -> str:  # the tokens rule, as the JSON always named MLA layers
        return "sliding" if self.window is not None else "chunked" if self.chunk is not None else "full"


    def entry_bytes(self, p: Precision, tp: int = 1, dp_attention: bool = False) -> int:
        d_c, d_r = self.kv_lora_rank, self.qk_rope_head_dim
        if p.layout == "expanded":
            h = heads_per_gpu(self.num_heads, tp, dp_attention)
            out = h * (row_bytes(self.qk_nope_head_dim + d_r, p.kv) + row_bytes(self.v_head_dim, p.kv))
        elif p.kv == "fp8_ds_mla":
            out = d_c + 4 * -(-d_c // FP8_DS_MLA_TILE) + 2 * d_r
        else:
            out = row_bytes(d_c + d_r, p.kv)
        return out + (self.indexer.bytes_per_entry(p) if self.indexer else 0)


    def op_shape(self, model, p, tp=1, dp_attention=False):
        n = self.num_heads
        return dict(mla=True, heads=self.attention_heads(tp, dp_attention), kv_heads=1, head_dim=self.qk_nope_head_dim,
                    d_c=self.kv_lora_rank, d_r=self.qk_rope_head_dim, d_nope=self.qk_nope_head_dim, d_v=self.v_head_dim,
                    q_lora=model.attention.q_lora_rank or 0, qk_norm=model.qk_norm,
                    kv_token_bytes=self.entry_bytes(p, tp, dp_attention),
                    decode_flops=self.flops_per_key(1, False, "absorbed") // n,
                    prefill_flops=self.flops_per_key(1, False, "expanded") // n, v_dim=self.v_head_dim)

    def flops_per_key(self, tp: int = 1, dp_attention: bool = False, mla_path: str = "absorbed") -> int:
        """Per cached token, h query heads on the GPU (docs/model.md "Decode step roofline"):
        absorbed h (2 (d_c + d_r) + 2 d_c); expanded h (2 (d_nope + d_r) + 2 d_v); recompute the
        expanded flops + 2 d_c h (d_nope + d_v) to rebuild K and V; + the indexer's scoring."""
        h = self.attention_heads(tp, dp_attention)
        d_c, d_r, d_n, d_v = self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim
        if mla_path == "absorbed":
            out = h * (2 * (d_c + d_r) + 2 * d_c)
        else:
            out = h * (2 * (d_n + d_r) + 2 * d_v)
            if mla_path == "recompute":
                out += 2 * d_c * h * (d_n + d_v)
        return out + (self.indexer.flops_per_entry() if self.indexer else 0)

    def prefill_flops_per_pair(self, tp=1, dp_attention=False):
        # Prefill is compute bound and runs MLA as MHA over expanded K and V (DeepSeek-V2 section 2.1).
        return self.flops_per_key(tp, dp_attention, "expanded")

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        return self.flops_per_key(tp, dp_attention, mla_path) * self.tokens_held(context)

    def projection_params(self, model) -> int:
        """q_a, q_a_norm, q_b (or q_proj), kv_a to d_c + d_r, kv_a_norm, kv_b to n_h (d_nope + d_v),
        o_proj (DeepSeek-V2 section 2.1) + the indexer's."""
        h, n_h, q_lora = model.hidden_size, self.num_heads, model.attention.q_lora_rank
        d_c, d_r, d_n, d_v = self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim
        q = (h * q_lora + q_lora + q_lora * n_h * (d_n + d_r)) if q_lora else h * n_h * (d_n + d_r)
        kv = h * (d_c + d_r) + d_c + d_c * n_h * (d_n + d_v)
        total = q + kv + n_h * d_v * h + (h if model.o_bias else 0) + (n_h if model.attn_sinks else 0)
        return total + self.indexer_params(model)

    def tp_error(self, tp):
        if tp > 1 and self.num_heads % tp:
            return f"tp {tp} does not divide the {self.num_heads} query heads"
        return None

    @property
    def label(self):
        base = {"full": "full attention", "sliding": "sliding-window attention", "chunked": "chunked attention"}[self.kind]
        extra = f", {self.window or self.chunk:,} tokens" if self.kind != "full" else ""
        index = f", index key {self.indexer.head_dim}" if self.indexer else ""
        return f"{base} (MLA latent{extra}{index})"

    def shape(self):
        out = {"attention": "mla", "num_heads": self.num_heads, "kv_lora_rank": self.kv_lora_rank,
               "qk_rope_head_dim": self.qk_rope_head_dim, "k_dim": self.kv_lora_rank + self.qk_rope_head_dim,
               "v_dim": self.kv_lora_rank}
        for key in ("window", "chunk"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.indexer:
            out["index_dim"] = self.indexer.head_dim
        return out

    def with_attention(self, att):
        if self.own_shape:
            return self
        return _attention_cache_for(att, self.window, self.chunk, self.indexer)


@dataclass(frozen=True)
class CompressedMLA(CacheSpec):
    """DeepSeek-V4 compressed attention (`compress_ratios[i]` = r): every layer keeps the last
    `window` tokens as latents of `head_dim` (K = V, the last `qk_rope_head_dim` dims RoPE); a
    layer with r > 0 adds one compressed latent per r tokens; ratio-4 layers add one `indexer`
    key per compressed entry (the lightning indexer picks `topk` of them). Entries: `head_dim`
    values at the KV dtype (bf16: 1,024 B), or the engines' fp8_ds_mla entry of 584 B (448 fp8 +
    64 bf16 RoPE dims + 7 ue8m0 scales + 1 pad; vLLM DeepseekV4 get_kv_cache_shape, SGLang
    asserts 584). Each compressed layer holds a float32 compressor state per sequence,
    2 coff r coff head_dim 4 B (coff 2 at r = 4, else 1), and at r = 4 the indexer's own
    compressor the same with its head_dim (DeepSeek's inference/model.py; vLLM
    CompressorStateCache; SGLang deepseek_v4_memory_pool.py). No head axis: whole on every rank."""

    num_heads: int
    head_dim: int
    qk_rope_head_dim: int
    window: int
    compress_ratio: int = 0
    indexer: Indexer | None = None
    own_shape: bool = True
    q_lora_rank: int = 0  # parameters only: wq_a / wq_b through the query latent
    o_lora_rank: int = 0  # parameters only: the grouped low-rank output (wo_a, wo_b)
    o_groups: int = 1

    kind = "compressed"
    holds_kv = True
    attends = True
    windowed = False  # its window is one part; the compressed latents keep the whole context

    def entry_bytes(self, p: Precision) -> int:
        """Bytes of one latent entry (window or compressed)."""
        if p.kv in ONE_BYTE_KV:
            nope = self.head_dim - self.qk_rope_head_dim
            raw = nope + 2 * self.qk_rope_head_dim + -(-nope // V4_SCALE_VALUES)
            return -(-raw // V4_ENTRY_ALIGN) * V4_ENTRY_ALIGN
        return row_bytes(self.head_dim, p.kv)

    def compressed_entries(self, context, block_size: int | None = None):
        """floor(T / r) compressed latents (0 without compression), in whole blocks when given."""
        if not self.compress_ratio:
            return 0 * context
        n = context // self.compress_ratio
        return -(-n // block_size) * block_size if block_size else n

    def tokens_held(self, context, block_size=None):
        """Entries held: the window's latents plus the compressed ones."""
        return held_tokens(context, self.window, None, block_size) + self.compressed_entries(context, block_size)

    def _index_bytes(self, p: Precision) -> int:
        return self.indexer.bytes_per_entry(p) if self.indexer else 0

    def bytes_per_token(self, p, tp=1, dp_attention=False):
        e = self.entry_bytes(p)
        if not self.compress_ratio:
            return e
        extra = e + self._index_bytes(p)
        return e + (extra // self.compress_ratio if extra % self.compress_ratio == 0 else extra / self.compress_ratio)

    def kv_bytes(self, context, p, tp=1, dp_attention=False, block_size=None):
        e = self.entry_bytes(p)
        window = held_tokens(context, self.window, None, block_size)
        compressed = self.compressed_entries(context, block_size)
        return e * window + (e + self._index_bytes(p)) * compressed

    def state_bytes(self, p, tp=1, dp_attention=False):
        r = self.compress_ratio
        if not r:
            return 0
        coff = 2 if r == 4 else 1
        per_dim = 2 * coff * r * coff * COMPRESSOR_STATE_BYTES
        return per_dim * self.head_dim + (per_dim * self.indexer.head_dim if self.indexer else 0)

    def decode_bytes(self, context, p, tp=1, dp_attention=False, mla_path="absorbed"):
        return self.kv_bytes(context, p) + 2 * self.state_bytes(p)

    def prefill_pairs(self, input_len, new_tokens):
        cached = input_len - new_tokens
        pairs = keys_before(input_len, self.window) - keys_before(cached, self.window)
        if self.compress_ratio:  # each query also sees the compressed entries before it
            r = self.compress_ratio
            pairs += _compressed_keys(input_len, r) - _compressed_keys(cached, r)
        return pairs

    def attention_heads(self, tp=1, dp_attention=False):
        return heads_per_gpu(self.num_heads, tp, dp_attention)

    def op_shape(self, model, p, tp=1, dp_attention=False):
        # The projections are costed as MLA's (q through the query latent, one latent of d a token).
        d_c = self.head_dim - self.qk_rope_head_dim
        per_head = self.flops_per_key() // self.num_heads
        return dict(mla=True, heads=self.attention_heads(tp, dp_attention), kv_heads=1, head_dim=d_c, d_c=d_c,
                    d_r=self.qk_rope_head_dim, d_nope=d_c, d_v=self.head_dim, q_lora=self.q_lora_rank, qk_norm=False,
                    kv_token_bytes=self.entry_bytes(p), decode_flops=per_head, prefill_flops=per_head,
                    v_dim=self.head_dim)

    def flops_per_key(self, tp: int = 1, dp_attention: bool = False, mla_path: str = "absorbed") -> int:
        """h (2 d + 2 d) per entry attended: the scores and the output on the shared latent."""
        return self.attention_heads(tp, dp_attention) * 4 * self.head_dim

    def prefill_flops_per_pair(self, tp=1, dp_attention=False):
        return self.flops_per_key(tp, dp_attention)

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        out = self.flops_per_key(tp, dp_attention) * self.tokens_held(context)
        if self.indexer:
            out = out + self.indexer.flops_per_entry() * self.compressed_entries(context)
        return out

    def projection_params(self, model) -> int:
        """DeepSeek-V4's attention block (its inference/model.py): wq_a, q_norm, wq_b through the
        query latent; wkv to one latent of d, kv_norm; the grouped low-rank output wo_a
        (o_lora x n_h d) and wo_b (h x o_groups o_lora); a sink per head; a compressed layer's
        compressor (wkv and wgate to coff d, a positional table r x coff d, a norm) and, at r = 4,
        the indexer (wq_b, weights_proj) with its own compressor."""
        h, n_h, d, q_lora = model.hidden_size, self.num_heads, self.head_dim, self.q_lora_rank
        q = (h * q_lora + q_lora + q_lora * n_h * d) if q_lora else h * n_h * d
        o = (self.o_lora_rank * n_h * d + h * self.o_groups * self.o_lora_rank) if self.o_lora_rank else n_h * d * h
        total = q + h * d + d + o + n_h
        if self.compress_ratio:
            total += self._compressor_params(h, d)
        return total + self.indexer_params(model)

    def indexer_params(self, model) -> int:
        ix = self.indexer
        if ix is None:
            return 0
        h = model.hidden_size
        return (self.q_lora_rank or h) * ix.n_heads * ix.head_dim + h * ix.n_heads + self._compressor_params(h, ix.head_dim)

    def _compressor_params(self, h: int, d: int) -> int:
        coff = 2 if self.compress_ratio == 4 else 1
        return 2 * h * coff * d + self.compress_ratio * coff * d + d

    def tp_error(self, tp):
        if tp > 1 and self.num_heads % tp:
            return f"tp {tp} does not divide the {self.num_heads} query heads"
        return None

    @property
    def label(self):
        if not self.compress_ratio:
            return f"compressed attention: {self.window:,}-token window only (latent {self.head_dim})"
        index = f" + index key {self.indexer.head_dim}" if self.indexer else ""
        return (f"compressed attention: {self.window:,}-token window + 1 latent per {self.compress_ratio} "
                f"tokens{index} (latent {self.head_dim})")

    def shape(self):
        out = {"attention": "compressed_mla", "num_heads": self.num_heads, "k_dim": self.head_dim,
               "v_dim": self.head_dim, "window": self.window, "compress_ratio": self.compress_ratio}
        if self.indexer:
            out["index_dim"] = self.indexer.head_dim
        return out


def _compressed_keys(n: int, r: int) -> int:
    """Sum over queries at positions 0..n-1 of the compressed entries before them, floor((p+1)/r)."""
    whole, rest = divmod(n, r)
    # positions with floor((p + 1) / r) = j for j = 0..whole: r positions each (the last: rest + 1)
    return r * (whole * (whole - 1) // 2) + whole * (rest + 1) if whole else 0


# --- layers that hold nothing of their own -------------------------------------------------------

@dataclass(frozen=True)
class SharedKV(CacheSpec):
    """Gemma-3n's last `num_kv_shared_layers`: no cache of its own; it attends over an earlier
    layer's cache (`source`, the kind it reads) with its own window."""

    source: CacheSpec
    window: int | None = None

    kind = "shared"
    attends = True

    def prefill_pairs(self, input_len, new_tokens):
        cached = input_len - new_tokens
        return keys_before(input_len, self.window) - keys_before(cached, self.window)

    def prefill_flops_per_pair(self, tp=1, dp_attention=False):
        return self.source.prefill_flops_per_pair(tp, dp_attention)

    def attention_heads(self, tp=1, dp_attention=False):
        return self.source.attention_heads(tp, dp_attention)

    def op_shape(self, model, p, tp=1, dp_attention=False):
        return {**self.source.op_shape(model, p, tp, dp_attention), "kv_token_bytes": 0}  # it holds nothing

    def projection_params(self, model) -> int:
        return self.source.projection_params(model)  # its own q, k, v, o (only the cache is shared)

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        # Its attention over the cache it reads; that cache's bytes are counted where it is held.
        return self.source.flops_per_key(tp, dp_attention) * held_tokens(context, self.window)

    @property
    def label(self):
        w = f", {self.window:,}-token window" if self.window else ", full attention"
        return f"shared KV (reads an earlier layer's cache){w}"

    def shape(self):
        return {"attention": "shared", **({"window": self.window} if self.window else {})}

    def with_attention(self, att):
        return replace(self, source=self.source.with_attention(att))


@dataclass(frozen=True)
class NoCache(CacheSpec):
    """An MLP-only or MoE-only block (Nemotron-H `-` / `E`, DeciLM `no_op` attention)."""


# --- recurrent state ------------------------------------------------------------------------------

# Recurrent kinds, one shape (docs/model.md): per layer per sequence
#     conv elements  = (K - 1) * (H * P + 2 * G * N)
#     state elements = H * P * N
#     Mamba-1          H = d_in = expand * hidden, P = 1, G = 0, N = d_state
#     Mamba-2          H = heads, P = head dim, G = n_groups, N = d_state
#     Gated DeltaNet   H = value heads, P = d_v, G = key heads, N = d_k
#     KDA              H = G = heads, P = N = head dim (recurrent state always float32 in vLLM)
#     lightning        H = heads, P = N = head dim, G = 0, K = 1 (no conv state)
#     short conv       H = conv_dim, P = 1, G = N = 0, K = conv_L_cache (LFM2: conv state only)
RECURRENT_KINDS: dict[str, str] = {
    "mamba1": "Mamba-1",
    "mamba2": "Mamba-2",
    "gdn": "Gated DeltaNet",
    "kda": "KDA (Kimi Delta Attention)",
    "lightning": "lightning attention",
    "shortconv": "short convolution",
}
# Kinds whose recurrent state vLLM keeps in float32 whatever the dtypes asked (kda_state_dtype).
FP32_RECURRENT_KINDS = ("kda",)


@dataclass(frozen=True)
class RecurrentState(CacheSpec):
    """The per-sequence state one recurrent layer holds, in the common shape above. Element
    counts; bytes = conv elements x the conv dtype + recurrent elements x the SSM dtype (KDA's
    recurrent part float32). H and G split over TP ranks like KV heads (`split`)."""

    recurrent_kind: str  # key of RECURRENT_KINDS
    num_heads: int  # H (Mamba-1: d_in channels; short conv: conv_dim)
    head_dim: int  # P
    num_groups: int  # G (0 when the kind has no separate key groups in its conv)
    state_size: int  # N
    conv_kernel: int  # K (1: no conv state)
    dt_rank: int = 0  # Mamba-1's low-rank time-step projection (parameters only)

    attends = False

    @property
    def kind(self) -> str:
        return self.recurrent_kind

    @property
    def label(self) -> str:
        return f"{RECURRENT_KINDS[self.recurrent_kind]} state"

    def split(self, tp: int = 1, dp_attention: bool = False) -> tuple[int, int]:
        """(heads, groups) on one GPU: heads max(1, H // tp); groups G // tp when G divides by
        tp, else whole (docs/model.md); with attention DP the state stays whole on its GPU."""
        if dp_attention or tp == 1:
            return self.num_heads, self.num_groups
        heads = max(1, self.num_heads // tp)
        groups = self.num_groups // tp if (self.num_groups >= tp and self.num_groups % tp == 0) else self.num_groups
        return heads, groups

    def conv_elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        h, g = self.split(tp, dp_attention)
        return (self.conv_kernel - 1) * (h * self.head_dim + 2 * g * self.state_size)

    def ssm_elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        h, _ = self.split(tp, dp_attention)
        return h * self.head_dim * self.state_size

    def elements(self, tp: int = 1, dp_attention: bool = False) -> int:
        return self.conv_elements(tp, dp_attention) + self.ssm_elements(tp, dp_attention)

    def state_elements(self, tp=1, dp_attention=False):
        return self.conv_elements(tp, dp_attention), self.ssm_elements(tp, dp_attention)

    def ssm_dtype(self, p: Precision) -> str:
        return "fp32" if self.recurrent_kind in FP32_RECURRENT_KINDS else p.ssm_state

    def state_bytes(self, p, tp=1, dp_attention=False):
        conv, ssm = self.state_elements(tp, dp_attention)
        return row_bytes(1, p.conv_state) * conv + row_bytes(1, self.ssm_dtype(p)) * ssm

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        """4 x recurrent elements + 2 x conv elements per sequence a step (docs/model.md)."""
        conv, ssm = self.state_elements(tp, dp_attention)
        return 0 * context + 4 * ssm + 2 * conv

    def mixer_params(self, model) -> int:
        """Parameters of one recurrent mixer (0 without one), by kind, from the reference
        implementations' module shapes (transformers modeling_{mamba,mamba2,qwen3_next,kimi_linear,
        minimax}); d_in = H * P, h = hidden size:
          Mamba-1   in_proj h x 2 d_in, conv d_in x K (+ bias), x_proj d_in x (dt_rank + 2N),
                    dt_proj dt_rank x d_in (+ bias), A_log d_in x N, D d_in, out_proj d_in x h
          Mamba-2   in_proj h x (2 d_in + 2 G N + H), conv (d_in + 2 G N) x K (+ bias),
                    dt_bias, A_log, D (H each), gated norm d_in, out_proj d_in x h
          GDN       in_proj_qkvz h x (2 G N + 2 d_in), in_proj_ba h x 2H, conv (2 G N + d_in) x K,
                    dt_bias, A_log (H each), norm P, out_proj d_in x h
          KDA       q, k, v h x d_in each, conv 3 d_in x K, forget and output gates low-rank
                    (h x P + P x d_in each), beta h x H, A_log H, dt_bias d_in, norm P, o_proj d_in x h
          lightning qkv h x 3 d_in, output gate h x d_in, norm d_in, out_proj d_in x h
        """
        h, k = model.hidden_size, self.conv_kernel
        d_in = self.num_heads * self.head_dim
        gn = self.num_groups * self.state_size
        kind, n_state, heads = self.recurrent_kind, self.state_size, self.num_heads
        if kind == "mamba1":
            return (h * 2 * d_in + d_in * k + d_in + d_in * (self.dt_rank + 2 * n_state)
                    + self.dt_rank * d_in + d_in + d_in * n_state + d_in + d_in * h)
        if kind == "mamba2":
            return h * (2 * d_in + 2 * gn + heads) + (d_in + 2 * gn) * (k + 1) + 3 * heads + d_in + d_in * h
        if kind == "gdn":
            return h * (2 * gn + 2 * d_in) + h * 2 * heads + (2 * gn + d_in) * k + 2 * heads + self.head_dim + d_in * h
        if kind == "kda":
            gates = 2 * (h * self.head_dim + self.head_dim * d_in)
            return 3 * h * d_in + 3 * d_in * k + gates + h * heads + heads + d_in + self.head_dim + d_in * h
        if kind == "lightning":
            return 3 * h * d_in + h * d_in + d_in + d_in * h
        return h * 3 * d_in + d_in * k + d_in * h  # shortconv: LFM2 in_proj h x 3 d, depthwise conv d x K, out_proj

    def tp_error(self, tp):
        if tp > 1 and self.num_heads % tp:
            return f"tp {tp} does not divide the {self.num_heads} {RECURRENT_KINDS[self.recurrent_kind]} heads"
        return None

    def shape(self):
        return {"recurrent": self.recurrent_kind, "heads": self.num_heads, "head_dim": self.head_dim,
                "groups": self.num_groups, "state_size": self.state_size, "conv_kernel": self.conv_kernel}


# --- a layer: its caches --------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerSpec:
    """One layer: the caches it holds for each sequence (LongCat-Flash: two MLA caches; Falcon-H1:
    attention and a Mamba-2 state side by side), and whether it is a multi-token-prediction /
    EAGLE `draft` layer added after the decoder."""

    caches: tuple[CacheSpec, ...] = field(default_factory=lambda: (NoCache(),))
    draft: bool = False

    @property
    def kind(self) -> str:
        """The JSON kind: the attention kind, joined with a recurrent kind ("full+mamba2");
        a recurrent layer alone is its recurrent kind; LongCat's two caches read "full"."""
        att = next((c.kind for c in self.caches if not isinstance(c, RecurrentState)), None)
        rec = next((c.kind for c in self.caches if isinstance(c, RecurrentState)), None)
        if rec is None:
            return att or "none"
        return rec if att in (None, "none") else f"{att}+{rec}"

    @property
    def label(self) -> str:
        labels: list[str] = []
        for c in self.caches:
            if not isinstance(c, NoCache) or len(self.caches) == 1:
                labels.append(c.label)
        n_kv = self.kv_caches
        text = " + ".join(dict.fromkeys(labels))
        if n_kv > 1 and len(set(c for c in self.caches if c.holds_kv)) == 1:
            text += f", {n_kv} caches"
        return f"draft layer: {text}" if self.draft else text

    @property
    def kv_caches(self) -> int:
        """Caches of per-token KV the layer holds (LongCat: 2; shared and attention-free: 0)."""
        return sum(1 for c in self.caches if c.holds_kv)

    @property
    def recurrent(self) -> bool:
        return any(isinstance(c, RecurrentState) for c in self.caches)

    @property
    def window(self) -> int | None:
        """The window of its first per-token or shared cache (None: every token)."""
        for c in self.caches:
            w = getattr(c, "window", None) or getattr(c, "chunk", None)
            if c.holds_kv or isinstance(c, SharedKV):
                return w
        return None

    def tokens_held(self, context, block_size=None):
        """Entries its first per-token cache keeps (0 when it holds none)."""
        for c in self.caches:
            if c.holds_kv:
                return c.tokens_held(context, block_size)
        return 0 * context

    def bytes_per_token(self, p: Precision, tp: int = 1, dp_attention: bool = False):
        return sum(c.bytes_per_token(p, tp, dp_attention) for c in self.caches)

    def kv_bytes(self, context, p: Precision, tp=1, dp_attention=False, block_size=None):
        return sum(c.kv_bytes(context, p, tp, dp_attention, block_size) for c in self.caches)

    def state_bytes(self, p: Precision, tp=1, dp_attention=False) -> int:
        return sum(c.state_bytes(p, tp, dp_attention) for c in self.caches)

    def decode_bytes(self, context, p: Precision, tp=1, dp_attention=False, mla_path="absorbed"):
        return sum(c.decode_bytes(context, p, tp, dp_attention, mla_path) for c in self.caches)

    def decode_flops(self, context, tp=1, dp_attention=False, mla_path="absorbed"):
        return sum(c.decode_flops(context, tp, dp_attention, mla_path) for c in self.caches)

    def prefill_attention_flops(self, input_len: int, new_tokens: int, tp=1, dp_attention=False) -> int:
        return sum(c.prefill_pairs(input_len, new_tokens) * c.prefill_flops_per_pair(tp, dp_attention)
                   for c in self.caches if c.attends)

    def prefill_pairs(self, input_len: int, new_tokens: int) -> int:
        return sum(c.prefill_pairs(input_len, new_tokens) for c in self.caches if c.attends)

    def tp_error(self, tp: int) -> str | None:
        return next((e for c in self.caches if (e := c.tp_error(tp))), None)

    def shape(self) -> dict:
        out: dict = {}
        for c in self.caches:
            for k, v in c.shape().items():
                out.setdefault(k, v)
        return out

    def with_attention(self, att) -> "LayerSpec":
        return replace(self, caches=tuple(c.with_attention(att) for c in self.caches))


def full_attention_layer(att, indexer: Indexer | None = None, draft: bool = False) -> LayerSpec:
    """A layer of full attention of the model-wide shape `att`."""
    return LayerSpec((_attention_cache_for(att, indexer=indexer),), draft)


def check_split(layers, tp: int) -> str | None:
    """The first reason `tp` ranks cannot split one of `layers` (None: they can)."""
    caches = list(dict.fromkeys(c for layer in layers for c in layer.caches))
    for c in sorted(caches, key=lambda c: not c.attends):  # the attention heads' reason first, as vLLM checks
        e = c.tp_error(tp)
        if e:
            return e
    return None


def require_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MLAError(f"{name} must be a positive integer, got {value!r}")
    return value
