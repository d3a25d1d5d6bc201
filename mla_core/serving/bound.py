"""The bound of a serving step: the bytes, flops and communication of a prefill or a decode step on
the busiest GPU of a group, and the times they cannot beat (docs/model.md, "Serving").

Weights, KV bytes, capacity and the decode step's bytes and flops come from `capacity`,
`roofline`, `params` and `kv` (one call site each: `_group_capacity`, `decode_work`,
`prefill_work`); this module adds prefill, communication and speculative decoding. Every time
is a lower bound; nothing is calibrated to an engine (the estimate, `step.py`, is).
"""
from __future__ import annotations

import functools
import math

from ..spec import ModelSpec
from .inputs import ACTIVATION_BYTES, PP_SEND_TENSORS, Deployment, Workload

# --- the core calls (the one place each is made) -------------------------------------------------

def _wdtype(model: ModelSpec, dep: Deployment) -> str:
    return dep.weights_dtype or model.default_weights_dtype


def _group_capacity(model: ModelSpec, dep: Deployment, context: int) -> dict:
    """`capacity.capacity` of one group (replica) of `tp` GPUs at `context` tokens a sequence.

    With `pp` stages each stage's GPUs hold that stage's weights and the cache of its layers for
    every sequence of the replica (`stages`); the engine allocates as many cache blocks as the
    tightest stage holds (vLLM takes the minimum over its workers), so the replica's capacity is
    the stage with the fewest whole requests, its `max_tokens_per_gpu` the least of any stage, and
    `weights_fit` only when every stage's weights fit."""
    from ..capacity import capacity

    caps = [capacity(st, context=context, gpu=dep.gpu, num_gpus=dep.tp, tp=dep.tp,
                     dp_attention=dep.dp_attention and dep.tp > 1, weights_dtype=dep.weights_dtype,
                     kv_dtype=dep.kv_dtype, gpu_memory_utilization=dep.gpu_memory_utilization,
                     block_size=dep.block_size, reserve_bytes=dep.reserve_bytes, state_dtype=dep.state_dtype,
                     ssm_state_dtype=dep.ssm_state_dtype) for st, _ in stages(model, dep)]
    if len(caps) == 1:
        return caps[0]
    short = [c for c in caps if not c["weights_fit"]]
    if short:
        return short[0]
    tight = min(caps, key=lambda c: (c["max_concurrent_requests"], c["max_tokens_per_gpu"]))
    return {**tight.to_dict(), "max_tokens_per_gpu": min(c["max_tokens_per_gpu"] for c in caps),
            "weights_bytes_per_gpu": max(c["weights_bytes_per_gpu"] for c in caps)}


# --- pipeline stages ------------------------------------------------------------------------------

def stages(model: ModelSpec, dep: Deployment) -> tuple[tuple[ModelSpec, int], ...]:
    """The models `dep.pp` pipeline stages run, equal stages once with their count
    (`spec.distinct_stages`; ((model, 1),) at pp 1)."""
    if dep.pp == 1:
        return ((model, 1),)
    from ..spec import distinct_stages

    return distinct_stages(model, dep.pp)


def micro_batches(pp: int, batch_group: int) -> tuple[int, int]:
    """(micro-batches in flight, sequences each) of a replica holding `batch_group` sequences over
    `pp` stages: min(pp, B) micro-batches of ceil(B / m) (docs/model.md, "Deployments")."""
    m = max(1, min(pp, batch_group))
    return m, -(-batch_group // m)


def pp_boundaries(dep: Deployment) -> tuple[int, int]:
    """(sends within a node, sends across nodes) among the pp - 1 stage boundaries of a replica:
    stage i holds GPUs i tp .. (i + 1) tp - 1, so boundary i crosses a node where i tp is a
    multiple of gpus_per_node."""
    cross = sum(1 for i in range(1, dep.pp) if (i * dep.tp) % dep.gpus_per_node == 0)
    return dep.pp - 1 - cross, cross


def pp_send_bytes(model: ModelSpec, dep: Deployment, tokens: int) -> float:
    """Bytes one GPU sends the next stage for `tokens` tokens of a micro-batch: the hidden states
    and the residual (PP_SEND_TENSORS), bf16, split over the TP ranks (vLLM's
    `send_tensor_dict(all_gather_group=tp_group)` sends 1/tp from each rank and the next stage
    all-gathers it; the gather is left out, so the figure stays a lower bound)."""
    return PP_SEND_TENSORS * float(tokens) * model.hidden_size * ACTIVATION_BYTES / dep.tp


def pp_send_s(model: ModelSpec, dep: Deployment, tokens: int) -> float:
    """Seconds of the pp - 1 sends one micro-batch of `tokens` tokens makes passing every stage
    (`pp_send_bytes` over the link each boundary crosses: `collective_wire`'s 'send')."""
    if dep.pp == 1:
        return 0.0
    size = pp_send_bytes(model, dep, tokens)
    within, across = pp_boundaries(dep)
    return sum(n * wire_time(*collective_wire("send", size, dep, nodes=nodes), dep)
               for n, nodes in ((within, 1), (across, 2)) if n)


def pipeline_time(stage_s, send_s: float, micro: int) -> float:
    """Time between a sequence's tokens with `micro` micro-batches over the stages of `stage_s`
    ((seconds, stages that take them), as `stages` counts them; docs/model.md, "Deployments"): a
    micro-batch passes every stage and the sends between them, sum + send_s, and the slowest
    stage serves every micro-batch in turn, micro x max; the larger of the two. At pp 1 it is the
    one stage's time."""
    return max(math.fsum(t * n for t, n in stage_s) + send_s, micro * max(t for t, _ in stage_s))


def _streamed_weight_bytes(model: ModelSpec, wdtype: str, tokens: int, tp: int, dp: bool) -> int:
    """Weight bytes one GPU reads for `tokens` tokens (experts touched; `params.weights_bytes`,
    so mxfp4 experts are 4.25 bits): TP divides all by tp; DP-attention keeps the attention
    weights whole and divides the rest."""
    from ..params import expert_and_other_dtypes, routed_params_streamed_per_step, weights_bytes
    from ..units import weight_bytes

    total = weights_bytes(model, wdtype, params=_streamed_params(model, tokens),
                          routed=routed_params_streamed_per_step(model, tokens))
    if not dp:
        return -(-total // tp)
    _, other = expert_and_other_dtypes(model, wdtype)
    attn = weight_bytes(_model_params(model)[1], other)
    return attn + -(-(total - attn) // tp)


@functools.lru_cache(maxsize=1 << 10)
def _state_step(model: ModelSpec, batch_gpu: int, state_dtype: str, tp: int, dp: bool,
                ssm_state_dtype: str = "auto") -> tuple[int, int]:
    """`roofline.recurrent_step` on one GPU: the per-sequence state read and written once a
    step, and the recurrent layers' flops (0, 0 without such state)."""
    from ..roofline import recurrent_step

    return recurrent_step(model, batch_gpu, state_dtype, tp=tp, dp_attention=dp, ssm_state_dtype=ssm_state_dtype)


def draft_step_work(model: ModelSpec, dep: Deployment, wl: Workload, batch_gpu: int) -> dict:
    """The MTP / EAGLE draft layers beyond what the step already counts.

    The draft layers are layers of the model (`spec.with_draft_layers`; `plan` adds the model's
    `num_nextn_predict_layers` itself when speculative tokens are asked for): their cache is read
    with the rest of the KV and their weights are streamed with the other weights, once a step.
    A draft proposing k tokens runs k times; the k - 1 further passes are left out so that every
    figure stays a lower bound on time. Returns {'bytes': 0, 'flops': 0.0}."""
    return {"bytes": 0, "flops": 0.0}


def with_mtp_draft(model: ModelSpec, wl: Workload) -> tuple[ModelSpec, str | None]:
    """The model a speculative workload runs: with `spec_tokens` > 0 and MTP layers in the
    config (`num_nextn_predict_layers`) but none turned on, they are added (and a note says so)."""
    if wl.spec_tokens > 0 and not model.draft_layers and model.num_nextn_predict_layers:
        from ..spec import with_draft_layers

        n = model.num_nextn_predict_layers
        return with_draft_layers(model, n), (f"speculative decoding with the model's {n} MTP draft "
                                             f"layer{'s' if n != 1 else ''} (num_nextn_predict_layers): "
                                             "their cache and weights are counted")
    return model, None


@functools.lru_cache(maxsize=1 << 10)
def _attention_one_sequence(model: ModelSpec, context: int, kv_dtype: str, mla_path: str, tp: int,
                            dp_attention: bool) -> dict:
    """`roofline.decode_attention` of one sequence on one GPU (its heads under TP, all of them under
    DP-attention); a step's attention is B times this."""
    from ..roofline import decode_attention

    return decode_attention(model, context, 1, kv_dtype, mla_path, tp=tp, dp_attention=dp_attention)


@functools.lru_cache(maxsize=1 << 8)
def _model_params(model: ModelSpec) -> tuple[int, int]:
    """(`params.active_params_per_token`, `params.attention_side_params`) of a model."""
    from ..params import active_params_per_token, attention_side_params

    return active_params_per_token(model), attention_side_params(model)


@functools.lru_cache(maxsize=1 << 14)
def _streamed_params(model: ModelSpec, tokens: int) -> float:
    """`params.params_streamed_per_step` at `tokens` tokens (MoE experts touched)."""
    from ..params import params_streamed_per_step

    return params_streamed_per_step(model, tokens)


def decode_work(model: ModelSpec, dep: Deployment, wl: Workload, batch_group: int) -> dict:
    """Bytes and flops of one decode step on the busiest GPU of a group holding `batch_group`
    sequences at the mean context, verifying k + 1 tokens each (the roofline of docs/model.md,
    "Decode step roofline", composed from the core's parts so that both splits share it):

        attention   `roofline.decode_attention` of the GPU's sequences (TP: all B, heads / tp,
                    the MLA latent whole; DP-attention: ceil(B / tp), every head), flops x (k + 1),
                    the KV read once
        weights     `params.params_streamed_per_step` at B (k + 1) tokens (experts touched): TP
                    divides all by tp; DP-attention keeps the attention weights whole, the rest / tp
        flops       2 x `params.active_params_per_token` a token (attention-side ones on the GPU's
                    own tokens under DP-attention) + attention

    At TP this equals `roofline.roofline(batch=B (k + 1), tp=tp)` but for the KV read once
    (tests/test_serving.py checks it). `draft_step_work` is added for MTP / EAGLE.
    Returns ints/floats: `weights_bytes`, `kv_bytes`, `step_bytes`, `step_flops`,
    `attention_flops`, `batch_gpu`, `peak_flops`."""
    wdtype, k1, tp = _wdtype(model, dep), wl.spec_tokens + 1, dep.tp
    dp = dep.dp_attention and tp > 1
    b_gpu = -(-batch_group // tp) if dp else batch_group
    one = _attention_one_sequence(model, wl.mean_context, dep.kv_dtype, dep.mla_path, 1 if dp else tp, dp)
    kv = one["attention_bytes"] * b_gpu
    attention_flops = one["attention_flops"] * b_gpu * k1
    active, attn_params = _model_params(model)
    tokens = batch_group * k1
    weights = _streamed_weight_bytes(model, wdtype, tokens, tp, dp)
    if dp:
        linear = 2.0 * attn_params * b_gpu * k1 + 2.0 * (active - attn_params) * tokens / tp
    else:
        linear = 2.0 * active * tokens / tp
    # Recurrent layers: the state read and written once a step; their flops for every verified token.
    state_bytes, state_flops = _state_step(model, b_gpu, dep.state_dtype, 1 if dp else tp, dp, dep.ssm_state_dtype)
    draft = draft_step_work(model, dep, wl, b_gpu)
    return {
        "weights_bytes": weights,
        "kv_bytes": kv,
        "state_bytes": state_bytes,
        "step_bytes": weights + kv + state_bytes + draft["bytes"],
        "step_flops": linear + attention_flops + state_flops * k1 + draft["flops"],
        "attention_flops": attention_flops,
        "batch_gpu": b_gpu,
        "peak_flops": dep.gpu.peak_flops(wdtype),
    }


def prefill_attention_pairs(model: ModelSpec, input_len: int, new_tokens: int) -> int:
    """(query, key) pairs a prefill of the last `new_tokens` of `input_len` computes, summed over
    the attention blocks of every layer (shared-KV layers included: they compute attention too),
    each cache kind counting the keys a query sees on it (`layers.CacheSpec.prefill_pairs`:
    causal; windows, chunks and DeepSeek-V4's compressed entries applied). Without windows a
    block has P (P + 1) / 2 + P (input_len - P). Returns an int."""
    return sum(g.count * g.layer.prefill_pairs(input_len, new_tokens) for g in model.cache_groups())


def prefill_attention_flops(model: ModelSpec, input_len: int, new_tokens: int) -> int:
    """Attention flops of that prefill, all heads: pairs x each kind's flops a pair (MLA runs as
    MHA over expanded K and V, DeepSeek-V2 section 2.1; `layers.CacheSpec.prefill_flops_per_pair`)."""
    return sum(g.count * g.layer.prefill_attention_flops(input_len, new_tokens) for g in model.cache_groups())


def prefill_work(model: ModelSpec, dep: Deployment, wl: Workload) -> dict:
    """Flops and bytes of one request's prefill (docs/model.md): P = ceil(input_len (1 - prefix_hit))
    new tokens; flops 2 (active_params - LM head) P + 2 LM head (the logits of the sampled token
    only) + pairs x the expanded (MHA-form) attention flops a pair;
    bytes: every streamed weight once (experts touched by P tokens) + the cache of `input_len`
    tokens (the prefix read, the new part written). Per GPU of the group: TP divides all by tp;
    DP-attention runs attention on one GPU and divides the rest by tp.
    Returns `new_tokens`, `attention_pairs`, `flops`, `attention_flops`, `flops_gpu`,
    `bytes_gpu`, `weights_bytes_gpu`, `kv_bytes_gpu` (floats / ints)."""
    from ..kv import kv_cache_bytes
    from ..params import active_params_per_token, attention_side_params

    wdtype, tp = _wdtype(model, dep), dep.tp
    p = wl.new_prefill_tokens
    pairs = prefill_attention_pairs(model, wl.input_len, p)
    attention = float(prefill_attention_flops(model, wl.input_len, p))
    active = active_params_per_token(model)
    # The LM head computes the logits of the sampled (last) token only, as engines run prefill; the
    # rest of the active parameters run on every new token.
    lm = (model.vocab_size or 0) * model.hidden_size if model.holds_lm_head else 0
    dp = dep.dp_attention and tp > 1
    weights = _streamed_weight_bytes(model, wdtype, p, tp, dp)
    # Recurrent layers run their recurrence over the P new tokens and write the state once.
    state_bytes, state_flops_one = _state_step(model, 1, dep.state_dtype, 1 if dp else tp, dp, dep.ssm_state_dtype)
    state_flops = state_flops_one * p
    linear = 2.0 * (active - lm) * p + 2.0 * lm
    if dp:
        attn = attention_side_params(model)
        flops_gpu = attention + state_flops + 2.0 * attn * p + 2.0 * (active - attn - lm) * p / tp + 2.0 * lm
        kv = kv_cache_bytes(model, wl.input_len, 1, dep.kv_dtype, tp=1, dp_attention=True)
    else:
        flops_gpu = (attention + linear) / tp + state_flops
        kv = kv_cache_bytes(model, wl.input_len, 1, dep.kv_dtype, tp=tp)
    kv += state_bytes // 2  # written once (recurrent_step counts a read and a write)
    return {
        "new_tokens": p,
        "attention_pairs": pairs,
        "flops": attention + linear + state_flops * (1 if dp else tp),
        "attention_flops": attention,
        "flops_gpu": flops_gpu,
        "weights_bytes_gpu": weights,
        "kv_bytes_gpu": kv,
        "bytes_gpu": weights + kv,
        "peak_flops": dep.gpu.peak_flops(wdtype),
    }


# --- communication --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 8)
def _moe_layers(model: ModelSpec) -> int:
    return model.moe.num_moe_layers if model.moe else 0


def _nodes(dep: Deployment) -> tuple[int, int]:
    """(nodes a group spans, GPUs of the group in one node)."""
    g = min(dep.tp, dep.gpus_per_node)
    return -(-dep.tp // g), g


def link_Bps(dep: Deployment) -> tuple[float, float]:
    """(within-node B/s per direction, across-node B/s per GPU), or the measured busbw for both."""
    if dep.link_bandwidth_Bps is not None:
        return dep.link_bandwidth_Bps, dep.link_bandwidth_Bps
    intra = dep.gpu.link_Bps if dep.gpu.link_GBps is not None else float("inf")
    return intra, dep.internode_gbps * 1e9 / 8


def collective_wire(op: str, size: float, dep: Deployment, *, topk: int = 1, nodes: int | None = None
                    ) -> tuple[float, float, float]:
    """(bytes per GPU, NVLink part, network part) of one collective over the group of `dep`
    (ring algorithms, nccl-tests' PERFORMANCE.md; docs/model.md, "Serving"):

        all_reduce                    2 (n - 1) / n S per GPU; over N nodes of g GPUs the NVLink
                                      part is 2 (g - 1) / g S and the network part
                                      2 (N - 1) / N S / g (hierarchical)
        all_gather, reduce_scatter    half of that each
        all_to_all                    one dispatch or combine of S = tokens x hidden x 2 bytes a
                                      GPU: S top_k (ep - 1) / ep, NVLink S top_k (g - 1) / ep, and
                                      once to each distinct remote node holding one of a token's
                                      experts, S (N - 1) (1 - (1 - 1/N)^top_k) (DeepEP's node dedup)
        send                          a pipeline stage's point-to-point send of S bytes to the next
                                      stage: S over NVLink, or over the network when the boundary
                                      crosses nodes (`nodes` 2)
    `size` is S in bytes. The one formula the bound's `communication` and the estimate's
    collective ops (ops.Collective) share."""
    if op == "send":
        return (float(size), 0.0, float(size)) if (nodes or 1) > 1 else (float(size), float(size), 0.0)
    tp = dep.tp
    if tp == 1:
        return 0.0, 0.0, 0.0
    nodes, g = _nodes(dep)
    if op == "all_to_all":
        ep = dep.ep
        total = size * topk * (ep - 1) / ep
        intra = size * topk * (g - 1) / ep
        inter = size * (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** topk) if nodes > 1 else 0.0
        return total, intra, inter
    f = 2.0 if op == "all_reduce" else 1.0
    total = f * (tp - 1) / tp * size
    intra = f * (g - 1) / g * size
    inter = f * (nodes - 1) / nodes * size / g if nodes > 1 else 0.0
    return total, intra, inter


def wire_time(total: float, intra: float, inter: float, dep: Deployment) -> float:
    """Seconds the bytes of `collective_wire` take: max(NVLink part / within-node link, network
    part / across-node link), or all of them over a measured bus bandwidth."""
    if dep.link_bandwidth_Bps is not None:
        return total / dep.link_bandwidth_Bps
    intra_bw, inter_bw = link_Bps(dep)
    return max(intra / intra_bw if intra else 0.0, inter / inter_bw if inter else 0.0)


def communication_calls(model: ModelSpec, dep: Deployment, tokens_group: int, tokens_gpu: int) -> list[tuple]:
    """The collectives of one forward pass on one GPU: [(op, message bytes S, calls a pass)]
    over the layers of `model` (one pipeline stage's when it is one). [] for one GPU a group.

        TP attention        two all-reduces a layer over the group's tokens, whatever the MoE
                            split: every rank holds every token after the attention all-reduce,
                            runs its experts' slices (E / ep experts, 1 / moe_tp of each) and the
                            layer's second all-reduce sums them (SGLang's MoE over moe_tp x ep =
                            tp, TensorRT-LLM's fused MoE under attention TP)
        DP-attention, ep 1  the sharded MLP's all-gather and reduce-scatter a layer
        DP-attention, ep tp the dense layers' gather and scatter, and one dispatch + one combine
                            all-to-all a MoE layer of the GPU's own tokens (DeepEP; SGLang's DeepEP
                            sets ep = tp)
        DP-attention, 1 < ep < tp   the MoE layers run over all the group's tokens with the
                            experts split moe_tp x ep: all-gather and reduce-scatter a layer, as
                            with ep 1 (TensorRT-LLM's fused MoE uses all-gather / reduce-scatter
                            where it does not use all-to-all)"""
    if dep.tp == 1:
        return []
    h, layers = model.hidden_size, model.num_hidden_layers
    s = float(tokens_group) * h * ACTIVATION_BYTES
    if not dep.dp_attention:
        return [("all_reduce", s, 2 * layers)]
    moe_layers = _moe_layers(model)
    a2a = dep.ep > 1 and dep.ep == dep.tp
    sharded = layers - moe_layers if a2a else layers  # the MLP is sharded: gather + scatter
    out = [("all_gather", s, sharded), ("reduce_scatter", s, sharded)]
    if a2a and moe_layers:
        per = float(tokens_gpu) * h * ACTIVATION_BYTES
        out += [("all_to_all", per, 2 * moe_layers)]
    return out


def communication(model: ModelSpec, dep: Deployment, tokens_group: int, tokens_gpu: int) -> dict:
    """Bytes one GPU sends a forward pass over `tokens_group` tokens of the group
    (`tokens_gpu` of them attended on this GPU under DP-attention), and the time they take.

    Returns `allreduce_bytes` (TP all-reduce, or the MLP all-gather + reduce-scatter under
    DP-attention), `alltoall_bytes` (EP dispatch + combine), `nvlink_bytes`, `network_bytes`
    (the parts on each link), `time_s` = max(nvlink / within-node, network / across-node)
    (0 for one GPU a group). Formulas: `collective_wire`, calls: `communication_calls`."""
    ar = a2a = nvlink = network = 0.0
    topk = model.moe.num_experts_per_tok if model.moe else 1
    for op, size, calls in communication_calls(model, dep, tokens_group, tokens_gpu):
        total, intra, inter = collective_wire(op, size, dep, topk=topk)
        if op == "all_to_all":
            a2a += calls * total
        else:
            ar += calls * total
        nvlink += calls * intra
        network += calls * inter
    time = wire_time(ar + a2a, nvlink, network, dep) if dep.tp > 1 else 0.0
    return {"allreduce_bytes": ar, "alltoall_bytes": a2a, "nvlink_bytes": nvlink, "network_bytes": network,
            "time_s": time}


def _times(bytes_gpu: float, flops_gpu: float, peak_flops: float, dep: Deployment, comm_s: float) -> tuple:
    """(memory s, compute s, what binds, bound s, serial s) of one GPU's prefill or decode step
    (docs/model.md, "Serving"): bound = max(memory, compute, communication), the strict lower
    bound; serial = max(memory, compute) + communication, nothing overlapped."""
    t_mem = bytes_gpu / dep.gpu.bandwidth_Bps
    t_cmp = flops_gpu / peak_flops
    parts = {"memory": t_mem, "compute": t_cmp, "communication": comm_s}
    bound = max(parts, key=parts.get)
    return t_mem, t_cmp, bound, parts[bound], max(t_mem, t_cmp) + comm_s

