"""The split search: every split of the GPUs at power-of-two batches up to the memory cap, each
point's bound (bound.py) and estimate (step.py), the frontier, the best point meeting the SLOs,
and its launch commands (docs/model.md, "Serving").
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field, fields, replace

from ..hardware import GPU
from ..spec import ModelSpec
from ..validate import MAX_BATCH, MAX_GPUS, MAX_TP, check_int, check_real
from .bound import (_attention_one_sequence, _group_capacity, _model_params, _moe_layers, _streamed_params, _times,
                    communication, decode_work, micro_batches, pipeline_time, pp_send_s, prefill_work, stages,
                    with_mtp_draft)
from .inputs import (MAX_PP, MAX_SPLIT_BATCH, Deployment, Workload, check_deployment, check_workload,
                     default_gpus_per_node, group_layout_error, split_label)
from .step import Estimate, StepEstimate


@dataclass(frozen=True)
class Estimator:
    """How points are estimated: the engine's rules (engines.ENGINES) and the kernel-table chain
    (tables.kernel_tables). Hashable, so the search caches per group and batch."""

    engine: str
    tables: tuple

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)


def estimator(gpu: GPU, engine: str = "vllm", kernel_tables: str = "auto", profile=None) -> Estimator:
    """The Estimator for `gpu` and `engine` (tables.kernel_tables picks the chain). Raises
    MLAError for an unknown engine, table choice or a bad profile."""
    from .engines import engine_rules
    from .tables import kernel_tables as chain

    rules = engine_rules(engine)
    return Estimator(engine, chain(gpu, rules.aic_backend, use=kernel_tables, profile=profile))


@dataclass(frozen=True)
class Point:
    """One split at one batch. Times are lower bounds (s), rates upper bounds (tokens/s).

    `batch` counts the sequences of the whole deployment; `max_batch` is the memory cap at this
    split (0: weights or one request do not fit). `bound` names what sets the decode step:
    'memory', 'compute' or 'communication'; `limit` what stopped this split's batch in a search
    ('capacity' at the memory cap, 'tpot' / 'ttft' at an SLO, else the step's bound).
    Costs are $ per million tokens, None without a price. `estimate` what the engine will do
    (step.Estimate; None when the search was asked for bounds only): the search ranks points by
    it and checks the SLOs against it.

    `pp` pipeline stages and `moe_tp` slices of each expert (moe_tp x ep = tp); with pp > 1 the
    replica's batch runs as `micro_batches` micro-batches, `stage_step_s` is the slowest stage's
    bound for one micro-batch and `pp_send_s` the sends one micro-batch makes passing every stage;
    `step_time_s` is then bound.pipeline_time of the stages and the sends, and the per-GPU byte,
    flop and time fields are the slowest stage's."""

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
    estimate: Estimate | None = None
    pp: int = 1
    moe_tp: int = 1
    micro_batches: int = 1
    stage_step_s: float = 0.0
    pp_send_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def rate_per_user(self) -> float:
        """Tokens/s per user of the estimate, else of the bound (what the search ranks on)."""
        return self.estimate.tokens_per_s_per_user if self.estimate else self.tokens_per_s_per_user

    @property
    def rate_per_gpu(self) -> float:
        return self.estimate.tokens_per_s_per_gpu if self.estimate else self.tokens_per_s_per_gpu


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
    prefill_estimate: tuple[StepEstimate, ...] = ()


def _prefill_estimate(model: ModelSpec, group: Deployment, wl: Workload, est: Estimator, bound_s: float
                      ) -> tuple[StepEstimate, ...]:
    """One request's prefill on a group: its chunks (the engine's max_num_batched_tokens), each
    step estimated (step.estimate_step)."""
    from .engines import engine_rules
    from .step import estimate_step, prefill_chunks
    from .tables import bind

    from .step import estimate_pipeline

    rules = engine_rules(est.engine)
    tables = bind(est.tables, group.gpu, group)
    chunks = prefill_chunks(wl, rules.prefill_chunk(group.gpu.memory_GB))
    return tuple(estimate_pipeline(model, group, wl, tables, rules, prefill_tokens=n, prefix=c,
                                   bound_s=bound_s if len(chunks) == 1 else 0.0) for n, c in chunks)


def _decode_estimate(model: ModelSpec, group: Deployment, wl: Workload, batch_group: int, est: Estimator,
                     bound_s: float) -> StepEstimate:
    """The decode step of a group holding `batch_group` sequences at the mean context (over its
    pipeline stages: step.estimate_pipeline)."""
    from .engines import engine_rules
    from .step import estimate_pipeline
    from .tables import bind

    return estimate_pipeline(model, group, wl, bind(est.tables, group.gpu, group), engine_rules(est.engine),
                             decode_seqs=batch_group, context=wl.mean_context, bound_s=bound_s)


def _stage_prefill(model: ModelSpec, dep: Deployment, wl: Workload) -> tuple:
    """(prefill_work, its times, the time a request costs the stage in a stream of them) of one
    request on one stage's GPUs (the whole model at pp 1). Prefill throughput: many requests
    share each weight read, so a request costs its flops, its cache writes and its
    communication; with DP-attention the group's GPUs prefill different requests at once."""
    pre = prefill_work(model, dep, wl)
    comm = communication(model, dep, pre["new_tokens"], pre["new_tokens"])
    times = _times(pre["bytes_gpu"], pre["flops_gpu"], pre["peak_flops"], dep, comm["time_s"])
    tp = dep.tp
    if dep.dp_attention and tp > 1:
        kv_group = pre["kv_bytes_gpu"]
        comm_req = communication(model, dep, tp * pre["new_tokens"], pre["new_tokens"])["time_s"] / tp
    else:
        kv_group = pre["kv_bytes_gpu"] * tp
        comm_req = comm["time_s"]
    per_request = max(pre["flops"] / (tp * pre["peak_flops"]), kv_group / (tp * dep.gpu.bandwidth_Bps), comm_req)
    return pre, times, per_request


def _prepare(model: ModelSpec, dep: Deployment, wl: Workload, est: Estimator | None = None,
             prefill=None) -> _Split:
    """A split's capacity (bound._group_capacity) and its prefill (`prefill`: _prefill_times or a
    cache of it, called with the deployment as timing_deployment gives it)."""
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
    slow, ttft, serial, bound, input_rate, pf = (prefill or _prefill_times)(model, timing_deployment(dep), wl, est)
    return _Split(dep, cap_batch, slow, ttft, serial, bound, input_rate, reason, pf)


# The Deployment fields that size the cache alone (bound._group_capacity reads them; no step time
# does), set to their defaults in the keys of the step caches below: a change of
# gpu_memory_utilization moves only the batches at the new cap, and every other point's step is kept.
_CACHE_ONLY = {f.name: f.default for f in fields(Deployment)
               if f.name in ("gpu_memory_utilization", "block_size", "reserve_bytes")}


def timing_deployment(dep: Deployment) -> Deployment:
    """`dep` as the step times read it: the cache-sizing fields at their defaults."""
    return replace(dep, **_CACHE_ONLY)


def _prefill_times(model: ModelSpec, dep: Deployment, wl: Workload, est: Estimator | None) -> tuple:
    """(prefill work of the slowest stage, TTFT s, serial TTFT s, what binds, input tokens/s per
    GPU, the prefill's StepEstimates) of one request on a split."""
    # One request passes every pipeline stage and the pp - 1 sends between them (docs/model.md,
    # "Deployments"); a stream of requests goes at the slowest stage's pace.
    per = [(_stage_prefill(st, dep, wl), n) for st, n in stages(model, dep)]
    send = pp_send_s(model, dep, per[0][0][0]["new_tokens"])
    slow = max((x for x, _ in per), key=lambda x: x[1][3])
    ttft = math.fsum(x[1][3] * n for x, n in per) + send
    serial = math.fsum(x[1][4] * n for x, n in per) + send
    per_request = max(x[2] for x, _ in per)
    # It counts every input token, cached prefix included.
    input_rate = wl.input_len / per_request / dep.group_gpus
    group = replace(dep, num_gpus=dep.group_gpus)
    pf = _prefill_estimate(model, group, wl, est, ttft) if est is not None else ()
    return slow[0], ttft, serial, slow[1][2], input_rate, pf


def _group_step(model: ModelSpec, dep: Deployment, wl: Workload, batch_group: int) -> tuple:
    """What a decode step costs a replica holding `batch_group` sequences: (decode_work of its
    busiest GPU, that GPU's communication, (memory s, compute s, what binds, step s, serial s),
    (micro-batches, slowest stage's bound s, PP sends s)). Over pp stages the batch runs as
    micro-batches (bound.micro_batches), each stage's step is its own layers' (bound.stages),
    and the step is bound.pipeline_time of the stages and the sends; at pp 1 it is the group's."""
    k1 = wl.spec_tokens + 1
    m, micro = micro_batches(dep.pp, batch_group)
    per = []
    for st, n in stages(model, dep):
        work = decode_work(st, dep, wl, micro)
        comm = communication(st, dep, micro * k1, work["batch_gpu"] * k1)
        per.append((work, comm, _times(work["step_bytes"], work["step_flops"], work["peak_flops"], dep,
                                       comm["time_s"]), n))
    if dep.pp == 1:
        work, comm, times, _ = per[0]
        return work, comm, times, (1, times[3], 0.0)
    send = pp_send_s(model, dep, micro * k1)
    work, comm, (t_mem, t_cmp, bound, stage_s, _), _ = max(per, key=lambda x: x[2][3])
    step = pipeline_time([(x[2][3], x[3]) for x in per], send, m)
    serial = pipeline_time([(x[2][4], x[3]) for x in per], send, m)
    return work, comm, (t_mem, t_cmp, bound, step, serial), (m, stage_s, send)


# The search's fast path: a group's figures do not depend on how many replicas the deployment has,
# so a sweep over deployment sizes reuses them (keyed by the group: num_gpus = tp). `evaluate` is
# the scalar path and recomputes everything.
_group_step_cached = functools.lru_cache(maxsize=1 << 16)(_group_step)
_prefill_times_cached = functools.lru_cache(maxsize=1 << 12)(_prefill_times)
_prepare_group_cached = functools.lru_cache(maxsize=1 << 12)(
    lambda model, dep, wl, est: _prepare(model, dep, wl, est, _prefill_times_cached))
_decode_estimate_cached = functools.lru_cache(maxsize=1 << 16)(_decode_estimate)


def clear_caches() -> None:
    """Forget the search's per-group figures and the kernel tables' lookups (benchmarks time a
    cold search; the tables' arrays, read from disk once, stay loaded)."""
    _group_step_cached.cache_clear()
    _prepare_group_cached.cache_clear()
    _prefill_times_cached.cache_clear()
    _decode_estimate_cached.cache_clear()
    for f in (_attention_one_sequence, _model_params, _streamed_params, _moe_layers):
        f.cache_clear()
    from .step import layer_shapes
    from .tables import clear_lookups

    layer_shapes.cache_clear()
    clear_lookups()


def _point(model: ModelSpec, sp: _Split, wl: Workload, batch: int, usd_per_gpu_hour: float | None,
           slo: tuple[float | None, float | None] = (None, None), group: Deployment | None = None,
           est: Estimator | None = None) -> Point:
    """One point; with `group` (the deployment cut to one group, num_gpus = tp) the group's step
    comes from the search's cache. With `est` the point carries its Estimate."""
    dep = sp.dep
    replicas = dep.replicas
    b_rep = -(-batch // replicas)
    if group is not None:
        work, comm, times, pipe = _group_step_cached(model, timing_deployment(group), wl, b_rep)
    else:
        work, comm, times, pipe = _group_step(model, dep, wl, b_rep)
    t_mem, t_cmp, bound, step, serial = times
    estimate = None
    if est is not None:
        from .engines import engine_rules
        from .step import point_estimate

        g = timing_deployment(group if group is not None else replace(dep, num_gpus=dep.group_gpus))
        decode = (_decode_estimate_cached if group is not None else _decode_estimate)(model, g, wl, b_rep, est, step)
        estimate = point_estimate(decode, sp.prefill_estimate, dep, wl, batch, engine_rules(est.engine))
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
        ttft, tpot = (estimate.ttft_s, estimate.tpot_s) if estimate else (sp.ttft_s, step / tps)
        meets = (ttft_max is None or ttft <= ttft_max) and (tpot_max is None or tpot <= tpot_max)
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
        limit=bound, estimate=estimate, pp=dep.pp, moe_tp=dep.moe_tp,
        micro_batches=pipe[0], stage_step_s=pipe[1], pp_send_s=pipe[2],
    )


def _check_price(usd_per_gpu_hour):
    if usd_per_gpu_hour is not None:
        check_real("usd_per_gpu_hour", usd_per_gpu_hour, minimum=0, exclusive_minimum=True, maximum=1e9)


def evaluate(model: ModelSpec, dep: Deployment, wl: Workload, batch: int, *,
             usd_per_gpu_hour: float | None = None, ttft_ms: float | None = None,
             tpot_ms: float | None = None, engine: str | None = "vllm", kernel_tables: str = "auto",
             profile=None) -> Point:
    """One point: `model` on `dep` serving `wl` with `batch` sequences in the whole deployment
    (spread evenly over the replicas; the busiest GPU sets the step). A batch above the memory
    cap is evaluated all the same, with `fits` False. `engine` (None: the bound alone),
    `kernel_tables` and `profile` set the estimate (`estimator`).
    Raises MLAError on bad input (0 GPUs, tp not dividing num_gpus, ep larger than the experts,
    acceptance outside [0, 1), a negative price, ...)."""
    check_workload(wl)
    model, _ = with_mtp_draft(model, wl)
    check_deployment(model, dep)
    check_int("batch", batch, maximum=MAX_BATCH)
    _check_price(usd_per_gpu_hour)
    slo = _slo(ttft_ms, tpot_ms)
    est = estimator(dep.gpu, engine, kernel_tables, profile) if engine is not None else None
    return _point(model, _prepare(model, dep, wl, est), wl, batch, usd_per_gpu_hour, slo, est=est)


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

def splits(model: ModelSpec, num_gpus: int, gpus_per_node: int | None = None) -> list[tuple[int, bool, int, int]]:
    """Every (tp, dp_attention, ep, pp) the search tries for `num_gpus`.

    TP over each divisor of num_gpus. Pipeline stages pp > 1 (powers of two, tp x pp dividing
    num_gpus, at most the decoder layers and MAX_PP) in the two layouts deployments use: TP
    filling each node with the stages across nodes (tp = gpus_per_node), and TP x PP filling one
    node (or the whole deployment, when it is smaller than a node). For MoE models each TP group
    of one stage also spreads its routed experts (ep = tp, when there are at least tp experts:
    vLLM's --enable-expert-parallel), and DP-attention groups (tp > 1, no pipeline stages:
    engines run DP-attention over one stage) shard the experts (ep 1) or spread them (ep = tp).
    Splits with 1 < ep < tp (TensorRT-LLM's moe_tp x moe_ep) are left to `evaluate` and a given
    split: their bound and collectives are those of ep 1, only the MoE kernel's shape differs.
    Engines run DP-attention for MoE models only (SGLang's --enable-dp-attention help), so dense
    models get TP."""
    from ..kv import divisors, tp_split_error

    out = []
    moe = model.moe
    layers = model.num_hidden_layers
    gpn = gpus_per_node
    node = min(gpn, num_gpus) if gpn is not None else num_gpus
    for tp in divisors(num_gpus):
        if tp > MAX_TP:
            break
        if gpn is not None and group_layout_error(tp, gpn):
            continue  # the group cannot be laid on the nodes
        if not tp_split_error(model, tp):
            out.append((tp, False, 1, 1))
            if moe is not None and 1 < tp <= moe.n_routed_experts:
                out.append((tp, False, tp, 1))
            pp = 2
            while tp * pp <= num_gpus and pp <= min(layers, MAX_PP):
                if not num_gpus % (tp * pp) and (tp == gpn or tp * pp == node) and not (
                        gpn is not None and group_layout_error(tp * pp, gpn, "replicas")):
                    out.append((tp, False, 1, pp))
                pp *= 2
        if moe is not None and tp > 1:
            out.append((tp, True, 1, 1))
            if tp <= moe.n_routed_experts:
                out.append((tp, True, tp, 1))
    return out


def pareto(points, *, bound: bool = False) -> list[Point]:
    """The points no other point beats on both tokens/s per user and tokens/s per GPU, sorted by
    tokens/s per user: the estimate's rates where the points have one (`bound` True: the
    bound's)."""
    def rates(p):
        return (p.tokens_per_s_per_user, p.tokens_per_s_per_gpu) if bound else (p.rate_per_user, p.rate_per_gpu)

    ordered = sorted(points, key=lambda p: (-rates(p)[0], -rates(p)[1]))
    front, best_gpu = [], -1.0
    for p in ordered:
        if rates(p)[1] > best_gpu:
            front.append(p)
            best_gpu = rates(p)[1]
    return sorted(front, key=lambda p: rates(p)[0])


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
    pp: int = 1
    moe_tp: int = 1

    def to_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "best"},
                "best": self.best.to_dict() if self.best else None}


@dataclass(frozen=True)
class Plan:
    """The frontier of `model` on `num_gpus` GPUs serving `workload`.

    `points` every (split, batch) tried; `pareto` the set no point beats on the estimate's
    tokens/s per user and tokens/s per GPU (`bound_pareto` on the bound's); `best` the point with
    the most estimated tokens/s per GPU among those whose estimate meets the SLOs (all points
    when none is set), None when none meets them; `splits` each split's best point; `estimate`
    the best point's estimate with the per-op breakdown of one decode step and one prefill
    (`estimate_breakdown`), `cross_check` aiconfigurator-core's own engine at the same point
    (aic.cross_check; None unless asked for); `vllm_command` / `sglang_command` /
    `trtllm_command` launch `best` (None with a reason in `notes`), `engine`'s first."""

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
    engine: str | None = None
    kernel_tables: tuple[str, ...] = ()
    bound_pareto: tuple[Point, ...] = ()
    estimate: dict | None = None
    cross_check: dict | None = None

    @property
    def launch_command(self) -> str | None:
        """The chosen engine's launch command (vLLM's when bounds only)."""
        return self.launch.get(f"{self.engine or 'vllm'}_command")

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
            "engine": self.engine,
            "kernel_tables": list(self.kernel_tables),
            "estimate": self.estimate,
            "cross_check": self.cross_check,
            "pareto": [p.to_dict() for p in self.pareto],
            "bound_pareto": [p.to_dict() for p in self.bound_pareto],
            "splits": [s.to_dict() for s in self.splits],
            "points": len(self.points),
            "launch_command": self.launch_command,
            "vllm_command": self.vllm_command,
            "sglang_command": self.sglang_command,
            "trtllm_command": self.launch.get("trtllm_command"),
            "launch": self.launch,
            "notes": list(self.notes),
        }


def search(model: ModelSpec, gpu: GPU, *, num_gpus: int, workload: Workload, gpus_per_node: int | None = None,
           ttft_ms: float | None = None, tpot_ms: float | None = None, usd_per_gpu_hour: float | None = None,
           weights_dtype: str | None = None, kv_dtype: str = "auto", gpu_memory_utilization: float = 0.9,
           internode_gbps: float = 400.0, link_bandwidth_Bps: float | None = None, block_size: int | None = None,
           reserve_bytes: int = 0, mla_path: str = "absorbed", tp: int | None = None,
           dp_attention: bool | None = None, ep: int | None = None, batch: int | None = None,
           model_path: str | None = None, state_dtype: str = "auto", engine: str | None = "vllm",
           ssm_state_dtype: str = "auto", pp: int | None = None,
           kernel_tables: str = "auto", profile=None, cross_check: bool = False) -> Plan:
    """Search every split of `num_gpus` (or the one given by `tp` / `dp_attention` / `ep` / `pp`) at
    batches of powers of two per group up to the memory cap (or the one `batch` of the whole
    deployment), and pick the best point meeting `ttft_ms` and `tpot_ms` (see `Plan`).
    `engine` (engines.ENGINES; None: bounds only), `kernel_tables` (tables.TABLE_SOURCES) and
    `profile` (a profile dict or its JSON file) set the estimate; `cross_check` adds
    aiconfigurator-core's own engine at the best point. `model_path` names the model in the
    commands (default: the preset's Hugging Face repo). `gpus_per_node` None: the GPU's NVLink
    domain (inputs.default_gpus_per_node: 72 on an NVL72, else 8). Raises MLAError on bad input."""
    check_int("num_gpus", num_gpus, maximum=MAX_GPUS)
    if gpus_per_node is None:
        gpus_per_node = default_gpus_per_node(gpu)
    if pp is not None:
        check_int("pp", pp, maximum=MAX_PP)
    check_workload(workload)
    _check_price(usd_per_gpu_hour)
    slo = _slo(ttft_ms, tpot_ms)
    if batch is not None:
        check_int("batch", batch, maximum=MAX_BATCH)
    from ..kv import resolve_state_dtype

    resolve_state_dtype(model, state_dtype)
    est = estimator(gpu, engine, kernel_tables, profile) if engine is not None else None
    model, draft_note = with_mtp_draft(model, workload)
    base = Deployment(gpu=gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node, tp=1, weights_dtype=weights_dtype,
                      kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization, internode_gbps=internode_gbps,
                      link_bandwidth_Bps=link_bandwidth_Bps, block_size=block_size, reserve_bytes=reserve_bytes,
                      mla_path=mla_path, state_dtype=state_dtype, ssm_state_dtype=ssm_state_dtype)
    given = tp is not None or dp_attention is not None or ep is not None or pp is not None
    if given:
        stages_ = pp if pp is not None else 1
        t = tp if tp is not None else max(1, num_gpus // stages_)
        chosen = [(t, bool(dp_attention), ep if ep is not None else 1, stages_)]
    else:
        chosen = splits(model, num_gpus, gpus_per_node)
        if gpu.link_GBps is None and link_bandwidth_Bps is None:
            chosen = [s for s in chosen if s[0] == 1]
    points, summaries = [], []
    for t, dp, e, stages_ in chosen:
        dep = check_deployment(model, replace(base, tp=t, dp_attention=dp, ep=e, pp=stages_))
        group = replace(dep, num_gpus=dep.group_gpus)
        sp = replace(_prepare_group_cached(model, group, workload, est), dep=dep)
        max_batch = sp.max_batch_per_replica * dep.replicas
        if batch is not None:
            tried = [batch]
        else:
            tried = [b * dep.replicas for b in batches_up_to(min(sp.max_batch_per_replica, MAX_SPLIT_BATCH))]
        mine = [_point(model, sp, workload, b, usd_per_gpu_hour, slo, group=group, est=est) for b in tried]
        points += mine
        ok = [p for p in mine if p.meets_slo is not False and (p.fits or batch is not None)]
        best = max(ok, key=_rank, default=None)
        if best is not None:
            best = replace(best, limit=_limit(best, sp, slo, workload, batch))
        summaries.append(SplitSummary(dep.split, t, dep.dp_attention and t > 1, e, dep.replicas, max_batch, best,
                                      sp.reason or ("" if best else "no batch meets the SLOs"), pp=stages_,
                                      moe_tp=dep.moe_tp))
    candidates = [s.best for s in summaries if s.best is not None]
    best = max(candidates, key=_rank, default=None)
    feasible = [p for p in points if p.fits or batch is not None]
    notes = list(model.notes) + ([draft_note] if draft_note else [])
    if not given:
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

        launch = launch_commands(model, _dep_of(base, best), workload, best, model_path=model_path)
        vllm, sglang = launch["vllm_command"], launch["sglang_command"]
        notes += launch["notes"]
    breakdown = check = None
    if best is not None and est is not None:
        best_dep = _dep_of(base, best)
        breakdown = estimate_breakdown(model, best_dep, workload, best, est)
        if cross_check:
            from .aic import cross_check as aic_check

            check = aic_check(model, best_dep, workload, best, est.engine, weights_dtype=weights_dtype)
    return Plan(model=model.name, gpu=gpu.id, num_gpus=num_gpus, gpus_per_node=gpus_per_node, workload=workload,
                ttft_ms=ttft_ms, tpot_ms=tpot_ms, usd_per_gpu_hour=usd_per_gpu_hour, points=tuple(points),
                pareto=tuple(pareto(feasible)), best=best, splits=tuple(summaries), vllm_command=vllm,
                sglang_command=sglang, launch=launch, notes=tuple(notes), engine=engine,
                kernel_tables=est.table_names if est else (), bound_pareto=tuple(pareto(feasible, bound=True)),
                estimate=breakdown, cross_check=check)


def _dep_of(base: Deployment, p: Point) -> Deployment:
    """The deployment of a point's split."""
    return replace(base, tp=p.tp, dp_attention=p.dp_attention, ep=p.ep, pp=p.pp)


def estimate_breakdown(model: ModelSpec, dep: Deployment, wl: Workload, point: Point, est: Estimator) -> dict:
    """The point's Estimate as a dict, with `bound` (the bound's TTFT, TPOT, tokens/s per user and
    per GPU beside it), `decode_step` and `prefill` (step.StepEstimate.to_dict: every op's time,
    source and note), `engine_rules` (engines.EngineRules.to_dict) and `kernel_tables` (the
    chain in precedence order, each table's `describe()`: what it holds and corrects)."""
    from .engines import engine_rules

    group = replace(dep, num_gpus=dep.group_gpus)
    b_rep = point.batch_per_replica
    decode = _decode_estimate_cached(model, timing_deployment(group), wl, b_rep, est, point.step_time_s)
    sp = _prepare_group_cached(model, group, wl, est)
    d = point.estimate.to_dict()
    d["bound"] = {"ttft_s": point.ttft_s, "tpot_s": point.tpot_s, "tokens_per_s_per_user": point.tokens_per_s_per_user,
                  "tokens_per_s_per_gpu": point.tokens_per_s_per_gpu, "step_time_s": point.step_time_s,
                  "bound": point.bound}
    d["decode_step"] = decode.to_dict()
    d["prefill"] = [s.to_dict() for s in sp.prefill_estimate]
    d["engine_rules"] = engine_rules(est.engine).to_dict()
    d["kernel_tables"] = [t.describe() for t in est.tables]
    return d


def _rank(p: Point) -> tuple:
    """Most estimated tokens/s per GPU, then per user (the bound's when there is no estimate),
    then the shortest bound step without overlap."""
    return (p.rate_per_gpu, p.rate_per_user, -p.step_serial_s)


def _limit(p: Point, sp: _Split, slo, wl: Workload, batch: int | None) -> str:
    """What stopped this split's best batch: the memory cap, an SLO, or (a given batch) its bound."""
    if batch is not None:
        return p.bound
    ttft_max, tpot_max = slo
    if ttft_max is not None and (p.estimate.ttft_s if p.estimate else sp.ttft_s) > ttft_max:
        return "ttft"
    if p.batch_per_replica >= sp.max_batch_per_replica:
        return "capacity"
    return "tpot" if tpot_max is not None else p.bound


