"""Prefill/decode disaggregation (docs/model.md, "Deployments: pipeline stages, MoE split,
disaggregation"): a prefill pool of `prefill_gpus` and a decode pool of `decode_gpus`, each with
its own split; a request's cache moves once from the first to the second.

    prefill pool    its split's TTFT for one request (its chunks, no queueing) and the requests a
                    second it prefills: the bound's (many requests share each weight read:
                    search._stage_prefill) and the estimate's, a full chunk step of
                    max_num_batched_tokens // new tokens requests on every attention rank
                    (step.estimate_pipeline with prefill_seqs), one step every interval_s
    KV transfer     the request's cache on each GPU that holds it, input_len tokens of every layer
                    (kv.kv_cache_bytes, in whole blocks) + its state (kv.state_bytes_per_sequence),
                    the larger of the two pools' per-GPU figures over one GPU's link: NVLink when
                    both pools sit in one NVLink domain (prefill + decode GPUs <= gpus_per_node),
                    else the network (`internode_gbps` per GPU), or the measured bus bandwidth;
                    the pools' links together carry min(P, D) x link B/s, which caps the rate
    decode pool     search.search on its GPUs for the TPOT SLO alone (it runs no prefill): its
                    best point's TPOT and decode tokens/s; the first output token comes from the
                    prefill pool (TensorRT-LLM's and SGLang's context servers return it), so a
                    request takes output_len - 1 decode tokens
    the pair        TTFT = prefill TTFT + KV transfer; TPOT = the decode pool's; requests a second =
                    min(prefill pool, decode pool, transfer); output tokens/s = that x output_len,
                    per GPU over P + D
A search over pool sizes for a workload (DistServe, Mooncake) tries each split of `num_gpus` into
two pools that can each hold the model and a request, and keeps the pair with the most output
tokens/s per GPU meeting the SLOs. Every figure is the estimate's where there is one (the engine's
rules and kernel tables), with the bound's beside it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from ..errors import MLAError
from ..hardware import GPU
from ..spec import ModelSpec
from ..validate import MAX_GPUS, check_int
from .inputs import Deployment, Workload, check_deployment, check_workload, default_gpus_per_node

MAX_POOL_SIZES = 24  # pool splits a search tries at most (evenly spaced over the candidates)


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated pair. `role` 'prefill' or 'decode'; `point` the pool's
    search.Point (the decode pool's best point; for the prefill pool, its split at the requests a
    prefill step holds); `requests_per_s` what the pool serves (the estimate's, else the bound's),
    `requests_per_s_bound` the bound's; `ttft_s` / `ttft_bound_s` one request's prefill (prefill
    pool); `prefill_batch` requests a prefill step holds on one attention rank."""

    role: str
    num_gpus: int
    split: str
    tp: int
    dp_attention: bool
    ep: int
    pp: int
    moe_tp: int
    replicas: int
    point: object
    requests_per_s: float
    requests_per_s_bound: float
    ttft_s: float = 0.0
    ttft_bound_s: float = 0.0
    prefill_batch: int = 0

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "point"}
        d["point"] = self.point.to_dict() if self.point is not None else None
        return d


@dataclass(frozen=True)
class Disagg:
    """A disaggregated pair (module docstring). Times in s, rates a second. `kv_transfer_bytes` one
    request's cache as the model holds it once (all layers, its state), `kv_transfer_bytes_per_gpu`
    the most one GPU of either pool sends or receives, `kv_transfer_s` that over `link_Bps`
    (`link`: 'NVLink', 'network' or 'measured'); `limit` which of 'prefill', 'decode', 'transfer'
    sets the rate; `bound` the same figures from the bound; `source` what the figures come from;
    `commands` both pools' launch commands and what joins them (commands.disagg_commands);
    `searched` the pool sizes a search tried (prefill_gpus, decode_gpus, output tokens/s per GPU,
    meets the SLOs)."""

    prefill_gpus: int
    decode_gpus: int
    prefill: Pool
    decode: Pool
    kv_transfer_bytes: int
    kv_transfer_bytes_per_gpu: int
    kv_transfer_s: float
    link: str
    link_Bps: float
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_user: float
    request_rate: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    limit: str
    meets_slo: bool | None
    bound: dict
    source: str
    commands: dict
    notes: tuple[str, ...] = ()
    searched: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("prefill", "decode")}
        d["prefill"] = self.prefill.to_dict()
        d["decode"] = self.decode.to_dict()
        d["prefill_split"] = self.prefill.split
        d["decode_split"] = self.decode.split
        d["notes"] = list(self.notes)
        d["searched"] = [dict(s) for s in self.searched]
        return d


# --- the KV transfer ------------------------------------------------------------------------------

def _side_bytes(model: ModelSpec, dep: Deployment, wl: Workload) -> tuple[int, int]:
    """(bytes of one request's cache on the busiest GPU of `dep`'s replica, GPUs holding it): its
    input_len tokens of each stage's layers in whole blocks, plus its state."""
    from ..capacity import default_block_size
    from ..kv import kv_cache_bytes, state_bytes_per_sequence
    from .bound import stages

    dp = dep.dp_attention and dep.tp > 1
    block = dep.block_size or default_block_size(model)
    per = max(kv_cache_bytes(st, wl.input_len, 1, dep.kv_dtype, block_size=block, tp=dep.tp, dp_attention=dp)
              + state_bytes_per_sequence(st, dep.state_dtype, tp=dep.tp, dp_attention=dp,
                                         ssm_state_dtype=dep.ssm_state_dtype)
              for st, _ in stages(model, dep))
    return per, (1 if dp else dep.tp) * dep.pp


def kv_transfer(model: ModelSpec, prefill: Deployment, decode: Deployment, wl: Workload) -> dict:
    """One request's KV transfer from the prefill pool to the decode pool (module docstring):
    `bytes` the cache as the model holds it once (kv_cache_bytes at tp 1 + state), `bytes_per_gpu`
    the larger per-GPU figure of the two pools, `time_s` that over `link_Bps` (`link`), and
    `requests_per_s` what min(P, D) links carry of the larger pool-side total a request (None
    when a request holds no cache)."""
    from ..kv import kv_cache_bytes, state_bytes_per_sequence

    whole = (kv_cache_bytes(model, wl.input_len, 1, decode.kv_dtype)
             + state_bytes_per_sequence(model, decode.state_dtype, ssm_state_dtype=decode.ssm_state_dtype))
    p_gpu, p_n = _side_bytes(model, prefill, wl)
    d_gpu, d_n = _side_bytes(model, decode, wl)
    if decode.link_bandwidth_Bps is not None:
        link, bw = "measured", decode.link_bandwidth_Bps
    elif prefill.num_gpus + decode.num_gpus <= decode.gpus_per_node and decode.gpu.link_GBps is not None:
        link, bw = "NVLink", decode.gpu.link_Bps
    else:
        link, bw = "network", decode.internode_gbps * 1e9 / 8
    per_gpu = max(p_gpu, d_gpu)
    wire = max(p_gpu * p_n, d_gpu * d_n)
    return {"bytes": int(whole), "bytes_per_gpu": int(per_gpu), "time_s": per_gpu / bw, "link": link,
            "link_Bps": bw, "requests_per_s": min(prefill.num_gpus, decode.num_gpus) * bw / wire if wire else None}


# --- the pools ------------------------------------------------------------------------------------

def _prefill_candidate(model, dep: Deployment, wl: Workload, est) -> dict | None:
    """The prefill pool at one split: None when it cannot hold the model and one prompt."""
    from .search import _prepare_group_cached

    wl_p = Workload(wl.input_len, 1, wl.prefix_hit)
    group = replace(dep, num_gpus=dep.group_gpus)
    sp = _prepare_group_cached(model, group, wl_p, est)
    if sp.max_batch_per_replica < 1:
        return None
    dp = dep.dp_attention and dep.tp > 1
    ranks = dep.tp if dp else 1
    bound_rate = sp.input_tokens_per_s_per_gpu * dep.num_gpus / wl.input_len
    out = {"dep": dep, "sp": sp, "wl": wl_p, "ttft_bound_s": sp.ttft_s, "rate_bound": bound_rate,
           "ttft_s": sp.ttft_s, "rate": bound_rate, "batch": 1}
    if est is None:
        return out
    from .engines import engine_rules
    from .step import estimate_pipeline
    from .tables import bind

    from .step import prefill_chunks

    rules = engine_rules(est.engine)
    tables = bind(est.tables, group.gpu, group)
    new = wl.new_prefill_tokens
    chunk = rules.prefill_chunk(dep.gpu.memory_GB)
    ttft = math.fsum(s.time_s for s in sp.prefill_estimate)
    if new <= chunk:  # a full chunk of whole prompts on every attention rank
        n = max(1, min(chunk // new, sp.max_batch_per_replica // ranks))
        step = estimate_pipeline(model, group, wl_p, tables, rules, prefill_tokens=new, prefix=wl.input_len - new,
                                 prefill_seqs=n, prefill_ranks=ranks)
        rate_rep = n * ranks / step.interval_s
    else:  # a prompt's chunks one after another, every attention rank on its own prompt
        n = 1
        rate_rep = ranks / math.fsum(
            estimate_pipeline(model, group, wl_p, tables, rules, prefill_tokens=t, prefix=c, prefill_ranks=ranks).interval_s
            for t, c in prefill_chunks(wl_p, chunk))
    out.update(ttft_s=ttft, rate=rate_rep * dep.replicas, batch=n)
    return out


def _prefill_pool(model, base: Deployment, wl: Workload, est, split, decode: Deployment, ttft_max):
    from .search import splits

    if split is not None:
        candidates = [split]
    else:
        candidates = splits(model, base.num_gpus, base.gpus_per_node)
        if base.gpu.link_GBps is None and base.link_bandwidth_Bps is None:
            candidates = [s for s in candidates if s[0] == 1]
    best, key_best = None, None
    for t, dp, e, pp in candidates:
        dep = check_deployment(model, replace(base, tp=t, dp_attention=dp, ep=e, pp=pp))
        c = _prefill_candidate(model, dep, wl, est)
        if c is None:
            continue
        c["transfer"] = kv_transfer(model, dep, decode, wl)
        meets = ttft_max is None or c["ttft_s"] + c["transfer"]["time_s"] <= ttft_max
        key = (meets, c["rate"] / dep.num_gpus, -c["ttft_s"])
        if key_best is None or key > key_best:
            best, key_best = c, key
    return best


def _pool(role: str, dep: Deployment, point, rate: float, rate_bound: float, **kw) -> Pool:
    return Pool(role, dep.num_gpus, dep.split, dep.tp, bool(dep.dp_attention and dep.tp > 1), dep.ep, dep.pp,
                dep.moe_tp, dep.replicas, point, rate, rate_bound, **kw)


def _split_of(split) -> tuple | None:
    """(tp, dp_attention, ep, pp) from a dict of the given fields (None: search)."""
    if not split:
        return None
    tp = split.get("tp")
    if tp is None:
        raise MLAError("a pool's split needs its tp (--prefill-tp / --decode-tp)")
    return (tp, bool(split.get("dp_attention", False)), split.get("ep") or 1, split.get("pp") or 1)


def disaggregate(model: ModelSpec, gpu: GPU, *, prefill_gpus: int, decode_gpus: int, workload: Workload,
                 gpus_per_node: int | None = None, ttft_ms: float | None = None, tpot_ms: float | None = None,
                 prefill_split: dict | None = None, decode_split: dict | None = None, engine: str | None = "vllm",
                 kernel_tables: str = "auto", profile=None, model_path: str | None = None, **deployment) -> Disagg:
    """The pair of a prefill pool of `prefill_gpus` and a decode pool of `decode_gpus` serving
    `workload` (module docstring). `prefill_split` / `decode_split` fix a pool's split (a dict of
    tp, dp_attention, ep, pp), else each is searched: the decode pool's by search.search for
    `tpot_ms`, the prefill pool's for the most requests a second per GPU whose TTFT plus the
    transfer meets `ttft_ms`. `deployment` holds Deployment's other fields (weights_dtype,
    kv_dtype, gpu_memory_utilization, internode_gbps, link_bandwidth_Bps, block_size, ...).
    Raises MLAError on bad input, or when a pool cannot hold the model and one request."""
    from .search import _slo, estimator, search

    check_int("prefill_gpus", prefill_gpus, maximum=MAX_GPUS)
    check_int("decode_gpus", decode_gpus, maximum=MAX_GPUS)
    check_workload(workload)
    ttft_max, tpot_max = _slo(ttft_ms, tpot_ms)
    if gpus_per_node is None:
        gpus_per_node = default_gpus_per_node(gpu)
    from .bound import with_mtp_draft

    est = estimator(gpu, engine, kernel_tables, profile) if engine is not None else None
    fixed = _split_of(decode_split)
    dkw = dict(tp=fixed[0], dp_attention=fixed[1], ep=fixed[2], pp=fixed[3]) if fixed else {}
    def decode_search(tpot):
        return search(model, gpu, num_gpus=decode_gpus, workload=workload, gpus_per_node=gpus_per_node, tpot_ms=tpot,
                      engine=engine, kernel_tables=kernel_tables, profile=profile, model_path=model_path,
                      **dkw, **deployment)

    plan = decode_search(tpot_ms)
    missed = plan.best is None and tpot_ms is not None
    if missed:  # no point meets the TPOT SLO: the pool's best without it, the pair then misses the SLOs
        plan = decode_search(None)
    d = plan.best
    if d is None or not d.fits:
        raise MLAError(f"the decode pool of {decode_gpus} GPUs: " + ("; ".join(n for n in plan.notes if "split" in n)
                                                                      or "no split holds the model and one request"))
    model, _ = with_mtp_draft(model, workload)
    base = Deployment(gpu=gpu, num_gpus=decode_gpus, gpus_per_node=gpus_per_node, **deployment)
    decode_dep = replace(base, tp=d.tp, dp_attention=d.dp_attention, ep=d.ep, pp=d.pp)
    pre = _prefill_pool(model, replace(base, num_gpus=prefill_gpus), workload, est, _split_of(prefill_split),
                        decode_dep, ttft_max)
    if pre is None:
        raise MLAError(f"the prefill pool of {prefill_gpus} GPUs: no split holds the model and one "
                       f"{workload.input_len:,}-token prompt")
    from .search import _point

    pdep = pre["dep"]
    group = replace(pdep, num_gpus=pdep.group_gpus)
    ranks = pdep.tp if (pdep.dp_attention and pdep.tp > 1) else 1
    pbatch = min(pre["sp"].max_batch_per_replica, pre["batch"] * ranks) * pdep.replicas
    ppoint = _point(model, pre["sp"], pre["wl"], pbatch, None, group=group, est=est)
    xfer = pre["transfer"]
    out_dec = max(1, workload.output_len - 1)
    e = d.estimate
    dec_rate = (e.tokens_per_s_per_gpu if e else d.tokens_per_s_per_gpu) * decode_gpus / out_dec
    dec_rate_b = d.tokens_per_s_per_gpu * decode_gpus / out_dec
    rates = {"prefill": pre["rate"], "decode": dec_rate}
    if xfer["requests_per_s"] is not None:
        rates["transfer"] = xfer["requests_per_s"]
    limit = min(rates, key=rates.get)
    rate = rates[limit]
    ttft = pre["ttft_s"] + xfer["time_s"]
    tpot = e.tpot_s if e else d.tpot_s
    n = prefill_gpus + decode_gpus
    meets = None
    if ttft_max is not None or tpot_max is not None:
        meets = (ttft_max is None or ttft <= ttft_max) and (tpot_max is None or tpot <= tpot_max)
    rate_b = min(pre["rate_bound"], dec_rate_b, xfer["requests_per_s"] or math.inf)
    bound = {"ttft_s": pre["ttft_bound_s"] + xfer["time_s"], "tpot_s": d.tpot_s, "request_rate": rate_b,
             "output_tokens_per_s_per_gpu": rate_b * workload.output_len / n,
             "prefill_requests_per_s": pre["rate_bound"], "decode_requests_per_s": dec_rate_b}
    from .commands import disagg_commands

    commands = disagg_commands(model, pdep, ppoint, decode_dep, d, workload, model_path=model_path)
    notes = ([f"no point of the decode pool meets TPOT <= {tpot_ms:g} ms: its best without the SLO"] if missed else [])
    notes += [f"TTFT: one request's prefill on the prefill pool (no queueing) + its KV transfer over {xfer['link']}",
             f"the decode pool makes output_len - 1 = {out_dec:,} tokens a request; the prefill pool returns the first"]
    notes += list(commands["prefill"]["notes"]) + [f"decode pool: {x}" for x in commands["decode"]["notes"]]
    notes += list(commands["notes"])
    source = (f"estimate ({engine}: {e.source})" if e else "bound")
    return Disagg(
        prefill_gpus, decode_gpus,
        _pool("prefill", pdep, ppoint, pre["rate"], pre["rate_bound"], ttft_s=pre["ttft_s"],
              ttft_bound_s=pre["ttft_bound_s"], prefill_batch=pre["batch"]),
        _pool("decode", decode_dep, d, dec_rate, dec_rate_b),
        xfer["bytes"], xfer["bytes_per_gpu"], xfer["time_s"], xfer["link"], xfer["link_Bps"], ttft, tpot, 1.0 / tpot,
        rate, rate * workload.output_len, rate * workload.output_len / n, limit, meets, bound, source,
        {k: v for k, v in commands.items() if k != "notes"}
        | {"prefill": _cmds(commands["prefill"]), "decode": _cmds(commands["decode"])},
        tuple(dict.fromkeys(notes)))


def _cmds(launch: dict) -> dict:
    return {k: launch[k] for k in ("vllm_command", "sglang_command", "trtllm_command")}


def pool_sizes(model: ModelSpec, gpu: GPU, num_gpus: int, workload: Workload, gpus_per_node: int, **deployment
               ) -> list[int]:
    """Prefill pool sizes a search tries on `num_gpus`: each P whose pool and the other's (num_gpus
    - P) can each hold the model and a request on some split (multiples of the smallest such
    pool), at most MAX_POOL_SIZES of them evenly spaced."""
    from .bound import _group_capacity
    from .search import splits

    def fits(n: int) -> bool:
        for t, dp, e, pp in splits(model, n, gpus_per_node):
            dep = Deployment(gpu=gpu, num_gpus=n, gpus_per_node=gpus_per_node, tp=t, dp_attention=dp, ep=e, pp=pp,
                             **deployment)
            cap = _group_capacity(model, dep, workload.mean_context)
            if cap["weights_fit"] and cap["max_tokens_per_gpu"] >= workload.max_context:
                return True
        return False

    smallest = next((n for n in range(1, num_gpus) if fits(n)), None)
    if smallest is None:
        return []
    sizes = [p for p in range(smallest, num_gpus - smallest + 1, smallest) if fits(num_gpus - p)]
    if len(sizes) > MAX_POOL_SIZES:
        step = len(sizes) / MAX_POOL_SIZES
        sizes = sorted({sizes[int(i * step)] for i in range(MAX_POOL_SIZES)})
    return sizes


def search_disagg(model: ModelSpec, gpu: GPU, *, num_gpus: int, workload: Workload, gpus_per_node: int | None = None,
                  **kw) -> Disagg:
    """The pool sizes of `num_gpus` GPUs that serve `workload` best (module docstring): each
    `pool_sizes` split tried with `disaggregate` (the same keywords), the pair with the most
    output tokens/s per GPU meeting the SLOs kept (the most output tokens/s per GPU when none
    meets them, with `meets_slo` False). Raises MLAError when no split into two pools holds the
    model twice."""
    check_int("num_gpus", num_gpus, minimum=2, maximum=MAX_GPUS)
    if gpus_per_node is None:
        gpus_per_node = default_gpus_per_node(gpu)
    dep_kw = {k: v for k, v in kw.items() if k in Deployment.__dataclass_fields__}
    sizes = pool_sizes(model, gpu, num_gpus, workload, gpus_per_node, **dep_kw)
    if not sizes:
        raise MLAError(f"{num_gpus} GPUs cannot be split into a prefill and a decode pool that each hold "
                       f"{model.name} and one request")
    tried, best, why = [], None, []
    for p in sizes:
        try:
            r = disaggregate(model, gpu, prefill_gpus=p, decode_gpus=num_gpus - p, workload=workload,
                             gpus_per_node=gpus_per_node, **kw)
        except MLAError as e:
            why.append(str(e))
            continue
        tried.append({"prefill_gpus": p, "decode_gpus": num_gpus - p, "prefill_split": r.prefill.split,
                      "decode_split": r.decode.split, "ttft_s": r.ttft_s, "tpot_s": r.tpot_s,
                      "output_tokens_per_s_per_gpu": r.output_tokens_per_s_per_gpu, "limit": r.limit,
                      "meets_slo": r.meets_slo})
        key = (r.meets_slo is not False, r.output_tokens_per_s_per_gpu)
        if best is None or key > (best.meets_slo is not False, best.output_tokens_per_s_per_gpu):
            best = r
    if best is None:
        raise MLAError(f"no split of {num_gpus} GPUs into a prefill and a decode pool could be planned"
                       + (f" ({why[0]})" if why else ""))
    sizes_text = ", ".join(f"{t['prefill_gpus']}P + {t['decode_gpus']}D" for t in tried)
    notes = best.notes + (f"pool sizes searched: {sizes_text}",) + (
        ("no pool split meets the SLOs",) if best.meets_slo is False else ())
    return replace(best, searched=tuple(tried), notes=notes)
