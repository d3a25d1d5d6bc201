"""The measured kernels and the reference math they are checked against.

Einsum letters: b batch, s query position (1 in decode), t cached token, h query head,
g KV head (group), j query head within a group, d per-head width (d_h, d_nope or d_v),
c latent (d_c), r decoupled RoPE key (d_r).

Shapes (DeepSeek-V3 values; docs/model.md symbols):
    SDPA decode     q [b, h, d]            K, V [b, g, t, d]           out [b, h, d]
    MLA decode      q_nope [b, s, h, d_nope]  q_pe [b, s, h, d_r]
                    kv (latent cache) [b, t, d_c=512]  pe (RoPE key cache) [b, t, d_r=64]
                    W_UK [h, d_nope, d_c]  W_UV [h, d_v, d_c]   (DeepSeek's wkv_b split)
                    out [b, s, h, d_v]

Why decode runs as MQA over the latent: per cached token the absorbed path reads d_c + d_r
values once for all heads (the latent is the only K and V), while the recompute path rebuilds
h (d_nope + d_v) values per token from it every step: the same bytes, ~h (d_nope + d_v) / 2
times the flops. Prefill is the other way round (compute bound either way).

MHA/GQA/MQA go through `scaled_dot_product_attention` without expanding K and V: the query
heads of a group are packed into SDPA's query-length axis (q [b, g, j, d] against K, V
[b, g, t, d]), which is exact for one query token and reads each K/V head once on every
backend. `enable_gqa=True` is avoided on purpose: on some backends (CPU, math fallback) it
re-reads or repeat_interleaves K/V per query head, multiplying the bytes by j. On CUDA the
fused backends are required; if none accepts the shape the math backend runs and the result
says so in `notes`.

`mla_absorbed_decode` is DeepSeek-V3 inference/model.py's "absorb" path verbatim;
`mla_recompute_decode` rebuilds K and V from the latent in chunks of cached tokens with an
online softmax (flash-decoding style), so its memory stays bounded at long contexts.
`reference_*` functions are the definitions, in float64, that tests compare both against.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Reference math (float64, unchunked, no tricks). Tests run these.


def reference_sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention of one query token per sequence, query head h reading KV head
    h // (h / g) (the grouping HF's repeat_kv uses). q [b, h, d]; k, v [b, g, t, d] -> [b, h, d]."""
    b, h, d = q.shape
    g = k.shape[1]
    qg = q.double().reshape(b, g, h // g, d)
    scores = torch.einsum("bgjd,bgtd->bgjt", qg, k.double()) / math.sqrt(d)
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("bgjt,bgtd->bgjd", p, v.double()).reshape(b, h, v.shape[-1])


def reference_mla_decode(q_nope, q_pe, kv, pe, w_uk, w_uv, scale: float) -> torch.Tensor:
    """MLA by its definition (DeepSeek-V2 eq. 9-19): per-head keys [W_UK c_t ; k_pe_t] and
    values W_UV c_t from the latent c_t, then softmax attention. Shapes: module docstring."""
    q_nope, q_pe, kv, pe, w_uk, w_uv = (x.double() for x in (q_nope, q_pe, kv, pe, w_uk, w_uv))
    k_nope = torch.einsum("btc,hdc->bthd", kv, w_uk)
    v = torch.einsum("btc,hdc->bthd", kv, w_uv)
    scores = (torch.einsum("bshd,bthd->bsht", q_nope, k_nope) + torch.einsum("bshr,btr->bsht", q_pe, pe)) * scale
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("bsht,bthd->bshd", p, v)


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref| over all elements (normwise: a near-zero element of ref does
    not blow it up). 0.0 when both are zero."""
    ref64 = ref.double()
    denom = ref64.abs().max().item()
    diff = (out.double() - ref64).abs().max().item()
    if denom == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / denom


# Tolerances on max_rel_err between the absorbed and recompute paths, by dtype. fp32 is the
# acceptance check (observed ~1e-6 at DeepSeek-V3 widths); the 16-bit figures cover the
# different rounding of W_UK q (absorbed) against W_UK c_t (recompute).
REL_ERR_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 1e-2}


# ---------------------------------------------------------------------------------------------
# Measured kernels.


def sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One decode step through SDPA, K and V read once: q [b, h, d], k, v [b, g, t, d]."""
    b, h, d = q.shape
    g = k.shape[1]
    out = F.scaled_dot_product_attention(q.view(b, g, h // g, d), k, v)
    return out.reshape(b, h, v.shape[-1])


def fused_sdpa_backends():
    """The fused SDPA backends allowed for timing (flash, memory-efficient): no math fallback."""
    from torch.nn.attention import SDPBackend

    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


def mla_absorbed_decode(q_nope, q_pe, kv, pe, w_uk, w_uv, scale: float) -> torch.Tensor:
    """DeepSeek-V3 inference/model.py, attn_impl "absorb": fold W_UK into the query, score
    against the latent and the shared RoPE key, softmax in fp32, combine latents, apply W_UV."""
    q_c = torch.einsum("bshd,hdc->bshc", q_nope, w_uk)
    scores = (torch.einsum("bshc,btc->bsht", q_c, kv) + torch.einsum("bshr,btr->bsht", q_pe, pe)) * scale
    p = scores.softmax(dim=-1, dtype=torch.float32).type_as(q_c)
    o_c = torch.einsum("bsht,btc->bshc", p, kv)
    return torch.einsum("bshc,hdc->bshd", o_c, w_uv)


def mla_recompute_decode(q_nope, q_pe, kv, pe, w_uk, w_uv, scale: float, chunk: int) -> torch.Tensor:
    """Rebuild per-head K (W_UK c_t, with the shared RoPE key) and V (W_UV c_t) from the cached
    latent every step, `chunk` cached tokens at a time, with an online softmax in fp32."""
    b, s, h, _ = q_nope.shape
    t_total = kv.shape[1]
    m = torch.full((b, s, h), -math.inf, dtype=torch.float32, device=kv.device)
    denom = torch.zeros((b, s, h), dtype=torch.float32, device=kv.device)
    acc = torch.zeros((b, s, h, w_uv.shape[1]), dtype=torch.float32, device=kv.device)
    for t0 in range(0, t_total, chunk):
        kv_t, pe_t = kv[:, t0:t0 + chunk], pe[:, t0:t0 + chunk]
        k_nope = torch.einsum("btc,hdc->bthd", kv_t, w_uk)
        v = torch.einsum("btc,hdc->bthd", kv_t, w_uv)
        scores = (torch.einsum("bshd,bthd->bsht", q_nope, k_nope)
                  + torch.einsum("bshr,btr->bsht", q_pe, pe_t)).float() * scale
        m_new = torch.maximum(m, scores.amax(dim=-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new.unsqueeze(-1))
        denom = denom * alpha + p.sum(dim=-1)
        acc = acc * alpha.unsqueeze(-1) + torch.einsum("bsht,bthd->bshd", p.type_as(v), v).float()
        m = m_new
    return (acc / denom.unsqueeze(-1)).type_as(q_nope)


# ---------------------------------------------------------------------------------------------
# Inputs. Random normal values; MLA weights scaled by 1/sqrt(d_c) so that rebuilt keys are
# ~N(0, 1) and the softmax is neither flat nor one-hot.


def sdpa_inputs(batch: int, heads: int, kv_heads: int, context: int, head_dim: int, dtype, device,
                generator=None):
    q = torch.randn(batch, heads, head_dim, dtype=dtype, device=device, generator=generator)
    k = torch.randn(batch, kv_heads, context, head_dim, dtype=dtype, device=device, generator=generator)
    v = torch.randn(batch, kv_heads, context, head_dim, dtype=dtype, device=device, generator=generator)
    return q, k, v


def mla_inputs(batch: int, heads: int, context: int, d_c: int, d_r: int, d_nope: int, d_v: int, dtype, device,
               generator=None):
    """(q_nope, q_pe, kv, pe, w_uk, w_uv, scale) with scale = 1/sqrt(d_nope + d_r) (DeepSeek's
    softmax_scale without the YaRN mscale)."""
    def rn(*shape, std=1.0):
        x = torch.randn(*shape, dtype=dtype, device=device, generator=generator)
        return x.mul_(std) if std != 1.0 else x

    q_nope = rn(batch, 1, heads, d_nope)
    q_pe = rn(batch, 1, heads, d_r)
    kv = rn(batch, context, d_c)
    pe = rn(batch, context, d_r)
    w_uk = rn(heads, d_nope, d_c, std=d_c ** -0.5)
    w_uv = rn(heads, d_v, d_c, std=d_c ** -0.5)
    return q_nope, q_pe, kv, pe, w_uk, w_uv, (d_nope + d_r) ** -0.5
