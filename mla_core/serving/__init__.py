"""Serving plan: prefill (TTFT), the decode step (TPOT) across GPUs and nodes, the frontier of
splits, cost, and the engines' launch commands (docs/model.md, "Serving", "Estimated step time"
and "Collective bandwidth").

The package, one file a part of the design:
    inputs.py    Deployment, Workload and their checks
    bound.py     the bound of a step: bytes, flops, communication, the times no engine can beat
    ops.py       the ops of a step, each an object with one interface: `op.time(table) -> OpTime`
    interp.py    log-space interpolation between measured shapes (the one place it is done)
    tables.py    kernel tables: your own profile, aiconfigurator-core's (aic.py), uncalibrated
    engines.py   per-engine rules: kernel tables, step overheads, CUDA-graph capture, overlaps
    step.py      a decode step, a prefill chunk, a mixed step as lists of ops per layer group,
                 summed in one place (`step_time`), and the estimate of a point
    search.py    the split search, the frontier, the best point, ranked by the estimate
    published.py published measurements against the bound
    commands.py  the engines' launch commands (both pools of a disaggregated pair too)
    disagg.py    prefill/decode disaggregation: the pools, the KV transfer, the pair, pool sizes

A deployment is `num_gpus` GPUs (`gpus_per_node` a node: one NVLink domain) split into
`num_gpus / (tp pp)` replicas of `pp` pipeline stages (spec.pipeline_stages: each stage its own
layers, the embedding on the first, the LM head on the last) of a `tp`-GPU group ("group") each:
    dp_attention False   attention and MLP tensor-parallel over the group (TP all-reduce, two a
                         layer); `ep` = tp spreads the routed experts over the group instead
    dp_attention True    every GPU of the group runs attention for its own sequences (attention
                         data parallelism, all heads); the MLP / experts are split over the
                         group: `ep` = tp is expert parallelism (all-to-all dispatch + combine
                         a MoE layer), `ep` = 1 shards them (all-gather + reduce-scatter a layer)
    ep, any divisor of tp   the routed experts over ep ranks, each expert sliced over moe_tp =
                         tp / ep (TensorRT-LLM's moe_tp_size x moe_ep_size): under TP attention the
                         layer's all-reduces combine them; under DP-attention with 1 < ep < tp the
                         MoE layers gather the group's tokens as with ep = 1
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
    pipeline (pp > 1)   B in m = min(pp, B) micro-batches; each stage's step at one micro-batch;
                        PP send 2 tokens h 2 / tp bytes a GPU a boundary (hidden + residual);
                        step = max(sum of stages + sends, m x slowest stage) (bound.pipeline_time);
                        TTFT = every stage's prefill + the sends; capacity of the tightest stage
The bound's times are lower bounds and its rates upper bounds, never calibrated to an engine;
the estimate (step.py) says what an engine will do, and names the kernel table it comes from.
"""

from __future__ import annotations

from .bound import (collective_wire, communication, communication_calls, decode_work, draft_step_work, link_Bps,
                    prefill_attention_pairs, prefill_work, with_mtp_draft)
from .inputs import (ACTIVATION_BYTES, MAX_SPEC_TOKENS, MAX_SPLIT_BATCH, Deployment, Workload, check_deployment,
                     check_workload, group_layout_error, split_label)
from .disagg import Disagg, Pool, disaggregate, kv_transfer, pool_sizes, search_disagg
from .published import MEASUREMENT_METRICS, accuracy, largest_batch_that_fits, published_checks
from .search import (Plan, Point, SplitSummary, batches_up_to, clear_caches, evaluate, pareto, search, splits)

__all__ = [
    "ACTIVATION_BYTES", "MAX_SPEC_TOKENS", "MAX_SPLIT_BATCH", "MEASUREMENT_METRICS", "Deployment", "Disagg", "Plan",
    "Point", "Pool", "SplitSummary", "Workload", "accuracy", "disaggregate", "kv_transfer", "pool_sizes",
    "search_disagg", "batches_up_to", "check_deployment", "check_workload", "clear_caches",
    "collective_wire", "communication", "communication_calls", "decode_work", "draft_step_work", "evaluate",
    "group_layout_error", "largest_batch_that_fits", "link_Bps", "pareto", "prefill_attention_pairs", "prefill_work",
    "published_checks", "search", "split_label", "splits", "with_mtp_draft",
]
