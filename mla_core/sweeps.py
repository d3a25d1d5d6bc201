"""Vectorised sweeps behind the charts (numpy): the same numbers as the scalar core, many at once.

Each function equals a loop of the scalar functions it names (tests/test_sweeps.py checks
that point by point). Byte counts are int64 while the largest value fits below 2**62, else
Python ints in an object array, so contexts up to 10**15 and batches up to 10**6 never wrap.
Only this module imports numpy; the command line never does.
"""
from __future__ import annotations

import numpy as np

from .capacity import default_block_size
from .capacity import kv_budget_bytes_per_gpu as capacity_budget
from .kv import kv_bytes_per_token, kv_cache_bytes, state_bytes_per_sequence
from .roofline import decode_step_terms
from .spec import ModelSpec
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


def _contexts_array(model: ModelSpec, contexts, per_token, block_size: int | None, scale: int = 1) -> np.ndarray:
    """`contexts` as int64 when every byte count below stays under 2**62, else exact Python ints."""
    ts = _check_contexts(contexts)
    bound = int((max(ts, default=0) + (block_size or 0) + 1) * max(per_token, 1)) * max(scale, 1)
    return _int_array(ts, bound)


def kv_cache_bytes_vs_context(model: ModelSpec, contexts, batch: int = 1, kv_dtype: str = "auto",
                              cache_layout: str = "latent", *, block_size: int | None = None, tp: int = 1,
                              dp_attention: bool = False) -> np.ndarray:
    """Vector of `kv.kv_cache_bytes(model, T, batch, ...)` over `contexts` (bytes): the same
    per-layer arithmetic on an array of contexts."""
    check_int("batch", batch, maximum=MAX_BATCH)
    per_token = kv_bytes_per_token(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    t = _contexts_array(model, contexts, per_token, block_size, batch)
    return kv_cache_bytes(model, t, batch, kv_dtype, cache_layout, block_size=block_size, tp=tp,
                          dp_attention=dp_attention)


def concurrent_requests_vs_context(model: ModelSpec, contexts, kv_budget_bytes: int, *, replicas: int = 1,
                                   kv_dtype: str = "auto", cache_layout: str = "latent", block_size: int | None = None,
                                   tp: int = 1, dp_attention: bool = False, state_dtype: str = "auto",
                                   ssm_state_dtype: str = "auto") -> np.ndarray:
    """Vector of `capacity(...)['max_concurrent_requests']` over `contexts` for a fixed KV budget
    per GPU: replicas * floor(budget / request_bytes_per_gpu(T)), the request's state included."""
    n = default_block_size(model) if block_size is None else check_int("block_size", block_size)
    per_token = kv_bytes_per_token(model, kv_dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    state = state_bytes_per_sequence(model, state_dtype, tp=tp, dp_attention=dp_attention,
                                     ssm_state_dtype=ssm_state_dtype)
    t = _contexts_array(model, contexts, per_token + state + kv_budget_bytes, n, replicas)
    request_bytes = kv_cache_bytes(model, t, 1, kv_dtype, cache_layout, block_size=n, tp=tp,
                                   dp_attention=dp_attention) + state
    return replicas * (kv_budget_bytes // np.maximum(request_bytes, 1))


def kv_budget_bytes_per_gpu(model: ModelSpec, memory_bytes: int, *, weights_dtype: str | None = None, tp: int = 1,
                            num_gpus: int | None = None, dp_attention: bool = False,
                            gpu_memory_utilization: float = 0.9, reserve_bytes: int = 0) -> int:
    """The budget `capacity()` uses (`capacity.kv_budget_bytes_per_gpu`), at least 0."""
    budget, _, _ = capacity_budget(model, memory_bytes, weights_dtype=weights_dtype, tp=tp, num_gpus=num_gpus,
                                   dp_attention=dp_attention, gpu_memory_utilization=gpu_memory_utilization,
                                   reserve_bytes=reserve_bytes)
    return max(0, budget)


def decode_step_vs_batch(model: ModelSpec, gpu, batches, *, context: int, kv_dtype: str = "auto",
                         weights_dtype: str | None = None, mla_path: str = "absorbed", tp: int = 1,
                         state_dtype: str = "auto") -> dict:
    """Vectors of `roofline(model, gpu, context=T, batch=B, ...)` over `batches`, computed by the
    same arithmetic (`roofline.decode_step_terms`) on an array of batches:
    `batch`, `weights_bytes_per_step`, `attention_bytes`, `attention_flops`, `state_bytes_per_step`,
    `step_time_s`, `tokens_per_s`, `memory_time_s`, `compute_time_s`, `compute_bound` (bool)."""
    check_int("context", context, maximum=MAX_CONTEXT)
    bs = [check_int("batch", int(b), maximum=MAX_BATCH) for b in batches]
    b = np.asarray(bs, dtype=np.float64)
    s = decode_step_terms(model, gpu, b, context=context, kv_dtype=kv_dtype, weights_dtype=weights_dtype,
                          mla_path=mla_path, tp=tp, state_dtype=state_dtype, maximum=np.maximum)
    weights = np.broadcast_to(np.asarray(s["weights_bytes_per_step"], dtype=np.float64), b.shape)
    return {
        "batch": np.asarray(bs, dtype=np.int64),
        "weights_bytes_per_step": weights,
        "attention_bytes": s["attention_bytes"],
        "attention_flops": s["attention_flops"],
        "state_bytes_per_step": s["state_bytes_per_step"],
        "memory_time_s": s["memory_time_s"],
        "compute_time_s": s["compute_time_s"],
        "step_time_s": s["step_time_s"],
        "tokens_per_s": b / s["step_time_s"],
        "compute_bound": s["compute_time_s"] > s["memory_time_s"],
    }
