"""The serving plan's inputs: a deployment (GPUs and how the model is split over them) and a
workload (what the users send), with the checks that turn bad input into one MLAError line
(docs/model.md, "Serving"). See the package docstring for the splits.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..errors import MLAError
from ..hardware import GPU
from ..spec import ModelSpec
from ..validate import MAX_CONTEXT, MAX_GPUS, check_choice, check_int, check_real

ACTIVATION_BYTES = 2  # bf16 activations on the wire (docs/model.md, "Serving")
PP_SEND_TENSORS = 2  # a stage hands the next its hidden states and the residual (vLLM's and SGLang's
#                      IntermediateTensors / PPProxyTensors of DeepSeek and Llama: {hidden_states, residual})
MAX_PP = 64
MAX_SPEC_TOKENS = 16
MAX_SPLIT_BATCH = 1 << 20  # batches per group searched up to this


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise MLAError(f"{name} must be true or false, got {value!r}"[:200])
    return value


@dataclass(frozen=True)
class Deployment:
    """GPUs and how the model is split over them (see the package docstring).

    `gpu` a `hardware.GPU`; `num_gpus` in the deployment; `gpus_per_node` (GPUs one NVLink
    domain joins: 8 on an HGX board, 72 in an NVL72 rack); `tp` GPUs a stage (the tensor-parallel
    group); `pp` pipeline stages a replica (layers split over them, `tp * pp` GPUs a replica);
    `dp_attention` attention data parallelism within the TP group; `ep` the routed experts'
    expert parallelism, any divisor of tp, the rest of the group slicing each expert
    (`moe_tp * ep = tp`, TensorRT-LLM's moe_tp_size x moe_ep_size); `weights_dtype` (None: the model's), `kv_dtype`
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
    pp: int = 1

    @property
    def group_gpus(self) -> int:
        """GPUs of one replica: tp x pp."""
        return self.tp * self.pp

    @property
    def replicas(self) -> int:
        return self.num_gpus // self.group_gpus

    @property
    def moe_tp(self) -> int:
        """Slices of each routed expert: tp / ep (TensorRT-LLM's moe_tp_size, SGLang's tp_size // ep_size)."""
        return self.tp // max(1, self.ep)

    @property
    def split(self) -> str:
        return split_label(self.tp, self.dp_attention, self.ep, self.replicas, self.pp)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gpu"] = self.gpu.id
        d["replicas"] = self.replicas
        d["moe_tp"] = self.moe_tp
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
    check_int("pp", dep.pp, maximum=MAX_PP)
    if dep.tp * dep.pp > dep.num_gpus:
        raise MLAError(f"tp x pp ({dep.tp} x {dep.pp}) cannot exceed num_gpus ({dep.num_gpus})")
    if dep.num_gpus % (dep.tp * dep.pp):
        what = f"tp ({dep.tp})" if dep.pp == 1 else f"tp x pp ({dep.tp} x {dep.pp} = {dep.tp * dep.pp})"
        raise MLAError(f"{what} must divide num_gpus ({dep.num_gpus})")
    decoder = model.num_hidden_layers
    if dep.pp > decoder:
        raise MLAError(f"pp ({dep.pp}) cannot exceed the {decoder} decoder layers of {model.name}: "
                       "every stage holds at least one")
    _check_bool("dp_attention", dep.dp_attention)
    if dep.pp > 1 and dep.dp_attention and dep.tp > 1:
        raise MLAError("pp with dp_attention is not planned: give pipeline stages of TP groups, or DP-attention "
                       "without pipeline stages")
    check_int("ep", dep.ep, maximum=MAX_GPUS)
    if dep.ep > 1:
        if model.moe is None:
            raise MLAError(f"ep {dep.ep}: {model.name} has no experts (expert parallelism needs a MoE model)")
        if dep.ep > model.moe.n_routed_experts:
            raise MLAError(f"ep ({dep.ep}) is larger than the {model.moe.n_routed_experts} routed experts of {model.name}")
        if dep.tp % dep.ep:
            raise MLAError(f"ep ({dep.ep}) must divide the group size tp ({dep.tp}): the rest of the group slices "
                           "each expert (moe_tp x ep = tp)")
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
    node_layout_error = group_layout_error(dep.tp, dep.gpus_per_node) or (
        group_layout_error(dep.tp * dep.pp, dep.gpus_per_node, "replicas") if dep.pp > 1 else None)
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


def group_layout_error(tp: int, gpus_per_node: int, what: str = "groups") -> str | None:
    """Why `what` (groups, replicas) of `tp` GPUs cannot be laid on nodes of `gpus_per_node`
    (engines start the same number of ranks on every node of a group): a group within a node must
    divide the node, a group over nodes must fill whole nodes. None when they can."""
    one = what[:-1]
    if tp <= gpus_per_node:
        if gpus_per_node % tp:
            return (f"{what} of {tp} GPUs do not tile a node of {gpus_per_node}: a {one} would straddle two "
                    "nodes with unequal halves")
    elif tp % gpus_per_node:
        return (f"a {one} of {tp} GPUs over nodes of {gpus_per_node} would leave a node part-filled "
                f"({tp % gpus_per_node} GPUs on its last node); engines start the same number of ranks on "
                "every node")
    return None


def default_gpus_per_node(gpu: GPU) -> int:
    """GPUs a node (one NVLink domain) when none is given: the preset's `link_domain_gpus` where it
    joins more than an HGX board's 8 (72 on GB200 / GB300 NVL72: one NVLink domain), else 8
    (HGX boards, and PCIe or bridged cards in 8-GPU servers: H100 NVL's 2-GPU bridge domains sit
    in 8-GPU hosts, so their launch commands stay on one node)."""
    domain = getattr(gpu, "link_domain_gpus", None)
    return domain if domain and domain > 8 else 8


def split_label(tp: int, dp_attention: bool, ep: int, replicas: int = 1, pp: int = 1) -> str:
    """'TP8', 'TP8 x2' (two replicas), 'TP8 + EP8', 'TP8 + MoE TP2 x EP4', 'TP4 + PP2',
    'DP-attention 16 + EP16', 'DP-attention 8 + MLP TP8', 'DP-attention 8 + MoE TP2 x EP4'."""
    if 1 < ep < tp:
        moe = f"MoE TP{tp // ep} x EP{ep}"
    else:
        moe = f"EP{ep}" if ep > 1 else ""
    if dp_attention and tp > 1:
        text = f"DP-attention {tp} + " + (moe or f"MLP TP{tp}")
    else:
        text = f"TP{tp}" + (f" + {moe}" if moe else "")
    if pp > 1:
        text += f" + PP{pp}"
    return text + (f" x{replicas}" if replicas > 1 else "")
