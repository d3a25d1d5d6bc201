"""Vectorised sweeps behind the charts (numpy): the same numbers as the scalar core, many at once.

Each function equals a loop of the scalar functions it names (tests/test_sweeps.py checks
that point by point). Byte counts are int64 while the largest value fits below 2**62, else
Python ints in an object array, so contexts up to 10**15 and batches up to 10**6 never wrap.
Only this module imports numpy; the command line never does.
"""
from __future__ import annotations

import numpy as np

from .capacity import default_block_size, weights_bytes_per_gpu
from .kv import kv_bytes_per_token_layer, resolve_kv_dtype
from .params import active_params_per_token, param_breakdown, routed_expert_params
from .roofline import attention_flops_per_token_layer
from .spec import ModelSpec
from .units import WEIGHT_DTYPES, floor_decimal_times
from .validate import MAX_BATCH, MAX_CONTEXT, check_int

_INT64_SAFE = 2**62


def _int_array(values, bound: int) -> np.ndarray:
    """int64 when every value stays below 2**62 (`bound` is the largest), else exact Python ints."""
    return np.asarray(values, dtype=np.int64 if bound < _INT64_SAFE else object)


def _check_contexts(contexts) -> list[int]:
    out = [int(c) for c in contexts]
    for c in out:
        check_int("context", c, maximum=MAX_CONTEXT)
    return out


def log_contexts(lo: int = 1024, hi: int = 1 << 20, points: int = 256) -> np.ndarray:
    """`points` whole token counts spaced evenly in log between lo and hi (duplicates removed)."""
    check_int("lo", lo, maximum=MAX_CONTEXT)
    check_int("hi", hi, minimum=lo, maximum=MAX_CONTEXT)
    return np.unique(np.round(np.geomspace(lo, hi, points)).astype(np.int64))


def tokens_held_all_layers(model: ModelSpec, contexts, block_size: int | None = None) -> np.ndarray:
    """Vector of `kv.sequence_tokens_all_layers(model, T, block_size)` over `contexts`."""
    ts = _check_contexts(contexts)
    bound = max(ts, default=0) * model.num_hidden_layers + (block_size or 0) * model.num_hidden_layers
    t = _int_array(ts, bound)
    total = np.zeros(len(ts), dtype=t.dtype)
    for window, n in model.window_groups():
        held = t if window is None else np.minimum(t, window)
        if block_size:
            held = -(-held // block_size) * block_size
        total = total + n * held
    return total


def kv_cache_bytes_vs_context(model: ModelSpec, contexts, batch: int = 1, kv_dtype: str = "auto",
                              cache_layout: str = "latent", *, block_size: int | None = None, tp: int = 1,
                              dp_attention: bool = False) -> np.ndarray:
    """Vector of `kv.kv_cache_bytes(model, T, batch, ...)` over `contexts` (bytes)."""
    check_int("batch", batch, maximum=MAX_BATCH)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    ts = _check_contexts(contexts)
    bound = (max(ts, default=0) + (block_size or 0)) * model.num_hidden_layers * per_layer * batch
    tokens = tokens_held_all_layers(model, ts, block_size).astype(np.int64 if bound < _INT64_SAFE else object)
    return tokens * (per_layer * batch)


def concurrent_requests_vs_context(model: ModelSpec, contexts, kv_budget_bytes: int, *, replicas: int = 1,
                                   kv_dtype: str = "auto", cache_layout: str = "latent", block_size: int | None = None,
                                   tp: int = 1, dp_attention: bool = False) -> np.ndarray:
    """Vector of `capacity(...)['max_concurrent_requests']` over `contexts` for a fixed KV budget
    per GPU: replicas * floor(budget / request_bytes_per_gpu(T))."""
    n = default_block_size(model) if block_size is None else check_int("block_size", block_size)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    ts = _check_contexts(contexts)
    bound = max(kv_budget_bytes, (max(ts, default=0) + n) * model.num_hidden_layers * per_layer) * max(replicas, 1)
    tokens = tokens_held_all_layers(model, ts, n).astype(np.int64 if bound < _INT64_SAFE else object)
    request_bytes = tokens * per_layer
    return replicas * (kv_budget_bytes // request_bytes)


def kv_budget_bytes_per_gpu(model: ModelSpec, memory_bytes: int, *, weights_dtype: str | None = None, tp: int = 1,
                            num_gpus: int | None = None, dp_attention: bool = False,
                            gpu_memory_utilization: float = 0.9, reserve_bytes: int = 0) -> int:
    """The budget `capacity()` uses: floor(gmu * memory) - weights per GPU - reserve, at least 0."""
    wdtype = weights_dtype or model.default_weights_dtype
    weights = weights_bytes_per_gpu(model, wdtype, tp=tp, num_gpus=num_gpus, dp_attention=dp_attention)
    return max(0, floor_decimal_times(gpu_memory_utilization, memory_bytes) - weights - reserve_bytes)


def decode_step_vs_batch(model: ModelSpec, gpu, batches, *, context: int, kv_dtype: str = "auto",
                         weights_dtype: str | None = None, mla_path: str = "absorbed", tp: int = 1) -> dict:
    """Vectors of `roofline(model, gpu, context=T, batch=B, ...)` over `batches`:
    `batch`, `weights_bytes_per_step`, `attention_bytes`, `attention_flops`, `step_time_s`,
    `tokens_per_s`, `memory_time_s`, `compute_time_s`, `compute_bound` (bool)."""
    check_int("context", context, maximum=MAX_CONTEXT)
    bs = [check_int("batch", int(b), maximum=MAX_BATCH) for b in batches]
    wdtype = weights_dtype or model.default_weights_dtype
    layout = "expanded" if (model.is_mla and mla_path == "expanded") else "latent"
    from .kv import heads_per_gpu, sequence_tokens_all_layers

    resolve_kv_dtype(model, kv_dtype, layout)
    per_layer = kv_bytes_per_token_layer(model, kv_dtype, layout, tp=tp)
    tokens = sequence_tokens_all_layers(model, context)
    heads = heads_per_gpu(model.attention.num_attention_heads, tp)
    flops_per_seq = attention_flops_per_token_layer(model, mla_path, heads) * tokens
    b = np.asarray(bs, dtype=np.float64)
    # Weights streamed: everything but the input embedding (tied tables are read by the LM head),
    # routed experts as touched under uniform routing (params.params_streamed_per_step).
    parts = param_breakdown(model)
    fixed = sum(parts.values()) - parts["moe_routed"] - (0 if model.tie_word_embeddings else parts["embed_tokens"])
    streamed = np.full_like(b, float(fixed))
    if model.moe:
        e, k = model.moe.n_routed_experts, model.moe.num_experts_per_tok
        touched = e * (1.0 - (1.0 - k / e) ** b)
        streamed = streamed + touched * model.moe.num_moe_layers * routed_expert_params(model)
    num, den = WEIGHT_DTYPES[wdtype]
    weights_bytes = np.ceil(np.ceil(streamed * num / den) / tp)
    attention_bytes = b * float(per_layer * tokens)
    attention_flops = b * float(flops_per_seq)
    step_flops = 2.0 * active_params_per_token(model) * b / tp + attention_flops
    t_mem = (weights_bytes + attention_bytes) / gpu.bandwidth_Bps
    t_compute = step_flops / gpu.peak_flops(wdtype)
    step = np.maximum(t_mem, t_compute)
    return {
        "batch": np.asarray(bs, dtype=np.int64),
        "weights_bytes_per_step": weights_bytes,
        "attention_bytes": attention_bytes,
        "attention_flops": attention_flops,
        "memory_time_s": t_mem,
        "compute_time_s": t_compute,
        "step_time_s": step,
        "tokens_per_s": b / step,
        "compute_bound": t_compute > t_mem,
    }
