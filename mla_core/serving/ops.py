"""The ops of a serving step, each an object with one interface: `op.time(tables) -> OpTime`
(docs/model.md, "Estimated step time: the ops of a step, each from a kernel table").

An op is one kernel at one real per-GPU shape (after TP / EP), called `calls` times a step
(once a layer of its group, usually). Its time comes from the kernel tables (tables.py: your
own profile, aiconfigurator-core's measured tables, or the uncalibrated two-term model), never
below its own roofline on this GPU:

    roofline_s = max(bytes / HBM bandwidth, flops / dense peak at the op's compute dtype)
                 (collectives: the bytes each GPU puts on each link, bound.collective_wire,
                 over that link: bound.wire_time)

so a step's estimate, the sum of its ops, is never faster than the step's bound (the sum of
per-op maxima is at least the maximum of the sums; tests/test_estimate.py checks it for every
preset and split). When a table answers below the roofline (an L2-resident benchmark, say) the
roofline is used and the OpTime says so.

Op classes and the shape each hands to a table (units: tokens, elements, bytes, seconds):
    Gemm              m x k @ k x n, weights `dtype` (our names: bf16, fp8, mxfp4, ...);
                      `block_fp8` marks 128 x 128 block-scaled fp8 (DeepSeek-style checkpoints)
    AttentionDecode   `kind` (mla_absorbed, gqa, sliding), `batch` sequences of `context` cached
                      tokens each, heads and KV heads on this GPU, K and V widths, kv dtype;
                      `token_bytes` per KV head per token, `flops_per_token` per query head
    AttentionPrefill  `kind` (mla_mha, gqa, sliding), `tokens` new tokens after `prefix` cached
                      ones; `pairs` (query, key) pairs it computes, `flops_per_pair` per head
    MoE               routed experts of one MoE layer: `tokens` entering it on the group,
                      top_k, E experts, `experts_local` on this GPU, `moe_tp` slices of each
    Elementwise       `bytes` read + written (norms, RoPE, activation, cache writes, sampling)
    Collective        `op` (all_reduce, all_gather, reduce_scatter, all_to_all, and a pipeline
                      stage's point-to-point `send`) of `bytes` per GPU over `ranks` GPUs
                      spanning `nodes` nodes
    Recurrent         `kind` (RECURRENT_KINDS), `batch` sequences, `tokens` a sequence,
                      `state_elements` per sequence on this GPU at `state_bytes` each
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

from ..units import weight_bytes

ACT = 2  # bytes of a bf16 activation
OP_CLASSES = ("gemm", "attention_decode", "attention_prefill", "moe", "elementwise", "collective", "recurrent")


@dataclass(frozen=True)
class OpTime:
    """One op's share of a step. `per_call_s` from the table (or the roofline when the table is
    faster), `time_s` = per_call_s x calls; `roofline_s` the same over calls; `bytes` and
    `flops` over calls; `source` the table that answered; `note` why the answer is not a plain
    lookup (extrapolated, filled in from another engine, clamped); `stream` the overlap group
    ('' = serial); `layer` the layer group it belongs to; `measured` False when the
    time comes from the uncalibrated model."""

    name: str
    op_class: str
    layer: str
    calls: float
    per_call_s: float
    time_s: float
    roofline_s: float
    bytes: float
    flops: float
    source: str
    note: str = ""
    stream: str = ""
    measured: bool = True

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Op:
    """Base of the op classes (module docstring). `name` says what the op is ('o_proj',
    'attention'), `layer` which layer group, `calls` how many times a step runs it, `stream`
    the overlap group the engine may run beside another ('' = serial)."""

    # compare=False: two ops at the same shape are equal (and hash alike), whatever they are called,
    # so Op.time keeps one answer per shape
    name: str = field(compare=False)
    calls: float = field(compare=False)
    layer: str = field(default="", compare=False)
    stream: str = field(default="", compare=False)

    op_class: ClassVar[str] = ""
    _meta: ClassVar[tuple[str, ...]] = ("name", "calls", "layer", "stream")

    def shape(self) -> dict:
        """The fields a kernel table is keyed and interpolated on."""
        return {name: getattr(self, name) for name in _shape_fields(type(self))}

    def work(self) -> tuple[float, float]:
        """(bytes, flops) of one call."""
        raise NotImplementedError

    def compute_dtype(self) -> str:
        return "bf16"

    def roofline_s(self, hw, work: tuple[float, float] | None = None) -> float:
        """Seconds one call cannot beat on `hw` (tables.Hardware); `work` this op's (bytes, flops)
        when already known."""
        nbytes, flops = work or self.work()
        return max(nbytes / hw.bandwidth_Bps, flops / hw.peak_flops(self.compute_dtype()) if flops else 0.0)

    def at(self, **shape) -> Op:
        """This op at another shape (the nearest measured one, for roofline scaling)."""
        return replace(self, **shape)

    def time(self, tables) -> OpTime:
        """The op's time from `tables` (tables.KernelTables: the precedence chain and the
        hardware), never below its roofline. An op's answer per call depends only on its shape
        (the fields compared), the chain and the hardware figures the roofline reads (for a
        collective, the group's links: tables.Hardware.key), so it is kept in `_PER_CALL` under
        those and only multiplied by `calls` here."""
        hw = tables.hw
        key = (self, tables.tables, hw.key(self.op_class == "collective"), hw.peak_flops(self.compute_dtype()))
        try:
            per, roof, nbytes, flops, source, note, measured = _PER_CALL[key]
        except KeyError:
            nbytes, flops = work = self.work()
            roof = self.roofline_s(hw, work)
            look = tables.lookup(self)
            per, note = look.latency_s, look.note
            if per < roof * (1 - 1e-9):
                per = roof
                note = "; ".join(filter(None, (note, "table faster than this GPU's roofline: the roofline used")))
            if len(_PER_CALL) > 1 << 17:
                _PER_CALL.clear()
            source, measured = look.source, look.measured
            _PER_CALL[key] = (per, roof, nbytes, flops, source, note, measured)
        c = self.calls
        return OpTime(self.name, self.op_class, self.layer, c, per, per * c, roof * c, nbytes * c, flops * c,
                      source, note, self.stream, measured)


# Op.time's answers per call: (op shape, table chain, hardware key, peak) -> (per-call s, roofline s,
# bytes, flops, source, note, measured); forgotten by tables.clear_lookups
_PER_CALL: dict = {}


@dataclass(frozen=True)
class Gemm(Op):
    m: int = 1
    n: int = 1
    k: int = 1
    dtype: str = "bf16"
    block_fp8: bool = False

    op_class: ClassVar[str] = "gemm"

    def work(self):
        return (weight_bytes(self.n * self.k, self.dtype) + ACT * (self.m * self.k + self.m * self.n),
                2.0 * self.m * self.n * self.k)

    def compute_dtype(self):
        return self.dtype


@dataclass(frozen=True)
class AttentionDecode(Op):
    kind: str = "gqa"
    batch: int = 1
    context: int = 1
    num_heads: int = 1
    num_kv_heads: int = 1
    k_dim: int = 128
    v_dim: int = 128
    kv_dtype: str = "bf16"
    window: int = 0
    token_bytes: float = 0.0  # cache bytes per token per KV head (MLA: the whole latent row)
    flops_per_token: float = 0.0  # per query head per cached token

    op_class: ClassVar[str] = "attention_decode"

    def work(self):
        cache = self.batch * self.context * self.num_kv_heads * self.token_bytes
        qo = self.batch * self.num_heads * (self.k_dim + self.v_dim) * ACT
        return cache + qo, self.batch * self.context * self.num_heads * self.flops_per_token

    def compute_dtype(self):
        return "fp8" if self.kv_dtype.startswith("fp8") else "bf16"


@dataclass(frozen=True)
class AttentionPrefill(Op):
    kind: str = "gqa"
    tokens: int = 1
    prefix: int = 0
    num_heads: int = 1
    num_kv_heads: int = 1
    k_dim: int = 128
    v_dim: int = 128
    window: int = 0
    dtype: str = "bf16"
    pairs: float = 1.0  # (query, key) pairs computed
    flops_per_pair: float = 0.0  # per query head

    op_class: ClassVar[str] = "attention_prefill"

    def work(self):
        q_o = self.tokens * self.num_heads * (self.k_dim + self.v_dim) * ACT
        kv = (self.tokens + self.prefix) * self.num_kv_heads * (self.k_dim + self.v_dim) * ACT
        return q_o + kv, self.pairs * self.num_heads * self.flops_per_pair

    def at(self, **shape):
        """At another (tokens, prefix): the pairs scale as the causal pairs do."""
        new = replace(self, **shape)
        if "tokens" in shape or "prefix" in shape:
            def causal(p, c):
                return p * (p + 1) / 2 + p * c
            old = causal(self.tokens, self.prefix)
            new = replace(new, pairs=self.pairs * causal(new.tokens, new.prefix) / old if old else new.pairs)
        return new


@functools.lru_cache(maxsize=None)
def _shape_fields(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in Op._meta)


def expected_active(experts_local: float, num_experts: int, topk: int, tokens: float) -> float:
    """Experts of this GPU that `tokens` tokens touch under uniform routing:
    experts_local (1 - (1 - k / E)^tokens) (docs/model.md, the E (1 - (1 - k/E)^B) rule)."""
    return experts_local * (1.0 - (1.0 - topk / num_experts) ** tokens)


@dataclass(frozen=True)
class MoE(Op):
    tokens: int = 1
    hidden: int = 1
    inter: int = 1
    topk: int = 1
    num_experts: int = 1
    experts_local: int = 1
    moe_tp: int = 1
    dtype: str = "bf16"

    op_class: ClassVar[str] = "moe"

    def work(self):
        per_expert = 3 * self.hidden * self.inter / self.moe_tp  # gate, up, down slices on this GPU
        active = expected_active(self.experts_local, self.num_experts, self.topk, self.tokens)
        ep = self.num_experts / self.experts_local
        rows = self.tokens * self.topk / ep  # routed rows this GPU computes (uniform routing)
        nbytes = weight_bytes(active * per_expert, self.dtype) + rows * (2 * self.hidden + 3 * self.inter / self.moe_tp) * ACT
        return nbytes, 2.0 * rows * per_expert

    def compute_dtype(self):
        return self.dtype


@dataclass(frozen=True)
class Elementwise(Op):
    bytes: float = 0.0

    op_class: ClassVar[str] = "elementwise"

    def work(self):
        return self.bytes, 0.0


@dataclass(frozen=True)
class Collective(Op):
    op: str = "all_reduce"
    bytes: float = 0.0  # message size S a GPU (bound.collective_wire)
    ranks: int = 1
    nodes: int = 1
    topk: int = 1
    graph: bool = True  # inside a CUDA graph (the engines time a graph and an eager variant)
    hidden: int = 0  # all_to_all: the token width, with `phase` dispatch / combine
    num_experts: int = 0
    phase: str = ""
    low_latency: bool = True  # all_to_all: DeepEP's low-latency kernels (decode), else high-throughput

    op_class: ClassVar[str] = "collective"

    def work(self):
        return self.bytes, 0.0

    def wire(self, dep) -> tuple[float, float, float]:
        from .bound import collective_wire

        return collective_wire(self.op, self.bytes, dep, topk=self.topk, nodes=self.nodes)

    def roofline_s(self, hw, work=None) -> float:
        from .bound import wire_time

        return wire_time(*self.wire(hw.dep), hw.dep)


@dataclass(frozen=True)
class Recurrent(Op):
    kind: str = "mamba2"
    batch: int = 1
    tokens: int = 1
    state_elements: int = 0
    state_bytes: float = 2.0  # bytes per state element
    flops_per_token: float = 0.0  # per sequence
    num_heads: int = 0  # the common shape of spec.RecurrentSpec on this GPU: H, G, P, N
    num_groups: int = 0
    head_dim: int = 0
    state_size: int = 0

    op_class: ClassVar[str] = "recurrent"

    def work(self):
        nbytes = 2.0 * self.batch * self.state_elements * self.state_bytes  # state read and written once
        return nbytes, self.batch * self.tokens * self.flops_per_token


def total_s(times) -> float:
    """Plain sum of OpTimes (no overlap): the serial time of a list."""
    return math.fsum(t.time_s for t in times)
