"""Published serving figures against the plan's bound (data/serving_measurements.json), and the
largest batch a group holds (the Roofline page's batch axis).
"""
from __future__ import annotations

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

