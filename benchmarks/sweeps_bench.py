"""3. The sweeps behind the charts, against a plain per-point Python loop over the same core calls.

- capacity: whole concurrent requests for every GPU preset x every variant (MHA, GQA, MQA, MLA
  latent, MLA expanded) x 256 contexts (`sweeps.concurrent_requests_vs_context`), against
  `capacity.capacity(...)` point by point;
- roofline: the decode step for batch 1..1024 (`sweeps.decode_step_vs_batch`), against
  `roofline.roofline(...)` point by point.
Goal: each sweep under 50 ms. The two paths must give the same numbers (checked here too).
"""
from __future__ import annotations

import argparse
import timeit

from common import dump, median, result

from mla_core.capacity import capacity
from mla_core.kv import variant_specs
from mla_core.presets import gpu_ids, load_gpu, load_model
from mla_core.roofline import roofline
from mla_core.sweeps import (concurrent_requests_vs_context, decode_step_vs_batch, kv_budget_bytes_per_gpu,
                             log_contexts)


def capacity_sweep(model, gpus, contexts):
    out = {}
    for g in gpus:
        for label, spec, layout, dtype in variant_specs(model, "bf16"):
            budget = kv_budget_bytes_per_gpu(spec, g.memory_bytes, tp=8, num_gpus=8)
            out[(g.id, label)] = concurrent_requests_vs_context(spec, contexts, budget, replicas=1, kv_dtype=dtype,
                                                                cache_layout=layout, tp=8)
    return out


def capacity_loop(model, gpus, contexts):
    out = {}
    for g in gpus:
        for label, spec, layout, dtype in variant_specs(model, "bf16"):
            out[(g.id, label)] = [capacity(spec, context=int(t), gpu=g, num_gpus=8, tp=8, kv_dtype=dtype,
                                           cache_layout=layout)["max_concurrent_requests"] for t in contexts]
    return out


def run(points: int = 256, max_batch: int = 1024, repeat: int = 5) -> list[dict]:
    model = load_model("deepseek-v3")
    gpus = [load_gpu(g) for g in gpu_ids()]
    contexts = log_contexts(1024, 1 << 20, points)
    batches = list(range(1, max_batch + 1))
    gpu = load_gpu("h200")

    a, b = capacity_sweep(model, gpus, contexts), capacity_loop(model, gpus, contexts)
    assert all([int(x) for x in a[k]] == b[k] for k in a), "sweep and loop disagree (capacity)"
    s = decode_step_vs_batch(model, gpu, batches[:64], context=32768, tp=8)
    assert all(abs(s["step_time_s"][i] - roofline(model, gpu, context=32768, batch=bb, tp=8)["step_time_s"])
               <= 1e-12 * s["step_time_s"][i] for i, bb in enumerate(batches[:64])), "sweep and loop disagree (roofline)"

    t_cap = median(timeit.repeat(lambda: capacity_sweep(model, gpus, contexts), number=1, repeat=repeat))
    t_cap_loop = median(timeit.repeat(lambda: capacity_loop(model, gpus, contexts), number=1, repeat=max(1, repeat // 2)))
    t_roof = median(timeit.repeat(lambda: decode_step_vs_batch(model, gpu, batches, context=32768, tp=8), number=1,
                                  repeat=repeat))
    t_roof_loop = median(timeit.repeat(lambda: [roofline(model, gpu, context=32768, batch=bb, tp=8) for bb in batches],
                                       number=1, repeat=max(1, repeat // 2)))
    n_cap = len(gpus) * len(a) // len(gpus) * len(contexts)
    return [
        result("capacity_sweep_ms", t_cap * 1e3, "ms", goal="< 50", met=t_cap < 0.05,
               points=n_cap, loop_ms=round(t_cap_loop * 1e3, 1), speedup_vs_loop=round(t_cap_loop / t_cap, 1)),
        result("roofline_batch_sweep_ms", t_roof * 1e3, "ms", goal="< 50", met=t_roof < 0.05,
               points=len(batches), loop_ms=round(t_roof_loop * 1e3, 1), speedup_vs_loop=round(t_roof_loop / t_roof, 1)),
    ]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=256)
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    dump(run(a.points, a.max_batch, a.repeat), a.out)
