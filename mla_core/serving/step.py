"""The estimate of a step: a decode step, a prefill chunk or a mixed step as lists of ops per layer
group (ops.py), each timed by the kernel tables (tables.py), summed in one place (`step_time`)
with only the overlaps the engine performs, plus the engine's per-step overhead (engines.py)
(docs/model.md, "Estimated step time").

Per layer, on the busiest GPU of a group of `tp` GPUs (TP: heads / tp, MLP columns / tp; with
DP-attention the GPU's own sequences with every head, the MLP sharded or its experts spread):
    attention side    input norm; MLA: fused q_a + kv_a GEMM (replicated, as vLLM's
                      fused_qkv_a_proj), q_a / kv_a norms, q_b GEMM, RoPE, decode: the absorbed
                      W_UK and W_UV batched GEMMs (bf16) around attention over the latent, prefill:
                      the kv_b up-projection of the new and cached tokens and attention run as MHA;
                      MHA/GQA/MQA: QKV GEMM (q/k norms), RoPE, attention; the KV-cache write; o_proj
    recurrent mixer   its projections as one GEMM of the layer's mixer parameters, and the scan /
                      state update (ops.Recurrent)
    MLP               dense: gate_up GEMM, activation, down GEMM; MoE: router GEMM (bf16, every
                      expert), top-k, the routed experts (ops.MoE: top_k x tokens rows over the
                      E (1 - (1 - k/E)^tokens) experts touched), the shared experts' GEMMs
    collectives       bound.communication_calls: TP all-reduces, DP-attention's sharded-MLP
                      all-gather / reduce-scatter, EP dispatch and combine (DeepEP low-latency
                      kernels in decode, high-throughput in prefill)
and once a step: embedding gather, final norm, lm_head (bf16, the sampled tokens only), the
logits all-gather under TP, sampling; weights the ops above do not read (norm weights, biases,
the V3.2 indexer, ...) are streamed as one memory-bound op so that every byte the bound counts
is in the estimate.

The one function that reads the model's per-layer cache shape is `layer_shapes` (swap it when
the per-layer cache classes land).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

from ..layers import held_tokens
from ..spec import ModelSpec
from .engines import EAGER_LAUNCH_S, EngineRules
from .inputs import Deployment, Workload
from .ops import ACT, AttentionDecode, AttentionPrefill, Collective, Elementwise, Gemm, MoE, OpTime, Recurrent

SAMPLING_BYTES = 4  # fp32 logits the sampler reads


# --- the model's layers ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerGroup:
    """`count` equal layers: `cache` the attention cache its blocks hold or read (a
    `layers.CacheSpec` that attends; None without attention), `blocks` attention blocks a layer
    (LongCat-Flash: 2), `recurrent` a recurrent mixer, `mlp` 'dense', 'moe' or None, `draft` an
    MTP / EAGLE layer."""

    count: int
    cache: object
    blocks: int
    recurrent: bool
    mlp: str | None
    draft: bool

    @property
    def attention(self) -> str | None:
        """The cache's kind ('full', 'sliding', 'chunked', 'compressed', 'shared'), None without attention."""
        return self.cache.kind if self.cache is not None else None

    @property
    def label(self) -> str:
        parts = []
        if self.cache is not None:
            w = getattr(self.cache, "window", None) or getattr(self.cache, "chunk", None)
            parts.append(f"{self.cache.kind} attention" + (f" {w}" if w else ""))
        if self.recurrent:
            parts.append("recurrent")
        if self.mlp:
            parts.append({"dense": "MLP", "moe": "MoE"}[self.mlp])
        return ("draft " if self.draft else "") + " + ".join(parts or ["identity"]) + f" x{self.count}"


def layer_groups(model: ModelSpec) -> tuple[LayerGroup, ...]:
    """The model's layers grouped by what they run, in first-seen order (`model.layers`,
    `moe.moe_layers`, `mlp_layers`); `layer_shapes` adds each group's shape on a GPU."""
    def make():
        moe = model.moe
        moe_layers = moe.moe_layers if moe else ()
        dense = "dense" if model.intermediate_size or model.mlp_widths else None
        counts: dict[tuple, int] = {}
        for i, layer in enumerate(model.layers):
            if layer.draft:  # DeepSeek's MTP module: a layer like the model's last
                mlp = "moe" if moe_layers and moe_layers[-1] else dense
            elif model.mlp_layers is not None and not model.mlp_layers[i]:
                mlp = None
            else:
                mlp = "moe" if i < len(moe_layers) and moe_layers[i] else dense
            attending = [c for c in layer.caches if c.attends]
            cache = attending[0] if attending else None
            key = (cache, len(attending), layer.recurrent, mlp, layer.draft)
            counts[key] = counts.get(key, 0) + 1
        return tuple(LayerGroup(n, *key) for key, n in counts.items())

    from ..spec import model_memo

    return model_memo(model, "estimate_layer_groups", make)


@dataclass(frozen=True)
class AttentionShape:
    """One attention block of a layer group on one GPU: `mla` (a latent cache: MLA, DeepSeek-V4's
    compressed latents) or MHA/GQA/MQA, query `heads` and `kv_heads` on the GPU, `head_dim`
    (K width) and `v_dim`; the latent's `d_c`, `d_r`, `d_nope`, `d_v`, `q_lora` (0: no query
    latent); `qk_norm`; `kv_token_bytes` one cached entry of one layer on the GPU (the cache
    kind's `bytes_per_token`: block formats, fp8_ds_mla and the indexer included); `decode_flops`
    per query head per cached entry (absorbed), `prefill_flops` per head per (query, key) pair
    (MLA as MHA)."""

    mla: bool
    heads: int
    kv_heads: int
    head_dim: int
    d_c: int
    d_r: int
    d_nope: int
    d_v: int
    q_lora: int
    qk_norm: bool
    kv_token_bytes: float
    decode_flops: int
    prefill_flops: int
    v_dim: int = 0


@dataclass(frozen=True)
class RecurrentShape:
    """A recurrent mixer on one GPU (layers.RecurrentState split as kv.py splits it): `kind`,
    `heads`, `groups`, `head_dim`, `state_size`, `elements` of state a sequence, `state_bytes`
    of it, `flops` a token a sequence (4 x recurrent + 2 x conv elements), `params` of its
    projections on the GPU."""

    kind: str
    heads: int
    groups: int
    head_dim: int
    state_size: int
    elements: int
    state_bytes: int
    flops: int
    params: int


def _attention_shape(model: ModelSpec, cache, p, tp: int, dp: bool) -> AttentionShape:
    """The op shape of one attention cache on one GPU: the cache kind's own `op_shape`."""
    return AttentionShape(**cache.op_shape(model, p, tp, dp))


@functools.lru_cache(maxsize=1 << 10)
def layer_shapes(model: ModelSpec, tp: int, dp: bool, kv_dtype: str, state_dtype: str, ssm_state_dtype: str = "auto"
                 ) -> tuple[tuple[LayerGroup, AttentionShape | None, RecurrentShape | None], ...]:
    """Every layer group with the shape of its attention block and recurrent mixer on one GPU of a
    group of `tp` (`dp` attention data parallelism), each read off the group's cache classes
    (mla_core/layers.py): their heads, widths, bytes per entry and flops."""
    from ..kv import precision, state_bytes_per_layer

    p = precision(model, kv_dtype, "latent", state_dtype, ssm_state_dtype)
    rec = None
    r = model.recurrent
    if r is not None and model.recurrent_layers:
        heads, groups = r.split(tp, dp)
        rec = RecurrentShape(r.kind, heads, groups, r.head_dim, r.state_size, r.elements(tp, dp),
                             state_bytes_per_layer(model, state_dtype, tp=tp, dp_attention=dp,
                                                   ssm_state_dtype=ssm_state_dtype),
                             4 * r.ssm_elements(tp, dp) + 2 * r.conv_elements(tp, dp),
                             r.mixer_params(model) // (1 if dp else tp))
    return tuple((g, _attention_shape(model, g.cache, p, tp, dp) if g.cache is not None else None,
                  rec if g.recurrent else None) for g in layer_groups(model))


# --- the ops of a forward pass --------------------------------------------------------------------

def forward_ops(model: ModelSpec, dep: Deployment, wl: Workload, *, decode_seqs: int = 0, context: int = 0,
                prefill_tokens: int = 0, prefix: int = 0, graph: bool = True, prefill_seqs: int = 1,
                prefill_ranks: int = 1, group_prefill_tokens: int | None = None) -> list:
    """The ops of one forward pass on the busiest GPU of `dep`'s group: `decode_seqs` sequences
    of the group (at `context` cached tokens, k + 1 tokens each) and a prefill chunk of
    `prefill_tokens` new tokens after `prefix` cached ones (0 for a pure decode step), for each of
    `prefill_seqs` sequences prefilled together on this GPU's attention (a prefill server batching
    requests into one chunk; each sequence its own attention); with DP-attention `prefill_ranks`
    of the group's GPUs prefill at once (1: one request's TTFT, the others idle; tp: a full step).
    `group_prefill_tokens` (DP-attention) sets the group's prefill tokens through the MLP / experts
    directly instead (every GPU prefilling a chunk of its own: a prefill pool, a replayed step).
    `graph` whether the step runs inside a CUDA graph (the collectives' variant)."""
    from ..kv import resolve_kv_dtype
    from ..params import expert_and_other_dtypes
    from ..units import weight_bytes
    from .bound import _streamed_weight_bytes, _wdtype, communication_calls
    from .ops import expected_active

    h = model.hidden_size
    tp = dep.tp
    dp = dep.dp_attention and tp > 1
    k1 = wl.spec_tokens + 1
    b_gpu = -(-decode_seqs // tp) if dp else decode_seqs
    dec_gpu = b_gpu * k1  # decode tokens through this GPU's attention side
    pre_gpu = prefill_tokens * prefill_seqs  # prefill tokens through this GPU's attention side
    t_attn = dec_gpu + pre_gpu
    group_pre = group_prefill_tokens if (dp and group_prefill_tokens is not None) else pre_gpu * (prefill_ranks if dp else 1)
    t_group = decode_seqs * k1 + group_pre  # tokens through the group's MLP
    t_mlp = t_group
    wdtype = _wdtype(model, dep)
    expert_dtype, other = expert_and_other_dtypes(model, wdtype)
    block_fp8 = model.quant_method == "fp8" and wdtype == "fp8"
    # What engines keep unquantized (the absorbed W_UK / W_UV, the router, the LM head): the
    # weights' own float dtype (fp32 in a CPU profile), bf16 under a quantized checkpoint.
    full = other if other in ("bf16", "fp16", "fp32") else "bf16"
    kv_dtype = resolve_kv_dtype(model, dep.kv_dtype)
    ops: list = []
    weights_read = 0.0

    def gemm(name, layer, calls, m, n, k, dtype=other, stream=""):
        nonlocal weights_read
        if m <= 0 or n <= 0 or k <= 0:
            return
        ops.append(Gemm(name, calls, layer, stream, m=int(m), n=int(n), k=int(k), dtype=dtype,
                        block_fp8=block_fp8 and dtype == "fp8"))
        weights_read += calls * weight_bytes(int(n) * int(k), dtype)

    def elem(name, layer, calls, nbytes, stream=""):
        if nbytes > 0:
            ops.append(Elementwise(name, calls, layer, stream, bytes=float(nbytes)))

    for g, att, rec in layer_shapes(model, tp, dp, dep.kv_dtype, dep.state_dtype, dep.ssm_state_dtype):
        lab, n = g.label, g.count
        elem("norms", lab, n * model.norms_per_layer, 4 * t_attn * h * ACT)
        if att is not None:
            c = g.cache
            calls = n * g.blocks
            n_h, n_kv, kv_tok = att.heads, att.kv_heads, att.kv_token_bytes
            window = getattr(c, "window", None) or getattr(c, "chunk", None)
            # entries the step reads (the cache kind's own rule: windows, chunks, compressed latents)
            held = c.tokens_held(context) if c.holds_kv else held_tokens(context, window)
            pairs = c.prefill_pairs(prefix + prefill_tokens, prefill_tokens) if prefill_tokens else 0
            if att.mla:
                nope, rope, d_v, d_c = att.d_nope, att.d_r, att.d_v, att.d_c
                if att.q_lora:
                    gemm("q_a + kv_a", lab, calls, t_attn, att.q_lora + d_c + rope, h)
                    gemm("q_b", lab, calls, t_attn, n_h * (nope + rope), att.q_lora)
                    elem("q_a / kv_a norms", lab, calls, 2 * t_attn * (att.q_lora + d_c) * ACT)
                else:
                    gemm("q", lab, calls, t_attn, n_h * (nope + rope), h)
                    gemm("kv_a", lab, calls, t_attn, d_c + rope, h)
                    elem("kv_a norm", lab, calls, 2 * t_attn * d_c * ACT)
                elem("RoPE", lab, calls, 2 * t_attn * (n_h + 1) * rope * ACT)
                if dec_gpu:
                    gemm("W_UK (absorbed)", lab, calls, dec_gpu, n_h * d_c, nope, full)
                    ops.append(AttentionDecode(
                        "attention", calls, lab, kind="mla_absorbed", batch=b_gpu, context=max(held, 1),
                        num_heads=n_h * k1, num_kv_heads=1, k_dim=d_c + rope, v_dim=d_c, kv_dtype=kv_dtype,
                        token_bytes=kv_tok, flops_per_token=att.decode_flops))
                    gemm("W_UV (absorbed)", lab, calls, dec_gpu, n_h * d_v, d_c, full)
                if prefill_tokens:
                    gemm("kv_b", lab, calls, (prefill_tokens + prefix) * prefill_seqs, n_h * (nope + d_v), d_c)
                    ops.append(AttentionPrefill(
                        "attention (MHA)", calls * prefill_seqs, lab, kind="mla_mha", tokens=prefill_tokens,
                        prefix=prefix,
                        num_heads=n_h, num_kv_heads=n_h, k_dim=nope + rope, v_dim=d_v, window=window or 0,
                        pairs=pairs, flops_per_pair=att.prefill_flops))
                o_in = n_h * d_v
            else:
                d_h = att.head_dim
                d_v = att.v_dim or d_h
                gemm("qkv", lab, calls, t_attn, n_h * d_h + n_kv * (d_h + d_v), h)
                if att.qk_norm:
                    elem("q / k norms", lab, calls, 2 * t_attn * (n_h + n_kv) * d_h * ACT)
                elem("RoPE", lab, calls, 2 * t_attn * (n_h + n_kv) * d_h * ACT)
                op_kind = "sliding" if c.windowed or (window and not c.holds_kv) else "gqa"
                if dec_gpu:
                    ops.append(AttentionDecode(
                        "attention", calls, lab, kind=op_kind, batch=b_gpu, context=max(held, 1), num_heads=n_h * k1,
                        num_kv_heads=n_kv, k_dim=d_h, v_dim=d_v, kv_dtype=kv_dtype, window=window or 0,
                        token_bytes=kv_tok / n_kv, flops_per_token=att.decode_flops))
                if prefill_tokens:
                    ops.append(AttentionPrefill(
                        "attention", calls * prefill_seqs, lab, kind=op_kind, tokens=prefill_tokens, prefix=prefix,
                        num_heads=n_h,
                        num_kv_heads=n_kv, k_dim=d_h, v_dim=d_v, window=window or 0, pairs=pairs,
                        flops_per_pair=att.prefill_flops))
                o_in = n_h * d_v
            if c.holds_kv:
                elem("KV-cache write", lab, calls, 2 * t_attn * kv_tok)
            gemm("o_proj", lab, calls, t_attn, h, o_in)
        if rec is not None:
            gemm("mixer projections", lab, n, t_attn, max(1, rec.params // h), h)
            for batch, tokens, name in ((b_gpu, k1, "state update"), (prefill_seqs, prefill_tokens, "scan")):
                if batch and tokens:
                    ops.append(Recurrent(name, n, lab, kind=rec.kind, batch=batch, tokens=tokens,
                                         state_elements=rec.elements, state_bytes=rec.state_bytes / max(rec.elements, 1),
                                         flops_per_token=rec.flops, num_heads=rec.heads, num_groups=rec.groups,
                                         head_dim=rec.head_dim, state_size=rec.state_size))
        if g.mlp == "dense" or (g.mlp == "moe" and model.extra_dense_mlps):
            # DeciLM's blocks each have their own width: their mean (the sum of the FFNs is the same)
            dense_w = model.intermediate_size or (sum(w for w in model.mlp_widths if w)
                                                  // max(1, sum(1 for w in model.mlp_widths if w)))
            width = -(-dense_w // tp)
            reps = n * (1 if g.mlp == "dense" else model.extra_dense_mlps)
            gemm("gate_up" if model.mlp_gated else "up", lab, reps, t_mlp, (2 if model.mlp_gated else 1) * width, h)
            elem("activation", lab, reps, 3 * t_mlp * width * ACT)
            gemm("down", lab, reps, t_mlp, h, width)
        if g.mlp == "moe":
            moe = model.moe
            e, k = moe.n_routed_experts, moe.num_experts_per_tok
            t_route = t_attn if dp else t_mlp
            gemm("router", lab, n, t_route, e + moe.zero_experts, h, full, stream="routed")
            elem("top-k", lab, n, t_route * (e + moe.zero_experts) * 4, stream="routed")
            ep = dep.ep if dep.ep > 1 else 1
            moe_tp = tp // ep  # moe_tp x ep = tp (TensorRT-LLM's moe_tp_size x moe_ep_size)
            op = MoE("routed experts", n, lab, "routed", tokens=max(1, t_group), hidden=h,
                     inter=moe.moe_intermediate_size, topk=k, num_experts=e, experts_local=max(1, e // ep),
                     moe_tp=moe_tp, dtype=expert_dtype)
            if t_group:
                ops.append(op)
                weights_read += n * weight_bytes(expected_active(op.experts_local, e, k, op.tokens)
                                                 * 3 * h * op.inter / moe_tp, expert_dtype)
            shared = moe.n_shared_experts * moe.moe_intermediate_size + moe.shared_expert_intermediate_size
            if shared:
                sw = -(-shared // tp)
                gemm("shared experts gate_up", lab, n, t_mlp, 2 * sw, h, stream="shared")
                elem("shared experts activation", lab, n, 3 * t_mlp * sw * ACT, stream="shared")
                gemm("shared experts down", lab, n, t_mlp, h, sw, stream="shared")
    # once a step (a pipeline stage: the embedding on the first, the final norm, LM head and sampling on the last)
    lab = "once a step"
    if model.holds_embedding:
        elem("embedding", lab, 1, 2 * t_attn * h * ACT)
    if model.holds_lm_head:
        elem("final norm", lab, 1, 4 * t_attn * h * ACT)
    sampled = dec_gpu + (prefill_seqs if prefill_tokens else 0)
    vocab = model.vocab_size or 0
    if vocab and sampled and model.holds_lm_head:
        v_gpu = vocab if dp else -(-vocab // tp)
        gemm("lm_head", lab, 1, sampled, v_gpu, h, full)
        nodes = -(-tp // min(tp, dep.gpus_per_node))
        if tp > 1 and not dp:
            ops.append(Collective("logits all-gather", 1, lab, op="all_gather", bytes=float(sampled * vocab * ACT),
                                  ranks=tp, nodes=nodes, graph=graph))
        elem("sampling", lab, 1, 2 * sampled * vocab * SAMPLING_BYTES)
    # collectives of every layer (the bound's calls)
    nodes = -(-tp // min(tp, dep.gpus_per_node))
    topk = model.moe.num_experts_per_tok if model.moe else 1
    for opname, size, calls in communication_calls(model, dep, t_group, t_attn):
        if opname == "all_to_all":
            for phase in ("dispatch", "combine"):
                ops.append(Collective(f"EP {phase}", calls / 2, "all layers", "routed", op="all_to_all", bytes=size,
                                      ranks=tp, nodes=nodes, topk=topk, graph=graph, hidden=h,
                                      num_experts=model.moe.n_routed_experts, phase=phase,
                                      low_latency=prefill_tokens == 0))
        else:
            ops.append(Collective({"all_reduce": "TP all-reduce"}.get(opname, f"MLP {opname.replace('_', '-')}"),
                                  calls, "all layers", op=opname, bytes=size, ranks=tp, nodes=nodes, graph=graph))
    # weights no op above reads (norm weights, biases, the indexer, ...), streamed once
    tokens = max(1, t_group)
    bound_weights = _streamed_weight_bytes(model, wdtype, tokens, tp, dp)
    if bound_weights > weights_read:
        elem("other weights", lab, 1, bound_weights - weights_read)
    return ops


# --- the one sum ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepEstimate:
    """One step's estimate. `time_s` = `gpu_s` + `overhead_s`; `gpu_s` the ops summed with the
    engine's overlaps (`overlap_saved_s` what they hid), eagerly launched kernels no shorter
    than a launch when not `captured`; `bound_s` the step's bound (bound.py); `ops` every
    OpTime; `tokens` the tokens the step processes on the group.

    Over `stages` > 1 pipeline stages (`estimate_pipeline`): `ops` holds every stage's ops (their
    `layer` says the stage) and the PP sends; `stage_gpu_s` each stage's summed ops; `gpu_s` the
    pipeline's time between a sequence's tokens (bound.pipeline_time: the stages and sends of one
    micro-batch, or the slowest stage times the micro-batches, whichever is longer);
    `interval_s` the slowest stage's time plus the overhead: how often the replica finishes a
    micro-batch in steady state (= `time_s` at one stage)."""

    phase: str
    time_s: float
    gpu_s: float
    overhead_s: float
    overlap_saved_s: float
    captured: bool
    bound_s: float
    tokens: int
    ops: tuple[OpTime, ...]
    stages: int = 1
    stage_gpu_s: tuple[float, ...] = ()
    interval_s: float = 0.0
    stage_labels: tuple[str, ...] = ()  # the distinct stages' names ('stage 1 of 4', 'stage 2 of 4 and 1 like it')
    stage_op_counts: tuple[int, ...] = ()  # ops of each distinct stage, in `ops` order (the PP sends follow)

    def __post_init__(self):
        if not self.interval_s:
            object.__setattr__(self, "interval_s", self.time_s)
        by_class: dict[str, float] = {}
        by_source: dict[str, float] = {}
        measured = total = 0.0
        for o in self.ops:
            by_class[o.op_class] = by_class.get(o.op_class, 0.0) + o.time_s
            by_source[o.source] = by_source.get(o.source, 0.0) + o.time_s
            total += o.time_s
            if o.measured and "outside" not in o.note:
                measured += o.time_s
        object.__setattr__(self, "_by_class", by_class)
        object.__setattr__(self, "_by_source", by_source)
        object.__setattr__(self, "_measured", measured / total if total else 0.0)
        object.__setattr__(self, "_notes", frozenset(o.note for o in self.ops if o.note))

    def measured_share(self) -> float:
        """Share of the ops' time that comes from measurements inside their tables."""
        return self._measured

    def by_class(self) -> dict[str, float]:
        return dict(self._by_class)

    def by_source(self) -> dict[str, float]:
        return dict(self._by_source)

    @property
    def notes(self) -> frozenset:
        return self._notes

    def to_dict(self, ops: bool = True) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("ops", "stage_op_counts") and not k.startswith("_")}
        d["by_class_s"] = self.by_class()
        if ops:
            d["ops"] = [o.to_dict() for o in self.ops]
            if self.stage_op_counts:  # say which stage each op runs on
                i = 0
                for label, n in zip(self.stage_labels, self.stage_op_counts):
                    for o in d["ops"][i:i + n]:
                        o["layer"] = f"{label}: {o['layer']}"
                    i += n
        return d


def step_time(times: list[OpTime], rules: EngineRules, *, captured: bool, overlap_tokens: int) -> tuple:
    """(gpu s, overhead s, overlap saved s) of a step's OpTimes: the one place they are summed.

    Serial ops add. Where the engine runs the shared experts on a second stream (`rules`,
    decode steps of at most `overlap_shared_experts_up_to` tokens inside a CUDA graph), each
    layer group's 'shared' ops and 'routed' ops take the longer of the two, never less than the
    two rooflines together (the streams share HBM). Outside a graph each kernel takes at least
    EAGER_LAUNCH_S (the CPU launches it). The engine's `step_overhead_s` is added once."""
    def t(o: OpTime) -> float:
        return o.time_s if captured else max(o.per_call_s, EAGER_LAUNCH_S) * o.calls

    overlap = captured and 0 < overlap_tokens <= rules.overlap_shared_experts_up_to
    serial = 0.0
    streams: dict[str, list[float]] = {}
    for o in times:
        if overlap and o.stream in ("shared", "routed"):
            s = streams.setdefault(o.layer, [0.0, 0.0, 0.0, 0.0])
            i = 0 if o.stream == "shared" else 1
            s[i] += t(o)
            s[2 + i] += o.roofline_s
        else:
            serial += t(o)
    saved = 0.0
    parallel = 0.0
    for sh, ro, rsh, rro in streams.values():
        both = max(sh, ro, rsh + rro)
        parallel += both
        saved += sh + ro - both
    return serial + parallel, rules.step_overhead_s, saved


def estimate_step(model: ModelSpec, dep: Deployment, wl: Workload, tables, rules: EngineRules, *,
                  decode_seqs: int = 0, context: int = 0, prefill_tokens: int = 0, prefix: int = 0,
                  bound_s: float = 0.0, prefill_seqs: int = 1, prefill_ranks: int = 1) -> StepEstimate:
    """One step on `dep`'s group (its busiest GPU): the ops (`forward_ops`), their times from
    `tables` (tables.KernelTables), summed by `step_time`. A decode step of at most the engine's
    graph batch per GPU is captured; a step with prefill tokens never is."""
    tp = dep.tp
    dp = dep.dp_attention and tp > 1
    b_gpu = -(-decode_seqs // tp) if dp else decode_seqs
    captured = prefill_tokens == 0 and 0 < b_gpu <= rules.graph_max_batch(dep.gpu.memory_GB, tp)
    ops = forward_ops(model, dep, wl, decode_seqs=decode_seqs, context=context, prefill_tokens=prefill_tokens,
                      prefix=prefix, graph=captured, prefill_seqs=prefill_seqs, prefill_ranks=prefill_ranks)
    times = [op.time(tables) for op in ops]
    tokens = decode_seqs * (wl.spec_tokens + 1) + prefill_tokens * prefill_seqs
    gpu, overhead, saved = step_time(times, rules, captured=captured, overlap_tokens=tokens)
    phase = "mixed" if (decode_seqs and prefill_tokens) else ("prefill" if prefill_tokens else "decode")
    return StepEstimate(phase, gpu + overhead, gpu, overhead, saved, captured, bound_s, tokens, tuple(times))


def pp_send_ops(model: ModelSpec, dep: Deployment, tokens: int, graph: bool = True) -> list:
    """The PP sends of one micro-batch of `tokens` tokens passing every stage: a Collective 'send'
    of bound.pp_send_bytes per GPU for each of the pp - 1 boundaries, within a node or across
    nodes (bound.pp_boundaries). [] at pp 1."""
    from .bound import pp_boundaries, pp_send_bytes

    if dep.pp == 1 or tokens <= 0:
        return []
    size = pp_send_bytes(model, dep, tokens)
    within, across = pp_boundaries(dep)
    return [Collective("PP send", n, "between stages", op="send", bytes=size, ranks=2, nodes=nodes, graph=graph)
            for n, nodes in ((within, 1), (across, 2)) if n]


def estimate_pipeline(model: ModelSpec, dep: Deployment, wl: Workload, tables, rules: EngineRules, *,
                      decode_seqs: int = 0, context: int = 0, prefill_tokens: int = 0, prefix: int = 0,
                      bound_s: float = 0.0, prefill_seqs: int = 1, prefill_ranks: int = 1) -> StepEstimate:
    """`estimate_step` over `dep.pp` pipeline stages (docs/model.md, "Deployments"): the replica's
    `decode_seqs` sequences in bound.micro_batches micro-batches, each stage's step of one
    micro-batch estimated on its own layers (bound.stages), the PP sends between them
    (`pp_send_ops`), combined by bound.pipeline_time; the engine's overhead once a step (see
    StepEstimate). At pp 1 it is `estimate_step`."""
    if dep.pp == 1:
        return estimate_step(model, dep, wl, tables, rules, decode_seqs=decode_seqs, context=context,
                             prefill_tokens=prefill_tokens, prefix=prefix, bound_s=bound_s, prefill_seqs=prefill_seqs,
                             prefill_ranks=prefill_ranks)
    from .bound import micro_batches, pipeline_time, stages

    m, micro = micro_batches(dep.pp, decode_seqs) if decode_seqs else (1, 0)
    distinct = stages(model, dep)
    steps = [(estimate_step(st, dep, wl, tables, rules, decode_seqs=micro, context=context,
                            prefill_tokens=prefill_tokens, prefix=prefix, prefill_seqs=prefill_seqs,
                            prefill_ranks=prefill_ranks), n) for st, n in distinct]
    k1 = wl.spec_tokens + 1
    captured = all(st.captured for st, _ in steps)
    sends = [op.time(tables) for op in pp_send_ops(model, dep, micro * k1 + prefill_tokens * prefill_seqs,
                                                    graph=captured)]
    send_s = math.fsum(o.time_s for o in sends)
    gpu = pipeline_time([(st.gpu_s, n) for st, n in steps], send_s, m)
    # every stage's ops once per stage that runs them (OpTime.calls x the stages), then the sends
    ops = tuple(o if n == 1 else _times_n(o, n) for st, n in steps for o in st.ops) + tuple(sends)
    overhead = rules.step_overhead_s
    stage_gpu = tuple(st.gpu_s for st, n in steps for _ in range(n))
    return StepEstimate(steps[0][0].phase, gpu + overhead, gpu, overhead,
                        math.fsum(st.overlap_saved_s * n for st, n in steps), captured, bound_s,
                        decode_seqs * k1 + prefill_tokens * prefill_seqs, ops, stages=dep.pp, stage_gpu_s=stage_gpu,
                        interval_s=max(stage_gpu) + overhead,
                        stage_labels=tuple(f"{distinct[i][0].name.rsplit(' (', 1)[-1].rstrip(')')}"
                                           + (f" and {n - 1} like it" if n > 1 else "")
                                           for i, (_, n) in enumerate(steps)),
                        stage_op_counts=tuple(len(st.ops) for st, _ in steps))


def _times_n(o: OpTime, n: int) -> OpTime:
    """An OpTime for `n` stages that run it alike: calls, time, roofline, bytes and flops x n."""
    from dataclasses import replace as _replace

    return _replace(o, calls=o.calls * n, time_s=o.time_s * n, roofline_s=o.roofline_s * n, bytes=o.bytes * n,
                    flops=o.flops * n)


# --- a point's estimate ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """What the engine will do at one point (docs/model.md, "Estimated step time"). Times in s,
    rates in tokens/s. `ttft_s` one request's prefill (its chunks, no queueing); `tpot_s` a
    decode step / tokens a step; `tokens_per_s_per_gpu` decode steps only (as the bound's field);
    `output_tokens_per_s_per_gpu` whole requests, prefill included, at this batch (a replica
    prefills its batch, then decodes it: output tokens / wall time, as offline benchmarks
    count); `source` the tables and their share of the time; `confidence` 'high' when at least
    90% of the decode step's time is measured inside its tables, 'medium' from 50%, else 'low'
    ('uncalibrated' figures are never 'high'); `engine` the engine's rules used."""

    engine: str
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float
    decode_step_s: float
    prefill_s: float
    captured: bool
    source: str
    confidence: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def describe_sources(*steps: StepEstimate) -> str:
    """'aiconfigurator-core ... (93%), uncalibrated (7%)' over the steps' op times."""
    share: dict[str, float] = {}
    for s in steps:
        for k, v in s._by_source.items():
            share[k] = share.get(k, 0.0) + v
    total = sum(share.values()) or 1.0
    ordered = sorted(share.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} ({100 * v / total:.0f}%)" for k, v in ordered)


def confidence(decode: StepEstimate) -> str:
    m = decode.measured_share()
    return "high" if m >= 0.9 else "medium" if m >= 0.5 else "low"


def prefill_chunks(wl: Workload, chunk: int) -> list[tuple[int, int]]:
    """[(new tokens, cached prefix)] of one request's prefill in chunks of at most `chunk`."""
    p = wl.new_prefill_tokens
    done = wl.input_len - p
    out = []
    while p > 0:
        n = min(chunk, p)
        out.append((n, done))
        done += n
        p -= n
    return out


def point_estimate(decode: StepEstimate, prefill: tuple[StepEstimate, ...], dep: Deployment, wl: Workload,
                   batch: int, rules: EngineRules) -> Estimate:
    """A point's Estimate from its decode step and its prefill chunks (see `Estimate`)."""
    tps = wl.tokens_per_step
    tpot = decode.time_s / tps
    ttft = math.fsum(s.time_s for s in prefill)
    per_user = 1.0 / tpot
    per_gpu = batch * per_user / dep.num_gpus
    b_rep = -(-batch // dep.replicas)
    dp = dep.dp_attention and dep.tp > 1
    prefill_rounds = -(-b_rep // dep.tp) if dp else b_rep
    # requests prefill one after another (pp of them in flight over the stages: one every interval)
    cycle = prefill_rounds * math.fsum(s.interval_s for s in prefill) + max(wl.output_len - 1, 0) / tps * decode.time_s
    out_gpu = b_rep * wl.output_len / cycle / dep.group_gpus if cycle > 0 else 0.0
    notes = sorted(decode.notes.union(*(s.notes for s in prefill)))
    conf = confidence(decode)
    source = describe_sources(decode, *prefill)
    if conf == "high" and "uncalibrated" in source.split(" (")[0]:
        conf = "medium"
    return Estimate(rules.id, ttft, tpot, per_user, per_gpu, out_gpu, decode.time_s, ttft, decode.captured, source,
                    conf, tuple(notes))


# --- a step from your own profile alone (the reduced-model check) ---------------------------------

def estimate_from_profile(model: ModelSpec, table, *, phase: str, batch: int, context: int,
                          bandwidth_TBps: float = 1e4, peak_TFLOPS: float = 1e6) -> float:
    """Seconds of one step of `model` on one device (TP 1) composed from a `bench --profile` kernel
    table alone (`table`: its dict, JSON file or stored run id): `phase` 'decode' is `batch`
    sequences at `context` cached tokens; 'prefill' is `batch` sequences of `context` new tokens
    each, no prefix, in one step (the GEMMs see all `batch x context` tokens, each sequence's
    attention its own pairs). The same ops and the same sum as the serving estimate
    (`forward_ops`, `step_time`), with no engine overhead and no CUDA graph (eager, as the local
    torch run is). The device's roofline is set far above any CPU (`bandwidth_TBps`,
    `peak_TFLOPS`) so that the table's measurements, not a datasheet, give every op its time;
    ops the table lacks fall back to the uncalibrated model and are named in the op's source.
    Raises MLAError on a bad phase, batch or context."""
    from dataclasses import replace as _replace

    from ..errors import MLAError
    from ..hardware import custom_gpu
    from .engines import engine_rules
    from .ops import AttentionPrefill
    from .tables import bind, kernel_tables

    from .tables import load_profile_dict

    if phase not in ("decode", "prefill"):
        raise MLAError(f"phase must be decode or prefill, got {phase!r}")
    data, _ = load_profile_dict(table)
    # The dtype the profile ran at (the reduced model runs at it too: fp32 on a CPU).
    dtype = next((r["dtype"] for r in data["ops"].get("gemm", []) if r.get("dtype")), model.torch_dtype)
    from dataclasses import replace as _r

    model = _r(model, torch_dtype=dtype, quant_method=None, expert_weights_dtype=None)
    gpu = custom_gpu(1e4, bandwidth_TBps, peak_TFLOPS, peak_TFLOPS)
    dep = Deployment(gpu=gpu, num_gpus=1, tp=1, weights_dtype=dtype, kv_dtype=dtype)
    wl = Workload(input_len=max(1, context), output_len=1)
    tables = bind(kernel_tables(gpu, "vllm", use="profile", profile=table), gpu, dep)
    rules = _replace(engine_rules("vllm"), step_overhead_s=0.0, overlap_shared_experts_up_to=0)
    if phase == "decode":
        ops = forward_ops(model, dep, wl, decode_seqs=batch, context=context, graph=False)
    else:
        ops = [o for o in forward_ops(model, dep, wl, prefill_tokens=batch * context, graph=False)
               if not isinstance(o, AttentionPrefill)]
        ops += [_replace(o, calls=o.calls * batch) for o in forward_ops(model, dep, wl, prefill_tokens=context,
                                                                        graph=False)
                if isinstance(o, AttentionPrefill)]
    gpu_s, _, _ = step_time([o.time(tables) for o in ops], rules, captured=False, overlap_tokens=0)
    return gpu_s
