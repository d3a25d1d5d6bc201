"""Parameter counts from a config (docs/model.md, "Parameter count from a config").

Counted: embeddings (`vocab_size * hidden_size`, twice unless `tie_word_embeddings`); per layer
the attention projections (MLA: q_a, q_a_norm, q_b or q_proj, kv_a to d_c + d_r, kv_a_norm,
kv_b to n_h * (d_nope + d_v), o_proj), biases only where the architecture has them, Qwen3 /
Gemma-3 q_norm and k_norm, gpt-oss attention sinks; RMSNorm weights (LayerNorm weight + bias
for Falcon / GPT-3); the MLP (gated: 3 matrices) or MoE router, routed and shared experts;
the DeepSeek-V3.2 indexer. Left out: DeepSeek's router bias and the MTP module (the hub's 685 B
for DeepSeek-V3 adds it; 671.0 B without), each noted in docs/model.md.

Published totals these reproduce (tests/test_params.py): Llama-3.1-8B 8,030,261,248 exactly;
DeepSeek-V3 671.0 B; DeepSeek-V2 235.7 B; DeepSeek-V2-Lite 15.7 B; Kimi-K2 1.03 T.
"""
from __future__ import annotations

from .spec import ModelSpec


def attention_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one layer's attention block (projections, their biases and norms), int."""
    a = model.attention
    h = model.hidden_size
    n_h = a.num_attention_heads
    if a.is_mla:
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * n_h * qk  # q_a, q_a_norm, q_b
        else:
            q = h * n_h * qk  # q_proj
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank  # kv_a (+ RoPE key), kv_a_norm
        kv += a.kv_lora_rank * n_h * (a.qk_nope_head_dim + a.v_head_dim)  # kv_b: W_UK and W_UV
        o = n_h * a.v_head_dim * h
        total = q + kv + o
    else:
        d_h, n_kv = a.head_dim, a.num_key_value_heads
        total = h * n_h * d_h + 2 * h * n_kv * d_h + n_h * d_h * h
        if model.attention_bias:
            total += n_h * d_h + 2 * n_kv * d_h
        if model.qk_norm:
            total += 2 * d_h
    if model.o_bias:
        total += h
    if model.attn_sinks:
        total += n_h
    return total


def indexer_params_per_layer(model: ModelSpec) -> int:
    """DeepSeek-V3.2 lightning indexer: wq_b, wk, k_norm (LayerNorm), weights_proj."""
    ix = model.indexer
    if ix is None:
        return 0
    h = model.hidden_size
    q_in = model.attention.q_lora_rank or h
    return q_in * ix.index_n_heads * ix.index_head_dim + h * ix.index_head_dim + 2 * ix.index_head_dim + h * ix.index_n_heads


def mlp_params(model: ModelSpec, width: int) -> int:
    """One MLP of `width`: gated (gate, up, down) or plain (up, down), with biases if any."""
    h = model.hidden_size
    if model.mlp_gated:
        n = 3 * h * width + ((2 * width + h) if model.mlp_bias else 0)
    else:
        n = 2 * h * width + ((width + h) if model.mlp_bias else 0)
    return n


def routed_expert_params(model: ModelSpec) -> int:
    """Parameters of one routed expert (0 for a dense model)."""
    moe = model.moe
    if moe is None:
        return 0
    h = model.hidden_size
    n = 3 * h * moe.moe_intermediate_size
    if moe.expert_bias:  # gpt-oss: gate_up bias [2 * inter] and down bias [h]
        n += 2 * moe.moe_intermediate_size + h
    return n


def param_breakdown(model: ModelSpec) -> dict[str, int]:
    """Parameter counts by part, all ints. Keys:

    `embed_tokens`, `lm_head` (0 when tied), `position_embeddings`, `attention` (all layers),
    `indexer`, `norms` (layer norms + final norm), `mlp_dense`, `moe_router`, `moe_shared`,
    `moe_routed` (every routed expert of every MoE layer).
    """
    h, layers = model.hidden_size, model.num_hidden_layers
    embed = (model.vocab_size or 0) * h
    norm = h * (2 if model.norm_with_bias else 1)
    out = {
        "embed_tokens": embed,
        "lm_head": 0 if model.tie_word_embeddings else embed,
        "position_embeddings": model.learned_pos_embeddings * h,
        "attention": layers * attention_params_per_layer(model),
        "indexer": layers * indexer_params_per_layer(model),
        "norms": layers * model.norms_per_layer * norm + norm,
        "mlp_dense": 0,
        "moe_router": 0,
        "moe_shared": 0,
        "moe_routed": 0,
    }
    moe = model.moe
    moe_layers = moe.moe_layers if moe else (False,) * layers
    n_moe = sum(moe_layers)
    n_dense = layers - n_moe
    if model.intermediate_size:
        out["mlp_dense"] = n_dense * mlp_params(model, model.intermediate_size)
    if moe:
        e = moe.n_routed_experts
        out["moe_router"] = n_moe * (e * h + (e if moe.router_bias else 0))
        shared = moe.n_shared_experts * 3 * h * moe.moe_intermediate_size
        if moe.shared_expert_intermediate_size:
            shared += 3 * h * moe.shared_expert_intermediate_size + (h if moe.shared_expert_gate else 0)
        out["moe_shared"] = n_moe * shared
        out["moe_routed"] = n_moe * e * routed_expert_params(model)
    return out


def params_total(model: ModelSpec) -> int:
    """All parameters of the model (int); see the module docstring for what counts."""
    return sum(param_breakdown(model).values())


def attention_side_params(model: ModelSpec) -> int:
    """Parameters that attention data parallelism keeps whole on every GPU: attention + indexer."""
    b = param_breakdown(model)
    return b["attention"] + b["indexer"]


def experts_touched(model: ModelSpec, batch: int) -> float:
    """Routed experts a decode step reads per MoE layer under uniform routing:
    E * (1 - (1 - k/E) ** B) (docs/model.md). 0.0 for dense models."""
    moe = model.moe
    if moe is None:
        return 0.0
    e, k = moe.n_routed_experts, moe.num_experts_per_tok
    return e * (1.0 - (1.0 - k / e) ** batch)


def params_streamed_per_step(model: ModelSpec, batch: int) -> float:
    """Parameters one decode step of `batch` sequences reads from memory.

    Every parameter except the input embedding table (a tied table is still read in full by
    the LM head); MoE routed experts only as many as are touched (`experts_touched`). A float
    when the model is MoE (expected experts), else an int.
    """
    b = param_breakdown(model)
    streamed = sum(b.values()) - b["moe_routed"]
    if not model.tie_word_embeddings:
        streamed -= b["embed_tokens"]
    if model.moe:
        touched = experts_touched(model, batch) * model.moe.num_moe_layers * routed_expert_params(model)
        return streamed + touched
    return streamed


def active_params_per_token(model: ModelSpec) -> int:
    """Parameters streamed at B = 1: input embedding out, LM head in, k routed experts per MoE
    layer (docs/model.md). Used for step flops: 2 * active * B."""
    b = param_breakdown(model)
    n = sum(b.values()) - b["moe_routed"]
    if not model.tie_word_embeddings:
        n -= b["embed_tokens"]
    if model.moe:
        n += model.moe.num_experts_per_tok * model.moe.num_moe_layers * routed_expert_params(model)
    return n
