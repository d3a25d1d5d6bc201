"""Decode-step roofline: one new token for each of B sequences at context T (docs/model.md).

Attention, per layer, per sequence, per cached token (2 flops per multiply-add), h heads on
the GPU:
    MHA / GQA / MQA   h * (2 d_h + 2 d_h)                    QK^T and PV
    MLA absorbed      h * (2 (d_c + d_r) + 2 d_c)            scores on the 576-wide latent+RoPE
                                                             key, output on the 512-wide latent
                                                             (FlashMLA's benchmark convention)
    MLA expanded      h * (2 (d_nope + d_r) + 2 d_v)         reads the expanded per-head cache
    MLA recompute     expanded + 2 d_c h (d_nope + d_v)      latent cached; K and V rebuilt
                                                             from it for every cached token
Attention bytes are the cache the step reads (`kv.kv_cache_bytes`, min(T, window) tokens per
layer, no block padding): the latent for absorbed and recompute, the expanded cache for
expanded. Intensity = flops / bytes: 1.0 for MHA at 16-bit, n_h / n_kv for GQA, 241.8 for
DeepSeek-V3 absorbed MLA at bf16.

Whole step: weights streamed (every parameter but the input embedding table; MoE routed
experts touched under uniform routing, E (1 - (1 - k/E)^B) per MoE layer) plus attention bytes;
flops 2 * active_params_per_token * B + attention flops;
    step_time_s = max(step_bytes / bandwidth, step_flops / peak_flops)
with the peak at the weights' dtype. `tokens_per_s = B / step_time_s`. These are upper bounds
on speed (lower bounds on time), never calibrated to an engine.

With `tp` > 1 the figures are one GPU's share: weights / tp, query heads / tp, max(1, n_kv // tp)
KV heads, the MLA latent whole.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

from .errors import MLAError
from .hardware import GPU
from .kv import heads_per_gpu, kv_cache_bytes, resolve_state_dtype, state_bytes_per_sequence
from .layers import MLA_PATHS, full_attention_layer
from .params import (active_params_per_token, experts_touched, params_streamed_per_step, params_total,
                     routed_params_streamed_per_step, weights_bytes)
from .results import Result
from .spec import ModelSpec
from .units import WEIGHT_DTYPES
from .validate import MAX_BATCH, MAX_CONTEXT, MAX_TP, check_choice, check_int



def attention_flops_per_token_layer(model: ModelSpec, mla_path: str = "absorbed", heads: int | None = None) -> int:
    """Flops one sequence's new token spends per cached token in the model's attention shape
    (`ModelSpec.attention`, the cache of a plain full-attention layer) on `heads` query heads
    (default: all): `layers.FullAttention.flops_per_key` / `layers.MLAttention.flops_per_key`.
    See the module docstring for the formulas. Returns an int."""
    check_choice("mla_path", mla_path, MLA_PATHS)
    cache = full_attention_layer(model.attention).caches[0]
    tp = model.attention.num_attention_heads // heads if heads else 1
    return cache.flops_per_key(tp, False, mla_path)


def decode_attention(
    model: ModelSpec,
    context,
    batch: int = 1,
    kv_dtype: str = "auto",
    mla_path: str = "absorbed",
    *,
    tp: int = 1,
    dp_attention: bool = False,
) -> dict:
    """Attention of one decode step on one GPU: `attention_flops` (int), `attention_bytes`
    (int, the cache read) and `attention_intensity_flop_per_byte` (float), summed over the
    layers that attend (each cache kind's `decode_flops` and `kv_bytes`: windows, chunks,
    compression and per-layer heads applied). `context` an int, or a numpy array (the sweeps).

    `dp_attention` keeps all heads on the GPU (each GPU runs whole sequences); otherwise query
    heads split over `tp` and the MLA latent is read whole by every rank.
    Raises MLAError on bad inputs."""
    if not hasattr(context, "shape"):
        check_int("context", context, maximum=MAX_CONTEXT)
    check_int("batch", batch, maximum=MAX_BATCH)
    check_int("tp", tp, maximum=MAX_TP)
    check_choice("mla_path", mla_path, MLA_PATHS)
    layout = "expanded" if (model.is_mla and mla_path == "expanded") else "latent"
    flops = batch * sum(g.count * sum(c.decode_flops(context, tp, dp_attention, mla_path)
                                      for c in g.layer.caches if c.attends)
                        for g in model.cache_groups())
    nbytes = kv_cache_bytes(model, context, batch, kv_dtype, layout, tp=tp, dp_attention=dp_attention)
    return {
        "attention_flops": flops,
        "attention_bytes": nbytes,
        "attention_intensity_flop_per_byte": flops / nbytes if nbytes else 0.0,
    }


def recurrent_step(model: ModelSpec, batch: int = 1, state_dtype: str = "auto", *, tp: int = 1,
                   dp_attention: bool = False, ssm_state_dtype: str = "auto") -> tuple[int, int]:
    """(bytes, flops) the per-sequence state spends in one decode step on one GPU (docs/model.md):
    each recurrent layer reads and writes its state once (2 x state bytes per sequence; DeepSeek-V4's
    compressor state too) and costs 4 x recurrent elements + 2 x conv elements flops per
    sequence. (0, 0) without such state."""
    nbytes = 2 * batch * state_bytes_per_sequence(model, state_dtype, tp=tp, dp_attention=dp_attention,
                                                  ssm_state_dtype=ssm_state_dtype)
    flops = sum(g.count * sum(c.decode_flops(0, tp, dp_attention) for c in g.layer.caches if not c.attends)
                for g in model.cache_groups())
    return nbytes, batch * flops


def decode_step_terms(model: ModelSpec, gpu: GPU, batch, *, context: int, kv_dtype: str = "auto",
                      weights_dtype: str | None = None, mla_path: str = "absorbed", tp: int = 1,
                      state_dtype: str = "auto", maximum=max, ssm_state_dtype: str = "auto") -> dict:
    """The one decode-step arithmetic (module docstring), for an int `batch` or a numpy array of
    batches (`sweeps.decode_step_vs_batch` passes one with `maximum=numpy.maximum`): every term
    is linear in B except the routed experts touched, so the same lines serve both.

    Returns `weights_bytes_per_step`, `attention_bytes`, `attention_flops`,
    `state_bytes_per_step`, `state_flops`, `step_bytes`, `step_flops`, `memory_time_s`,
    `compute_time_s`, `step_time_s`, `bandwidth_Bps`, `peak_flops` (at the weights' dtype).
    Raises MLAError on bad inputs."""
    wdtype = weights_dtype or model.default_weights_dtype
    check_choice("weights_dtype", wdtype, tuple(WEIGHT_DTYPES))
    one = decode_attention(model, context, 1, kv_dtype, mla_path, tp=tp)  # one sequence; B times it
    state_one, state_flops_one = recurrent_step(model, 1, state_dtype, tp=tp, ssm_state_dtype=ssm_state_dtype)
    streamed = params_streamed_per_step(model, batch)
    weights_step = -(-weights_bytes(model, wdtype, params=streamed,
                                    routed=routed_params_streamed_per_step(model, batch)) // tp)
    attention_bytes = batch * one["attention_bytes"]
    attention_flops = batch * one["attention_flops"]
    step_bytes = weights_step + attention_bytes + batch * state_one
    step_flops = 2 * active_params_per_token(model) * batch / tp + attention_flops + batch * state_flops_one
    bandwidth, peak = gpu.bandwidth_Bps, gpu.peak_flops(wdtype)
    t_mem, t_compute = step_bytes / bandwidth, step_flops / peak
    return {
        "weights_bytes_per_step": weights_step,
        "attention_bytes": attention_bytes,
        "attention_flops": attention_flops,
        "state_bytes_per_step": batch * state_one,
        "state_flops": batch * state_flops_one,
        "step_bytes": step_bytes,
        "step_flops": step_flops,
        "memory_time_s": t_mem,
        "compute_time_s": t_compute,
        "step_time_s": maximum(t_mem, t_compute),
        "bandwidth_Bps": bandwidth,
        "peak_flops": peak,
    }


@dataclass(frozen=True)
class RooflineResult(Result):
    """What `roofline()` returns (see its docstring); reads like a dict."""

    model: str
    gpu: str
    attention: str
    mla_path: str | None
    context: int
    batch: int
    tp: int
    params_total: int
    params_active_per_token: int
    weights_dtype: str
    state_dtype: str
    weights_bytes_per_step: int
    experts_touched_per_moe_layer: float
    attention_flops: int
    attention_bytes: int
    attention_intensity_flop_per_byte: float
    state_bytes_per_step: int
    state_flops: int
    step_bytes: int
    step_flops: float
    step_intensity_flop_per_byte: float
    bandwidth_Bps: float
    peak_flops: float
    ridge_flop_per_byte: float
    attention_ridge_flop_per_byte: float
    weights_resident_bytes_per_gpu: int
    weights_fit_in_memory: bool
    memory_time_s: float
    compute_time_s: float
    step_time_s: float
    tokens_per_s: float
    bound: str
    attention_time_s: float
    attention_bound: str
    notes: tuple[str, ...] = ()  # what the config parser assumed or could not model


def roofline(
    model: ModelSpec,
    gpu: GPU,
    *,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    weights_dtype: str | None = None,
    mla_path: str = "absorbed",
    tp: int = 1,
    state_dtype: str = "auto",
    ssm_state_dtype: str = "auto",
) -> RooflineResult:
    """The decode step's roofline on one GPU of `gpu` (see the module docstring).

    Returns a `RooflineResult`: `params_total`, `params_active_per_token`, `weights_dtype`,
    `weights_bytes_per_step` (int), `attention_flops`, `attention_bytes`,
    `attention_intensity_flop_per_byte`, `state_bytes_per_step` and `state_flops` (recurrent
    layers: state read and written, docs/model.md), `step_bytes`, `step_flops`, `memory_time_s`,
    `compute_time_s`, `step_time_s` (lower bound), `tokens_per_s` (upper bound), `bound`
    ('memory' or 'compute'), `bandwidth_Bps`, `peak_flops`, `ridge_flop_per_byte` (at the weights'
    peak: the whole step's ridge), `attention_ridge_flop_per_byte` (at the bf16 peak, where
    attention runs), `weights_resident_bytes_per_gpu` and `weights_fit_in_memory` (whether one
    GPU of the preset holds its share of the weights at all),
    `attention_time_s` (attention alone at the roofline), `experts_touched_per_moe_layer`.
    Raises MLAError on bad inputs or a GPU without published figures.
    """
    wdtype = weights_dtype or model.default_weights_dtype
    check_choice("weights_dtype", wdtype, tuple(WEIGHT_DTYPES))
    # The attention alone, on the bf16 roofline (attention runs at the KV/activation precision).
    att = attention_roofline(model, gpu, context=context, batch=batch, kv_dtype=kv_dtype, mla_path=mla_path, tp=tp)
    s = decode_step_terms(model, gpu, batch, context=context, kv_dtype=kv_dtype, weights_dtype=wdtype,
                          mla_path=mla_path, tp=tp, state_dtype=state_dtype, ssm_state_dtype=ssm_state_dtype)
    bandwidth, peak = s["bandwidth_Bps"], s["peak_flops"]
    t_mem, t_compute, step_time = s["memory_time_s"], s["compute_time_s"], s["step_time_s"]
    step_bytes, step_flops = s["step_bytes"], s["step_flops"]
    resident = -(-weights_bytes(model, wdtype) // tp)  # all weights held, / tp
    active = active_params_per_token(model)
    return RooflineResult(
        model=model.name,
        gpu=gpu.id,
        attention=model.kind,
        mla_path=mla_path if model.is_mla else None,
        context=context,
        batch=batch,
        tp=tp,
        params_total=params_total(model),
        params_active_per_token=active,
        weights_dtype=wdtype,
        state_dtype=resolve_state_dtype(model, state_dtype),
        weights_bytes_per_step=s["weights_bytes_per_step"],
        experts_touched_per_moe_layer=experts_touched(model, batch),
        attention_flops=att["attention_flops"],
        attention_bytes=att["attention_bytes"],
        attention_intensity_flop_per_byte=att["attention_intensity_flop_per_byte"],
        state_bytes_per_step=s["state_bytes_per_step"],
        state_flops=s["state_flops"],
        step_bytes=step_bytes,
        step_flops=step_flops,
        step_intensity_flop_per_byte=step_flops / step_bytes,
        bandwidth_Bps=bandwidth,
        peak_flops=peak,
        ridge_flop_per_byte=peak / bandwidth,
        attention_ridge_flop_per_byte=att["ridge_flop_per_byte"],
        weights_resident_bytes_per_gpu=resident,
        weights_fit_in_memory=resident <= gpu.memory_bytes,
        memory_time_s=t_mem,
        compute_time_s=t_compute,
        step_time_s=step_time,
        tokens_per_s=batch / step_time,
        bound="memory" if t_mem >= t_compute else "compute",
        attention_time_s=att["attention_time_s"],
        attention_bound=att["bound"],
        notes=model.notes,
    )


class DecodeVariant(namedtuple("DecodeVariant", "label spec kv_dtype mla_path")):
    """One variant's decode attention: unpacks as (label: str, spec: ModelSpec, kv_dtype: str,
    mla_path: str). (collections.namedtuple: no `typing` import at start-up.)"""

    __slots__ = ()

    @property
    def key(self) -> str:
        return f"mla-{self.mla_path}" if self.spec.is_mla else self.spec.kind


def decode_variants(model: ModelSpec, kv_dtype: str = "auto", **variant_kw) -> list[DecodeVariant]:
    """The same-width variants of `kv.variant_specs` as the decode step runs them: the MLA
    latent twice (absorbed, recompute), the expanded cache once, the rest as themselves.
    `variant_kw`: gqa_groups, kv_lora_rank, qk_rope_head_dim."""
    from .kv import variant_specs

    out = []
    for var in variant_specs(model, kv_dtype, **variant_kw):
        if var.key == "mla":
            out += [DecodeVariant("MLA absorbed", var.spec, var.kv_dtype, "absorbed"),
                    DecodeVariant("MLA recompute", var.spec, var.kv_dtype, "recompute")]
        elif var.key == "mla-expanded":
            out.append(DecodeVariant("MLA expanded", var.spec, var.kv_dtype, "expanded"))
        else:
            out.append(DecodeVariant(var.label, var.spec, var.kv_dtype, "absorbed"))
    return out


def attainable_flops(intensity: float, gpu: GPU, dtype: str = "bf16") -> float:
    """The roofline: min(peak, bandwidth * intensity) in flop/s."""
    if intensity < 0:
        raise MLAError("intensity must be non-negative")
    return min(gpu.peak_flops(dtype), gpu.bandwidth_Bps * intensity)


def attention_roofline(
    model: ModelSpec,
    gpu: GPU,
    *,
    context: int,
    batch: int = 1,
    kv_dtype: str = "auto",
    mla_path: str = "absorbed",
    tp: int = 1,
    dp_attention: bool = False,
) -> dict:
    """The attention of one decode step placed on `gpu`'s bf16 roofline (the roofline page's
    points; the same attention time as `roofline()['attention_time_s']`).

    Returns `decode_attention`'s fields (`attention_flops`, `attention_bytes`,
    `attention_intensity_flop_per_byte`) plus `heads_per_gpu`, `bandwidth_Bps`, `peak_flops`
    (bf16: attention runs at the KV/activation precision), `ridge_flop_per_byte`,
    `attainable_flops` (min(peak, bandwidth * intensity), flop/s), `memory_time_s`
    (bytes / bandwidth), `compute_time_s` (flops / peak), `attention_time_s` (the larger: a
    lower bound on the time) and `bound` ('memory' or 'compute').
    Raises MLAError on bad inputs or a GPU without published figures."""
    from .kv import heads_per_gpu

    att = decode_attention(model, context, batch, kv_dtype, mla_path, tp=tp, dp_attention=dp_attention)
    bandwidth = gpu.bandwidth_Bps
    peak = gpu.peak_flops("bf16")
    t_mem = att["attention_bytes"] / bandwidth
    t_compute = att["attention_flops"] / peak
    return {
        **att,
        "heads_per_gpu": heads_per_gpu(model.attention.num_attention_heads, tp, dp_attention),
        "bandwidth_Bps": bandwidth,
        "peak_flops": peak,
        "ridge_flop_per_byte": peak / bandwidth,
        "attainable_flops": attainable_flops(att["attention_intensity_flop_per_byte"], gpu, "bf16"),
        "memory_time_s": t_mem,
        "compute_time_s": t_compute,
        "attention_time_s": max(t_mem, t_compute),
        "bound": "memory" if t_mem >= t_compute else "compute",
    }
