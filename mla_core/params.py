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

from .layers import full_attention_layer
from .spec import ModelSpec, model_memo


def attention_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one attention block of the model's attention shape (projections, their
    biases and norms; the indexer apart), int: `layers.CacheSpec.projection_params` of a plain
    full-attention layer."""
    cache = full_attention_layer(model.attention, model.indexer).caches[0]
    return cache.projection_params(model) - cache.indexer_params(model)


def indexer_params_per_layer(model: ModelSpec) -> int:
    """DeepSeek-V3.2 lightning indexer of one layer: wq_b, wk, k_norm (LayerNorm), weights_proj."""
    return full_attention_layer(model.attention, model.indexer).caches[0].indexer_params(model)


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
    n = (3 if model.mlp_gated else 2) * h * moe.moe_intermediate_size  # Nemotron-H: squared-ReLU up / down
    if moe.expert_bias:  # gpt-oss: gate_up bias [2 * inter] and down bias [h]
        n += 2 * moe.moe_intermediate_size + h
    return n


def param_breakdown(model: ModelSpec) -> dict[str, int]:
    """Parameter counts by part, all ints. Keys:

    `embed_tokens`, `lm_head` (0 when tied), `position_embeddings`, `attention` (all layers),
    `indexer`, `norms` (layer norms + final norm), `mlp_dense`, `moe_router`, `moe_shared`,
    `moe_routed` (every routed expert of every MoE layer).
    """
    return dict(model_memo(model, "param_breakdown", lambda: _param_breakdown(model)))


def _param_breakdown(model: ModelSpec) -> dict[str, int]:
    h, layers = model.hidden_size, model.num_hidden_layers
    embed = (model.vocab_size or 0) * h
    norm = h * (2 if model.norm_with_bias else 1)
    decoder = [(g.layer, g.count) for g in model.cache_groups() if not g.layer.draft]
    attention = sum(n * sum(c.projection_params(model) - c.indexer_params(model) for c in layer.caches)
                    for layer, n in decoder)
    indexer = sum(n * sum(c.indexer_params(model) for c in layer.caches) for layer, n in decoder)
    recurrent = sum(n * sum(c.mixer_params(model) for c in layer.caches) for layer, n in decoder)
    # A pipeline stage (spec.pipeline_stages) holds the embedding on the first stage, the final norm
    # and the LM head on the last; the whole model holds both.
    out = {
        "embed_tokens": embed if model.holds_embedding else 0,
        "lm_head": 0 if model.tie_word_embeddings or not model.holds_lm_head else embed,
        "position_embeddings": model.learned_pos_embeddings * h,
        "attention": attention,
        "indexer": indexer,
        "recurrent": recurrent,
        "norms": layers * model.norms_per_layer * norm + (norm if model.holds_lm_head else 0),
        "mlp_dense": 0,
        "moe_router": 0,
        "moe_shared": 0,
        "moe_routed": 0,
        "draft_layers": 0,
    }
    moe = model.moe
    moe_layers = moe.moe_layers if moe else (False,) * layers
    has_mlp = model.mlp_layers if model.mlp_layers is not None else (True,) * layers
    n_moe = sum(moe_layers)
    n_dense = sum(1 for m, e in zip(has_mlp, moe_layers) if m and not e)
    if model.mlp_widths is not None:  # DeciLM: each block its own FFN width (None: no FFN)
        out["mlp_dense"] = sum(mlp_params(model, w) for w in model.mlp_widths if w)
    elif model.intermediate_size:
        out["mlp_dense"] = (n_dense + n_moe * model.extra_dense_mlps) * mlp_params(model, model.intermediate_size)
    if moe:
        out["moe_router"] = n_moe * _router_params(model)
        out["moe_shared"] = n_moe * _shared_expert_params(model)
        out["moe_routed"] = n_moe * moe.n_routed_experts * routed_expert_params(model)
    if model.draft_layers:
        out["draft_layers"] = model.draft_layers * draft_layer_params(model)
    return out


def recurrent_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one recurrent mixer of the model (0 without one): `layers.RecurrentState.mixer_params`."""
    rec = model.recurrent
    return rec.mixer_params(model) if rec is not None else 0


def _router_params(model: ModelSpec) -> int:
    moe, h = model.moe, model.hidden_size
    e = moe.n_routed_experts + moe.zero_experts
    return e * h + (e if moe.router_bias else 0)


def _shared_expert_params(model: ModelSpec) -> int:
    moe, h = model.moe, model.hidden_size
    mats = 3 if model.mlp_gated else 2
    shared = moe.n_shared_experts * mats * h * moe.moe_intermediate_size
    if moe.shared_expert_intermediate_size:
        shared += mats * h * moe.shared_expert_intermediate_size + (h if moe.shared_expert_gate else 0)
    return shared


def draft_layer_params(model: ModelSpec) -> int:
    """One multi-token-prediction draft layer (DeepSeek-V3's MTP module, docs/model.md): a decoder
    layer like the model's last (attention + its MoE or dense MLP + 2 norms), plus the module's
    own `eh_proj` (2h -> h) and its two input norms; embeddings and the output head are shared
    with the main model. DeepSeek-V3: 671.0 B + this = the 685 B the hub lists."""
    h = model.hidden_size
    n = sum(c.projection_params(model) for c in model.draft_caches()) + model.norms_per_layer * h
    moe = model.moe
    if moe and moe.moe_layers and moe.moe_layers[-1]:
        n += _router_params(model) + _shared_expert_params(model) + moe.n_routed_experts * routed_expert_params(model)
    elif model.intermediate_size:
        n += mlp_params(model, model.intermediate_size)
    return n + 2 * h * h + 2 * h


def params_total(model: ModelSpec) -> int:
    """All parameters of the model (int); see the module docstring for what counts."""
    return model_memo(model, "params_total", lambda: sum(param_breakdown(model).values()))


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


def routed_params_streamed_per_step(model: ModelSpec, batch: int) -> float:
    """The routed-expert part of `params_streamed_per_step` (0 for dense models)."""
    if not model.moe:
        return 0
    return experts_touched(model, batch) * model.moe.num_moe_layers * routed_expert_params(model)


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


# ---------------------------------------------------------------------------------------------
# Weight bytes: one place for every dtype, mixed formats included (docs/model.md, "Weights from
# quantization_config").

def expert_and_other_dtypes(model: ModelSpec, weights_dtype: str) -> tuple[str, str]:
    """(dtype of the routed-expert matrices, dtype of everything else). `mxfp4` (gpt-oss)
    stores the MoE experts at 4.25 bits and the rest (attention, router, embeddings: what
    `modules_to_not_convert` names) at `torch_dtype`; at the model's own weights dtype, a
    checkpoint that stores its experts apart (`ModelSpec.expert_weights_dtype`) keeps them so;
    other plain dtypes are the same for both."""
    if weights_dtype == "mxfp4":
        return "mxfp4", ("bf16" if model.torch_dtype == "fp32" else model.torch_dtype)
    if model.expert_weights_dtype and weights_dtype == model.default_weights_dtype:
        # The checkpoint's own mix: DeepSeek-V4's MXFP4 experts beside fp8, Kimi-K2.5's int4 beside bf16.
        return model.expert_weights_dtype, weights_dtype
    return weights_dtype, weights_dtype


def weights_bytes(model: ModelSpec, weights_dtype: str, *, params: float | None = None,
                  routed: float | None = None) -> int:
    """Bytes of `params` parameters (default: all) of which `routed` (default: all routed
    experts) are routed-expert weights, stored as `weights_dtype` (int, rounded up)."""
    from .units import weight_bytes

    if params is None:
        params = params_total(model)
        if routed is None:
            routed = param_breakdown(model)["moe_routed"]
    if routed is None:
        routed = 0
    expert_dtype, other_dtype = expert_and_other_dtypes(model, weights_dtype)
    if expert_dtype == other_dtype:
        return weight_bytes(params, other_dtype)
    return weight_bytes(routed, expert_dtype) + weight_bytes(params - routed, other_dtype)
