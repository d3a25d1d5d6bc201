"""Published serving figures against the plan's bound (data/serving_measurements.json), and the
largest batch a group holds (the Roofline page's batch axis).
"""
from __future__ import annotations

import copy
import functools
from dataclasses import replace

from ..errors import MLAError
from ..hardware import GPU
from ..spec import ModelSpec
from ..validate import MAX_GPUS, check_choice, check_int, check_real
from .inputs import Workload, split_label
from .search import search

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
                          tp=par["tp"], dp_attention=par["dp_attention"], ep=par["ep"], batch=m.get("batch"),
                          engine=None)  # the bound's best batch, not the estimate's
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



# --- the estimate against published serving figures ------------------------------------------------

# Goals of issue 18 ("Checked against the field's records"): the median |error| and the factor every
# case stays within.
ACCURACY_GOALS = {"median_abs_error_pct": 15.0, "within_factor": 2.0}
SERVING_METRICS = ("output_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "tpot_s", "ttft_s")


def estimate_engine(engine: str) -> str:
    """The estimate's engine rules (engines.ENGINES) for a row's `engine` text: TensorRT-LLM
    (MLPerf's NVIDIA harness included) 'trtllm', SGLang 'sglang', else 'vllm' (vLLM itself, and
    engines the estimate has no rules for: DeepSeek's own system)."""
    t = engine.lower()
    if "tensorrt" in t or "trt-llm" in t or "trtllm" in t:
        return "trtllm"
    if "sglang" in t:
        return "sglang"
    return "vllm"


def pool_prefill_rate(model: ModelSpec, dep, wl: Workload, engine: str, *, kernel_tables: str = "auto") -> dict:
    """Estimated input tokens/s per GPU of a deployment that only prefills (an offline prefill
    run, a prefill pool): every step a full chunk of the engine's `prefill_chunk` tokens on each
    attention GPU (`n` = chunk // new tokens prompts of `wl`, each P = wl.new_prefill_tokens new
    tokens after H cached; a longer prompt in chunks, `step.prefill_chunks`), its ops from
    `step.forward_ops` (under DP-attention every GPU prefills its own chunk, so the experts and the
    MLP see the group's tp chunks: `group_prefill_tokens`), launched eagerly and summed by
    `step.step_time`, + the engine's step overhead. The n prompts of a step are one chunk of
    n P tokens after n H cached (the kv_b up-projection of all their tokens), its attention ops
    scaled to the prompts' own pairs, n (P H + P (P + 1) / 2) over the chunk's (one
    variable-length kernel over the prompts, its work in proportion to the pairs). Counts every
    input token, cached ones included (as the bound's `input_tokens_per_s_per_gpu`). Returns
    {'input_tokens_per_s_per_gpu', 'prompts_per_step', 'step_s', 'source', 'confidence'}."""
    from .engines import engine_rules
    from .search import estimator
    from .step import confidence, forward_ops, prefill_chunks, step_time
    from .tables import bind

    rules = engine_rules(engine)
    group = replace(dep, num_gpus=dep.tp)
    tables = bind(estimator(dep.gpu, engine, kernel_tables).tables, dep.gpu, group)
    dp = group.dp_attention and group.tp > 1
    chunk = rules.prefill_chunk(dep.gpu.memory_GB)
    p, h = wl.new_prefill_tokens, wl.input_len - wl.new_prefill_tokens

    def step(tokens: int, prefix: int, own_pairs: float | None) -> tuple[float, list]:
        ops = forward_ops(model, group, wl, prefill_tokens=tokens, prefix=prefix, graph=False,
                          group_prefill_tokens=tokens * group.tp if dp else None)
        times = [op.time(tables) for op in ops]
        if own_pairs is not None:
            full = tokens * prefix + tokens * (tokens + 1) / 2
            times = [replace(t, per_call_s=t.per_call_s * own_pairs / full, time_s=t.time_s * own_pairs / full)
                     if t.op_class == "attention_prefill" else t for t in times]
        return step_time(times, rules, captured=False, overlap_tokens=0)[0] + rules.step_overhead_s, times

    if p <= chunk:
        n = max(1, chunk // p)
        t, times = step(n * p, n * h, n * (p * h + p * (p + 1) / 2) if n > 1 else None)
        rate = n * wl.input_len / t
        steps = [times]
    else:
        n, t, steps = 1, 0.0, []
        for c, s in prefill_chunks(wl, chunk):
            dt, times = step(c, s, None)
            t += dt
            steps.append(times)
        rate = wl.input_len / t
    from .step import StepEstimate, describe_sources

    est = [StepEstimate("prefill", 0.0, 0.0, 0.0, 0.0, False, 0.0, 0, tuple(ts)) for ts in steps]
    return {"input_tokens_per_s_per_gpu": rate if dp else rate / group.tp, "prompts_per_step": n, "step_s": t,
            "source": describe_sources(*est), "confidence": confidence(est[0])}


def _dominant(source: str) -> str:
    """The table family that answers most of an estimate's time: 'aiconfigurator-core <system>/
    <backend>', 'own profile' or 'uncalibrated'."""
    first = source.split(" (")[0]
    if first.startswith("aiconfigurator-core"):
        parts = first.split()
        return f"aiconfigurator-core {parts[2].split('/')[0]}" if len(parts) > 2 else first
    return "own profile" if first.startswith("own profile") else first


def _estimate_case(m: dict, cross_check: bool) -> dict:
    """One published row against the estimate for its setting (see `estimate_accuracy`)."""
    from ..presets import load_gpu, load_model
    from .aic import aic_estimate
    from .inputs import Deployment

    metric = m["metric"]
    model, gpu = load_model(m["model"]), load_gpu(m["gpu"])
    par, w = m["parallelism"], m["workload"]
    wl = Workload(**w)
    eng = estimate_engine(m.get("engine", ""))
    measured = m["measured"] / m["measured_over_gpus"]
    decode_only = bool(m.get("decode_only"))
    dep = Deployment(gpu=gpu, num_gpus=par["num_gpus"], gpus_per_node=par["gpus_per_node"], tp=par["tp"],
                     dp_attention=par["dp_attention"], ep=par["ep"], weights_dtype=m.get("weights_dtype"),
                     kv_dtype=m.get("kv_dtype", "auto"))
    split = split_label(par["tp"], par["dp_attention"], par["ep"], par["num_gpus"] // par["tp"])
    prompts = 1
    if metric == "input_tokens_per_s_per_gpu":
        from .bound import with_mtp_draft

        mm, _ = with_mtp_draft(model, wl)
        pool = pool_prefill_rate(mm, dep, wl, eng)
        est, source, conf = pool["input_tokens_per_s_per_gpu"], pool["source"], pool["confidence"]
        prompts, batch = pool["prompts_per_step"], None
        counts = f"prefill steps of {prompts:,} prompt{'s' if prompts != 1 else ''} on each attention GPU"
        batch_rep = prompts
    else:
        plan = search(model, gpu, num_gpus=par["num_gpus"], gpus_per_node=par["gpus_per_node"], workload=wl,
                      weights_dtype=m.get("weights_dtype"), kv_dtype=m.get("kv_dtype", "auto"), tp=par["tp"],
                      dp_attention=par["dp_attention"], ep=par["ep"], batch=m.get("batch"), engine=eng)
        best = plan.best
        if best is None or best.estimate is None:
            raise MLAError(f"data/serving_measurements.json: {m['id']} has no estimate ({'; '.join(plan.notes)})")
        e = best.estimate
        batch, batch_rep = best.batch, best.batch_per_replica
        source, conf = e.source, e.confidence
        if metric == "tpot_s":
            est, counts = e.tpot_s, f"a decode step at batch {batch:,} / the tokens it emits"
        elif metric == "ttft_s":
            est, counts = e.ttft_s, "one request's prefill, no queueing"
        elif decode_only:
            est, counts = e.tokens_per_s_per_gpu, f"decode steps only at batch {batch:,} (a decode pool)"
        else:
            est = e.output_tokens_per_s_per_gpu
            counts = f"whole requests at batch {batch:,} (prefilled, then decoded)"
    aic = None
    if cross_check:
        a = aic_estimate(model, dep, wl, batch_rep if metric != "input_tokens_per_s_per_gpu" else 1, eng,
                         weights_dtype=m.get("weights_dtype"), prefill_prompts=prompts)
        if a["available"]:
            key = ("tokens_per_s_per_gpu" if decode_only and metric == "output_tokens_per_s_per_gpu" else metric)
            v = a[key]
            aic = {"available": True, "estimate": v, "error_pct": (v - measured) / measured * 100,
                   "system": a["system"], "backend": a["backend"], "version": a["version"]}
        else:
            aic = {"available": False, "reason": a["reason"]}
    err = (est - measured) / measured * 100
    ratio = est / measured
    return {
        "id": m["id"], "title": m.get("title", m["id"]), "source": m.get("source", ""), "engine": m.get("engine", ""),
        "estimate_engine": eng, "model": model.name, "gpu": gpu.id, "split": split, "workload": w, "metric": metric,
        "batch": batch, "counts": counts, "measured": measured, "estimate": est, "error_pct": err,
        "abs_error_pct": abs(err), "ratio": ratio, "within_factor": max(ratio, 1 / ratio) <= ACCURACY_GOALS["within_factor"],
        "estimate_source": source, "table": _dominant(source), "confidence": conf, "aic": aic,
        "assumptions": m.get("assumptions", ""),
    }


def _summary(cases: list[dict]) -> dict:
    """Median and worst |error| of `cases`, and how many stay within the goal's factor."""
    import statistics

    errs = [c["abs_error_pct"] for c in cases]
    if not errs:
        return {"cases": 0, "median_abs_error_pct": None, "worst": None, "within_factor": 0}
    worst = max(cases, key=lambda c: c["abs_error_pct"])
    return {"cases": len(cases), "median_abs_error_pct": statistics.median(errs),
            "mean_abs_error_pct": statistics.fmean(errs),
            "worst": {"id": worst["id"], "error_pct": worst["error_pct"]},
            "within_factor": sum(c["within_factor"] for c in cases),
            "within_25_pct": sum(e <= 25 for e in errs)}


@functools.lru_cache(maxsize=2)
def _estimate_accuracy(cross_check: bool) -> dict:
    from ..presets import _load

    cases, skipped = [], []
    for m in _load("serving_measurements.json").get("measurements", []):
        try:
            metric = check_choice("metric", m["metric"], MEASUREMENT_METRICS)
        except KeyError as e:
            raise MLAError(f"data/serving_measurements.json: a malformed row ({e})") from None
        if metric not in SERVING_METRICS:
            skipped.append({"id": m["id"], "metric": metric,
                            "reason": "a kernel figure, not a serving step: the estimate composes steps"})
            continue
        try:
            cases.append(_estimate_case(m, cross_check))
        except (KeyError, TypeError) as e:
            raise MLAError(f"data/serving_measurements.json: a malformed row ({e})") from None
    overall = _summary(cases)
    groups = {}
    for name, key in (("by_table", "table"), ("by_engine", "estimate_engine"), ("by_metric", "metric")):
        values = sorted({c[key] for c in cases})
        groups[name] = {v: _summary([c for c in cases if c[key] == v]) for v in values}
    with_aic = [c for c in cases if c["aic"] and c["aic"]["available"]]
    aic_cases = [{**c, "error_pct": c["aic"]["error_pct"], "abs_error_pct": abs(c["aic"]["error_pct"]),
                  "within_factor": max(c["aic"]["estimate"] / c["measured"], c["measured"] / c["aic"]["estimate"])
                  <= ACCURACY_GOALS["within_factor"]} for c in with_aic]
    goals = ACCURACY_GOALS
    med = overall["median_abs_error_pct"]
    return {
        "cases": cases, "skipped": skipped, "summary": overall, **groups,
        "aic": {"cases": len(with_aic), "aic": _summary(aic_cases), "ours": _summary(with_aic)},
        "goals": dict(goals),
        "meets": {"median_abs_error_pct": med is not None and med <= goals["median_abs_error_pct"],
                  "within_factor": bool(cases) and overall["within_factor"] == len(cases)},
        "fitted_constants": [],
        "notes": ["no constant is fitted to published serving figures: every op time comes from a kernel table "
                  "or the uncalibrated model's written-down floors and efficiencies, every engine figure from "
                  "engines.RULES with its source (none to split into fitted and held-out halves)"],
    }


def estimate_accuracy(*, cross_check: bool = True) -> dict:
    """Every serving figure of data/serving_measurements.json against the estimate for its setting
    (docs/model.md, "Estimated step time"), beside aiconfigurator-core's own estimate.

    Per case (`cases`): `measured` and `estimate` in the metric's unit (tokens/s per GPU, or s),
    `error_pct` = (estimate - measured) / measured x 100, `ratio` estimate / measured,
    `within_factor` (within ACCURACY_GOALS' factor either way), `estimate_source` and `table`
    (the table family answering most of the time), `confidence`, `estimate_engine` (the row's
    engine where the estimate has its rules, else vLLM: `estimate_engine`), `batch` the batch the
    estimate is taken at and `counts` what it counts:
        output_tokens_per_s_per_gpu  the plan's `estimate.output_tokens_per_s_per_gpu` (whole
                                     requests) at the published batch, or, offline, at the batch
                                     the plan picks; a row marked `decode_only` (a decode pool
                                     of a prefill/decode-disaggregated deployment) its decode
                                     steps' `tokens_per_s_per_gpu`
        input_tokens_per_s_per_gpu   `pool_prefill_rate` (full prefill steps)
        tpot_s / ttft_s              the plan's estimate at the published batch
    `aic`: aiconfigurator-core's estimate of the same figure (serving.aic.aic_estimate) with its
    error, or `available` False and the reason. Kernel rows are `skipped`. `summary`, `by_table`,
    `by_engine`, `by_metric`: the median and worst |error| and the count within the factor; `aic`
    the same for aiconfigurator-core and for ours over the cases it covers; `goals` and `meets`.
    Cached: computed once per process (the kernel tables load once). Raises MLAError when the file
    is missing, a row is malformed or a setting has no estimate."""
    return copy.deepcopy(_estimate_accuracy(bool(cross_check)))
