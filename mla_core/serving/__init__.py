"""Serving plan: prefill (TTFT), the decode step (TPOT) across GPUs and nodes, the frontier of
splits, cost, and the engines' launch commands (docs/model.md, "Serving" and "Collective bandwidth").

A deployment is `num_gpus` GPUs (`gpus_per_node` a node) split into `num_gpus / tp` replicas
("groups") of `tp` GPUs each:
    dp_attention False   attention and MLP tensor-parallel over the group (TP all-reduce, two a
                         layer); `ep` = tp spreads the routed experts over the group instead
    dp_attention True    every GPU of the group runs attention for its own sequences (attention
                         data parallelism, all heads); the MLP / experts are split over the
                         group: `ep` = tp is expert parallelism (all-to-all dispatch + combine
                         a MoE layer), `ep` = 1 shards them (all-gather + reduce-scatter a layer)
Weights, KV bytes, capacity and the decode step's bytes and flops come from `capacity`,
`roofline`, `params` and `kv` (one call site each: `_group_capacity`, `decode_work`,
`prefill_work`); this module adds prefill, communication, speculative decoding, the frontier,
cost and the commands.

Formulas (B = sequences of one group, k = speculative tokens, a = acceptance, h = hidden_size):
    tokens_per_step     (1 - a^(k+1)) / (1 - a)            sequences emit per decode step
    decode step         verifies k + 1 tokens a sequence: weights read once (experts touched by
                        B (k + 1) tokens), KV read once, attention and linear flops x (k + 1)
    TP all-reduce       2 a layer, S = B (k + 1) h 2 bytes: 2 (n - 1) / n S per GPU
    EP all-to-all       dispatch and combine a MoE layer: B_gpu (k + 1) top_k h 2 (n - 1) / n
                        per GPU (bf16 activations)
    links               within a node the preset's link (NVLink) per direction; a group that
                        spans nodes also crosses the network (`internode_gbps` per GPU):
                        hierarchical all-reduce, 2 (N - 1) / N S / g per GPU over the network
                        (N nodes of g GPUs); all-to-all sends a token once to each distinct
                        remote node holding one of its experts (DeepEP's node-level dedup),
                        (N - 1) (1 - (1 - 1/N)^top_k) nodes under uniform routing.
                        comm time = max(NVLink bytes / NVLink, network bytes / network);
                        `link_bandwidth_Bps` (a measured busbw) replaces both
    step bound          max(memory, compute, communication): a strict lower bound on the step
    step serial         max(memory, compute) + communication: no overlap
    TPOT                step / tokens_per_step;  tokens/s per user = 1 / TPOT
    prefill (TTFT)      P = ceil(input_len (1 - prefix_hit)) new tokens; flops 2 active P +
                        causal pairs x n_h (2 (d_nope + d_r) + 2 d_v) a layer (MLA runs prefill as
                        MHA; MHA/GQA: n_h 4 d_h); bytes: weights once + the cache touched
    memory cap          `capacity` at the mean context input_len + output_len / 2; a request
                        is admitted only if input_len + output_len fits one GPU's cache
    cost                usd_per_gpu_hour gpus / (tokens/s 3600) 1e6 $ per million tokens
Every time is a lower bound and every rate an upper bound; nothing is calibrated to an engine.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field, replace

from ..errors import MLAError
from ..hardware import GPU
from ..spec import ModelSpec
from ..validate import MAX_BATCH, MAX_CONTEXT, MAX_GPUS, MAX_TP, check_choice, check_int, check_real

ACTIVATION_BYTES = 2  # bf16 activations on the wire (docs/model.md, "Serving")
MAX_SPEC_TOKENS = 16
MAX_SPLIT_BATCH = 1 << 20  # batches per group searched up to this


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise MLAError(f"{name} must be true or false, got {value!r}"[:200])
    return value


# --- inputs ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Deployment:
    """GPUs and how the model is split over them (see the module docstring).

    `gpu` a `hardware.GPU`; `num_gpus` in the deployment; `gpus_per_node`; `tp` GPUs a group
    (replica); `dp_attention` attention data parallelism within the group; `ep` 1 or `tp`
    (experts spread over the group); `weights_dtype` (None: the model's), `kv_dtype`
    (kv_cache_dtype), `gpu_memory_utilization` (vLLM's meaning); `internode_gbps` network per
    GPU in Gb/s (1e9 bit/s); `link_bandwidth_Bps` a measured collective bus bandwidth (B/s) that
    replaces the link figures; `block_size` (None: 64 for MLA, 16 otherwise); `reserve_bytes`
    memory kept back per GPU; `mla_path` the decode path (docs/model.md); `state_dtype` the
    recurrent state's dtype (hybrid models).
    """

    gpu: GPU
    num_gpus: int = 1
    gpus_per_node: int = 8
    tp: int = 1
    dp_attention: bool = False
    ep: int = 1
    weights_dtype: str | None = None
    kv_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    internode_gbps: float = 400.0
    link_bandwidth_Bps: float | None = None
    block_size: int | None = None
    reserve_bytes: int = 0
    mla_path: str = "absorbed"
    state_dtype: str = "auto"  # recurrent state (Mamba, DeltaNet, KDA, lightning); auto = torch_dtype
    ssm_state_dtype: str = "auto"  # its recurrent (SSM) part alone; auto = the config's, else state_dtype

    @property
    def replicas(self) -> int:
        return self.num_gpus // self.tp

    @property
    def split(self) -> str:
        return split_label(self.tp, self.dp_attention, self.ep, self.replicas)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gpu"] = self.gpu.id
        d["replicas"] = self.replicas
        d["split"] = self.split
        return d


@dataclass(frozen=True)
class Workload:
    """What the users send: `input_len` and `output_len` tokens a request, `prefix_hit` the share of
    input tokens already cached (0 <= h < 1), `spec_tokens` k speculative tokens a step and
    `acceptance` a (0 <= a < 1) the chance each is accepted (MTP / EAGLE)."""

    input_len: int
    output_len: int
    prefix_hit: float = 0.0
    spec_tokens: int = 0
    acceptance: float = 0.0

    @property
    def mean_context(self) -> int:
        """input_len + output_len / 2 (rounded up): where continuous batching holds a sequence on average."""
        return self.input_len + -(-self.output_len // 2)

    @property
    def max_context(self) -> int:
        return self.input_len + self.output_len

    @property
    def new_prefill_tokens(self) -> int:
        """P = ceil(input_len (1 - prefix_hit)), at least 1 (the last token is always computed)."""
        return max(1, math.ceil(self.input_len * (1.0 - self.prefix_hit) - 1e-9))

    @property
    def tokens_per_step(self) -> float:
        """(1 - a^(k+1)) / (1 - a): tokens a sequence emits per decode step on average."""
        k, a = self.spec_tokens, self.acceptance
        return float(k + 1) if a == 1 else (1.0 - a ** (k + 1)) / (1.0 - a)

    def to_dict(self) -> dict:
        return {**asdict(self), "mean_context": self.mean_context, "new_prefill_tokens": self.new_prefill_tokens,
                "tokens_per_step": self.tokens_per_step}


def check_workload(wl: Workload) -> Workload:
    """Raise MLAError (one line) on a bad workload; return it."""
    check_int("input_len", wl.input_len, maximum=MAX_CONTEXT)
    check_int("output_len", wl.output_len, maximum=MAX_CONTEXT)
    check_int("input_len + output_len", wl.input_len + wl.output_len, maximum=MAX_CONTEXT)
    check_real("prefix_hit", wl.prefix_hit, minimum=0)
    if wl.prefix_hit >= 1:
        raise MLAError(f"prefix_hit must be in [0, 1), got {wl.prefix_hit:g}")
    check_int("spec_tokens", wl.spec_tokens, minimum=0, maximum=MAX_SPEC_TOKENS)
    check_real("acceptance", wl.acceptance, minimum=0)
    if wl.acceptance >= 1:
        raise MLAError(f"acceptance must be in [0, 1), got {wl.acceptance:g}")
    if wl.spec_tokens == 0 and wl.acceptance:
        raise MLAError("acceptance needs spec_tokens >= 1 (speculative tokens a step)")
    return wl


def check_deployment(model: ModelSpec, dep: Deployment) -> Deployment:
    """Raise MLAError (one line) on a deployment that cannot be built; return it."""
    from ..roofline import MLA_PATHS
    from ..units import KV_DTYPES, STATE_DTYPES, WEIGHT_DTYPES

    check_choice("state_dtype", dep.state_dtype, STATE_DTYPES)
    check_choice("ssm_state_dtype", dep.ssm_state_dtype, STATE_DTYPES)
    if not isinstance(dep.gpu, GPU):
        raise MLAError("gpu must be a GPU preset or a typed GPU")
    check_int("num_gpus", dep.num_gpus, maximum=MAX_GPUS)
    check_int("gpus_per_node", dep.gpus_per_node, maximum=MAX_GPUS)
    check_int("tp", dep.tp, maximum=MAX_GPUS)
    if dep.tp > dep.num_gpus:
        raise MLAError(f"tp ({dep.tp}) cannot exceed num_gpus ({dep.num_gpus})")
    if dep.num_gpus % dep.tp:
        raise MLAError(f"tp ({dep.tp}) must divide num_gpus ({dep.num_gpus})")
    _check_bool("dp_attention", dep.dp_attention)
    check_int("ep", dep.ep, maximum=MAX_GPUS)
    if dep.ep > 1:
        if model.moe is None:
            raise MLAError(f"ep {dep.ep}: {model.name} has no experts (expert parallelism needs a MoE model)")
        if dep.ep > model.moe.n_routed_experts:
            raise MLAError(f"ep ({dep.ep}) is larger than the {model.moe.n_routed_experts} routed experts of {model.name}")
        if dep.ep != dep.tp:
            raise MLAError(f"ep must be 1 or the group size tp ({dep.tp}); got {dep.ep}")
    if dep.weights_dtype is not None:
        check_choice("weights_dtype", dep.weights_dtype, tuple(WEIGHT_DTYPES))
    check_choice("kv_dtype", dep.kv_dtype, KV_DTYPES)
    check_real("gpu_memory_utilization", dep.gpu_memory_utilization, minimum=0, exclusive_minimum=True, maximum=1)
    check_real("internode_gbps", dep.internode_gbps, minimum=0, exclusive_minimum=True, maximum=1e7)
    if dep.link_bandwidth_Bps is not None:
        check_real("link_bandwidth_Bps", dep.link_bandwidth_Bps, minimum=0, exclusive_minimum=True, maximum=1e16)
    if dep.block_size is not None:
        check_int("block_size", dep.block_size, maximum=1 << 20)
    check_int("reserve_bytes", dep.reserve_bytes, minimum=0, maximum=1 << 62)
    check_choice("mla_path", dep.mla_path, MLA_PATHS)
    node_layout_error = group_layout_error(dep.tp, dep.gpus_per_node)
    if node_layout_error:
        raise MLAError(node_layout_error)
    if not (dep.dp_attention and dep.tp > 1):
        from ..kv import tp_split_error

        err = tp_split_error(model, dep.tp)
        if err:
            raise MLAError(err)
    if dep.tp > 1 and dep.link_bandwidth_Bps is None and dep.gpu.link_GBps is None:
        raise MLAError(f"GPU {dep.gpu.id} has no published GPU-to-GPU link figure; use one GPU a group, "
                       "or give a measured link bandwidth")
    dep.gpu.bandwidth_Bps  # raises for a GPU without a bandwidth figure
    dep.gpu.peak_flops(dep.weights_dtype or model.default_weights_dtype)
    return dep


def group_layout_error(tp: int, gpus_per_node: int) -> str | None:
    """Why groups of `tp` GPUs cannot be laid on nodes of `gpus_per_node` (engines start the same
    number of ranks on every node of a group): a group within a node must divide the node, a
    group over nodes must fill whole nodes. None when they can."""
    if tp <= gpus_per_node:
        if gpus_per_node % tp:
            return (f"groups of {tp} GPUs do not tile a node of {gpus_per_node}: a group would straddle two "
                    "nodes with unequal halves")
    elif tp % gpus_per_node:
        return (f"a group of {tp} GPUs over nodes of {gpus_per_node} would leave a node part-filled "
                f"({tp % gpus_per_node} GPUs on its last node); engines start the same number of ranks on "
                "every node")
    return None


def split_label(tp: int, dp_attention: bool, ep: int, replicas: int = 1) -> str:
    """'TP8', 'TP8 x2' (two replicas), 'DP-attention 16 + EP16', 'DP-attention 8 + MoE TP8'."""
    if dp_attention and tp > 1:
        text = f"DP-attention {tp} + " + (f"EP{ep}" if ep > 1 else f"MLP TP{tp}")
    else:
        text = f"TP{tp}" + (f" + EP{ep}" if ep > 1 else "")
    return text + (f" x{replicas}" if replicas > 1 else "")


# --- the core calls (the one place each is made) -------------------------------------------------

def _wdtype(model: ModelSpec, dep: Deployment) -> str:
    return dep.weights_dtype or model.default_weights_dtype


def _group_capacity(model: ModelSpec, dep: Deployment, context: int) -> dict:
    """`capacity.capacity` of one group (replica) of `tp` GPUs at `context` tokens a sequence."""
    from ..capacity import capacity

    return capacity(model, context=context, gpu=dep.gpu, num_gpus=dep.tp, tp=dep.tp,
                    dp_attention=dep.dp_attention and dep.tp > 1, weights_dtype=dep.weights_dtype,
                    kv_dtype=dep.kv_dtype, gpu_memory_utilization=dep.gpu_memory_utilization,
                    block_size=dep.block_size, reserve_bytes=dep.reserve_bytes, state_dtype=dep.state_dtype,
                    ssm_state_dtype=dep.ssm_state_dtype)


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
    new tokens; flops 2 active_params P + pairs x the expanded (MHA-form) attention flops a pair;
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
    dp = dep.dp_attention and tp > 1
    weights = _streamed_weight_bytes(model, wdtype, p, tp, dp)
    # Recurrent layers run their recurrence over the P new tokens and write the state once.
    state_bytes, state_flops_one = _state_step(model, 1, dep.state_dtype, 1 if dp else tp, dp, dep.ssm_state_dtype)
    state_flops = state_flops_one * p
    if dp:
        attn = attention_side_params(model)
        flops_gpu = attention + state_flops + 2.0 * attn * p + 2.0 * (active - attn) * p / tp
        kv = kv_cache_bytes(model, wl.input_len, 1, dep.kv_dtype, tp=1, dp_attention=True)
    else:
        flops_gpu = (attention + 2.0 * active * p) / tp + state_flops
        kv = kv_cache_bytes(model, wl.input_len, 1, dep.kv_dtype, tp=tp)
    kv += state_bytes // 2  # written once (recurrent_step counts a read and a write)
    return {
        "new_tokens": p,
        "attention_pairs": pairs,
        "flops": attention + 2.0 * active * p + state_flops * (1 if dp else tp),
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


def communication(model: ModelSpec, dep: Deployment, tokens_group: int, tokens_gpu: int) -> dict:
    """Bytes one GPU sends a forward pass over `tokens_group` tokens of the group
    (`tokens_gpu` of them attended on this GPU under DP-attention), and the time they take.

    Returns `allreduce_bytes` (TP all-reduce, or the MLP all-gather + reduce-scatter under
    DP-attention), `alltoall_bytes` (EP dispatch + combine), `nvlink_bytes`, `network_bytes`
    (the parts on each link), `time_s` = max(nvlink / within-node, network / across-node)
    (0 for one GPU a group). See the module docstring for the formulas."""
    tp, h, layers = dep.tp, model.hidden_size, model.num_hidden_layers
    zero = {"allreduce_bytes": 0.0, "alltoall_bytes": 0.0, "nvlink_bytes": 0.0, "network_bytes": 0.0, "time_s": 0.0}
    if tp == 1:
        return zero
    nodes, g = _nodes(dep)
    moe_layers = _moe_layers(model)

    def allreduce(size: float, count: int) -> tuple[float, float, float]:
        """(bytes per GPU, NVLink part, network part) of `count` all-reduces of `size` bytes."""
        total = count * 2.0 * (tp - 1) / tp * size
        intra = count * 2.0 * (g - 1) / g * size
        inter = count * 2.0 * (nodes - 1) / nodes * size / g if nodes > 1 else 0.0
        return total, intra, inter

    s = float(tokens_group) * h * ACTIVATION_BYTES
    if dep.dp_attention:
        ar_layers = layers - moe_layers if dep.ep > 1 else layers  # the MLP is sharded: gather + scatter
        ar, ar_intra, ar_inter = allreduce(s, ar_layers)
        a2a = a2a_intra = a2a_inter = 0.0
        if dep.ep > 1 and moe_layers:
            topk = model.moe.num_experts_per_tok
            per = float(tokens_gpu) * h * ACTIVATION_BYTES
            a2a = 2 * moe_layers * per * topk * (dep.ep - 1) / dep.ep
            a2a_intra = 2 * moe_layers * per * topk * (g - 1) / dep.ep
            if nodes > 1:  # a token goes once to each distinct remote node holding one of its experts
                remote_nodes = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** topk)
                a2a_inter = 2 * moe_layers * per * remote_nodes
    else:
        ar, ar_intra, ar_inter = allreduce(s, 2 * layers)
        a2a = a2a_intra = a2a_inter = 0.0
    nvlink, network = ar_intra + a2a_intra, ar_inter + a2a_inter
    intra_bw, inter_bw = link_Bps(dep)
    if dep.link_bandwidth_Bps is not None:
        time = (ar + a2a) / dep.link_bandwidth_Bps
    else:
        time = max(nvlink / intra_bw, network / inter_bw if network else 0.0)
    return {"allreduce_bytes": ar, "alltoall_bytes": a2a, "nvlink_bytes": nvlink, "network_bytes": network,
            "time_s": time}


# --- one point ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    """One split at one batch. Times are lower bounds (s), rates upper bounds (tokens/s).

    `batch` counts the sequences of the whole deployment; `max_batch` is the memory cap at this
    split (0: weights or one request do not fit). `bound` names what sets the decode step:
    'memory', 'compute' or 'communication'; `limit` what stopped this split's batch in a search
    ('capacity' at the memory cap, 'tpot' / 'ttft' at an SLO, else the step's bound).
    Costs are $ per million tokens, None without a price."""

    split: str
    tp: int
    dp_attention: bool
    ep: int
    replicas: int
    num_gpus: int
    batch: int
    batch_per_replica: int
    batch_per_gpu: int
    max_batch: int
    fits: bool
    ttft_s: float
    ttft_serial_s: float
    prefill_bound: str
    tpot_s: float
    tpot_serial_s: float
    step_time_s: float
    step_serial_s: float
    memory_time_s: float
    compute_time_s: float
    communication_time_s: float
    bound: str
    tokens_per_step: float
    tokens_per_s_per_user: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    input_tokens_per_s_per_gpu: float
    step_bytes_per_gpu: int
    step_flops_per_gpu: float
    step_intensity_flop_per_byte: float
    kv_bytes_per_gpu: int
    weights_bytes_per_step_per_gpu: int
    communication_bytes_per_gpu: float
    usd_per_million_output_tokens: float | None = None
    usd_per_million_input_tokens: float | None = None
    meets_slo: bool | None = None
    limit: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Split:
    """What a split fixes before the batch: its capacity and its prefill."""

    dep: Deployment
    max_batch_per_replica: int
    prefill: dict
    ttft_s: float
    ttft_serial_s: float
    prefill_bound: str
    input_tokens_per_s_per_gpu: float
    reason: str = ""


def _times(bytes_gpu: float, flops_gpu: float, peak_flops: float, dep: Deployment, comm_s: float) -> tuple:
    """(memory s, compute s, what binds, bound s, serial s) of one GPU's prefill or decode step
    (docs/model.md, "Serving"): bound = max(memory, compute, communication), the strict lower
    bound; serial = max(memory, compute) + communication, nothing overlapped."""
    t_mem = bytes_gpu / dep.gpu.bandwidth_Bps
    t_cmp = flops_gpu / peak_flops
    parts = {"memory": t_mem, "compute": t_cmp, "communication": comm_s}
    bound = max(parts, key=parts.get)
    return t_mem, t_cmp, bound, parts[bound], max(t_mem, t_cmp) + comm_s


def _prepare(model: ModelSpec, dep: Deployment, wl: Workload) -> _Split:
    cap = _group_capacity(model, dep, wl.mean_context)
    reason = ""
    if not cap["weights_fit"]:
        reason = "weights do not fit"
        cap_batch = 0
    elif cap["max_tokens_per_gpu"] < wl.max_context:
        reason = f"one request of {wl.max_context:,} tokens does not fit one GPU's cache"
        cap_batch = 0
    else:
        cap_batch = cap["max_concurrent_requests"]
    pre = prefill_work(model, dep, wl)
    comm = communication(model, dep, pre["new_tokens"], pre["new_tokens"])
    _, _, bound, ttft, serial = _times(pre["bytes_gpu"], pre["flops_gpu"], pre["peak_flops"], dep, comm["time_s"])
    # Prefill throughput: many requests share each weight read, so a request costs its flops, its
    # cache writes and its communication; with DP-attention the group's GPUs prefill different
    # requests at once. It counts every input token, cached prefix included.
    tp = dep.tp
    if dep.dp_attention and tp > 1:
        kv_group = pre["kv_bytes_gpu"]
        comm_req = communication(model, dep, tp * pre["new_tokens"], pre["new_tokens"])["time_s"] / tp
    else:
        kv_group = pre["kv_bytes_gpu"] * tp
        comm_req = comm["time_s"]
    per_request = max(pre["flops"] / (tp * pre["peak_flops"]), kv_group / (tp * dep.gpu.bandwidth_Bps), comm_req)
    input_rate = wl.input_len / per_request / tp
    return _Split(dep, cap_batch, pre, ttft, serial, bound, input_rate, reason)


def _group_step(model: ModelSpec, dep: Deployment, wl: Workload, batch_group: int) -> tuple:
    """(decode_work of a group at `batch_group`, its communication): what a step costs one GPU."""
    work = decode_work(model, dep, wl, batch_group)
    k1 = wl.spec_tokens + 1
    return work, communication(model, dep, batch_group * k1, work["batch_gpu"] * k1)


# The search's fast path: a group's figures do not depend on how many replicas the deployment has,
# so a sweep over deployment sizes reuses them (keyed by the group: num_gpus = tp). `evaluate` is
# the scalar path and recomputes everything.
_group_step_cached = functools.lru_cache(maxsize=1 << 16)(_group_step)
_prepare_group_cached = functools.lru_cache(maxsize=1 << 12)(lambda model, dep, wl: _prepare(model, dep, wl))


def clear_caches() -> None:
    """Forget the search's per-group figures (benchmarks time a cold search)."""
    _group_step_cached.cache_clear()
    _prepare_group_cached.cache_clear()
    for f in (_attention_one_sequence, _model_params, _streamed_params, _moe_layers):
        f.cache_clear()


def _point(model: ModelSpec, sp: _Split, wl: Workload, batch: int, usd_per_gpu_hour: float | None,
           slo: tuple[float | None, float | None] = (None, None), group: Deployment | None = None) -> Point:
    """One point; with `group` (the deployment cut to one group, num_gpus = tp) the group's step
    comes from the search's cache."""
    dep = sp.dep
    replicas = dep.replicas
    b_rep = -(-batch // replicas)
    if group is not None:
        work, comm = _group_step_cached(model, group, wl, b_rep)
    else:
        work, comm = _group_step(model, dep, wl, b_rep)
    t_mem, t_cmp, bound, step, serial = _times(work["step_bytes"], work["step_flops"], work["peak_flops"], dep,
                                               comm["time_s"])
    tps = wl.tokens_per_step
    per_user = tps / step
    total = batch * per_user
    per_gpu = total / dep.num_gpus
    max_batch = sp.max_batch_per_replica * replicas
    usd_out = usd_in = None
    if usd_per_gpu_hour is not None:
        usd_out = usd_per_gpu_hour * dep.num_gpus / (total * 3600) * 1e6
        usd_in = usd_per_gpu_hour / (sp.input_tokens_per_s_per_gpu * 3600) * 1e6
    ttft_max, tpot_max = slo
    meets = None
    if ttft_max is not None or tpot_max is not None:
        meets = (ttft_max is None or sp.ttft_s <= ttft_max) and (tpot_max is None or step / tps <= tpot_max)
    return Point(
        split=dep.split, tp=dep.tp, dp_attention=bool(dep.dp_attention and dep.tp > 1), ep=dep.ep,
        replicas=replicas, num_gpus=dep.num_gpus, batch=batch, batch_per_replica=b_rep,
        batch_per_gpu=work["batch_gpu"], max_batch=max_batch, fits=0 < batch <= max_batch,
        ttft_s=sp.ttft_s, ttft_serial_s=sp.ttft_serial_s, prefill_bound=sp.prefill_bound,
        tpot_s=step / tps, tpot_serial_s=serial / tps, step_time_s=step, step_serial_s=serial,
        memory_time_s=t_mem, compute_time_s=t_cmp, communication_time_s=comm["time_s"], bound=bound,
        tokens_per_step=tps, tokens_per_s_per_user=per_user, tokens_per_s=total, tokens_per_s_per_gpu=per_gpu,
        input_tokens_per_s_per_gpu=sp.input_tokens_per_s_per_gpu,
        step_bytes_per_gpu=work["step_bytes"], step_flops_per_gpu=work["step_flops"],
        step_intensity_flop_per_byte=work["step_flops"] / work["step_bytes"],
        kv_bytes_per_gpu=work["kv_bytes"], weights_bytes_per_step_per_gpu=work["weights_bytes"],
        communication_bytes_per_gpu=comm["allreduce_bytes"] + comm["alltoall_bytes"],
        usd_per_million_output_tokens=usd_out, usd_per_million_input_tokens=usd_in, meets_slo=meets,
        limit=bound,
    )


def _check_price(usd_per_gpu_hour):
    if usd_per_gpu_hour is not None:
        check_real("usd_per_gpu_hour", usd_per_gpu_hour, minimum=0, exclusive_minimum=True, maximum=1e9)


def evaluate(model: ModelSpec, dep: Deployment, wl: Workload, batch: int, *,
             usd_per_gpu_hour: float | None = None, ttft_ms: float | None = None,
             tpot_ms: float | None = None) -> Point:
    """One point: `model` on `dep` serving `wl` with `batch` sequences in the whole deployment
    (spread evenly over the replicas; the busiest GPU sets the step). A batch above the memory
    cap is evaluated all the same, with `fits` False.
    Raises MLAError on bad input (0 GPUs, tp not dividing num_gpus, ep larger than the experts,
    acceptance outside [0, 1), a negative price, ...)."""
    check_workload(wl)
    model, _ = with_mtp_draft(model, wl)
    check_deployment(model, dep)
    check_int("batch", batch, maximum=MAX_BATCH)
    _check_price(usd_per_gpu_hour)
    slo = _slo(ttft_ms, tpot_ms)
    return _point(model, _prepare(model, dep, wl), wl, batch, usd_per_gpu_hour, slo)


def _slo(ttft_ms, tpot_ms) -> tuple[float | None, float | None]:
    out = []
    for name, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if v is not None:
            check_real(name, v, minimum=0, exclusive_minimum=True, maximum=1e12)
            out.append(v / 1000.0)
        else:
            out.append(None)
    return out[0], out[1]


# --- the search -----------------------------------------------------------------------------------

def splits(model: ModelSpec, num_gpus: int, gpus_per_node: int | None = None) -> list[tuple[int, bool, int]]:
    """Every (tp, dp_attention, ep) the search tries for `num_gpus`: TP over each divisor of
    num_gpus; for MoE models also DP-attention groups (tp > 1) with the experts sharded (ep 1) or
    spread (ep = tp, when there are at least tp routed experts). TP with ep = tp is left out: its
    bytes and collectives are those of plain TP here (`evaluate` still takes it). Engines run
    DP-attention for MoE models only (SGLang's --enable-dp-attention help), so dense models get TP."""
    from ..kv import divisors

    from ..kv import tp_split_error

    out = []
    moe = model.moe
    for tp in divisors(num_gpus):
        if tp > MAX_TP:
            break
        if gpus_per_node is not None and group_layout_error(tp, gpus_per_node):
            continue  # the group cannot be laid on the nodes
        if not tp_split_error(model, tp):
            out.append((tp, False, 1))
        if moe is not None and tp > 1:
            out.append((tp, True, 1))
            if tp <= moe.n_routed_experts:
                out.append((tp, True, tp))
    return out


def pareto(points) -> list[Point]:
    """The points no other point beats on both tokens/s per user and tokens/s per GPU, sorted by
    tokens/s per user."""
    ordered = sorted(points, key=lambda p: (-p.tokens_per_s_per_user, -p.tokens_per_s_per_gpu))
    front, best_gpu = [], -1.0
    for p in ordered:
        if p.tokens_per_s_per_gpu > best_gpu:
            front.append(p)
            best_gpu = p.tokens_per_s_per_gpu
    return sorted(front, key=lambda p: p.tokens_per_s_per_user)


def batches_up_to(cap: int) -> list[int]:
    """Powers of two below `cap`, and `cap` itself (batches a group is tried at)."""
    out, b = [], 1
    while b < cap:
        out.append(b)
        b *= 2
    if cap >= 1:
        out.append(cap)
    return out


@dataclass(frozen=True)
class SplitSummary:
    """One split's row in the plan: its best point (None when nothing fits) and why."""

    split: str
    tp: int
    dp_attention: bool
    ep: int
    replicas: int
    max_batch: int
    best: Point | None
    reason: str = ""

    def to_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "best"},
                "best": self.best.to_dict() if self.best else None}


@dataclass(frozen=True)
class Plan:
    """The frontier of `model` on `num_gpus` GPUs serving `workload`.

    `points` every (split, batch) tried; `pareto` the set no point beats on tokens/s per user and
    tokens/s per GPU; `best` the point with the most tokens/s per GPU among those meeting the SLOs
    (all points when none is set), None when none meets them; `splits` each split's best point;
    `vllm_command` / `sglang_command` launch `best` (None with a reason in `notes`)."""

    model: str
    gpu: str
    num_gpus: int
    gpus_per_node: int
    workload: Workload
    ttft_ms: float | None
    tpot_ms: float | None
    usd_per_gpu_hour: float | None
    points: tuple[Point, ...]
    pareto: tuple[Point, ...]
    best: Point | None
    splits: tuple[SplitSummary, ...]
    vllm_command: str | None
    sglang_command: str | None
    launch: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        best = self.best.to_dict() if self.best else None
        return {
            "model": self.model, "gpu": self.gpu, "num_gpus": self.num_gpus, "gpus_per_node": self.gpus_per_node,
            "workload": self.workload.to_dict(), "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "best": best,
            **{k: (best or {}).get(k) for k in ("split", "ttft_s", "tpot_s", "tokens_per_s_per_user",
                                                "tokens_per_s_per_gpu", "tokens_per_s", "max_batch", "bound",
                                                "usd_per_million_output_tokens", "usd_per_million_input_tokens")},
            "pareto": [p.to_dict() for p in self.pareto],
            "splits": [s.to_dict() for s in self.splits],
            "points": len(self.points),
            "vllm_command": self.vllm_command,
            "sglang_command": self.sglang_command,
            "launch": self.launch,
            "notes": list(self.notes),
        }


def search(model: ModelSpec, gpu: GPU, *, num_gpus: int, workload: Workload, gpus_per_node: int = 8,
           ttft_ms: float | None = None, tpot_ms: float | None = None, usd_per_gpu_hour: float | None = None,
           weights_dtype: str | None = None, kv_dtype: str = "auto", gpu_memory_utilization: float = 0.9,
           internode_gbps: float = 400.0, link_bandwidth_Bps: float | None = None, block_size: int | None = None,
           reserve_bytes: int = 0, mla_path: str = "absorbed", tp: int | None = None,
           dp_attention: bool | None = None, ep: int | None = None, batch: int | None = None,
           model_path: str | None = None, state_dtype: str = "auto", ssm_state_dtype: str = "auto") -> Plan:
    """Search every split of `num_gpus` (or the one given by `tp` / `dp_attention` / `ep`) at
    batches of powers of two per group up to the memory cap (or the one `batch` of the whole
    deployment), and pick the best point meeting `ttft_ms` and `tpot_ms` (see `Plan`).
    `model_path` names the model in the commands (default: the preset's Hugging Face repo).
    Raises MLAError on bad input."""
    check_int("num_gpus", num_gpus, maximum=MAX_GPUS)
    check_workload(workload)
    _check_price(usd_per_gpu_hour)
    slo = _slo(ttft_ms, tpot_ms)
    if batch is not None:
        check_int("batch", batch, maximum=MAX_BATCH)
    from ..kv import resolve_state_dtype

    resolve_state_dtype(model, state_dtype)
    model, draft_note = with_mtp_draft(model, workload)
    base = Deployment(gpu=gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node, tp=1, weights_dtype=weights_dtype,
                      kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization, internode_gbps=internode_gbps,
                      link_bandwidth_Bps=link_bandwidth_Bps, block_size=block_size, reserve_bytes=reserve_bytes,
                      mla_path=mla_path, state_dtype=state_dtype, ssm_state_dtype=ssm_state_dtype)
    if tp is not None or dp_attention is not None or ep is not None:
        t = tp if tp is not None else num_gpus
        chosen = [(t, bool(dp_attention), ep if ep is not None else 1)]
    else:
        chosen = splits(model, num_gpus, gpus_per_node)
        if gpu.link_GBps is None and link_bandwidth_Bps is None:
            chosen = [s for s in chosen if s[0] == 1]
    points, summaries = [], []
    for t, dp, e in chosen:
        dep = check_deployment(model, replace(base, tp=t, dp_attention=dp, ep=e))
        group = replace(dep, num_gpus=dep.tp)
        sp = replace(_prepare_group_cached(model, group, workload), dep=dep)
        max_batch = sp.max_batch_per_replica * dep.replicas
        if batch is not None:
            tried = [batch]
        else:
            tried = [b * dep.replicas for b in batches_up_to(min(sp.max_batch_per_replica, MAX_SPLIT_BATCH))]
        mine = [_point(model, sp, workload, b, usd_per_gpu_hour, slo, group=group) for b in tried]
        points += mine
        ok = [p for p in mine if p.meets_slo is not False and (p.fits or batch is not None)]
        best = max(ok, key=_rank, default=None)
        if best is not None:
            best = replace(best, limit=_limit(best, sp, slo, workload, batch))
        summaries.append(SplitSummary(dep.split, t, dep.dp_attention and t > 1, e, dep.replicas, max_batch, best,
                                      sp.reason or ("" if best else "no batch meets the SLOs")))
    candidates = [s.best for s in summaries if s.best is not None]
    best = max(candidates, key=_rank, default=None)
    feasible = [p for p in points if p.fits or batch is not None]
    notes = list(model.notes) + ([draft_note] if draft_note else [])
    if tp is None and dp_attention is None and ep is None:
        from ..kv import divisors

        skipped = [t for t in divisors(num_gpus) if group_layout_error(t, gpus_per_node)]
        if skipped:
            notes.append(f"groups of {', '.join(map(str, skipped))} GPUs skipped: they do not lay out on nodes of "
                         f"{gpus_per_node} (a group fills part of one node evenly, or whole nodes)")
    if best is None:
        notes.append("no split meets the SLOs" if candidates == [] and any(s.max_batch for s in summaries)
                     else "no split holds the model and one request")
    vllm = sglang = None
    launch = {}
    if best is not None and not best.fits:
        notes.append(f"the batch given ({best.batch:,}) does not fit in memory (at most {best.max_batch:,} "
                     "sequences): no launch command")
    elif best is not None:
        from .commands import launch_commands

        launch = launch_commands(model, replace(base, tp=best.tp, dp_attention=best.dp_attention, ep=best.ep),
                                 workload, best, model_path=model_path)
        vllm, sglang = launch["vllm_command"], launch["sglang_command"]
        notes += launch["notes"]
    return Plan(model=model.name, gpu=gpu.id, num_gpus=num_gpus, gpus_per_node=gpus_per_node, workload=workload,
                ttft_ms=ttft_ms, tpot_ms=tpot_ms, usd_per_gpu_hour=usd_per_gpu_hour, points=tuple(points),
                pareto=tuple(pareto(feasible)), best=best, splits=tuple(summaries), vllm_command=vllm,
                sglang_command=sglang, launch=launch, notes=tuple(notes))


def _rank(p: Point) -> tuple:
    """Most tokens/s per GPU, then per user, then the shortest step without overlap."""
    return (p.tokens_per_s_per_gpu, p.tokens_per_s_per_user, -p.step_serial_s)


def _limit(p: Point, sp: _Split, slo, wl: Workload, batch: int | None) -> str:
    """What stopped this split's best batch: the memory cap, an SLO, or (a given batch) its bound."""
    if batch is not None:
        return p.bound
    ttft_max, tpot_max = slo
    if ttft_max is not None and sp.ttft_s > ttft_max:
        return "ttft"
    if p.batch_per_replica >= sp.max_batch_per_replica:
        return "capacity"
    return "tpot" if tpot_max is not None else p.bound


# --- published figures ----------------------------------------------------------------------------

MEASUREMENT_METRICS = ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "tpot_s", "ttft_s",
                       "kernel_GBps", "kernel_TFLOPS")
LATENCY_METRICS = ("tpot_s", "ttft_s")  # times: a measured time at or above its bound stays within it


def published_checks() -> list[dict]:
    """Every figure of data/serving_measurements.json against the plan's bound for its setting.

    Per GPU: `measured` / `measured_over_gpus`. Bounds: output tokens/s per GPU, the most tokens/s
    per GPU over the batches that fit memory at the published split (or at the published batch);
    input tokens/s per GPU, the split's prefill throughput; `tpot_s` (s), the decode step at the
    published batch over the tokens a step emits; `ttft_s` (s), one request's prefill; a kernel's
    GB/s or TFLOP/s, the roof it runs under (the preset's bandwidth or dense bf16 peak).
    A time is a lower bound: it is within its bound when measured >= bound, and its efficiency
    is bound / measured (a time is not shared by GPUs: `measured_over_gpus` must be 1); a rate is
    within when measured <= bound, efficiency measured / bound.
    Each row: `id`, `title`, `source`, `engine`, `model`, `gpu`, `split`, `parallelism`,
    `workload`, `metric`, `measured_per_gpu` (the metric's unit), `bound_per_gpu`, `efficiency`,
    `within_bound`, `batch` (the batch the bound is taken at, None for kernels and prefill),
    `bound_by`, `assumptions`. Raises MLAError when the file is missing or a row is malformed."""
    from ..presets import _load, load_gpu, load_model

    rows = []
    for m in _load("serving_measurements.json").get("measurements", []):
        try:
            metric = check_choice("metric", m["metric"], MEASUREMENT_METRICS)
            model, gpu = load_model(m["model"]), load_gpu(m["gpu"])
            par, w = m["parallelism"], m["workload"]
            latency = metric in LATENCY_METRICS
            over = check_int("measured_over_gpus", m["measured_over_gpus"], maximum=1 if latency else MAX_GPUS)
            measured = check_real("measured", m["measured"], minimum=0, exclusive_minimum=latency) / over
            wl = Workload(**w)
        except (KeyError, TypeError) as e:
            raise MLAError(f"data/serving_measurements.json: a malformed row ({e})") from None
        if metric == "tpot_s" and m.get("batch") is None:
            raise MLAError(f"data/serving_measurements.json: {m['id']} gives a TPOT without the batch it ran at")
        batch, bound_by = None, ""
        split = split_label(par["tp"], par["dp_attention"], par["ep"], par["num_gpus"] // par["tp"])
        if metric == "kernel_GBps":
            bound = gpu.bandwidth_Bps / 1e9
            bound_by = "HBM bandwidth"
        elif metric == "kernel_TFLOPS":
            bound = gpu.peak_flops("bf16") / 1e12
            bound_by = "dense bf16 peak"
        else:
            plan = search(model, gpu, num_gpus=par["num_gpus"], gpus_per_node=par["gpus_per_node"], workload=wl,
                          weights_dtype=m.get("weights_dtype"), kv_dtype=m.get("kv_dtype", "auto"),
                          tp=par["tp"], dp_attention=par["dp_attention"], ep=par["ep"], batch=m.get("batch"))
            best = plan.best
            if best is None:
                raise MLAError(f"data/serving_measurements.json: {m['id']} does not fit ({'; '.join(plan.notes)})")
            if metric == "input_tokens_per_s_per_gpu":
                bound, bound_by = best.input_tokens_per_s_per_gpu, f"prefill, {best.prefill_bound} bound"
            elif metric == "ttft_s":
                bound, bound_by = best.ttft_s, f"one request's prefill, {best.prefill_bound} bound"
            elif metric == "tpot_s":
                bound, bound_by = best.tpot_s, f"decode at batch {best.batch:,}, {best.bound} bound"
                batch = best.batch
            else:
                bound, bound_by = best.tokens_per_s_per_gpu, f"decode at batch {best.batch:,}, {best.bound} bound"
                batch = best.batch
        rows.append({
            "id": m["id"], "title": m.get("title", m["id"]), "source": m.get("source", ""),
            "engine": m.get("engine", ""), "model": model.name, "gpu": gpu.id, "split": split,
            "parallelism": par, "workload": w, "metric": metric, "measured_per_gpu": measured,
            "bound_per_gpu": bound, "efficiency": bound / measured if latency else measured / bound,
            "within_bound": measured >= bound if latency else measured <= bound,
            "batch": batch, "bound_by": bound_by, "assumptions": m.get("assumptions", ""),
        })
    return rows


def largest_batch_that_fits(model: ModelSpec, gpu: GPU, *, context: int, tp: int = 1, kv_dtype: str = "auto",
                            weights_dtype: str | None = None, cache_layout: str = "latent",
                            gpu_memory_utilization: float = 0.9, block_size: int | None = None) -> int:
    """Whole sequences of `context` tokens that one group of `tp` GPUs holds at TP: the
    `capacity.capacity` answer (`max_concurrent_requests`) the roofline page marks on its batch
    axis; 0 when the weights do not fit. Raises MLAError on bad inputs."""
    from ..capacity import capacity

    return capacity(model, context=context, gpu=gpu, num_gpus=tp, tp=tp, weights_dtype=weights_dtype,
                    kv_dtype=kv_dtype, cache_layout=cache_layout, gpu_memory_utilization=gpu_memory_utilization,
                    block_size=block_size)["max_concurrent_requests"]


def accuracy() -> dict:
    """`published_checks()` and their summary, for the Published figures page: `rows`, `cases`,
    `within_bound` (how many measured figures stay at or under their bound), `efficiency_min`,
    `efficiency_max` (measured / bound)."""
    rows = published_checks()
    eff = [r["efficiency"] for r in rows]
    return {"rows": rows, "cases": len(rows), "within_bound": sum(r["within_bound"] for r in rows),
            "efficiency_min": min(eff, default=None), "efficiency_max": max(eff, default=None)}
