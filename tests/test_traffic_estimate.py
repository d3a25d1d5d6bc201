"""mla_core.traffic.EstimateStepTimes: the simulation's step times from the estimate
(docs/model.md, "Estimated step time"), checked against step.py's own composition of the same
steps, the bound it never beats, and the plan's estimate for a lone request."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mla_core import traffic as T
from mla_core.presets import load_gpu, load_model
from mla_core.serving import Deployment, Workload, evaluate
from mla_core.serving.engines import engine_rules
from mla_core.serving.search import estimator
from mla_core.serving.step import estimate_step
from mla_core.serving.tables import bind


@pytest.fixture(scope="module")
def r1():
    """DeepSeek-R1 on 8 H200 at TP8, 3,200 in / 800 out (dstack's published setting)."""
    model, gpu = load_model("deepseek-r1"), load_gpu("h200")
    dep = Deployment(gpu=gpu, num_gpus=8, tp=8)
    wl = Workload(3200, 800)
    st = T.EstimateStepTimes(model, dep, wl)
    tables = bind(estimator(gpu, "vllm").tables, gpu, dep)
    return model, dep, wl, st, tables


def _pairs(p, s):
    return p * s + p * (p + 1) // 2


def test_decode_steps_are_estimate_steps_on_the_table(r1):
    model, dep, wl, st, tables = r1
    rules = engine_rules("vllm")
    ctxs = [c for c in st._decode.ys if 1000 <= c <= 8000][:3]
    for d in (1, 4, 37, 64):
        for c in ctxs:
            want = estimate_step(model, dep, wl, tables, rules, decode_seqs=d, context=c).time_s
            assert st.step_s(d, d * c, 0, 0) == pytest.approx(want, rel=1e-12)
            # the vectorised path of a run of decode steps gives the same float
            assert st.step_s(d, np.array([d * c, d * 10.0]), 0, 0)[0] == st.step_s(d, d * c, 0, 0)


def test_mixed_steps_are_step_pys_mixed_step_on_the_table(r1):
    model, dep, wl, st, tables = r1
    rules = engine_rules("vllm")
    c = next(v for v in st._eager_decode.ys if v >= 3000)
    p = next(v for v in st._rest(1).ys if v >= 1000)
    s = next(v for v in st._prefill.ys if v >= 2000)
    for d in (0, 3, 40):
        for prefix in (0, s):
            want = estimate_step(model, dep, wl, tables, rules, decode_seqs=d, context=c, prefill_tokens=p,
                                 prefix=prefix)
            assert not want.captured and want.phase == ("mixed" if d else "prefill")
            got = st.step_s(d, d * c, p, _pairs(p, prefix))
            # R(d, p) + [E(d, T) - E(d, 1)] + [P(p, s) - P(p, 0)] + overhead: the three op sets add up
            assert got == pytest.approx(want.time_s, rel=1e-9)


def test_off_the_table_steps_stay_close(r1):
    model, dep, wl, st, tables = r1
    rules = engine_rules("vllm")
    for d, c, p, s in ((5, 1000, 512, 0), (3, 3600, 2048, 1024), (0, 0, 3200, 0), (100, 3500, 700, 2500)):
        want = estimate_step(model, dep, wl, tables, rules, decode_seqs=d, context=c, prefill_tokens=p,
                             prefix=s).time_s
        assert st.step_s(d, d * c, p, _pairs(p, s)) == pytest.approx(want, rel=0.02)
    for d, c in ((70, 3333), (300, 3900), (700, 3500)):
        want = estimate_step(model, dep, wl, tables, rules, decode_seqs=d, context=c).time_s
        assert st.step_s(d, d * c, 0, 0) == pytest.approx(want, rel=0.02)


def test_several_prompts_in_one_step_cost_less_attention_than_one(r1):
    _, _, _, st, _ = r1
    one = st.step_s(0, 0, 2048, _pairs(2048, 0))
    four = st.step_s(0, 0, 2048, 4 * _pairs(512, 0))
    assert four < one
    # only the prefill attention shrinks: the GEMMs of 2,048 rows stay
    assert four > st._rest(1).at(0, 2048) - st._prefill_attention.at(2048, 0)


@pytest.mark.parametrize("preset, gpu, tp, dp, ep", [
    ("deepseek-r1", "h200", 8, False, 1), ("deepseek-r1", "h200", 8, True, 8), ("llama-3.1-70b", "h100-sxm", 4, False, 1),
    ("gemma-2-9b", "h200", 1, False, 1), ("jamba-1.5-mini", "h200", 2, False, 1), ("qwen3-30b-a3b", "b200", 1, False, 1),
])
def test_never_below_the_bound(preset, gpu, tp, dp, ep):
    model, g = load_model(preset), load_gpu(gpu)
    dep = Deployment(gpu=g, num_gpus=tp, tp=tp, dp_attention=dp, ep=ep)
    wl = Workload(2048, 512)
    st = T.EstimateStepTimes(model, dep, wl)
    rng = np.random.default_rng(0)
    for _ in range(60):
        d = int(rng.integers(0, 600))
        p = int(rng.integers(0 if d else 1, 9000))
        ctx = d * float(rng.integers(1, 20000))
        pairs = float(rng.integers(max(p, 1), _pairs(p, 20000) + 2)) if p else 0
        assert st.step_s(d, ctx, p, pairs) >= st.bound.step_s(d, ctx, p, pairs)
    d, ctx = 50, np.linspace(50, 50 * 30000, 40)
    assert (st.step_s(d, ctx, 0, 0) >= st.bound.step_s(d, ctx, 0, 0)).all()


def test_lone_request_ttft_and_tpot_are_the_plans_estimate(r1):
    model, dep, wl, st, _ = r1
    kv = T.kv_cache_for(model, dep)
    cfg = T.TrafficConfig(input_len=3200, output_len=800, num_prompts=3, max_concurrency=1, max_num_seqs=1024,
                          max_num_batched_tokens=8192)
    r = T.simulate(st, kv, cfg)
    est = evaluate(model, dep, wl, 1).estimate
    # one request alone: its prefill is one step of 3,200 tokens (vLLM's 8,192 a step), the plan's TTFT
    assert r.ttft_s.mean == pytest.approx(est.ttft_s, rel=2e-3)
    # a closed loop of one: decode steps at batch 1 over contexts 3,200..4,000, the plan's at their mean
    assert r.tpot_s.mean == pytest.approx(est.tpot_s, rel=5e-3)
    assert r.step_times == st.source and st.source.startswith("vLLM estimate: aiconfigurator-core 0.12.0 h200_sxm/vllm")


@pytest.mark.parametrize("kw", [dict(max_concurrency=16, num_prompts=64), dict(rate=4.0, num_prompts=80,
                                                                              random_range_ratio=0.5)])
def test_runs_give_the_step_loops_figures(r1, kw):
    model, dep, _, st, _ = r1
    cfg = T.TrafficConfig(input_len=3200, output_len=800, max_num_seqs=1024, max_num_batched_tokens=8192, **kw)
    kv = T.kv_cache_for(model, dep)
    a, b = T.simulate(st, kv, cfg), T.simulate(st, kv, cfg, aggregate=False)
    for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert getattr(a, k).to_dict() == pytest.approx(getattr(b, k).to_dict(), rel=1e-9)
    assert a.engine_steps == b.engine_steps


def test_plan_traffic_defaults_to_the_estimate_and_falls_back_to_the_bound():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h200")
    dep = Deployment(gpu=gpu, num_gpus=1, tp=1)
    cfg = T.TrafficConfig(input_len=1024, output_len=256, num_prompts=40, max_concurrency=8, max_num_seqs=1024,
                          max_num_batched_tokens=8192)
    est = T.plan_traffic(model, dep, cfg)
    bound = T.plan_traffic(model, dep, cfg, engine=None)
    sglang = T.plan_traffic(model, dep, cfg, engine="sglang")
    assert est.step_times.startswith("vLLM estimate: ") and bound.step_times == "bound"
    assert sglang.step_times.startswith("SGLang estimate: ")
    assert est.tpot_s.mean > bound.tpot_s.mean and est.ttft_s.mean > bound.ttft_s.mean
    # vLLM's 250 us a step of overhead (engines.RULES) against SGLang's none: its TPOT is longer
    assert est.tpot_s.mean > sglang.tpot_s.mean
    st, note = T.estimate_or_bound(model, dep, cfg.workload(), engine="nope")
    assert isinstance(st, T.BoundStepTimes) and "engine must be one of" in note


def test_a_gpu_without_tables_is_uncalibrated():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("mi300x")
    st = T.EstimateStepTimes(model, Deployment(gpu=gpu, num_gpus=1, tp=1), Workload(512, 128))
    assert st.source == "vLLM estimate: uncalibrated (100%)" and st.confidence == "low"
    assert math.isfinite(st.step_s(8, 8 * 600, 0, 0))
