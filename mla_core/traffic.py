"""Traffic: requests over time through a continuous-batching engine (docs/model.md, "Traffic:
requests over time"; the step times come from "Serving" or "Estimated step time").

No torch; numpy for the arrays. The parts, each replaceable on its own:

    StepTimes        what one engine step costs: `step_s(decode_seqs, decode_context_tokens,
                     prefill_tokens, prefill_context_tokens)` in seconds. `BoundStepTimes` is the
                     serving bound (mla_core.serving: decode_work, prefill_work, communication);
                     the estimate (mla_core/serving/step.py) plugs in the same way.
    KVCache          the cache a replica admits against: per-GPU budget, bytes a request holds
                     at T tokens (each layer group min(T, window) rounded to blocks, + its
                     recurrent state), from mla_core.capacity (`kv_cache_for`).
    TrafficConfig    the client and engine settings, named as `vllm bench serve` and vLLM name
                     them: rate, burstiness, max_concurrency, num_prompts, input/output lengths
                     (fixed, --random-range-ratio, or a shipped length histogram), max_num_seqs,
                     max_num_batched_tokens, seed, SLOs.
    simulate         the run: a TrafficResult of TTFT, TPOT, ITL and E2E (mean, p50, p90, p99),
                     throughputs, goodput, `saturated`.
    max_rate_at_slo  the highest Poisson rate whose p99s meet the SLOs (bisection in log rate).
    replay           an imported `vllm bench serve` / SGLang `bench_serving` result run again with
                     its own settings, the error of each metric.

The engine (vLLM v1's scheduler, vllm/v1/core/sched/scheduler.py, as this module reads it):
each step has a token budget of `max_num_batched_tokens`; the running requests come first, in
admission order: a decoding request takes k + 1 tokens (k speculative), a request part-way
through its prefill takes min(what is left, the budget) (chunked prefill); then, if no request
was preempted this step, waiting requests are admitted first come first served while fewer than
`max_num_seqs` run, budget is left and the cache holds them. A request's cached prefix
(`prefix_hit`) is not computed. The cache holds, for every running request, its tokens so far
plus the step's new ones (k lookahead slots while decoding); when a step does not fit, the
latest admitted request is preempted: its cache freed, it goes back to the front of the queue
and is recomputed later (prompt and the tokens it had generated), as vLLM v1 does. The first
token comes at the end of the step that finishes the prefill; each decode step then emits the
accepted tokens, (1 - a^(k+1)) / (1 - a) on average (`serving.Workload.tokens_per_step`).
Replicas (num_gpus / tp groups) serve requests dealt round robin, each its own engine.

Clients (vllm/benchmarks/serve.py, `get_request` and `benchmark`): request i is generated at the
cumulative sum of gamma(shape = burstiness, scale = 1 / (rate burstiness)) gaps, the sum scaled
so that the last one lands at num_prompts / rate (rate inf: all at t = 0; burstiness 1 is
Poisson); with `max_concurrency` a request is sent when one of that many clients is free.
Metrics as `calculate_metrics`: TTFT = first token - send; E2E = last token - send; TPOT =
(E2E - TTFT) / (output tokens - 1) over requests with more than one output token; ITL = every
gap between a request's consecutive outputs, pooled; percentiles by numpy's linear rule;
throughputs and goodput over the run's duration (from t = 0 to the last token).

Speed (benchmarks/traffic_sim.py): between events (a request arriving that could be admitted, a
prefill chunk, a request finishing, the cache filling), the decoding batch does not change, so a
run of decode steps is priced in one vectorised `step_s` call ("runs"); a plain step loop
(`aggregate=False`) gives the same figures, step by step.
"""
from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

import numpy as np

from .errors import MLAError

# Length conventions of --random-range-ratio: vLLM's (integers uniform in
# [floor(L (1 - r)), ceil(L (1 + r))], vllm/benchmarks/datasets.py RandomDataset.get_sampling_params)
# and SGLang's (uniform in [max(1, int(L r)), L], python/sglang/bench_serving.py sample_random_requests).
RANGE_CONVENTIONS = ("vllm", "sglang")
# The length histograms shipped in data/traffic_lengths.json (their sources are in the file).
LENGTH_DATASETS = ("azure-conv-2023", "azure-code-2023")
PERCENTILES = (50, 90, 99)
MAX_PROMPTS = 1_000_000
SATURATION_GROWTH = 0.1  # queue growth per arrival over the second half of the arrivals that counts as unbounded
_MIN_RUN = 8  # decode steps below which a run is priced step by step (a numpy call costs more)
_MAX_RUN = 4096
_MAX_DOUBLINGS = 12


class StepTimes(Protocol):
    """Seconds of one engine step of one replica.

    `step_s(decode_seqs, decode_context_tokens, prefill_tokens, prefill_context_tokens)`:
    `decode_seqs` sequences decode one token each (k + 1 with k speculative tokens) over contexts
    summing to `decode_context_tokens` (each sequence's tokens so far, the one it feeds included);
    mixed in, `prefill_tokens` new prefill tokens of one or more prompts (chunked prefill) whose
    causal attention covers `prefill_context_tokens` (query, key) pairs in total: a chunk of c
    tokens after s computed ones adds c s + c (c + 1) / 2; `prefill_prompts` how many prompts
    those chunks belong to (None: one; under DP-attention each prompt runs on one GPU of the
    group, so it sets how the tokens spread). Any argument may be a numpy array (the answer is
    then an array of the broadcast shape). `source` names where the times come from."""

    source: str

    def step_s(self, decode_seqs, decode_context_tokens, prefill_tokens, prefill_context_tokens,
               prefill_prompts=None): ...


# --- step times from the bound ---------------------------------------------------------------------

class _Curve:
    """y(x) piecewise linear through (xs, ys), extended along the last segment beyond the grid; one
    formula for scalars (bisect) and arrays (searchsorted), so both give the same floats."""

    __slots__ = ("xs", "ys", "slopes", "_x", "_y", "_s", "_n")

    def __init__(self, xs, ys):
        self.xs, self.ys = [float(v) for v in xs], [float(v) for v in ys]
        self.slopes = [(self.ys[i + 1] - self.ys[i]) / (self.xs[i + 1] - self.xs[i]) for i in range(len(xs) - 1)]
        self._x, self._y, self._s = np.asarray(self.xs), np.asarray(self.ys), np.asarray(self.slopes)
        self._n = len(self.xs) - 2

    def at(self, x: float) -> float:
        i = bisect.bisect_right(self.xs, x) - 1
        if i < 0:
            i = 0
        elif i > self._n:
            i = self._n
        return self.ys[i] + (x - self.xs[i]) * self.slopes[i]

    def many(self, x):
        i = np.searchsorted(self._x, x, side="right") - 1
        np.minimum(np.maximum(i, 0, out=i), self._n, out=i)
        return self._y[i] + (x - self._x[i]) * self._s[i]


def _grid(top: int, small: int = 64, points: int = 96, extra=()) -> list[int]:
    """0..small, then about `points` whole numbers growing geometrically to `top`, with `extra`."""
    out = set(range(0, small + 1)) | {int(v) for v in extra if 0 <= v <= top}
    if top > small:
        out |= {int(round(v)) for v in np.geomspace(small, top, points)}
    return sorted(out)


class BoundStepTimes:
    """Step times of one replica from the serving bound (docs/model.md, "Serving"): a step of
    n = decode_seqs (k + 1) + prefill_tokens tokens takes max(memory, compute, communication) on
    the busiest GPU of the group, with

        bytes   the weights streamed for n tokens (experts touched, `serving.decode_work`), the
                decoding sequences' cache at their mean context (`roofline.decode_attention`,
                one per sequence on the GPU), their recurrent state, and the prefill tokens'
                cache written (`serving.prefill_work` per token)
        flops   the linear layers' flops for the decode tokens (`decode_work`) and the prefill
                tokens (`prefill_work` per token), decode attention x (k + 1), and the prefill
                pairs x the MHA-form flops a pair (`prefill_work`'s attention over its pairs)
        comm    `serving.communication` of the decode tokens plus that of the prefill tokens

    The functions are tabulated once over token counts (0..64 exactly, then about 100 points to
    `max_tokens`) and contexts (to `max_context`, window edges included) and read back by linear
    interpolation, extended along the last segment beyond the tables: exact where they are linear
    (flops, full-attention cache bytes, TP collectives), slightly under where weights grow with
    the experts touched, so the step stays a lower bound. A decode-only step at batch B and context T
    equals `serving.evaluate(..., batch=B).step_time_s` at T on the tabulated points, and a lone
    prefill of a whole prompt equals its `ttft_s` (tests/test_traffic.py). Under DP-attention
    the decode and prefill collectives are added, not merged (a little over the bound).

    `model` a ModelSpec, `deployment` a serving.Deployment (one replica of it is timed),
    `workload` a serving.Workload (its spec_tokens and acceptance; its input_len sets the
    reference prompt for the prefill flops a pair on windowed models). Raises MLAError on bad
    input."""

    def __init__(self, model, deployment, workload, *, max_tokens: int = 1 << 16, max_context: int = 1 << 20):
        from .roofline import decode_attention
        from .serving import (Workload, check_deployment, check_workload, communication, decode_work,
                              prefill_work, with_mtp_draft)

        check_workload(workload)
        model, _ = with_mtp_draft(model, workload)
        check_deployment(model, deployment)
        dep = replace(deployment, num_gpus=deployment.tp)
        tp = dep.tp
        self.dp = dep.dp_attention and tp > 1
        self.tp = tp
        self.k1 = workload.spec_tokens + 1
        self.source = "bound"
        one = Workload(input_len=1, output_len=1)
        tokens = _grid(max_tokens)
        w_b, s_b, f_b, c_dec, c_pre = [0.0], [0.0], [0.0], [0.0], [0.0]
        peak = None
        for n in tokens[1:]:
            w = decode_work(model, dep, one, n)
            peak = w["peak_flops"]
            w_b.append(w["weights_bytes"])
            s_b.append(w["state_bytes"])
            f_b.append(w["step_flops"] - w["attention_flops"])
            c_dec.append(communication(model, dep, n, w["batch_gpu"])["time_s"])
            c_pre.append(communication(model, dep, n, n)["time_s"])
        self.peak_flops, self.bandwidth_Bps = peak, dep.gpu.bandwidth_Bps
        self._weights, self._state, self._linear = _Curve(tokens, w_b), _Curve(tokens, s_b), _Curve(tokens, f_b)
        self._comm_decode, self._comm_prefill = _Curve(tokens, c_dec), _Curve(tokens, c_pre)
        windows = list(model.windows())
        contexts = [c for c in _grid(max_context, extra=windows + [w + 1 for w in windows]) if c >= 1]
        kv_tp = 1 if self.dp else tp
        att = [decode_attention(model, c, 1, dep.kv_dtype, dep.mla_path, tp=kv_tp, dp_attention=self.dp)
               for c in contexts]
        self._attn_bytes = _Curve(contexts, [a["attention_bytes"] for a in att])
        self._attn_flops = _Curve(contexts, [a["attention_flops"] for a in att])
        # Prefill per token and per pair, from one whole-prompt prefill at the workload's input length.
        ref = max(1, workload.input_len)
        pre = prefill_work(model, dep, Workload(input_len=ref, output_len=1))
        attn_gpu = pre["attention_flops"] if self.dp else pre["attention_flops"] / tp
        p = pre["new_tokens"]
        self._prefill_flops_per_token = (pre["flops_gpu"] - attn_gpu) / p
        self._prefill_flops_per_pair = attn_gpu / (p * (p + 1) / 2)
        self._prefill_kv_per_token = pre["kv_bytes_gpu"] / ref
        self._parts = {}

    def _decode_part(self, d: int) -> tuple:
        """(bytes, flops, communication s) of `d` decoding sequences that do not depend on their
        contexts: weights for d (k + 1) tokens and the state; the linear flops; the collectives."""
        got = self._parts.get(d)
        if got is None:
            td = d * self.k1
            got = (self._weights.at(td) + (self._state.at(d) if d else 0.0), self._linear.at(td),
                   self._comm_decode.at(td) if td else 0.0, (-(-d // self.tp) if self.dp else d))
            if len(self._parts) < 1 << 16:
                self._parts[d] = got
        return got

    def step_s(self, decode_seqs, decode_context_tokens, prefill_tokens, prefill_context_tokens,
               prefill_prompts=None):
        """Seconds of one step (see the class docstring); arrays broadcast. The bound does not
        use `prefill_prompts` (its prefill work is the group's, spread evenly)."""
        d, p = decode_seqs, prefill_tokens
        if isinstance(d, int) and isinstance(p, int) and not p:
            nbytes, flops, comm, b_gpu = self._decode_part(d)
            if not d:
                return max(nbytes / self.bandwidth_Bps, flops / self.peak_flops, comm)
            mean = decode_context_tokens / d
            if isinstance(mean, float):
                return max((nbytes + b_gpu * self._attn_bytes.at(mean)) / self.bandwidth_Bps,
                           (flops + b_gpu * self._attn_flops.at(mean) * self.k1) / self.peak_flops, comm)
            mean = np.asarray(mean, dtype=float)
            return np.maximum(np.maximum((nbytes + b_gpu * self._attn_bytes.many(mean)) / self.bandwidth_Bps,
                                         (flops + b_gpu * self._attn_flops.many(mean) * self.k1) / self.peak_flops),
                              comm)
        if all(isinstance(v, (int, float)) for v in (d, decode_context_tokens, p, prefill_context_tokens)):
            td = d * self.k1
            if d:
                b_gpu = -(-d // self.tp) if self.dp else d
                mean = decode_context_tokens / d
                kv, attn = b_gpu * self._attn_bytes.at(mean), b_gpu * self._attn_flops.at(mean) * self.k1
                state = self._state.at(d)
            else:
                kv = attn = state = 0.0
            nbytes = self._weights.at(td + p) + state + kv + p * self._prefill_kv_per_token
            flops = (self._linear.at(td) + attn + p * self._prefill_flops_per_token
                     + prefill_context_tokens * self._prefill_flops_per_pair)
            comm = (self._comm_decode.at(td) if td else 0.0) + (self._comm_prefill.at(p) if p else 0.0)
            return max(nbytes / self.bandwidth_Bps, flops / self.peak_flops, comm)
        d = np.asarray(d, dtype=float)
        p = np.asarray(p, dtype=float)
        td = d * self.k1
        safe = np.maximum(d, 1.0)
        b_gpu = np.ceil(d / self.tp) if self.dp else d
        mean = np.asarray(decode_context_tokens, dtype=float) / safe
        kv = b_gpu * self._attn_bytes.many(mean)
        attn = b_gpu * self._attn_flops.many(mean) * self.k1
        state = np.where(d > 0, self._state.many(d), 0.0)
        nbytes = self._weights.many(td + p) + state + kv + p * self._prefill_kv_per_token
        flops = (self._linear.many(td) + attn + p * self._prefill_flops_per_token
                 + np.asarray(prefill_context_tokens, dtype=float) * self._prefill_flops_per_pair)
        comm = np.where(td > 0, self._comm_decode.many(td), 0.0) + np.where(p > 0, self._comm_prefill.many(p), 0.0)
        return np.maximum(np.maximum(nbytes / self.bandwidth_Bps, flops / self.peak_flops), comm)


# --- step times from the estimate ------------------------------------------------------------------

def _where(xs: list, last: int, x: float) -> tuple[int, float]:
    """(i, t): x = xs[i] + t (xs[i + 1] - xs[i]) with i clamped to [0, last] (t outside [0, 1]
    extends the first or last segment)."""
    i = bisect.bisect_right(xs, x) - 1
    if i < 0:
        i = 0
    elif i > last:
        i = last
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


class _LazyGrid:
    """f(x, y) on the grid xs x ys (whole numbers, two or more each), each cell computed the first
    time a lookup needs it and kept; read back by bilinear interpolation, extended along the last
    segment beyond the grid (as _Curve). Exact on the grid points."""

    __slots__ = ("xs", "ys", "f", "vals", "_nx", "_ny", "_ya")

    def __init__(self, xs, ys, f):
        self.xs, self.ys = [int(v) for v in xs], [int(v) for v in ys]
        self._ya = np.asarray(self.ys, dtype=float)
        self.f, self.vals = f, {}
        self._nx, self._ny = len(self.xs) - 2, len(self.ys) - 2

    def cell(self, i: int, j: int) -> float:
        v = self.vals.get((i, j))
        if v is None:
            v = self.vals[(i, j)] = float(self.f(self.xs[i], self.ys[j]))
        return v

    def _row(self, i: int, j: int, ty: float) -> float:
        c = self.cell(i, j)
        return c if ty == 0 else c + ty * (self.cell(i, j + 1) - c)

    def at(self, x: float, y: float) -> float:
        i, tx = _where(self.xs, self._nx, x)
        j, ty = _where(self.ys, self._ny, y)
        lo = self._row(i, j, ty)
        return lo if tx == 0 else lo + tx * (self._row(i + 1, j, ty) - lo)

    def many(self, x: float, y) -> np.ndarray:
        """at(x, each y) for an array y (x a number)."""
        i, tx = _where(self.xs, self._nx, x)
        y = np.asarray(y, dtype=float)
        j = np.searchsorted(self._ya, y, side="right") - 1
        np.minimum(np.maximum(j, 0, out=j), self._ny, out=j)
        ty = (y - self._ya[j]) / (self._ya[j + 1] - self._ya[j])
        lo_j, hi_j = int(j.min()), int(j.max()) + 1

        def col(ii):
            v = np.array([self.cell(ii, jj) for jj in range(lo_j, hi_j + 1)])
            k = j - lo_j
            return v[k] + ty * (v[k + 1] - v[k])

        lo = col(i)
        return lo if tx == 0 else lo + tx * (col(i + 1) - lo)


class EstimateStepTimes:
    """Step times of one replica from the estimate (docs/model.md, "Estimated step time";
    mla_core/serving/step.py): a step's ops (`step.forward_ops`, on the busiest GPU of the group)
    timed by the kernel tables and summed by `step.step_time` under the engine's rules, never
    below the bound (`BoundStepTimes` at the same step).

    How a step is composed, as step.py composes it:
      decode only   `step.estimate_step(decode_seqs=d, context=T)` at the sequences' mean context
                    T = decode_context_tokens / d: a CUDA graph up to the engine's graph batch
                    (else launched eagerly), the shared experts overlapped where the engine does.
      with prefill  step.py's mixed step: d decoding sequences and p prefill tokens in one pass,
                    launched eagerly (never a graph), every op serial. Its ops fall in three sets
                    that each depend on two of the step's figures: the decode attention on
                    (d, T); the prefill attention and the kv_b up-projection on (p, s), s the
                    cached prefix; everything else (GEMMs at d (k + 1) + p rows, the MoE, norms,
                    collectives, lm_head, sampling) on (d, p). So, exactly on the tables' points,
                        t = R(d, p) + [E(d, T) - E(d, 1)] + [P(p, s) - P(p, 0)] + overhead
                    R the mixed step at T = 1, s = 0; E an eager decode step; P a prefill alone
                    (each the ops' sum without the engine's per-step overhead).
    The pairs: a chunk of p tokens after s computed ones has p s + p (p + 1) / 2 (query, key)
    pairs (full causal: `layers` `keys_before` without a window, the StepTimes protocol's count),
    so s = pairs / p - (p + 1) / 2; step.py then counts the pairs by each cache kind's own rule
    (windows, chunks). A step of several prompts has fewer pairs than one chunk from zero: its
    prefill-attention ops are scaled by pairs / (p (p + 1) / 2) (one variable-length kernel over
    the prompts, its work in proportion to the pairs).
    Under DP-attention every prompt is prefilled by one GPU of the group, the group's GPUs step
    together, and the experts / MLP see every GPU's tokens: n = `prefill_prompts` prompts spread
    over min(n, tp) GPUs, the busiest one's attention side takes p / min(n, tp) of the tokens and
    of the pairs (`step.forward_ops` with `group_prefill_tokens` = p), so a lone prompt runs on
    one GPU (the plan's TTFT) and a full step on all of them. R is then tabulated per min(n, tp).

    Tables: decode d x T and the prefill tokens p of R and P (0..64 exactly, then 128 points
    geometric to `max_tokens`: the GEMMs' and collectives' steps in the tokens), R's and E's d
    (0..16, then 64 points), contexts and prefixes to `max_context` (window edges included). Each cell is
    estimated the first time a step needs it (a run touches few of them) and read back by
    bilinear interpolation, extended along the last segment beyond the tables.

    `model` a ModelSpec, `deployment` a serving.Deployment (one replica of it is timed),
    `workload` a serving.Workload (its spec_tokens); `engine` one of serving.engines.ENGINES,
    `kernel_tables` / `profile` as `serving.search.estimator`. `source` names the engine and the
    tables with their shares of a lone request's decode step and prefill (e.g. 'vLLM estimate:
    aiconfigurator-core 0.12.0 h200_sxm/vllm 0.24.0 (95%), uncalibrated (5%)'); `confidence`
    the decode step's (step.confidence). Raises MLAError on bad input or an unknown engine."""

    def __init__(self, model, deployment, workload, *, engine: str = "vllm", kernel_tables: str = "auto",
                 profile=None, max_tokens: int = 1 << 16, max_context: int = 1 << 20):
        from .serving import check_deployment, check_workload, with_mtp_draft
        from .serving.engines import engine_rules
        from .serving.search import estimator
        from .serving.step import confidence, describe_sources, estimate_step
        from .serving.tables import bind

        check_workload(workload)
        model, _ = with_mtp_draft(model, workload)
        check_deployment(model, deployment)
        self.bound = BoundStepTimes(model, deployment, workload, max_tokens=max_tokens, max_context=max_context)
        self.model, self.workload = model, workload
        self.dep = replace(deployment, num_gpus=deployment.tp)
        est = estimator(deployment.gpu, engine, kernel_tables, profile)
        self.engine, self.kernel_tables = engine, est.table_names
        self._rules = engine_rules(engine)
        self._tables = bind(est.tables, deployment.gpu, self.dep)
        self._estimate_step = estimate_step
        self.overhead_s = self._rules.step_overhead_s
        tokens = _grid(max_tokens, small=64, points=128)  # decode batches: TPOT reads these
        coarse = _grid(max_tokens, small=16, points=64)  # the mixed step's axes (a cell costs ~4 ms)
        windows = list(model.windows())
        contexts = [c for c in _grid(max_context, small=16, points=64, extra=windows + [w + 1 for w in windows])
                    if c >= 1]
        prefixes = _grid(max_context, small=16, points=48, extra=windows + [w + 1 for w in windows])
        # the batch edges where the engine's rules change: the largest CUDA-graph batch, the shared
        # experts' overlap (step.estimate_step, step.step_time)
        dp = self.dep.dp_attention and self.dep.tp > 1
        graph = self._rules.graph_max_batch(deployment.gpu.memory_GB, self.dep.tp) * (self.dep.tp if dp else 1)
        overlap = self._rules.overlap_shared_experts_up_to // (workload.spec_tokens + 1)
        edges = [e + k for e in (graph, overlap) if 0 < e < max_tokens for k in (0, 1)]
        seqs = sorted({d for d in tokens if d >= 1} | set(edges))
        chunks = [p for p in tokens if p >= 1]
        self._decode = _LazyGrid(seqs, contexts, lambda d, c: self._step(d, c, 0, 0).time_s)
        self._dp = dp
        self._rest_axes = (sorted(set(coarse) | set(edges)), chunks)
        self._rests: dict[int, _LazyGrid] = {}
        self._eager_decode = _LazyGrid(sorted(set(coarse) | set(edges)), contexts, lambda d, c: self._eager(d, c, 0, 0)[0] if d else 0.0)
        self._prefill = _LazyGrid(chunks, prefixes, lambda p, s: self._eager(0, 0, p, s)[0])
        self._prefill_attention = _LazyGrid(chunks, [0, 1], lambda p, _s: self._eager(0, 0, p, 0)[1])
        ref = max(1, workload.input_len)
        dec = self._step(1, ref, 0, 0)
        pre = self._step(0, 0, min(ref, self._rules.prefill_chunk(deployment.gpu.memory_GB)), 0)
        self.source = f"{self._rules.label} estimate: {describe_sources(dec, pre)}"
        self.confidence = confidence(dec)

    def _step(self, d: int, c: int, p: int, s: int):
        return self._estimate_step(self.model, self.dep, self.workload, self._tables, self._rules, decode_seqs=d,
                                   context=c, prefill_tokens=p, prefix=s)

    def _rest(self, spread: int) -> _LazyGrid:
        """R(d, p) of a step whose prefill spreads over `spread` GPUs (1 without DP-attention)."""
        g = self._rests.get(spread)
        if g is None:
            g = self._rests[spread] = _LazyGrid(
                *self._rest_axes, lambda d, p: self._eager(d, 1, -(-p // spread), 0, group=p if self._dp else None)[0])
        return g

    def _eager(self, d: int, c: int, p: int, s: int, group: int | None = None) -> tuple[float, float]:
        """(the ops' sum, that of the prefill-attention ops) of one step launched eagerly, without the
        per-step overhead: step.forward_ops timed and summed by step.step_time, as estimate_step
        does for a step with prefill."""
        from .serving.step import forward_ops, step_time

        ops = forward_ops(self.model, self.dep, self.workload, decode_seqs=d, context=c, prefill_tokens=p, prefix=s,
                          graph=False, group_prefill_tokens=group)
        times = [op.time(self._tables) for op in ops]
        total = step_time(times, self._rules, captured=False, overlap_tokens=0)[0]
        attn = step_time([t for t in times if t.op_class == "attention_prefill"], self._rules, captured=False,
                         overlap_tokens=0)[0]
        return total, attn

    def _one(self, d, ctx, p, pairs, n=None) -> float:
        if not p:
            return self._decode.at(d, ctx / d) if d else 0.0
        spread = min(max(int(n or 1), 1), self.dep.tp) if self._dp else 1
        t = self._rest(spread).at(d, p) + self.overhead_s
        if spread > 1:  # the busiest GPU's share of the prefill attention
            p, pairs = p / spread, pairs / spread
        if d:
            mean = ctx / d
            t += self._eager_decode.at(d, mean) - self._eager_decode.at(d, 1)
        s = pairs / p - (p + 1) / 2
        if s >= 0:
            t += self._prefill.at(p, s) - self._prefill.at(p, 0)
        else:
            t -= self._prefill_attention.at(p, 0) * (1 - pairs / (p * (p + 1) / 2))
        return t

    def step_s(self, decode_seqs, decode_context_tokens, prefill_tokens, prefill_context_tokens,
               prefill_prompts=None):
        """Seconds of one step (see the class docstring), at least the bound's; arrays broadcast
        (`prefill_prompts` a number)."""
        d, p = decode_seqs, prefill_tokens
        bound = self.bound.step_s(d, decode_context_tokens, p, prefill_context_tokens)
        scalars = (d, decode_context_tokens, p, prefill_context_tokens)
        if all(isinstance(v, (int, float)) for v in scalars):
            return max(self._one(d, decode_context_tokens, p, prefill_context_tokens, prefill_prompts), bound)
        if isinstance(d, (int, float)) and isinstance(p, (int, float)) and not p and d:
            mean = np.asarray(decode_context_tokens, dtype=float) / d
            return np.maximum(self._decode.many(d, mean), bound)
        b = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in scalars))
        est = np.array([self._one(int(dd) if float(dd).is_integer() else dd, c,
                                  int(pp) if float(pp).is_integer() else pp, q, prefill_prompts)
                        for dd, c, pp, q in zip(*(v.ravel() for v in b))]).reshape(b[0].shape)
        return np.maximum(est, bound)


def estimate_or_bound(model, deployment, workload, *, engine: str | None = "vllm", kernel_tables: str = "auto",
                      profile=None) -> tuple:
    """(StepTimes, note): `EstimateStepTimes` for `engine`, or `BoundStepTimes` when `engine` is
    None or the estimate cannot be made (the note says why; '' otherwise). Raises MLAError only
    when the bound cannot be made either (a deployment that cannot be built)."""
    if engine is not None:
        try:
            return EstimateStepTimes(model, deployment, workload, engine=engine, kernel_tables=kernel_tables,
                                     profile=profile), ""
        except MLAError as e:
            return BoundStepTimes(model, deployment, workload), f"no estimate ({e}): step times from the bound"
    return BoundStepTimes(model, deployment, workload), ""


# --- the cache --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KVCache:
    """The KV cache one replica admits against (docs/model.md, "Capacity per GPU").

    `budget_bytes` per GPU; `layers` ((layers.LayerSpec, count), ...) the model's layer groups and
    `precision` their dtypes (layers.Precision), split over `tp` ranks or whole under
    `dp_attention`; `state_bytes` a request's constant state per GPU; `block_size` tokens a block;
    `gpus` the GPUs whose caches the replica's requests share (DP-attention: tp, each holding whole
    requests; TP: 1, every GPU holding a share of every request). A request of T tokens holds
    `state + sum over layers of LayerSpec.kv_bytes(T, block_size)` per GPU (capacity's
    `request_bytes_per_gpu`: windows, chunks and compression applied by each cache kind); the
    replica admits while the sum stays within `budget_bytes * gpus`."""

    budget_bytes: int
    layers: tuple
    precision: object
    state_bytes: int = 0
    block_size: int = 16
    gpus: int = 1
    tp: int = 1
    dp_attention: bool = False

    @property
    def total_budget(self) -> int:
        return self.budget_bytes * self.gpus

    @property
    def bytes_per_token_bound(self) -> float:
        """Bytes a token adds at most, every cache counted, no window: for quick upper bounds."""
        return float(sum(n * layer.bytes_per_token(self.precision, self.tp, self.dp_attention)
                         for layer, n in self.layers))

    def request_bytes(self, tokens):
        """Bytes per GPU a request holds at `tokens` tokens (a number or an array)."""
        if not isinstance(tokens, (int, float)):
            tokens = np.asarray(tokens, dtype=float)
        elif isinstance(tokens, float) and tokens.is_integer():
            tokens = int(tokens)
        p, tp, dp, n = self.precision, self.tp, self.dp_attention, self.block_size
        return self.state_bytes + sum(c * layer.kv_bytes(tokens, p, tp, dp, n) for layer, c in self.layers)

    def to_dict(self) -> dict:
        return {"budget_bytes": self.budget_bytes, "state_bytes": self.state_bytes, "block_size": self.block_size,
                "gpus": self.gpus, "bytes_per_token_bound": self.bytes_per_token_bound}


def kv_cache_for(model, deployment) -> KVCache:
    """The KVCache of one replica of `deployment` (a serving.Deployment) from `capacity.capacity`:
    its budget, state and block size per GPU, and the model's layers. Raises MLAError when the
    weights do not fit."""
    from .capacity import capacity
    from .kv import precision

    dp = deployment.dp_attention and deployment.tp > 1
    cap = capacity(model, context=1, gpu=deployment.gpu, num_gpus=deployment.tp, tp=deployment.tp, dp_attention=dp,
                   weights_dtype=deployment.weights_dtype, kv_dtype=deployment.kv_dtype,
                   gpu_memory_utilization=deployment.gpu_memory_utilization, block_size=deployment.block_size,
                   reserve_bytes=deployment.reserve_bytes, state_dtype=deployment.state_dtype,
                   ssm_state_dtype=getattr(deployment, "ssm_state_dtype", "auto"))
    if not cap["weights_fit"]:
        raise MLAError(f"the weights of {model.name} do not fit {deployment.tp} x {deployment.gpu.id} "
                       f"({cap['weights_bytes_per_gpu'] / 2**30:,.1f} GiB a GPU): no cache to serve from")
    return KVCache(budget_bytes=cap["kv_budget_bytes_per_gpu"],
                   layers=tuple((g.layer, g.count) for g in model.cache_groups()),
                   precision=precision(model, deployment.kv_dtype, "latent", deployment.state_dtype,
                                       getattr(deployment, "ssm_state_dtype", "auto")),
                   state_bytes=cap["state_bytes_per_request_per_gpu"], block_size=cap["block_size"],
                   gpus=deployment.tp if dp else 1, tp=1 if dp else deployment.tp, dp_attention=dp)


# --- lengths and arrivals ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LengthHistogram:
    """A joint histogram of request (input, output) lengths (data/traffic_lengths.json): `cells`
    ((input bin, output bin, requests), ...) over the bins [edges[i], edges[i + 1])."""

    id: str
    title: str
    source: str
    requests: int
    trace_mean_input_len: float
    trace_mean_output_len: float
    input_edges: tuple
    output_edges: tuple
    cells: tuple

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(input lengths, output lengths), `n` whole numbers each: a cell by its count, then
        uniform in the cell."""
        cells = np.asarray(self.cells, dtype=np.int64)
        pick = rng.choice(len(cells), size=n, p=cells[:, 2] / cells[:, 2].sum())
        ie, oe = np.asarray(self.input_edges), np.asarray(self.output_edges)
        i, o = cells[pick, 0], cells[pick, 1]
        return rng.integers(ie[i], ie[i + 1]), rng.integers(oe[o], oe[o + 1])

    def mean_lengths(self) -> tuple[float, float]:
        """The histogram's expected (input, output) length (cells drawn uniformly within)."""
        cells = np.asarray(self.cells, dtype=float)
        ie, oe = np.asarray(self.input_edges, dtype=float), np.asarray(self.output_edges, dtype=float)
        i, o, c = cells[:, 0].astype(int), cells[:, 1].astype(int), cells[:, 2]
        mid_i, mid_o = (ie[i] + ie[i + 1] - 1) / 2, (oe[o] + oe[o + 1] - 1) / 2
        return float((mid_i * c).sum() / c.sum()), float((mid_o * c).sum() / c.sum())


def length_histograms() -> dict[str, LengthHistogram]:
    """{id: LengthHistogram} of data/traffic_lengths.json. Raises MLAError when it cannot be read."""
    from .presets import _load

    out = {}
    try:
        for d in _load("traffic_lengths.json")["datasets"]:
            out[d["id"]] = LengthHistogram(
                id=d["id"], title=d["title"], source=d["source"], requests=d["requests"],
                trace_mean_input_len=d["trace_mean_input_len"], trace_mean_output_len=d["trace_mean_output_len"],
                input_edges=tuple(d["input_edges"]), output_edges=tuple(d["output_edges"]),
                cells=tuple(tuple(c) for c in d["cells"]))
    except (KeyError, TypeError) as e:
        raise MLAError(f"data/traffic_lengths.json: a malformed dataset ({e})") from None
    return out


def sample_lengths(n: int, input_len: int, output_len: int, *, range_ratio: float = 0.0,
                   convention: str = "vllm", dataset: str | None = None,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(input lengths, output lengths) of `n` requests, int64 arrays: from `dataset` (a
    LENGTH_DATASETS id), else `input_len` / `output_len` spread by `range_ratio` in the given
    convention (RANGE_CONVENTIONS; vLLM's 0 and SGLang's 1 mean fixed lengths)."""
    if dataset is not None:
        return length_histograms()[dataset].sample(n, rng)
    if convention == "vllm":
        lo_i, hi_i = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
        lo_o, hi_o = math.floor(output_len * (1 - range_ratio)), math.ceil(output_len * (1 + range_ratio))
    else:
        lo_i, hi_i = int(input_len * range_ratio), input_len
        lo_o, hi_o = int(output_len * range_ratio), output_len
    lo_i, lo_o = max(1, lo_i), max(1, lo_o)
    return rng.integers(lo_i, hi_i + 1, size=n), rng.integers(lo_o, hi_o + 1, size=n)


def arrival_times(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """Times (s) `vllm bench serve` generates `n` requests at: cumulative gamma gaps (shape =
    burstiness, scale = 1 / (rate burstiness); burstiness 1 is Poisson, inf constant gaps),
    scaled so the last lands at n / rate; rate inf: all at 0 (vllm/benchmarks/serve.py
    `get_request`)."""
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if t[-1] > 0:
        t *= (n / rate) / t[-1]
    return t


# --- settings and results ---------------------------------------------------------------------------

def vllm_batch_defaults(gpu) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) `vllm serve` picks on `gpu`: 8192 and 1024 on GPUs of
    70 GiB or more other than the A100, else 2048 and 256 (vllm/engine/arg_utils.py,
    EngineArgs.get_batch_defaults, OPENAI_API_SERVER usage context)."""
    if gpu is not None and gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.id.lower():
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class TrafficConfig:
    """One benchmark run's settings, in `vllm bench serve` and vLLM's names.

    Clients: `num_prompts`; `rate` requests/s (inf: all at once), `burstiness` (gamma shape; 1
    Poisson), `max_concurrency` clients (None: no limit); lengths `input_len` / `output_len`
    spread by `random_range_ratio` (`range_convention` "vllm" or "sglang"), or drawn from
    `dataset` (LENGTH_DATASETS); `seed`. Engine: `max_num_seqs`, `max_num_batched_tokens` (vLLM's
    defaults: `vllm_batch_defaults`), `prefix_hit` share of each prompt already cached,
    `spec_tokens` k and `acceptance` a, `replicas` engines requests are dealt to. SLOs for
    goodput and `max_rate_at_slo`: `ttft_ms`, `tpot_ms`, `e2el_ms` (vLLM's --goodput keys)."""

    input_len: int
    output_len: int
    num_prompts: int = 1000
    rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    random_range_ratio: float = 0.0
    range_convention: str = "vllm"
    dataset: str | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    prefix_hit: float = 0.0
    spec_tokens: int = 0
    acceptance: float = 0.0
    replicas: int = 1
    seed: int = 0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @property
    def mode(self) -> str:
        if self.max_concurrency is not None and math.isinf(self.rate):
            return "closed loop"
        if math.isinf(self.rate):
            return "all at once"
        kind = "Poisson" if self.burstiness == 1 else f"gamma (burstiness {self.burstiness:g})"
        return kind + (f", at most {self.max_concurrency} in flight" if self.max_concurrency else "")

    @property
    def slos(self) -> dict:
        return {k: v for k, v in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms), ("e2el_ms", self.e2el_ms))
                if v is not None}

    def workload(self):
        from .serving import Workload

        return Workload(input_len=self.input_len, output_len=self.output_len, prefix_hit=self.prefix_hit,
                        spec_tokens=self.spec_tokens, acceptance=self.acceptance)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rate"] = None if math.isinf(self.rate) else self.rate
        d["burstiness"] = None if math.isinf(self.burstiness) else self.burstiness
        d["mode"] = self.mode
        return d


def check_config(cfg: TrafficConfig) -> TrafficConfig:
    """Raise MLAError (one line) on settings no run can have; return them."""
    from .serving import check_workload
    from .validate import check_choice, check_int, check_real

    check_workload(cfg.workload())
    check_int("num_prompts", cfg.num_prompts, maximum=MAX_PROMPTS)
    if not isinstance(cfg.rate, (int, float)) or isinstance(cfg.rate, bool) or cfg.rate != cfg.rate or cfg.rate <= 0:
        raise MLAError(f"rate must be a positive number of requests a second (or inf), got {cfg.rate!r}"[:200])
    if not isinstance(cfg.burstiness, (int, float)) or isinstance(cfg.burstiness, bool) \
            or cfg.burstiness != cfg.burstiness or cfg.burstiness <= 0:
        raise MLAError(f"burstiness must be a positive number (1: Poisson), got {cfg.burstiness!r}"[:200])
    if cfg.max_concurrency is not None:
        check_int("max_concurrency", cfg.max_concurrency, maximum=MAX_PROMPTS)
    check_choice("range_convention", cfg.range_convention, RANGE_CONVENTIONS)
    check_real("random_range_ratio", cfg.random_range_ratio, minimum=0, maximum=1)
    if cfg.range_convention == "vllm" and cfg.random_range_ratio >= 1:
        raise MLAError(f"random_range_ratio must be in [0, 1) (vLLM's meaning), got {cfg.random_range_ratio:g}")
    if cfg.dataset is not None:
        check_choice("dataset", cfg.dataset, LENGTH_DATASETS)
    check_int("max_num_seqs", cfg.max_num_seqs, maximum=1 << 20)
    check_int("max_num_batched_tokens", cfg.max_num_batched_tokens, maximum=1 << 24)
    need = cfg.max_num_seqs * (cfg.spec_tokens + 1)
    if cfg.max_num_batched_tokens < need:
        raise MLAError(f"max_num_batched_tokens ({cfg.max_num_batched_tokens:,}) must be at least max_num_seqs x "
                       f"(spec tokens + 1) = {need:,}: every running request decodes each step (vLLM asks "
                       "max_num_batched_tokens >= max_num_seqs)")
    check_int("replicas", cfg.replicas, maximum=1 << 20)
    check_int("seed", cfg.seed, minimum=0, maximum=2**63 - 1)
    for name, v in cfg.slos.items():
        check_real(name, v, minimum=0, exclusive_minimum=True, maximum=1e12)
    return cfg


@dataclass(frozen=True)
class Percentiles:
    """mean, p50, p90, p99 of one metric, seconds (None when no request has it)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, values, weights=None) -> "Percentiles":
        v = np.asarray(values, dtype=float)
        if v.size == 0:
            return cls(None, None, None, None)
        if weights is None:
            p = np.percentile(v, PERCENTILES)
            return cls(float(v.mean()), float(p[0]), float(p[1]), float(p[2]))
        w = np.asarray(weights, dtype=float)
        return cls(float((v * w).sum() / w.sum()), *weighted_percentiles(v, w, PERCENTILES))


def weighted_percentiles(values, weights, qs) -> list[float]:
    """np.percentile(np.repeat(values, weights), qs) (numpy's linear rule) without the repeat:
    `weights` are whole counts."""
    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=float)[order]
    cw = np.cumsum(np.asarray(weights, dtype=np.int64)[order])
    m = int(cw[-1])
    out = []
    for q in qs:
        pos = q / 100.0 * (m - 1)
        lo = math.floor(pos)
        a = v[np.searchsorted(cw, lo, side="right")]
        b = v[np.searchsorted(cw, min(lo + 1, m - 1), side="right")]
        out.append(float(a + (pos - lo) * (b - a)))
    return out


@dataclass(frozen=True)
class TrafficResult:
    """A simulated benchmark run (definitions: the module docstring; times in s, rates per s).

    `ttft_s`, `tpot_s`, `itl_s`, `e2e_s` Percentiles; `request_throughput`,
    `output_tokens_per_s`, `total_tokens_per_s` over `duration_s`; `goodput_rps` requests a
    second meeting every SLO given (None without SLOs); `saturated` the queue of requests waiting
    for admission grows without bound (arrivals above the service rate: over the second half of
    the arrivals more than SATURATION_GROWTH of them stay queued; a closed loop is never
    saturated); `max_rate_at_slo` (set by `max_rate_at_slo`, else None); `simulated_requests`;
    `sim_wall_s` the simulation's own wall time; `preemptions`, `engine_steps`; `step_times`
    the StepTimes' source; `config` the settings; `notes`."""

    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    request_throughput: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    goodput_rps: float | None
    saturated: bool
    max_rate_at_slo: float | None
    simulated_requests: int
    sim_wall_s: float
    duration_s: float
    preemptions: int
    engine_steps: int
    mean_input_len: float
    mean_output_len: float
    step_times: str
    config: TrafficConfig
    notes: tuple = ()

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "config"):
            d[k] = getattr(self, k).to_dict()
        d["notes"] = list(self.notes)
        return d


# --- the engine -------------------------------------------------------------------------------------

class _Engine:
    """One replica under its clients. State in Python lists (scalar speed) indexed by request."""

    def __init__(self, st, kv: KVCache, L, N, H, gen, clients, cfg: TrafficConfig, tps: float):
        self.st, self.kv, self.cfg = st, kv, cfg
        self.L, self.N, self.H, self.gen = L, N, H, gen
        n = len(L)
        self.n = n
        self.k = cfg.spec_tokens
        self.k1 = self.k + 1
        self.tps = tps
        self.total = kv.total_budget
        self.bpt = kv.bytes_per_token_bound
        self.state = kv.state_bytes
        self.blk = kv.block_size
        self.max_seqs, self.budget = cfg.max_num_seqs, cfg.max_num_batched_tokens
        nan = float("nan")
        self.send, self.first, self.done, self.admit = [nan] * n, [nan] * n, [nan] * n, [nan] * n
        self.target = list(L)  # tokens to compute before the next output (prompt, or prompt + generated)
        self.computed = [0] * n
        self.out = [0.0] * n  # tokens emitted
        self.last_out = [nan] * n
        self.version = [0] * n
        self.arrivals = deque()  # (send time, r), sorted by time
        self.next_i = 0
        self.free = clients  # None: no client limit
        self.waiting = deque()
        self.running = {}  # r -> None, admission order
        self.prefilling = {}  # r -> None, admission order
        self.dec = {}  # r -> base b: its context at step s is b + tps s
        self.A = 0.0  # sum of the bases
        self._barr = None  # the bases as an array (None: rebuild, the set changed)
        self._memo = (-1, None, 0.0)  # (step, array, exact bytes) of the last exact sum
        self.fin = []  # heap of (finish step, r, version)
        self.t, self.s = 0.0, 0
        self.last_dt = 0.0
        self.itl_v, self.itl_w = [], []  # one step's gap and how many outputs it ends
        self.itl_runs = []  # (gaps of a run of decode steps, outputs each)
        self.gaps = []  # single gaps (a preempted request's first output after its recompute)
        self.preemptions = 0
        self._release(0.0)

    # clients
    def _release(self, t: float) -> None:
        gen, arrivals = self.gen, self.arrivals
        while self.next_i < self.n and (self.free is None or self.free > 0):
            i = self.next_i
            arrivals.append((gen[i] if gen[i] > t else t, i))
            self.next_i += 1
            if self.free is not None:
                self.free -= 1

    def _finish(self, r: int, t: float) -> None:
        self.done[r] = t
        del self.running[r]
        if self.free is not None:
            self.free += 1
            self._release(t)

    # the cache
    def _decode_need(self, s: int, exact: bool) -> float:
        """Bytes the decoding requests hold at step s (k lookahead slots each): an upper bound,
        or the exact sum."""
        d = len(self.dec)
        if not d:
            return 0.0
        if not exact:
            return self.bpt * (self.A + d * (self.tps * s + self.k + self.blk)) + d * self.state
        if self._memo[0] == s and self._memo[1] is self._barr and self._barr is not None:
            return self._memo[2]
        if self._barr is None:
            self._barr = np.fromiter(self.dec.values(), float, d)
        need = float(self.kv.request_bytes(self._barr + (self.tps * s + self.k)).sum())
        self._memo = (s, self._barr, need)
        return need

    def _preempt(self, r: int) -> None:
        self.preemptions += 1
        del self.running[r]
        if r in self.prefilling:
            del self.prefilling[r]
            done_tokens = self.out[r]
        else:
            b = self.dec.pop(r)
            self.A -= b
            self._barr = None
            self.version[r] += 1
            done_tokens = self.out[r] = round(b + self.tps * self.s - self.L[r])
            self.last_out[r] = self.t
        self.target[r] = self.L[r] + int(done_tokens)
        self.computed[r] = 0
        self.waiting.appendleft(r)

    # one step, priced alone
    def step(self) -> bool:
        """Run one engine step from time t; False when every request is done."""
        t, arrivals = self.t, self.arrivals
        while arrivals and arrivals[0][0] <= t:
            ts, r = arrivals.popleft()
            self.send[r] = ts
            self.waiting.append(r)
        if not self.running and not self.waiting:
            if not arrivals:
                return False
            self.t = arrivals[0][0]
            return True
        kv, s = self.kv, self.s
        budget = self.budget - len(self.dec) * self.k1
        chunks = []
        pre_need = 0.0
        for r in self.prefilling:
            c = min(self.target[r] - self.computed[r], budget)
            if c > 0:
                chunks.append([r, c])
                budget -= c
            pre_need += kv.request_bytes(self.computed[r] + max(c, 0))
        dec_need = self._decode_need(s, exact=False)
        if pre_need + dec_need > self.total:
            dec_need = self._decode_need(s, exact=True)
        preempted = False
        while pre_need + dec_need > self.total and self.running:
            victim = next(reversed(self.running))
            preempted = True
            was_prefilling = victim in self.prefilling
            self._preempt(victim)
            if was_prefilling:
                for ch in chunks:
                    if ch[0] == victim:
                        budget += ch[1]
                        chunks.remove(ch)
                        break
                given = {r: c for r, c in chunks}
                pre_need = sum(kv.request_bytes(self.computed[r] + given.get(r, 0)) for r in self.prefilling)
            else:
                dec_need = self._decode_need(s, exact=True)
        if not preempted:
            exact = False
            while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
                r = self.waiting[0]
                c0 = self.H[r]
                c = min(self.target[r] - c0, budget)
                need = kv.request_bytes(c0 + c)
                if pre_need + dec_need + need > self.total:
                    if exact:
                        break
                    dec_need, exact = self._decode_need(s, exact=True), True
                    if pre_need + dec_need + need > self.total:
                        break
                self.waiting.popleft()
                self.running[r] = None
                self.prefilling[r] = None
                self.computed[r] = c0
                if self.admit[r] != self.admit[r]:
                    self.admit[r] = t
                chunks.append([r, c])
                budget -= c
                pre_need += need
        d = len(self.dec)
        if not chunks and not d:
            raise MLAError("the simulation stalled: a request cannot be admitted into an empty engine "
                           "(its cache does not fit the budget)")
        p = pairs = 0
        for r, c in chunks:
            before = self.computed[r]
            p += c
            pairs += c * before + c * (c + 1) // 2
        dt = self.st.step_s(d, self.A + d * self.tps * s, p, pairs, len(chunks)) if chunks else \
            self.st.step_s(d, self.A + d * self.tps * s, 0, 0)
        t_end = t + dt
        if d:
            self.itl_v.append(dt)
            self.itl_w.append(d)
        for r, c in chunks:
            self.computed[r] += c
            if self.computed[r] >= self.target[r]:
                del self.prefilling[r]
                self._emit_after_prefill(r, t_end, s)
        self._finish_decodes(s, t_end)
        self.t, self.s, self.last_dt = t_end, s + 1, dt
        return True

    def _emit_after_prefill(self, r: int, t_end: float, s: int) -> None:
        if self.first[r] != self.first[r]:
            self.first[r] = t_end
        else:
            self.gaps.append(t_end - self.last_out[r])
        self.out[r] += 1
        left = self.N[r] - self.out[r]
        if left <= 0:
            self._finish(r, t_end)
            return
        b = self.L[r] + self.out[r] - self.tps * (s + 1)
        self.dec[r] = b
        self.A += b
        self._barr = None
        heapq.heappush(self.fin, (s + math.ceil(left / self.tps - 1e-9), r, self.version[r]))

    def _finish_decodes(self, s: int, t_end: float) -> None:
        fin = self.fin
        while fin and fin[0][0] <= s:
            _, r, v = heapq.heappop(fin)
            if v != self.version[r] or r not in self.dec:
                continue
            self.A -= self.dec.pop(r)
            self._barr = None
            self.out[r] = self.N[r]
            self._finish(r, t_end)

    def _top_finish(self) -> int:
        fin = self.fin
        while fin and (fin[0][2] != self.version[fin[0][1]] or fin[0][1] not in self.dec):
            heapq.heappop(fin)
        return fin[0][0]

    # a run of decode steps, priced at once
    def run(self) -> bool:
        """A run of decode-only steps when the batch cannot change for a while, else one step."""
        t, arrivals = self.t, self.arrivals
        while arrivals and arrivals[0][0] <= t:
            ts, r = arrivals.popleft()
            self.send[r] = ts
            self.waiting.append(r)
        d = len(self.dec)
        if self.prefilling or not d:
            return self.step()
        t_arr = math.inf
        if not self.waiting and arrivals:
            t_arr = arrivals[0][0]
            if t_arr - t < _MIN_RUN * self.last_dt:
                return self.step()  # an arrival is due within a few steps
        s, kv = self.s, self.kv
        dec_need = self._decode_need(s, exact=False)
        safe = None  # steps the cache surely holds (None: the quick bound holds now; check the run's end)
        if dec_need > self.total:
            dec_need = self._decode_need(s, exact=True)
            if dec_need > self.total:
                return self.step()  # a preemption is due
            # a step adds at most floor(tps / N) + 1 blocks a sequence
            safe = int((self.total - dec_need) // (d * self.bpt * self.blk * (self.tps // self.blk + 1)))
            if safe < _MIN_RUN:
                return self.step()
        if self.waiting and len(self.running) < self.max_seqs:
            r = self.waiting[0]
            c0 = self.H[r]
            need = kv.request_bytes(c0 + min(self.target[r] - c0, self.budget - d * self.k1))
            if dec_need + need <= self.total or self._decode_need(s, exact=True) + need <= self.total:
                return self.step()  # it can be admitted now
        # else the queue's head is blocked until a request finishes: arrivals change nothing before then
        horizon = self._top_finish() - s + 1
        if t_arr < math.inf:
            guess = (t_arr - t) / self.last_dt if self.last_dt > 0 else _MAX_RUN
            horizon = min(horizon, int(guess * 1.25) + 4)
        horizon = min(horizon, _MAX_RUN, safe if safe is not None else _MAX_RUN)
        if horizon < _MIN_RUN:
            return self.step()
        j = np.arange(horizon)
        dts = self.st.step_s(d, self.A + d * self.tps * (s + j), 0, 0)
        ends = t + np.cumsum(dts)
        h = horizon
        if t_arr < math.inf:
            starts = ends - dts
            h = min(h, int(np.searchsorted(starts, t_arr, side="left")))
        if safe is None and self._decode_need(s + h - 1, exact=False) > self.total \
                and self._decode_need(s + h - 1, exact=True) > self.total:
            # the cache fills within the run: the longest of ~16 candidate lengths that still fits, in one
            # array operation (the steps s .. s + m - 1 fit when the need at step s + m - 1 does)
            cand = np.unique(np.round(np.geomspace(1, h - 1, 16)).astype(np.int64)) if h > 2 else np.array([1])
            ctx = self._barr[:, None] + (self.tps * (s + cand - 1) + self.k)[None, :]
            fits = self.kv.request_bytes(ctx).sum(axis=0) <= self.total
            h = int(cand[fits].max()) if fits.any() else 0
        if h < 1:
            return self.step()
        self.itl_runs.append((dts[:h], d))
        self.t = float(ends[h - 1])
        self.s = s + h
        self.last_dt = float(dts[h - 1])
        self._finish_decodes(s + h - 1, self.t)
        return True


def _prefix_tokens(L: np.ndarray, prefix_hit: float) -> np.ndarray:
    """Cached prompt tokens of each request: input_len - `Workload.new_prefill_tokens`."""
    from .serving import Workload

    if not prefix_hit:
        return np.zeros_like(L)
    out = np.empty_like(L)
    for v in np.unique(L):
        out[L == v] = v - Workload(input_len=int(v), output_len=1, prefix_hit=prefix_hit).new_prefill_tokens
    return out


def simulate(step_times: StepTimes, kv: KVCache, config: TrafficConfig, *, aggregate: bool = True) -> TrafficResult:
    """Run `config` through `config.replicas` engines with `step_times` and cache `kv` (see the
    module docstring). `aggregate=False` prices every step alone (the plain step loop: the same
    figures, slower). Deterministic: the same inputs give the same result. Raises MLAError on bad
    settings or a request too long for the cache."""
    check_config(config)
    wall = time.perf_counter()
    cfg = config
    n = cfg.num_prompts
    root = np.random.SeedSequence(cfg.seed)
    rng_len, rng_arr = (np.random.default_rng(s) for s in root.spawn(2))
    L, N = sample_lengths(n, cfg.input_len, cfg.output_len, range_ratio=cfg.random_range_ratio,
                          convention=cfg.range_convention, dataset=cfg.dataset, rng=rng_len)
    L, N = L.astype(np.int64), N.astype(np.int64)
    gen = arrival_times(n, cfg.rate, cfg.burstiness, rng_arr)
    H = _prefix_tokens(L, cfg.prefix_hit)
    longest = int((L + N).max()) + cfg.spec_tokens
    if kv.request_bytes(longest) > kv.total_budget:
        raise MLAError(f"a request of {longest:,} tokens does not fit the KV cache of one replica "
                       f"({kv.total_budget / 2**30:,.2f} GiB): it could never be admitted")
    tps = cfg.workload().tokens_per_step
    # Requests are dealt round robin to the replicas that have clients (all of them without a limit).
    R = cfg.replicas if cfg.max_concurrency is None else min(cfg.replicas, cfg.max_concurrency)
    send, first, done, admit = (np.empty(n) for _ in range(4))
    itl_v, itl_w, gaps = [], [], []
    preemptions = steps = 0
    for rep in range(R):
        idx = np.arange(rep, n, R)
        if idx.size == 0:
            continue
        clients = None
        if cfg.max_concurrency is not None:
            clients = cfg.max_concurrency // R + (1 if rep < cfg.max_concurrency % R else 0)
        eng = _Engine(step_times, kv, L[idx].tolist(), N[idx].tolist(), H[idx].tolist(), gen[idx].tolist(),
                      clients, cfg, tps)
        go = eng.run if aggregate else eng.step
        while go():
            pass
        send[idx], first[idx], done[idx], admit[idx] = eng.send, eng.first, eng.done, eng.admit
        itl_v.append(np.asarray(eng.itl_v, dtype=float))
        itl_w.append(np.asarray(eng.itl_w, dtype=np.int64))
        for v, w in eng.itl_runs:
            itl_v.append(v)
            itl_w.append(np.full(v.size, w, dtype=np.int64))
        gaps += eng.gaps
        preemptions += eng.preemptions
        steps += eng.s
    if np.isnan(done).any():
        raise MLAError("the simulation ended with requests unserved")
    if gaps:
        itl_v.append(np.asarray(gaps))
        itl_w.append(np.ones(len(gaps), dtype=np.int64))
    ttft, e2e = first - send, done - send
    multi = N > 1
    tpot = (e2e[multi] - ttft[multi]) / (N[multi] - 1)
    duration = float(done.max())
    good = None
    if cfg.slos:
        ok = np.ones(n, dtype=bool)
        if cfg.ttft_ms is not None:
            ok &= ttft <= cfg.ttft_ms / 1e3
        if cfg.tpot_ms is not None:
            all_tpot = np.zeros(n)
            all_tpot[multi] = tpot
            ok &= all_tpot <= cfg.tpot_ms / 1e3
        if cfg.e2el_ms is not None:
            ok &= e2e <= cfg.e2el_ms / 1e3
        good = float(ok.sum() / duration)
    out_tokens, in_tokens = int(N.sum()), int(L.sum())
    notes = []
    if cfg.dataset is not None:
        notes.append(f"lengths drawn from the {cfg.dataset} histogram (input_len / output_len not used)")
    if preemptions:
        notes.append(f"{preemptions:,} preemption{'s' if preemptions != 1 else ''}: the cache ran out and the latest "
                     "admitted requests were recomputed")
    values = np.concatenate(itl_v) if itl_v else np.zeros(0)
    weights = np.concatenate(itl_w) if itl_w else np.zeros(0, dtype=np.int64)
    return TrafficResult(
        ttft_s=Percentiles.of(ttft), tpot_s=Percentiles.of(tpot), itl_s=Percentiles.of(values, weights),
        e2e_s=Percentiles.of(e2e), request_throughput=n / duration, output_tokens_per_s=out_tokens / duration,
        total_tokens_per_s=(in_tokens + out_tokens) / duration, goodput_rps=good,
        saturated=_saturated(cfg, gen, admit), max_rate_at_slo=None, simulated_requests=n,
        sim_wall_s=time.perf_counter() - wall, duration_s=duration, preemptions=preemptions, engine_steps=steps,
        mean_input_len=float(L.mean()), mean_output_len=float(N.mean()),
        step_times=getattr(step_times, "source", type(step_times).__name__), config=cfg, notes=tuple(notes))


def _saturated(cfg: TrafficConfig, gen: np.ndarray, admit: np.ndarray) -> bool:
    """The queue (generated, not yet admitted) grows by more than SATURATION_GROWTH of the requests
    generated over the second half of the arrivals. A closed loop (rate inf) never saturates."""
    if math.isinf(cfg.rate) or gen.size < 4:
        return False
    order = np.sort(gen)
    t_half, t_end = order[gen.size // 2], order[-1]
    adm = np.sort(admit)

    def queue(t):
        return np.searchsorted(order, t, side="right") - np.searchsorted(adm, t, side="right")

    arrived = np.searchsorted(order, t_end, side="right") - np.searchsorted(order, t_half, side="right")
    return bool(arrived > 0 and (queue(t_end) - queue(t_half)) > SATURATION_GROWTH * arrived)


# --- the highest rate at the SLOs -------------------------------------------------------------------

def max_rate_at_slo(step_times: StepTimes, kv: KVCache, config: TrafficConfig, *, iterations: int = 12) -> dict:
    """The highest Poisson rate (req/s, burstiness 1, no client limit, the rest of `config`) at
    which the run is not saturated and its p99 TTFT, p99 TPOT and p99 E2E meet the SLOs given,
    found by bisection in log rate: from 1/1000 of the throughput of a closed loop of max_num_seqs
    clients a replica, the upper end doubled from that throughput until a rate fails. Same seed at every rate (the arrivals scale with 1 /
    rate). Returns {'rate': float or None (no SLO given), 'relative_precision', 'runs', 'note'};
    rate 0.0 when even the lowest rate misses an SLO."""
    cfg = check_config(config)
    if not cfg.slos:
        return {"rate": None, "relative_precision": None, "runs": 0, "note": "no SLO given"}
    closed = replace(cfg, rate=math.inf, max_concurrency=cfg.max_num_seqs * cfg.replicas)
    cap = simulate(step_times, kv, closed).request_throughput

    def ok(rate: float) -> bool:
        r = simulate(step_times, kv, replace(cfg, rate=rate, burstiness=1.0, max_concurrency=None))
        return (not r.saturated and (cfg.ttft_ms is None or r.ttft_s.p99 <= cfg.ttft_ms / 1e3)
                and (cfg.tpot_ms is None or r.tpot_s.p99 is None or r.tpot_s.p99 <= cfg.tpot_ms / 1e3)
                and (cfg.e2el_ms is None or r.e2e_s.p99 <= cfg.e2el_ms / 1e3))

    lo, hi = cap / 1000.0, cap
    runs = 2
    if not ok(lo):
        return {"rate": 0.0, "relative_precision": None, "runs": runs,
                "note": f"even {lo:.3g} req/s misses an SLO (one request alone is too slow)"}
    for _ in range(_MAX_DOUBLINGS):
        runs += 1
        if not ok(hi):
            break
        lo, hi = hi, hi * 2
    else:
        return {"rate": lo, "relative_precision": None, "runs": runs,
                "note": f"meets the SLOs up to {lo:.3g} req/s, the top of the search"}
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        runs += 1
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return {"rate": lo, "relative_precision": hi / lo - 1.0, "runs": runs, "note": ""}


# --- a plan's traffic -------------------------------------------------------------------------------

def best_point_deployment(plan, gpu, **fields):
    """The Deployment of `plan`'s best point (its split on `gpu`, `fields` the other Deployment
    fields the plan was searched with), or (None, reason) when traffic cannot be run there: no
    point fits memory, or the split has pipeline stages (not modelled). Returns (deployment, "")."""
    from .serving import Deployment

    best = plan.best
    if best is None or not best.fits:
        return None, "the plan has no point that fits memory: nothing to serve traffic"
    if best.pp > 1:
        return None, ("the traffic simulation runs one stage a replica: it does not model pipeline stages yet "
                      f"(best split {best.split})")
    return Deployment(gpu=gpu, num_gpus=plan.num_gpus, gpus_per_node=plan.gpus_per_node, tp=best.tp,
                      dp_attention=best.dp_attention, ep=best.ep, **fields), ""


def traffic_inputs(model, deployment, config: TrafficConfig, *, step_times: StepTimes | None = None,
                   engine: str | None = "vllm", kernel_tables: str = "auto", profile=None):
    """What a run of `config` on `deployment` simulates with: (config with the deployment's
    replicas, checked; step times, default `estimate_or_bound` for `engine`, `kernel_tables`,
    `profile`; the cache from `kv_cache_for`; the note saying the bound stood in, or ""). The model
    served is `model` with its MTP draft when the workload speculates. Raises MLAError."""
    from .serving import with_mtp_draft

    cfg = replace(config, replicas=deployment.replicas)
    wl = check_config(cfg).workload()
    model, _ = with_mtp_draft(model, wl)
    note = ""
    if step_times is not None:
        st = step_times
    else:
        st, note = estimate_or_bound(model, deployment, wl, engine=engine, kernel_tables=kernel_tables,
                                     profile=profile)
    return cfg, st, kv_cache_for(model, deployment), note


def plan_traffic(model, deployment, config: TrafficConfig, *, step_times: StepTimes | None = None,
                 engine: str | None = "vllm", kernel_tables: str = "auto", profile=None,
                 search_rate: bool = True, rate_iterations: int = 12) -> TrafficResult:
    """`config` served by `deployment` (a serving.Deployment; its replicas set config.replicas)
    with the step times and cache of `traffic_inputs`, and `max_rate_at_slo` (`rate_iterations`
    bisection steps) when SLOs are given and `search_rate`. Raises MLAError on bad input."""
    cfg, st, kv, note = traffic_inputs(model, deployment, config, step_times=step_times, engine=engine,
                                       kernel_tables=kernel_tables, profile=profile)
    result = simulate(st, kv, cfg)
    if note:
        result = replace(result, notes=result.notes + (note,))
    if search_rate and cfg.slos:
        found = max_rate_at_slo(st, kv, cfg, iterations=rate_iterations)
        notes = result.notes + ((f"max_rate_at_slo: {found['note']}",) if found["note"] else ())
        result = replace(result, max_rate_at_slo=found["rate"], notes=notes)
    return result


# --- replaying a benchmark --------------------------------------------------------------------------

def _engines():
    """The engine-result importer (mla_core.store.engines, formerly mla_core.bench.engines)."""
    try:
        from .store import engines
    except ImportError:
        from .bench import engines
    return engines


# (metric, our field, statistic): the engines' keys are f"{stat}_{name}_ms".
_REPLAY_METRICS = (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"), ("e2e", "e2e_s"))
_ENGINE_E2E = {"vllm_serve": "e2el", "sglang_bench_serving": "e2e_latency"}


@dataclass(frozen=True)
class ReplayPoint:
    """One run of an engine result replayed: its settings, the simulated TrafficResult, and
    `errors` [{'metric', 'measured', 'simulated', 'error_pct'}] where the file has the figure
    (error = (simulated - measured) / measured x 100)."""

    settings: dict
    result: TrafficResult
    errors: tuple

    def to_dict(self) -> dict:
        return {"settings": self.settings, "result": self.result.to_dict(), "errors": [dict(e) for e in self.errors]}


@dataclass(frozen=True)
class ReplayReport:
    """`replay(run)`: every point of an engine result, and the median |error| of each metric."""

    engine: str
    format: str
    model: str
    gpu: str
    split: dict
    step_times: str
    points: tuple
    median_abs_error_pct: dict
    notes: tuple = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["points"] = [p.to_dict() for p in self.points]
        d["notes"] = list(self.notes)
        return d


def replay(run, *, step_times_for=None, engine: str | None = None, gpu_memory_utilization: float = 0.9
           ) -> ReplayReport:
    """Replay an imported engine result (the dict the importer's `load_engine_file` returns, or a
    history run {"result": ...}) with each run's own settings: num_prompts (or the requests
    completed), rate (None: all at once), max_concurrency, the mean lengths, SGLang's
    random_range_ratio in SGLang's meaning, on the run's model, GPU and split. `step_times_for`:
    a callable (model, deployment, workload) -> StepTimes (default: `estimate_or_bound` with
    `engine`, else the result's own engine where the estimate has its rules, else vLLM's). Engine
    defaults the file does not record are vLLM's (`vllm_batch_defaults`). Compares mean, median and
    p99 of TTFT, TPOT, ITL and E2E, request and output-token throughput. Raises MLAError for a
    result that is not a served benchmark (`sglang_one_batch` has no traffic to replay)."""
    result = run.get("result", run) if isinstance(run, dict) else run
    if not isinstance(result, dict) or result.get("kind") != "engine":
        raise MLAError("not an engine result (kind 'engine'); import one with `python -m mla_core bench import FILE`")
    if result["format"] not in _ENGINE_E2E:
        raise MLAError(f"a {result['format']} result is one static batch, not traffic: nothing to replay")
    from .presets import load_gpu, load_model
    from .serving import Deployment, with_mtp_draft

    s = result["settings"]
    model, gpu = load_model(s["model"]), load_gpu(s["gpu"])
    dep = Deployment(gpu=gpu, num_gpus=s["num_gpus"], gpus_per_node=s["gpus_per_node"], tp=s["tp"],
                     dp_attention=s["dp_attention"], ep=s["ep"], weights_dtype=s.get("weights_dtype"),
                     kv_dtype=s["kv_dtype"], gpu_memory_utilization=gpu_memory_utilization)
    batched, seqs = vllm_batch_defaults(gpu)
    e2e_key = _ENGINE_E2E[result["format"]]
    from .serving.engines import ENGINES

    eng_rules = engine or (result["engine"] if result["engine"] in ENGINES else "vllm")
    points, cache, notes = [], {}, []
    for p in result["points"]:
        w, f = p["workload"], p.get("engine_fields", {})
        rate = w.get("request_rate")
        convention = "sglang" if result["format"] == "sglang_bench_serving" else "vllm"
        ratio = f.get("random_range_ratio")
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
            ratio = 1.0 if convention == "sglang" else 0.0
        cfg = TrafficConfig(input_len=w["input_len"], output_len=w["output_len"],
                            num_prompts=w.get("num_prompts") or p["measured"]["completed"],
                            rate=math.inf if rate is None else float(rate),
                            burstiness=float(f["burstiness"]) if isinstance(f.get("burstiness"), (int, float)) else 1.0,
                            max_concurrency=w.get("max_concurrency"), random_range_ratio=float(ratio),
                            range_convention=convention, max_num_seqs=seqs, max_num_batched_tokens=batched,
                            replicas=dep.replicas)
        key = (cfg.input_len, cfg.output_len)
        if key not in cache:
            wl = cfg.workload()
            m, _ = with_mtp_draft(model, wl)
            if step_times_for is not None:
                st = step_times_for(m, dep, wl)
            else:
                st, note = estimate_or_bound(m, dep, wl, engine=eng_rules)
                if note and note not in notes:
                    notes.append(note)
            cache[key] = (st, kv_cache_for(m, dep))
        st, kv = cache[key]
        sim = simulate(st, kv, cfg)
        errors = []
        for name, ours in _REPLAY_METRICS:
            eng = e2e_key if name == "e2e" else name
            got = getattr(sim, ours)
            for stat, attr in (("mean", "mean"), ("median", "p50"), ("p99", "p99")):
                measured = f.get(f"{stat}_{eng}_ms")
                errors.append(_error(f"{stat}_{ours}", None if measured is None else measured / 1e3,
                                     getattr(got, attr)))
        errors.append(_error("request_throughput", p["measured"].get("request_throughput"), sim.request_throughput))
        errors.append(_error("output_tokens_per_s", p["measured"].get("output_tokens_per_s"), sim.output_tokens_per_s))
        points.append(ReplayPoint(settings=cfg.to_dict(), result=sim, errors=tuple(e for e in errors if e)))
    med = {}
    for p in points:
        for e in p.errors:
            if e["error_pct"] is not None:
                med.setdefault(e["metric"], []).append(abs(e["error_pct"]))
    source = points[0].result.step_times if points else ""
    return ReplayReport(engine=result["engine"], format=result["format"], model=s["model"], gpu=s["gpu"],
                        split={"tp": dep.tp, "dp_attention": dep.dp_attention, "ep": dep.ep,
                               "num_gpus": dep.num_gpus},
                        step_times=source, points=tuple(points),
                        median_abs_error_pct={k: float(np.median(v)) for k, v in med.items()},
                        notes=("engine settings the file does not record (max_num_seqs, max_num_batched_tokens) "
                               "are vLLM's defaults for the GPU", *notes))


def _error(metric: str, measured, simulated) -> dict | None:
    if not isinstance(measured, (int, float)) or isinstance(measured, bool) or simulated is None:
        return None
    err = (simulated - measured) / measured * 100.0 if measured > 0 else None
    return {"metric": metric, "measured": float(measured), "simulated": float(simulated), "error_pct": err}


# --- replaying published runs -----------------------------------------------------------------------

# Issue 19's goal for the replay of published runs: median |error| of the mean TTFT and the mean TPOT.
REPLAY_GOAL_PCT = 20.0
REPLAY_GOAL_METRICS = ("mean_ttft_s", "mean_tpot_s")
_PUBLISHED_STATS = (("mean", "mean"), ("median", "p50"), ("p99", "p99"))
# the benchmark tools whose --random-range-ratio the runs name, and the meaning each gives it
_SGLANG_TOOLS = ("sglang", "bench_serving")


def _published_config(run: dict, point: dict, gpu, replicas: int, engine: str) -> tuple[TrafficConfig, list[str]]:
    """The TrafficConfig of one published point (data/traffic_runs.json), and notes on what the
    source does not give."""
    from .serving.engines import engine_rules

    notes = []
    w = point.get("workload") or run["workload"]
    bench = run.get("benchmark", {})
    tool = str(bench.get("tool", "")).lower()
    ratio = w.get("random_range_ratio", bench.get("random_range_ratio"))
    if ratio is not None and w.get("random_input_len") and w.get("dataset", "random") == "random":
        convention = "sglang" if any(t in tool for t in _SGLANG_TOOLS) else "vllm"
        if convention == "vllm" and ratio >= 1:
            ratio = 0.0
        lengths = dict(input_len=int(w["random_input_len"]), output_len=int(w["random_output_len"]),
                       random_range_ratio=float(ratio), range_convention=convention)
    else:
        lengths = dict(input_len=max(1, round(w["input_len"])), output_len=max(1, round(w["output_len"])))
        if w.get("dataset") not in (None, "random"):
            notes.append(f"the {w['dataset']} dataset replayed at its mean lengths "
                         f"({lengths['input_len']:,} in / {lengths['output_len']:,} out)")
    rate = point.get("request_rate")
    seqs = vllm_batch_defaults(gpu)[1]
    chunk = engine_rules(engine).prefill_chunk(gpu.memory_GB)
    par = run["parallelism"]
    if par.get("dp_attention") and par["tp"] > 1:  # every DP rank schedules its own requests and chunk
        seqs, chunk = seqs * par["tp"], chunk * par["tp"]
    prompts = point.get("num_prompts") or point.get("completed")
    if not prompts:
        prompts = 10 * (point.get("max_concurrency") or 100)
        notes.append(f"num_prompts not printed: {prompts:,} (ten per client) assumed")
    cfg = TrafficConfig(**lengths, num_prompts=int(prompts),
                        rate=math.inf if rate is None else float(rate), max_concurrency=point.get("max_concurrency"),
                        max_num_seqs=seqs, max_num_batched_tokens=max(chunk, seqs * (w.get("spec_tokens", 0) + 1)),
                        prefix_hit=w.get("prefix_hit", 0.0), spec_tokens=w.get("spec_tokens", 0),
                        acceptance=w.get("acceptance", 0.0), replicas=replicas)
    return cfg, notes


def replay_published(ids=None, *, engine: str | None = None, step_times_cache: dict | None = None) -> dict:
    """Every run of data/traffic_runs.json (or those in `ids`) replayed through `simulate` with
    its own settings: each point's arrivals (closed loop of `max_concurrency` clients, Poisson at
    `request_rate`, or all at once), `num_prompts`, lengths (fixed, or the tool's random range in
    its own convention: SGLang's bench_serving or vLLM's; a dataset at its mean lengths), on the
    run's model, GPU and split, with `estimate_or_bound` step times for the run's engine
    (serving.published.estimate_engine; `engine` overrides it). Engine limits the sources do not
    print: `max_num_seqs` vLLM's default for the GPU, `max_num_batched_tokens` the engine's
    default chunk (engines.EngineRules.prefill_chunk), both per DP rank under DP-attention; a split the deployment cannot express yet
    (MoE TP x EP inside a group) runs with its experts tensor-parallel, and says so.

    Returns {'runs': [{'id', 'title', 'engine', 'estimate_engine', 'model', 'gpu', 'split',
    'step_times', 'notes', 'points': [{'settings', 'source', 'errors': [{'metric', 'measured',
    'simulated', 'error_pct'}], 'sim_wall_s', 'simulated_requests'}], 'median_abs_error_pct'}],
    'by_metric': {metric: {'points', 'median_abs_error_pct', 'worst'}}, 'goal': {'metrics',
    'max_median_abs_error_pct', 'median_abs_error_pct': {metric: value}, 'met'}, 'points',
    'simulated_requests', 'sim_wall_s', 'requests_per_s'}. Metrics: `{mean,median,p99}_{ttft_s,
    tpot_s,itl_s,e2e_s}`, `request_throughput`, `output_tokens_per_s` (the deployment's; per GPU
    where the source prints per GPU), error = (simulated - measured) / measured x 100.
    `step_times_cache`: a dict kept between calls (the step times and caches per run; a second
    replay then simulates with their tables already filled). Raises MLAError when the file cannot
    be read."""
    from .presets import _load, load_gpu, load_model
    from .serving import Deployment, with_mtp_draft
    from .serving.published import estimate_engine

    try:
        runs = _load("traffic_runs.json")["runs"]
    except (KeyError, TypeError) as e:
        raise MLAError(f"data/traffic_runs.json: unreadable ({e})") from None
    if ids is not None:
        want = set(ids)
        runs = [r for r in runs if r["id"] in want]
    out_runs, wall, requests = [], 0.0, 0
    per_metric: dict[str, list] = {}
    for run in runs:
        try:
            model, gpu = load_model(run["model"]), load_gpu(run["gpu"])
            par = run["parallelism"]
        except KeyError as e:
            raise MLAError(f"data/traffic_runs.json: {run.get('id')}: missing {e}") from None
        eng = engine or estimate_engine(run.get("engine", ""))
        notes = []
        dep = Deployment(gpu=gpu, num_gpus=par["num_gpus"], gpus_per_node=par["gpus_per_node"], tp=par["tp"],
                         dp_attention=par["dp_attention"], ep=par["ep"], weights_dtype=run.get("weights_dtype"),
                         kv_dtype=run.get("kv_dtype", "auto"))
        from .serving import check_deployment

        try:
            check_deployment(model, dep)
        except MLAError as e:
            dep = replace(dep, ep=1)
            notes.append(f"split not expressible here ({e}): replayed with the experts tensor-parallel (ep 1)")
        cache = {} if step_times_cache is None else step_times_cache.setdefault((run["id"], eng), {})
        points = []
        for p in run["points"]:
            cfg, pnotes = _published_config(run, p, gpu, dep.replicas, eng)
            wl = cfg.workload()
            m, _ = with_mtp_draft(model, wl)
            key = (wl.spec_tokens, wl.acceptance, cfg.input_len if list(m.windows()) else None)
            if key not in cache:
                st, note = estimate_or_bound(m, dep, wl, engine=eng)
                if note:
                    notes.append(note)
                cache[key] = (st, kv_cache_for(m, dep))
            st, kv = cache[key]
            sim = simulate(st, kv, cfg)
            wall += sim.sim_wall_s
            requests += sim.simulated_requests
            errors = []
            for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
                got, given = getattr(sim, name), p.get(name) or {}
                for stat, attr in _PUBLISHED_STATS:
                    errors.append(_error(f"{stat}_{name}", given.get(stat), getattr(got, attr)))
            errors.append(_error("request_throughput", p.get("request_throughput"), sim.request_throughput))
            if "output_tokens_per_s" in p:
                errors.append(_error("output_tokens_per_s", p["output_tokens_per_s"], sim.output_tokens_per_s))
            elif "output_tokens_per_s_per_gpu" in p:
                errors.append(_error("output_tokens_per_s_per_gpu", p["output_tokens_per_s_per_gpu"],
                                     sim.output_tokens_per_s / dep.num_gpus))
            errors = tuple(e for e in errors if e)
            for e in errors:
                if e["error_pct"] is not None:
                    per_metric.setdefault(e["metric"], []).append((abs(e["error_pct"]), run["id"], e["error_pct"]))
            points.append({"settings": cfg.to_dict(), "source": p.get("source", ""), "errors": [dict(e) for e in errors],
                           "notes": pnotes + list(sim.notes), "sim_wall_s": sim.sim_wall_s,
                           "simulated_requests": sim.simulated_requests, "saturated": sim.saturated})
        med = {}
        for pt in points:
            for e in pt["errors"]:
                if e["error_pct"] is not None:
                    med.setdefault(e["metric"], []).append(abs(e["error_pct"]))
        out_runs.append({"id": run["id"], "title": run.get("title", run["id"]), "engine": run.get("engine", ""),
                         "estimate_engine": eng, "model": model.name, "gpu": gpu.id, "split": dep.split,
                         "step_times": next(iter(cache.values()))[0].source if cache else "",
                         "notes": list(dict.fromkeys(notes)), "points": points,
                         "median_abs_error_pct": {k: float(np.median(v)) for k, v in med.items()}})
    by_metric = {}
    for k, v in per_metric.items():
        worst = max(v)
        by_metric[k] = {"points": len(v), "median_abs_error_pct": float(np.median([a for a, _, _ in v])),
                        "worst": {"run": worst[1], "error_pct": worst[2]}}
    goal = {k: by_metric[k]["median_abs_error_pct"] if k in by_metric else None for k in REPLAY_GOAL_METRICS}
    return {"runs": out_runs, "by_metric": by_metric,
            "goal": {"metrics": list(REPLAY_GOAL_METRICS), "max_median_abs_error_pct": REPLAY_GOAL_PCT,
                     "median_abs_error_pct": goal,
                     "met": all(v is not None and v <= REPLAY_GOAL_PCT for v in goal.values())},
            "points": sum(len(r["points"]) for r in out_runs), "simulated_requests": requests, "sim_wall_s": wall,
            "requests_per_s": requests / wall if wall > 0 else None}
