"""How many tokens and whole requests fit per GPU and per deployment (docs/model.md, "Capacity").

    kv_budget_bytes_per_gpu = floor(gpu_memory_utilization * memory) - weights_bytes_per_gpu - reserve
                              (vLLM's meaning), or given directly (`kv_budget_bytes`)
    blocks_per_gpu          = floor(budget / (N * kv_bytes_per_token_per_gpu))
    max_tokens_per_gpu      = blocks_per_gpu * N
    replicas                = num_gpus / tp, or num_gpus with attention data parallelism
    max_tokens_total        = replicas * max_tokens_per_gpu
    max_concurrent_requests = replicas * floor(budget / request_bytes_per_gpu)
    request_bytes_per_gpu   = per-layer bytes * sum over layers of ceil(min(T, window) / N) * N

Tensor parallelism splits MHA/GQA KV heads (max(1, n_kv // tp) per GPU); the MLA latent has no
head axis, so every rank stores all of it and `kv_bytes_per_token_per_gpu` does not fall with
TP. With attention data parallelism each GPU holds whole, distinct sequences with all their
heads, attention weights are whole on every GPU and the rest (experts) is split over all GPUs.
Block size N defaults to 64 for MLA models (FlashMLA's page) and 16 otherwise (vLLM).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import MLAError
from .hardware import GPU
from .kv import kv_bytes_per_token, kv_cache_bytes, resolve_kv_dtype, resolve_state_dtype, state_bytes_per_sequence
from .params import attention_side_params, expert_and_other_dtypes, params_total, weights_bytes
from .results import Result
from .spec import ModelSpec
from .units import WEIGHT_DTYPES, floor_decimal_times, weight_bytes
from .validate import (MAX_BLOCK, MAX_CONTEXT, MAX_GPUS, MAX_TP, check_choice, check_int,
                       check_real)


def default_block_size(model: ModelSpec) -> int:
    """64 for MLA models (FlashMLA's page size), 16 otherwise (vLLM's default)."""
    return 64 if model.is_mla else 16


def weights_bytes_per_gpu(model: ModelSpec, weights_dtype: str, *, tp: int = 1, num_gpus: int | None = None,
                          dp_attention: bool = False) -> int:
    """Weight bytes one GPU holds (int, rounded up).

    TP: all weights / tp. Attention DP: attention (and indexer) weights whole on every GPU,
    everything else / num_gpus (expert parallelism)."""
    if dp_attention:
        attn = attention_side_params(model)
        n = num_gpus or tp
        _, attn_dtype = expert_and_other_dtypes(model, weights_dtype)
        rest = weights_bytes(model, weights_dtype) - weight_bytes(attn, attn_dtype)
        return weight_bytes(attn, attn_dtype) + -(-rest // n)
    return -(-weights_bytes(model, weights_dtype) // tp)


def kv_budget_bytes_per_gpu(model: ModelSpec, memory_bytes: int, *, weights_dtype: str | None = None,
                            tp: int = 1, num_gpus: int | None = None, dp_attention: bool = False,
                            gpu_memory_utilization: float = 0.9, reserve_bytes: int = 0) -> tuple[int, int, int]:
    """(budget, usable, weights) per GPU in bytes: usable = floor(gmu * memory), budget =
    usable - weights - reserve (may be negative: the weights do not fit). The one budget
    computation of the core (capacity, sweeps and the serving plan call it)."""
    wdtype = weights_dtype or model.default_weights_dtype
    weights = weights_bytes_per_gpu(model, wdtype, tp=tp, num_gpus=num_gpus, dp_attention=dp_attention)
    usable = floor_decimal_times(gpu_memory_utilization, memory_bytes)
    return usable - weights - reserve_bytes, usable, weights


@dataclass(frozen=True)
class CapacityResult(Result):
    """What `capacity()` returns (bytes and counts are ints; see its docstring)."""

    model: str
    attention: str
    gpu: str | None
    num_gpus: int
    tp: int
    dp_attention: bool
    replicas: int
    context: int
    block_size: int
    kv_dtype: str
    state_dtype: str
    cache_layout: str
    weights_dtype: str
    gpu_memory_utilization: float
    memory_bytes_per_gpu: int | None
    usable_bytes_per_gpu: int | None
    reserve_bytes: int
    params_total: int
    weights_bytes_per_gpu: int
    weights_fit: bool
    kv_budget_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    state_bytes_per_request_per_gpu: int
    blocks_per_gpu: int
    max_tokens_per_gpu: int
    max_tokens_total: int
    kv_bytes_per_request_per_gpu: int
    request_bytes_per_gpu: int
    max_concurrent_requests: int
    kv_used_bytes_per_gpu: int
    max_concurrency: float
    notes: tuple[str, ...] = ()  # what the config parser assumed or could not model


def capacity(
    model: ModelSpec,
    *,
    context: int,
    gpu: GPU | None = None,
    num_gpus: int | None = None,
    tp: int = 1,
    dp_attention: bool = False,
    weights_dtype: str | None = None,
    kv_dtype: str = "auto",
    cache_layout: str = "latent",
    gpu_memory_utilization: float = 0.9,
    kv_budget_bytes: int | None = None,
    block_size: int | None = None,
    reserve_bytes: int = 0,
    state_dtype: str = "auto",
    ssm_state_dtype: str = "auto",
) -> CapacityResult:
    """Concurrency of `model` on `num_gpus` GPUs (see the module docstring for the formulas).

    Give either `gpu` (its memory sets the budget with `gpu_memory_utilization`, weights and
    `reserve_bytes`) or `kv_budget_bytes` (the KV budget per GPU, used as is).
    Recurrent state (hybrid models) is held per request before its tokens:
    `request_bytes_per_gpu` = KV of the request + its state; `max_tokens_per_gpu` is what one
    sequence can hold, floor((budget - state) / (N * per-token bytes)) * N (docs/model.md).
    Returns a `CapacityResult` (reads like a dict); bytes and counts are ints: `kv_budget_bytes_per_gpu`,
    `kv_bytes_per_token_per_gpu`, `blocks_per_gpu`, `max_tokens_per_gpu`, `max_tokens_total`,
    `max_concurrent_requests`, `request_bytes_per_gpu`, `weights_bytes_per_gpu`, `replicas`,
    `weights_fit` (False when weights exceed the usable memory: budget and counts are 0), and
    the engine-style fractional `max_concurrency` (blocks * N / T).
    Raises MLAError on bad inputs (tp not dividing num_gpus, gmu outside (0, 1], ...).
    """
    check_int("context", context, maximum=MAX_CONTEXT)
    check_int("tp", tp, maximum=MAX_TP)
    num_gpus = tp if num_gpus is None else num_gpus
    check_int("num_gpus", num_gpus, maximum=MAX_GPUS)
    if num_gpus % tp:
        raise MLAError(f"tp ({tp}) must divide num_gpus ({num_gpus})")
    if not dp_attention:
        from .kv import tp_split_error

        err = tp_split_error(model, tp)
        if err:
            raise MLAError(err)
    check_real("gpu_memory_utilization", gpu_memory_utilization, minimum=0, exclusive_minimum=True, maximum=1)
    check_int("reserve_bytes", reserve_bytes, minimum=0, maximum=1 << 62)
    n = default_block_size(model) if block_size is None else check_int("block_size", block_size, maximum=MAX_BLOCK)
    wdtype = weights_dtype or model.default_weights_dtype
    check_choice("weights_dtype", wdtype, tuple(WEIGHT_DTYPES))
    dtype = resolve_kv_dtype(model, kv_dtype, cache_layout)

    if kv_budget_bytes is not None:
        weights = weights_bytes_per_gpu(model, wdtype, tp=tp, num_gpus=num_gpus, dp_attention=dp_attention)
        check_int("kv_budget_bytes", kv_budget_bytes, minimum=0, maximum=1 << 80)
        memory = gpu.memory_bytes if gpu is not None else None
        usable = None
        budget = kv_budget_bytes
        fits = True
    else:
        if gpu is None:
            raise MLAError("give a GPU (or its memory) or a KV budget")
        memory = gpu.memory_bytes
        budget, usable, weights = kv_budget_bytes_per_gpu(
            model, memory, weights_dtype=wdtype, tp=tp, num_gpus=num_gpus, dp_attention=dp_attention,
            gpu_memory_utilization=gpu_memory_utilization, reserve_bytes=reserve_bytes)
        fits = budget > 0
        budget = max(0, budget)

    per_token = kv_bytes_per_token(model, dtype, cache_layout, tp=tp, dp_attention=dp_attention)
    state = state_bytes_per_sequence(model, state_dtype, tp=tp, dp_attention=dp_attention,
                                     ssm_state_dtype=ssm_state_dtype)
    # One sequence's state is held before its tokens: what is left bounds the tokens it can hold.
    blocks = int(max(0, budget - state) // (n * per_token)) if per_token else 0
    replicas = num_gpus if dp_attention else num_gpus // tp
    kv_request = kv_cache_bytes(model, context, 1, dtype, cache_layout, block_size=n, tp=tp, dp_attention=dp_attention)
    request_bytes = kv_request + state
    requests_per_gpu = budget // request_bytes if request_bytes else 0
    return CapacityResult(
        model=model.name,
        attention=model.kind,
        gpu=gpu.id if gpu is not None else None,
        num_gpus=num_gpus,
        tp=tp,
        dp_attention=dp_attention,
        replicas=replicas,
        context=context,
        block_size=n,
        kv_dtype=dtype,
        state_dtype=resolve_state_dtype(model, state_dtype),
        cache_layout=cache_layout if model.is_mla else "kv_heads",
        weights_dtype=wdtype,
        gpu_memory_utilization=gpu_memory_utilization,
        memory_bytes_per_gpu=memory,
        usable_bytes_per_gpu=usable,
        reserve_bytes=reserve_bytes,
        params_total=params_total(model),
        weights_bytes_per_gpu=weights,
        weights_fit=fits,
        kv_budget_bytes_per_gpu=budget,
        kv_bytes_per_token_per_gpu=per_token,
        state_bytes_per_request_per_gpu=state,
        blocks_per_gpu=blocks,
        max_tokens_per_gpu=blocks * n,
        max_tokens_total=replicas * blocks * n,
        kv_bytes_per_request_per_gpu=kv_request,
        request_bytes_per_gpu=request_bytes,
        max_concurrent_requests=replicas * requests_per_gpu,
        kv_used_bytes_per_gpu=requests_per_gpu * request_bytes,
        max_concurrency=replicas * blocks * n / context,
        notes=model.notes,
    )


def allocator_waste(model: ModelSpec, **kwargs) -> dict:
    """What an allocator that sizes an MLA model's cache with the MHA formula (the expanded
    per-head K and V, as engines without MLA support do) would reserve, against the latent.

    Takes the arguments of `capacity` (its `cache_layout` is overridden). Returns
    `latent` and `expanded` capacity dicts and `waste_factor` = expanded / latent bytes per
    token per GPU. Raises MLAError for a model without MLA.
    """
    if not model.is_mla:
        raise MLAError(f"{model.name} has no MLA latent: its allocator already uses the MHA formula")
    kwargs = dict(kwargs)
    kwargs.pop("cache_layout", None)
    if kwargs.get("kv_dtype") == "fp8_ds_mla":
        expanded_kwargs = dict(kwargs, kv_dtype="fp8")
    else:
        expanded_kwargs = kwargs
    latent = capacity(model, cache_layout="latent", **kwargs)
    expanded = capacity(model, cache_layout="expanded", **expanded_kwargs)
    return {
        "latent": latent,
        "expanded": expanded,
        "waste_factor": expanded["kv_bytes_per_token_per_gpu"] / latent["kv_bytes_per_token_per_gpu"],
    }


def capacity_variants(model: ModelSpec, *, kv_dtype: str = "auto", gqa_groups: int | None = None,
                      **kwargs) -> list[dict]:
    """The capacity of `model` next to the same model costed as MHA, GQA, MQA, MLA latent and
    MLA expanded (the variants of `kv.variant_specs`: same layers, query heads, d_h, windows).

    Each variant is a whole model: its own attention projections set its weights, hence its KV
    budget (`capacity` with the same GPU, parallelism, dtypes and reserve, passed in `kwargs`).
    With `block_size` None each variant takes its kind's default (64 MLA, 16 otherwise).
    Each row is a `capacity` dict plus `variant` (label), `is_model` (the row is the model as
    configured), `kv_bytes_vs_model` (this row's KV bytes per token per GPU / the model's) and
    `requests_vs_model` (this row's whole requests / the model's; None when the model fits none).
    Raises MLAError on bad inputs (as `capacity` and `variant_specs`).
    """
    from .kv import variant_specs

    kwargs = dict(kwargs)
    kwargs.pop("cache_layout", None)
    ref = capacity(model, kv_dtype=kv_dtype, cache_layout="latent", **kwargs)
    rows = []
    for label, spec, layout, dtype in variant_specs(model, kv_dtype, gqa_groups=gqa_groups):
        r = capacity(spec, kv_dtype=dtype, cache_layout=layout, **kwargs)
        rows.append({
            **r,
            "variant": label,
            "is_model": layout == "latent" and spec.attention == model.attention,
            "kv_bytes_vs_model": r["kv_bytes_per_token_per_gpu"] / ref["kv_bytes_per_token_per_gpu"],
            "requests_vs_model": (r["max_concurrent_requests"] / ref["max_concurrent_requests"]
                                  if ref["max_concurrent_requests"] else None),
        })
    return rows


def memory_breakdown(result: dict) -> dict:
    """One GPU's memory as a `capacity` result (computed from a GPU, not a given budget) splits it.

    Returns ints (bytes per GPU): `weights`, `kv_in_use` (the whole requests of the context that
    fit), `kv_free` (the rest of the KV budget: less than one request, or block padding),
    `reserve`, `headroom` (memory the engine leaves alone: memory - floor(gmu * memory)),
    `memory`, and `over` (how far weights + reserve exceed the usable memory; 0 when they fit).
    When the weights fit, weights + kv_in_use + kv_free + reserve + headroom == memory; when they
    do not, the KV parts are 0 and the parts exceed the memory by `over`.
    Raises MLAError for a result without a GPU memory (budget given directly).
    """
    memory, usable = result["memory_bytes_per_gpu"], result["usable_bytes_per_gpu"]
    if memory is None or usable is None:
        raise MLAError("a memory breakdown needs a GPU memory size, not a KV budget given directly")
    weights, reserve = result["weights_bytes_per_gpu"], result["reserve_bytes"]
    used, budget = result["kv_used_bytes_per_gpu"], result["kv_budget_bytes_per_gpu"]
    return {
        "weights": weights,
        "kv_in_use": used,
        "kv_free": budget - used,
        "reserve": reserve,
        "headroom": memory - usable,
        "memory": memory,
        "over": max(0, weights + reserve - usable),
    }
