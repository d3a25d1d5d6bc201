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


# ---------------------------------------------------------------------------------------------
# The other ops of a step, as `bench --profile` measures them and the reduced model
# (mla_core.bench.reduced) runs them: one implementation each, so that the table and the model
# it is checked against time the same code.


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last axis (torch's fused `F.rms_norm`): x [..., d], weight [d]."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation on a fused gate_up output: x [..., 2 i] -> silu(gate) * up [..., i]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half form (HF's apply_rotary_pos_emb): x [..., d], cos/sin
    broadcastable to [..., d / 2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def sdpa_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Causal attention of one sequence's `t` new tokens over `s` = prefix + t keys, the queries
    aligned to the last keys (bottom-right): q [1, h, t, d_k], k [1, g, s, d_k], v [1, g, s, d_v]
    -> [1, h, t, d_v]. g < h is grouped-query attention (SDPA's enable_gqa); `window`: each query
    sees its last `window` keys, itself included (keys no query can see are cut first)."""
    from torch.nn.attention.bias import causal_lower_right

    t, s = q.shape[-2], k.shape[-2]
    gqa = q.shape[1] != k.shape[1]
    if window is None:
        if t == s:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(t, s), enable_gqa=gqa)
    start = max(0, s - t - window + 1)
    k, v = k[..., start:, :], v[..., start:, :]
    s = k.shape[-2]
    qpos = torch.arange(s - t, s, device=q.device).unsqueeze(1)
    kpos = torch.arange(s, device=q.device).unsqueeze(0)
    mask = (kpos <= qpos) & (kpos > qpos - window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def moe_routed(x: torch.Tensor, logits: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, topk: int,
               renormalize: bool = True) -> torch.Tensor:
    """The routed experts of one MoE block on one GPU (vLLM's fused_moe, in torch): softmax over
    the router logits, top-k, the rows routed to the experts this GPU holds sorted by expert, one
    grouped GEMM for gate_up, SiLU x up, one grouped GEMM for down, weighted and summed back.

    x [tokens, h]; logits [tokens, E] (the router's output, a GEMM of its own); w_gate_up
    [E_local, 2 i, h]; w_down [E_local, h, i]. Experts 0..E_local - 1 are this GPU's (expert
    parallelism: rows for the others are computed elsewhere); E_local = E when the experts are
    TP-sharded (i = moe_intermediate_size / tp). Returns [tokens, h]. Grouped GEMMs through
    `torch.nn.functional.grouped_mm` (a CUTLASS kernel on CUDA sm90+ in bf16); where it refuses
    the dtype or device, one GEMM per expert that has rows."""
    tokens, e_local = x.shape[0], w_gate_up.shape[0]
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    weights, ids = probs.topk(topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    flat_ids, flat_w = ids.reshape(-1), weights.reshape(-1)
    token_of = torch.arange(tokens, device=x.device).repeat_interleave(topk)
    if e_local < logits.shape[-1]:
        local = flat_ids < e_local
        flat_ids, flat_w, token_of = flat_ids[local], flat_w[local], token_of[local]
    order = flat_ids.argsort(stable=True)
    rows_token = token_of[order]
    counts = torch.bincount(flat_ids, minlength=e_local)
    rows = x.index_select(0, rows_token)
    hidden = _grouped(rows, w_gate_up, counts)
    out_rows = _grouped(silu_mul(hidden), w_down, counts)
    out_rows = out_rows * flat_w[order].unsqueeze(-1).to(out_rows.dtype)
    return torch.zeros_like(x).index_add_(0, rows_token, out_rows)


_GROUPED_MM_OK: dict = {}


def _grouped(rows: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """rows [R, k] (sorted by group) @ w[g]^T for each group g of counts[g] rows -> [R, n]."""
    key = (rows.device.type, rows.dtype)
    if _GROUPED_MM_OK.get(key, True):
        try:
            offs = counts.cumsum(0).to(torch.int32)
            return F.grouped_mm(rows, w.transpose(-2, -1), offs=offs)
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            _GROUPED_MM_OK[key] = False
    outs, start = [], 0
    for g, c in enumerate(counts.tolist()):
        if c:
            outs.append(rows[start:start + c] @ w[g].t())
            start += c
    if not outs:
        return rows.new_zeros((0, w.shape[1]))
    return torch.cat(outs)


# Recurrent layers: the causal conv over the mixer's channels, then the state recurrence, one
# token at a time ("simple scan"; engines run chunked kernels for prefill). One shape for every
# kind (mla_core.spec RECURRENT_KINDS): a state [B, G, R, P, N] of H = G R heads, P wide, N deep,
# updated per token as  S <- decay * S;  u <- u - beta * (S k) (delta rule only);  S <- S + u k^T;
# y = S q  (Mamba: u = dt x, k = B, q = C, decay exp(dt A), plus D x; GDN / KDA: u = v, k and q
# L2-normalised, decay exp(g); lightning: u = v, a constant decay per head).


def causal_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Depthwise causal conv1d + SiLU over tokens: x [B, T, C], w [C, K], bias [C] -> [B, T, C]."""
    k = w.shape[1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (k - 1, 0)), w.unsqueeze(1), bias, groups=w.shape[0])
    return F.silu(y).transpose(1, 2)


def conv_step(conv_state: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One decode token of `causal_conv`: conv_state [B, C, K - 1] (updated in place), x [B, C]."""
    full = torch.cat((conv_state, x.unsqueeze(-1)), dim=-1)
    conv_state.copy_(full[..., 1:])
    return F.silu((full * w).sum(dim=-1) + bias)


def recurrent_weights(dims: dict, dtype, device, generator=None) -> dict:
    """Random weights of one recurrent mixer's conv and recurrence (`profile_plan.recurrent_dims`)."""
    kind, h, p, n, c, k = (dims[x] for x in ("kind", "heads", "head_dim", "state", "conv_channels", "conv_kernel"))

    def rn(*shape, std=1.0):
        return torch.randn(*shape, dtype=dtype, device=device, generator=generator).mul_(std)

    w = {}
    if k > 1 and c:
        w["conv_w"], w["conv_b"] = rn(c, k, std=k ** -0.5), rn(c, std=0.1)
    if kind == "mamba1":
        w["A"] = -torch.rand(h, n, dtype=dtype, device=device, generator=generator).add_(0.5)
    else:
        w["A"] = -torch.rand(h, dtype=dtype, device=device, generator=generator).add_(0.5)
    w["dt_bias"] = rn(h, std=0.1)
    w["D"] = rn(h)
    return w


def recurrent_inputs(dims: dict, batch: int, tokens: int, dtype, device, generator=None) -> tuple:
    """(mix [B, T, C_mix], gates [B, T, C_gate]) as the layer's projections deliver them:
    mix is what the conv runs over (Mamba-2: x, B, C; GDN: q, k, v; KDA: q, k, v; Mamba-1: x;
    lightning: q, k, v without a conv), gates the rest (Mamba-2: dt per head; Mamba-1: dt per
    channel, B, C; GDN: a and b per head; KDA: g per channel and beta per head; lightning: none)."""
    mix = torch.randn(batch, tokens, mix_channels(dims), dtype=dtype, device=device, generator=generator)
    gates = torch.randn(batch, tokens, gate_channels(dims), dtype=dtype, device=device, generator=generator)
    return mix, gates


def mix_channels(dims: dict) -> int:
    h, p = dims["heads"], dims["head_dim"]
    return dims["conv_channels"] or 3 * h * p


def gate_channels(dims: dict) -> int:
    kind, h, n = dims["kind"], dims["heads"], dims["state"]
    return {"mamba1": h + 2 * n, "mamba2": h, "gdn": 2 * h, "kda": h * n + h, "lightning": 0}[kind]


def recurrent_state(dims: dict, batch: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(state [B, H, P, N] zeros, conv state [B, C, K - 1] zeros or None)."""
    h, p, n, c, k = (dims[x] for x in ("heads", "head_dim", "state", "conv_channels", "conv_kernel"))
    state = torch.zeros(batch, h, p, n, dtype=dtype, device=device)
    conv = torch.zeros(batch, c, k - 1, dtype=dtype, device=device) if (k > 1 and c) else None
    return state, conv


def recurrent_mix(dims: dict, mix: torch.Tensor, gates: torch.Tensor, w: dict, state: torch.Tensor,
                  conv_state: torch.Tensor | None = None) -> torch.Tensor:
    """One recurrent layer over the T tokens of `mix` (see `recurrent_inputs`): the causal conv
    (T = 1 with `conv_state`: one conv step), then the recurrence above, token by token, updating
    `state` [B, H, P, N] in place. Returns y [B, T, H P]."""
    kind, h, p, g, n = (dims[x] for x in ("kind", "heads", "head_dim", "groups", "state"))
    bsz, t_len, _ = mix.shape
    if "conv_w" in w:
        if t_len == 1 and conv_state is not None:
            mix = conv_step(conv_state, mix[:, 0], w["conv_w"], w["conv_b"]).unsqueeze(1)
        else:
            mix = causal_conv(mix, w["conv_w"], w["conv_b"])
    rep = h // g
    beta = None
    if kind in ("mamba1", "mamba2"):
        if kind == "mamba2":
            x, bm, cm = mix.split((h * p, g * n, g * n), dim=-1)
            dt = F.softplus(gates + w["dt_bias"])  # [B, T, H]
            decay = torch.exp(dt * w["A"]).view(bsz, t_len, g, rep, 1, 1)
        else:  # H channels of width 1, one group
            x = mix
            dt_raw, bm, cm = gates.split((h, n, n), dim=-1)
            dt = F.softplus(dt_raw + w["dt_bias"])
            decay = torch.exp(dt.unsqueeze(-1) * w["A"]).view(bsz, t_len, g, rep, 1, n)
        x4 = x.view(bsz, t_len, h, p)
        u = (dt.unsqueeze(-1) * x4).view(bsz, t_len, g, rep * p, 1)
        kk = bm.reshape(bsz, t_len, g, 1, n)
        qq = cm.reshape(bsz, t_len, g, n, 1)
    else:
        if kind == "lightning":
            q, k, v = mix.split((h * p, h * p, h * p), dim=-1)
            decay = torch.exp(w["A"]).view(1, 1, g, rep, 1, 1).expand(bsz, t_len, g, rep, 1, 1)
        else:
            q, k, v = mix.split((g * n, g * n, h * p), dim=-1)
            if kind == "gdn":
                a, b = gates.split((h, h), dim=-1)
                decay = torch.exp(w["A"] * F.softplus(a + w["dt_bias"])).view(bsz, t_len, g, rep, 1, 1)
            else:  # kda: a forget gate per channel
                fg, b = gates.split((h * n, h), dim=-1)
                decay = torch.exp(-F.softplus(fg)).view(bsz, t_len, g, rep, 1, n)
            beta = torch.sigmoid(b).view(bsz, t_len, g, rep, 1, 1).expand(bsz, t_len, g, rep, p, 1)
            beta = beta.reshape(bsz, t_len, g, rep * p, 1)
            q = F.normalize(q.view(bsz, t_len, g, n), dim=-1)
            k = F.normalize(k.view(bsz, t_len, g, n), dim=-1)
        u = v.reshape(bsz, t_len, g, rep * p, 1)
        kk = k.reshape(bsz, t_len, g, 1, n)
        qq = q.reshape(bsz, t_len, g, n, 1)
    st = state.view(bsz * g, rep * p, n)
    st4 = state.view(bsz * g, rep, p, n)
    bg = bsz * g

    def per_token(x, *shape):  # [B, T, ...] -> [T, B G, ...], made once outside the loop
        return x.transpose(0, 1).reshape(t_len, bg, *shape)

    decay_t, u_t = per_token(decay, rep, 1, decay.shape[-1]), per_token(u, rep * p, 1)
    k_t, q_t = per_token(kk, 1, n), per_token(qq, n, 1)
    beta_t = per_token(beta, rep * p, 1) if beta is not None else None
    ys = []
    for t in range(t_len):
        st4.mul_(decay_t[t])
        ut, kt = u_t[t], k_t[t]
        if beta_t is not None:  # delta rule: write the error of what the state recalls for k
            ut = (ut - torch.bmm(st, kt.transpose(1, 2))) * beta_t[t]
        st.baddbmm_(ut, kt)
        ys.append(torch.bmm(st, q_t[t]).view(bsz, h * p))
    y = torch.stack(ys, dim=1)
    if kind in ("mamba1", "mamba2"):
        y = y + (w["D"].view(1, 1, h, 1) * x4).reshape(bsz, t_len, h * p)
    return y
