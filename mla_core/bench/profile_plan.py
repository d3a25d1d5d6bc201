"""What `bench --profile` measures for a model: its own op shapes on one GPU after TP (no torch).

The profile is a kernel table (docs/model.md, "Estimated step time"): measured latency at the
shapes a step of *this* model asks for, so that the step composer (mla_core.serving) looks its
ops up instead of bounding them. This module says which shapes those are and what each costs to
measure; `mla_core.bench.profile` measures them with torch.

Families and their rows (the table's JSON shape: mla_core/store/profile.schema.json, the one schema a profile has):
    gemm               {m, n, k, dtype, latency_s}: y[m, n] = x[m, k] @ W[n, k]^T, for every GEMM
                       of the model per GPU after TP (`model_gemms`), m = 1..8,192 tokens
    attention_decode   {kind, batch, context, num_heads, num_kv_heads, k_dim, v_dim, kv_dtype,
                       latency_s}: one decode step of `batch` sequences; `context` is the tokens
                       the kernel attends over (a sliding layer: min(T, window))
    attention_prefill  {kind, tokens, prefix, num_heads, num_kv_heads, k_dim, v_dim, window,
                       dtype, latency_s}: one sequence, `tokens` new queries over `prefix` cached
                       plus themselves, causal (bottom-right aligned)
    moe                {tokens, hidden, inter, topk, num_experts, experts_local, dtype,
                       latency_s}: the routed experts of one MoE block on one GPU
    elementwise        {bytes, latency_s}: an RMSNorm over a [rows, hidden] tensor of `bytes`
                       input bytes (it reads them and writes as many)
    collective         {op, bytes, ranks, latency_s}: under torchrun only (nccl-tests' sizes)
    recurrent          {kind, batch, tokens, state_elements, latency_s}: the causal conv and the
                       state recurrence of one recurrent layer over `tokens` tokens of `batch`
                       sequences (decode: tokens = 1); state_elements = RecurrentSpec.elements(tp)

Attention kinds: "mla_absorbed" (decode on the latent: DeepSeek-V3 inference/model.py's absorb
path, the W_UK fold of the query and the W_UV of the output included), "mla_mha" (prefill: MLA
as MHA on K and V rebuilt from the latent; the kv_b up-projection is a GEMM of its own, at m =
prefix + tokens), "gqa" (MHA/GQA/MQA through SDPA, K/V read once), "sliding" (the same over the
window). MLA decode rows give num_kv_heads 1, k_dim d_c + d_r and v_dim d_c (the latent is the
one K and V head: FlashMLA's 576 / 512); MLA prefill rows give num_kv_heads = num_heads, k_dim
d_nope + d_r and v_dim d_v.

TP (vLLM's layout): query heads, KV heads (max(1, n_kv // tp): replicated when fewer than tp),
MLP and expert widths, recurrent heads and the vocabulary are split over tp; the MLA latent
projection (kv_a), q_a and the router are replicated. MoE rows are measured both as vLLM runs
by default (experts TP-sharded: inter / tp, all experts local) and, at tp > 1, as expert
parallelism over the same GPUs (inter whole, num_experts / tp local).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..spec import RECURRENT_KINDS, ModelSpec

FAMILIES = ("gemm", "attention_decode", "attention_prefill", "moe", "elementwise", "collective", "recurrent")
DECODE_KINDS = ("mla_absorbed", "gqa", "sliding")
PREFILL_KINDS = ("mla_mha", "gqa", "sliding")
ATTENTION_KINDS = ("mla_absorbed", "mla_mha", "gqa", "sliding")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
MAX_TOKENS = 8192  # the longest GEMM / MoE row count of a profile (a prefill chunk)

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

# Grids, by device class: GPU full / quick; CPU full / quick (the CPU's are then cut to the time
# budget, `plan_profile`).
GRIDS = {
    ("gpu", False): dict(m=tuple(2 ** i for i in range(14)), batches=(1, 4, 16, 64, 256),
                         contexts=(1024, 4096, 16384, 65536), prefill_tokens=(128, 512, 2048, 8192),
                         prefixes=(0, 8192), recurrent_tokens=(1, 64, 512)),
    ("gpu", True): dict(m=(1, 8, 64, 512, 4096), batches=(1, 16, 128), contexts=(1024, 8192),
                        prefill_tokens=(512, 4096), prefixes=(0,), recurrent_tokens=(1, 256)),
    ("cpu", False): dict(m=tuple(2 ** i for i in range(14)), batches=(1, 4, 16, 64),
                         contexts=(512, 2048, 8192), prefill_tokens=(64, 256, 1024),
                         prefixes=(0, 1024), recurrent_tokens=(1, 16, 128)),
    ("cpu", True): dict(m=(1, 4, 16, 64, 256, 1024), batches=(1, 8), contexts=(512, 2048),
                        prefill_tokens=(64, 256), prefixes=(0,), recurrent_tokens=(1, 32)),
}
# A CPU point may cost at most this many flops a call (about 0.1-0.5 s at the 50-150 GFLOP/s two
# to sixteen cores reach in fp32): the same rule as the kernel benchmark's CPU_POINT_FLOPS.
CPU_POINT_FLOPS = {True: 2e10, False: 1e11}
# A Python-stepped recurrent scan costs ~10 small ops a token on any device: tokens capped here.
CPU_SCAN_TOKENS = {True: 64, False: 256}


@dataclass(frozen=True)
class Gemm:
    """One GEMM of the model on one GPU: y[m, n] = x[m, k] @ W^T. `names` are the HF module names
    of the model's GEMMs with this (n, k) (several modules may share one shape)."""

    n: int
    k: int
    names: tuple[str, ...]


def _split(x: int, tp: int) -> int:
    return max(1, -(-x // tp))


def attention_heads(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) on one GPU: n_h // tp, and max(1, n_kv // tp) (vLLM replicates KV
    heads when there are fewer than tp). MLA: (n_h // tp, 1), the latent whole on every rank."""
    from ..kv import heads_per_gpu

    a = model.attention
    heads = heads_per_gpu(a.num_attention_heads, tp)
    if a.is_mla:
        return heads, 1
    return heads, heads_per_gpu(a.num_key_value_heads, tp)


def _decoder_layers(model: ModelSpec):
    return [layer for layer in model.layers if not layer.draft]


def has_dense_mlp(model: ModelSpec) -> bool:
    """Some decoder layer has a dense MLP (the non-MoE layers with an MLP, or LongCat's extras)."""
    if not model.intermediate_size:
        return False
    n = model.num_hidden_layers
    moe = model.moe.moe_layers if model.moe else (False,) * n
    mlp = model.mlp_layers if model.mlp_layers is not None else (True,) * n
    return any(m and not e for m, e in zip(mlp, moe)) or bool(model.moe and model.extra_dense_mlps)


def has_moe(model: ModelSpec) -> bool:
    return bool(model.moe and model.moe.num_moe_layers)


def has_attention(model: ModelSpec) -> bool:
    return any(c.attends for g in model.cache_groups() for c in g.layer.caches)


def has_recurrent(model: ModelSpec) -> bool:
    return model.recurrent is not None and model.recurrent_layers > 0


def shared_expert_width(model: ModelSpec) -> int:
    """Width of the MoE block's shared expert(s) as one MLP: DeepSeek's n_shared x moe_inter plus
    Qwen-MoE's shared_expert_intermediate_size (0: none)."""
    moe = model.moe
    if moe is None:
        return 0
    return moe.n_shared_experts * moe.moe_intermediate_size + moe.shared_expert_intermediate_size


def recurrent_projections(model: ModelSpec, tp: int = 1) -> list[tuple[str, int, int]]:
    """[(name, n, k)] of one recurrent mixer's GEMMs on one GPU, by kind (transformers'
    modeling_{mamba,mamba2,qwen3_next,kimi_linear,minimax} module shapes, as
    `params.recurrent_params_per_layer` counts them), heads and groups split as
    `RecurrentSpec.split(tp)`."""
    rec, h = model.recurrent, model.hidden_size
    heads, groups = rec.split(tp)
    d_in, gn, p = heads * rec.head_dim, groups * rec.state_size, rec.head_dim
    if rec.kind == "mamba1":
        return [("in_proj", 2 * d_in, h), ("x_proj", rec.dt_rank + 2 * rec.state_size, d_in),
                ("dt_proj", d_in, rec.dt_rank), ("out_proj", h, d_in)]
    if rec.kind == "mamba2":
        return [("in_proj", 2 * d_in + 2 * gn + heads, h), ("out_proj", h, d_in)]
    if rec.kind == "gdn":
        return [("in_proj_qkvz", 2 * gn + 2 * d_in, h), ("in_proj_ba", 2 * heads, h), ("out_proj", h, d_in)]
    if rec.kind == "kda":
        return [("q_proj/k_proj/v_proj", d_in, h), ("f_a_proj/g_a_proj", p, h), ("f_b_proj/g_b_proj", d_in, p),
                ("b_proj", heads, h), ("o_proj", h, d_in)]
    if rec.kind == "lightning":
        return [("qkv_proj", 3 * d_in, h), ("output_gate", d_in, h), ("out_proj", h, d_in)]
    raise ValueError(f"unknown recurrent kind {rec.kind!r}")


def model_gemms(model: ModelSpec, tp: int = 1) -> list[Gemm]:
    """Every GEMM of one decode step or prefill chunk of `model` on one GPU of a TP group of `tp`,
    deduplicated by (n, k), in model order:
        MLA     q_a_proj (d_q, replicated) and q_b_proj (n_h/tp (d_nope + d_r)), or q_proj;
                kv_a_proj_with_mqa (d_c + d_r, replicated); kv_b_proj (n_h/tp (d_nope + d_v),
                k = d_c: prefill only, decode absorbs it); o_proj (k = n_h/tp d_v)
        others  qkv_proj ((n_h/tp + 2 n_kv/tp) d_h, fused as vLLM's QKVParallelLinear); o_proj
        MLP     gate_up_proj (2 I / tp, or I / tp when not gated), down_proj (k = I / tp)
        MoE     gate (the router: n = E + zero experts, replicated), the shared expert's
                gate_up / down (width `shared_expert_width` / tp) and Qwen's shared_expert_gate
        recurrent  `recurrent_projections`
        lm_head n = vocab / tp
    The routed experts are the `moe` family, not GEMMs here. DeepSeek-V3.2's indexer is left out."""
    a, h = model.attention, model.hidden_size
    out: list[tuple[str, int, int]] = []
    if has_attention(model):
        heads, kv_heads = attention_heads(model, tp)
        if a.is_mla:
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                out += [("q_a_proj", a.q_lora_rank, h), ("q_b_proj", heads * qk, a.q_lora_rank)]
            else:
                out.append(("q_proj", heads * qk, h))
            out += [("kv_a_proj_with_mqa", a.kv_lora_rank + a.qk_rope_head_dim, h),
                    ("kv_b_proj", heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
                    ("o_proj", h, heads * a.v_head_dim)]
        else:
            out += [("qkv_proj", (heads + 2 * kv_heads) * a.head_dim, h), ("o_proj", h, heads * a.head_dim)]
    if has_recurrent(model):
        out += recurrent_projections(model, tp)
    if has_dense_mlp(model):
        inter = _split(model.intermediate_size, tp)
        out += [("gate_up_proj" if model.mlp_gated else "up_proj", (2 if model.mlp_gated else 1) * inter, h),
                ("down_proj", h, inter)]
    if has_moe(model):
        moe = model.moe
        out.append(("gate", moe.n_routed_experts + moe.zero_experts, h))
        shared = shared_expert_width(model)
        if shared:
            s = _split(shared, tp)
            out += [("shared_experts.gate_up_proj", 2 * s, h), ("shared_experts.down_proj", h, s)]
        if moe.shared_expert_gate:
            out.append(("shared_expert_gate", 1, h))
    if model.vocab_size:
        out.append(("lm_head", _split(model.vocab_size, tp), h))
    merged: dict[tuple[int, int], list[str]] = {}
    for name, n, k in out:
        merged.setdefault((n, k), [])
        if name not in merged[(n, k)]:
            merged[(n, k)].append(name)
    return [Gemm(n, k, tuple(names)) for (n, k), names in merged.items()]


def decode_kinds(model: ModelSpec) -> list[tuple[str, int | None]]:
    """[(attention kind, window or None)] of the model's attending layers, first-seen order:
    full layers are "mla_absorbed" (MLA) or "gqa"; sliding and chunked layers "sliding" with their
    window (an MLA model's windowed layers stay "mla_absorbed" over the window)."""
    out: list[tuple[str, int | None]] = []
    for g in model.cache_groups():
        if not any(c.attends for c in g.layer.caches):
            continue
        window = g.layer.window
        if window:
            key = ("mla_absorbed" if model.is_mla else "sliding", window)
        else:
            key = ("mla_absorbed" if model.is_mla else "gqa", None)
        if key not in out:
            out.append(key)
    return out


def prefill_kind(decode: str) -> str:
    return {"mla_absorbed": "mla_mha"}.get(decode, decode)


def attention_dims(model: ModelSpec, phase: str) -> tuple[int, int]:
    """(k_dim, v_dim) of the model's attention kernel: MLA decode (d_c + d_r, d_c), MLA prefill
    (d_nope + d_r, d_v), otherwise (d_h, d_h)."""
    a = model.attention
    if a.is_mla:
        if phase == "decode":
            return a.kv_lora_rank + a.qk_rope_head_dim, a.kv_lora_rank
        return a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
    return a.head_dim, a.head_dim


# ---------------------------------------------------------------------------------------------
# Points: each with the flops and the peak bytes its measurement costs.

@dataclass
class Point:
    family: str
    key: dict  # the row without latency_s
    flops: float
    bytes: int  # peak memory the measurement holds (inputs, weights, outputs, scratch)
    moved: int  # bytes the op must move at least (timing-error check: not faster than the peak)


@dataclass
class ProfilePlan:
    model: str
    tp: int
    dtype: str
    points: list[Point] = field(default_factory=list)
    scaled: list[str] = field(default_factory=list)  # what was cut to the budget, and why
    skipped: list[dict] = field(default_factory=list)

    def by_family(self, family: str) -> list[Point]:
        return [p for p in self.points if p.family == family]


def _gemm_point(m: int, g: Gemm, dtype: str, b: int) -> Point:
    return Point("gemm", {"m": m, "n": g.n, "k": g.k, "dtype": dtype}, 2.0 * m * g.n * g.k,
                 (m * g.k + g.n * g.k + m * g.n) * b, (g.n * g.k) * b)


def _decode_point(model: ModelSpec, kind: str, window, batch: int, context: int, tp: int, dtype: str,
                  b: int) -> Point:
    a = model.attention
    heads, kv_heads = attention_heads(model, tp)
    k_dim, v_dim = attention_dims(model, "decode")
    t = min(context, window) if window else context
    if kind == "mla_absorbed":
        c, r, dn, dv = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        flops = 2.0 * batch * heads * (dn * c + t * (c + r) + t * c + c * dv)
        cache = batch * t * (c + r) * b
        scratch = batch * heads * t * (5 * b + 4) + heads * (dn + dv) * c * b + 4 * batch * heads * c * b
        moved = cache
    else:
        flops = 2.0 * batch * heads * t * (k_dim + v_dim)
        cache = batch * kv_heads * t * (k_dim + v_dim) * b
        scratch = 4 * batch * heads * t + 2 * batch * heads * k_dim * b
        moved = cache
    key = {"kind": kind, "batch": batch, "context": t, "num_heads": heads, "num_kv_heads": kv_heads,
           "k_dim": k_dim, "v_dim": v_dim, "kv_dtype": dtype}
    return Point("attention_decode", key, flops, cache + scratch, moved)


def _prefill_point(model: ModelSpec, kind: str, window, tokens: int, prefix: int, tp: int, dtype: str,
                   b: int) -> Point:
    heads, kv_heads = attention_heads(model, tp)
    if kind == "mla_mha":
        kv_heads = heads
    k_dim, v_dim = attention_dims(model, "prefill")
    keys = prefix + tokens
    # Causal pairs (bottom-right): query i sees prefix + i + 1 keys, or the window's.
    if window:
        pairs = sum(min(prefix + i + 1, window) for i in range(tokens)) if tokens <= 65536 else tokens * window
        keys = min(keys, window + tokens - 1)
    else:
        pairs = tokens * prefix + tokens * (tokens + 1) // 2
    flops = 2.0 * heads * pairs * (k_dim + v_dim)
    io = (heads * tokens * (k_dim + v_dim) + kv_heads * keys * (k_dim + v_dim)) * b
    scratch = 4 * heads * tokens * keys * 2  # a materialised mask and scores, if a backend makes them
    key = {"kind": kind, "tokens": tokens, "prefix": prefix, "num_heads": heads, "num_kv_heads": kv_heads,
           "k_dim": k_dim, "v_dim": v_dim, "window": window, "dtype": dtype}
    return Point("attention_prefill", key, flops, io + scratch, io)


def moe_layouts(model: ModelSpec, tp: int) -> list[tuple[int, int]]:
    """[(inter, experts_local)] the MoE rows are measured at: TP-sharded experts (inter / tp, E),
    and at tp > 1 expert parallelism (inter, E / tp)."""
    moe = model.moe
    e, inter = moe.n_routed_experts, moe.moe_intermediate_size
    out = [(_split(inter, tp), e)]
    if tp > 1 and e % tp == 0:
        out.append((inter, e // tp))
    return out


def expected_active(num_experts: int, topk: int, tokens: int, experts_local: int) -> float:
    """Routed experts of one GPU a step touches under uniform routing, E_local (1 - (1 - k/E)^tokens)
    (docs/model.md)."""
    return experts_local * (1.0 - (1.0 - topk / num_experts) ** tokens)


def _moe_point(model: ModelSpec, tokens: int, inter: int, local: int, dtype: str, b: int) -> Point:
    moe, h = model.moe, model.hidden_size
    e, k = moe.n_routed_experts, moe.num_experts_per_tok
    rows = tokens * k * local / e
    active = expected_active(e, k, tokens, local)
    flops = 2.0 * rows * 3 * h * inter
    weights = local * 3 * h * inter * b
    act = int(tokens * h * b * 3 + rows * (3 * inter + h) * b + tokens * e * 4 * 2)
    key = {"tokens": tokens, "hidden": h, "inter": inter, "topk": k, "num_experts": e, "experts_local": local,
           "dtype": dtype}
    return Point("moe", key, flops, weights + act, int(active * 3 * h * inter * b))


def recurrent_dims(model: ModelSpec, tp: int) -> dict:
    """The per-GPU shape the recurrent kernels take: heads H, head width P, groups G, state N,
    conv kernel K, and the conv channels (H P + 2 G N; Mamba-1: H P)."""
    rec = model.recurrent
    heads, groups = rec.split(tp)
    if rec.kind == "mamba1":
        groups = 1  # B and C are shared by all channels (one group); its conv runs over d_in only
        conv = heads * rec.head_dim
    elif rec.kind in ("kda",):
        groups = heads
        conv = 3 * heads * rec.head_dim
    elif rec.kind == "lightning":
        groups = heads
        conv = 0
    else:
        conv = heads * rec.head_dim + 2 * groups * rec.state_size
    return {"kind": rec.kind, "heads": heads, "head_dim": rec.head_dim, "groups": max(1, groups),
            "state": rec.state_size, "conv_kernel": rec.conv_kernel, "conv_channels": conv}


def _recurrent_point(model: ModelSpec, batch: int, tokens: int, tp: int, dtype: str, b: int) -> Point:
    rec = model.recurrent
    d = recurrent_dims(model, tp)
    state = d["heads"] * d["head_dim"] * d["state"]
    per_token = batch * (6 * state + 2 * d["conv_channels"] * d["conv_kernel"])
    io = batch * tokens * (d["conv_channels"] + 3 * d["heads"] * d["head_dim"] + 2 * d["heads"]) * b
    key = {"kind": rec.kind, "batch": batch, "tokens": tokens, "state_elements": rec.elements(tp)}
    return Point("recurrent", key, float(per_token * tokens), 3 * batch * state * b + 2 * io, batch * state * b)


def elementwise_sizes(model: ModelSpec, tp: int, m_values, b: int) -> list[int]:
    """Bytes of the activations a step's elementwise ops touch, as powers of two: from 1 KiB (a
    token's latent or RoPE key) to the widest activation (m tokens of the widest of hidden, 2 x the MLP
    or expert width per GPU, the vocab row) at the largest m."""
    widths = [model.hidden_size]
    if model.intermediate_size and has_dense_mlp(model):
        widths.append(2 * _split(model.intermediate_size, tp))
    if has_moe(model):
        widths.append(2 * model.moe.moe_intermediate_size * model.moe.num_experts_per_tok)
    hi = max(widths) * b * max(m_values)
    e0, e1 = 10, max(10, math.ceil(math.log2(hi)))
    return [2 ** e for e in range(e0, e1 + 1)]


def plan_profile(model: ModelSpec, *, tp: int = 1, device_kind: str = "cpu", dtype: str = "fp32",
                 quick: bool = False, memory_budget: int | None = None, grids: dict | None = None) -> ProfilePlan:
    """Every point of a profile of `model` on one GPU of a TP group of `tp`, in run order.

    `grids` overrides the default grids (`GRIDS`: keys m, batches, contexts, prefill_tokens,
    prefixes, recurrent_tokens). On a CPU a point whose measurement costs more than
    CPU_POINT_FLOPS a call is cut (GEMM and MoE rows by m, attention by batch x context, scans by
    tokens beyond CPU_SCAN_TOKENS), and every point must fit `memory_budget` bytes (the caller
    passes half the free memory, or 80% on a GPU); `scaled` says what was cut and why, `skipped`
    lists what does not fit. Raises ValueError for an unknown device kind or dtype."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}")
    cls = "cpu" if device_kind == "cpu" else "gpu"
    grid = dict(GRIDS[(cls, bool(quick))])
    grid.update(grids or {})
    b = DTYPE_BYTES[dtype]
    plan = ProfilePlan(model.name, tp, dtype)
    flop_cap = CPU_POINT_FLOPS[bool(quick)] if cls == "cpu" else None
    cut: dict[str, list] = {}

    def add(p: Point, what: str) -> None:
        if flop_cap is not None and p.flops > flop_cap:
            cut.setdefault(what, []).append(p)
            return
        if memory_budget is not None and p.bytes > memory_budget:
            plan.skipped.append({"family": p.family, **p.key, "estimated_bytes": p.bytes,
                                 "reason": f"needs {p.bytes / 2**30:.2f} GiB, over the budget of "
                                           f"{memory_budget / 2**30:.2f} GiB"})
            return
        plan.points.append(p)

    m_values = sorted(set(int(m) for m in grid["m"]))
    for g in model_gemms(model, tp):
        for m in m_values:
            add(_gemm_point(m, g, dtype, b), "gemm")
    if has_attention(model):
        for kind, window in decode_kinds(model):
            seen = set()
            for batch in grid["batches"]:
                for context in grid["contexts"]:
                    p = _decode_point(model, kind, window, batch, context, tp, dtype, b)
                    sig = tuple(p.key.values())
                    if sig not in seen:
                        seen.add(sig)
                        add(p, "attention_decode")
        for kind, window in decode_kinds(model):
            pk = prefill_kind(kind)
            for tokens in grid["prefill_tokens"]:
                for prefix in grid["prefixes"]:
                    add(_prefill_point(model, pk, window if pk == "sliding" else None, tokens, prefix, tp, dtype, b),
                        "attention_prefill")
    if has_moe(model):
        for inter, local in moe_layouts(model, tp):
            for m in m_values:
                add(_moe_point(model, m, inter, local, dtype, b), "moe")
    kept_m = [p.key["m"] for p in plan.by_family("gemm")] or m_values
    for nbytes in elementwise_sizes(model, tp, kept_m, b):
        p = Point("elementwise", {"bytes": nbytes}, nbytes / b * 4.0, 2 * nbytes + model.hidden_size * b, 2 * nbytes)
        add(p, "elementwise")
    if has_recurrent(model):
        scan_cap = CPU_SCAN_TOKENS[bool(quick)] if cls == "cpu" else None
        for batch in grid["batches"]:
            for tokens in grid["recurrent_tokens"]:
                if scan_cap is not None and tokens > scan_cap:
                    cut.setdefault("recurrent", []).append(_recurrent_point(model, batch, tokens, tp, dtype, b))
                    continue
                add(_recurrent_point(model, batch, tokens, tp, dtype, b), "recurrent")
    for family, points in cut.items():
        plan.scaled.append(_cut_text(family, points, plan, flop_cap, CPU_SCAN_TOKENS[bool(quick)]))
    return plan


def _cut_text(family: str, points: list[Point], plan: ProfilePlan, flop_cap, scan_cap) -> str:
    kept = plan.by_family(family)
    if family in ("gemm", "moe"):
        axis = "m" if family == "gemm" else "tokens"

        def shape(p):
            return (f"n={p.key['n']:,} k={p.key['k']:,}" if family == "gemm"
                    else f"inter={p.key['inter']:,} experts_local={p.key['experts_local']:,}")
        parts = []
        for sh in dict.fromkeys(shape(p) for p in points):
            top = max((p.key[axis] for p in kept if shape(p) == sh), default=None)
            parts.append(f"{sh} up to m={top:,}" if top else f"{sh} not at all")
        what = f"{family}: {len(points)} points not measured ({'; '.join(parts)})"
    elif family == "attention_decode":
        what = (f"attention_decode: {len(points)} batch x context points not measured, e.g. B={points[0].key['batch']} "
                f"T={points[0].key['context']:,}")
    elif family == "attention_prefill":
        what = (f"attention_prefill: {len(points)} points not measured, e.g. {points[0].key['tokens']:,} tokens "
                f"after {points[0].key['prefix']:,}")
    elif family == "recurrent":
        return (f"recurrent: scans over more than {scan_cap} tokens not measured on a CPU ({len(points)} points; "
                "the scan steps one token at a time)")
    else:
        what = f"{family}: {len(points)} points not measured"
    return what + f", to fit the CPU time budget of {flop_cap / 1e9:g} GFLOP a call"


# ---------------------------------------------------------------------------------------------
# The table's schema.

def profile_schema() -> dict:
    """The JSON Schema of a stored profile (mla_core/store/profile.schema.json), a fresh copy."""
    from ..store.schema import result_schema

    return result_schema("profile")


def validate_profile(table) -> dict:
    """Check a profile table (a dict) against the store's `profile.schema.json` (JSON Schema
    2020-12, the `jsonschema` library), as it would be saved (`store.profiles.validate_table`),
    and that every latency is finite and positive; return it. Raises InvalidResult (one line
    naming the first problem and where)."""
    from ..store.profiles import validate_table

    return validate_table(table)


def recurrent_kinds() -> tuple[str, ...]:
    return tuple(RECURRENT_KINDS)
