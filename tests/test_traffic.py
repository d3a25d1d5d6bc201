"""mla_core.traffic: the request-level simulation (docs/model.md, "Traffic: requests over time").

Hand-computable cases against the serving bound it runs on, the `vllm bench serve` conventions
it follows (sources in the comments), determinism, the step loop against the runs, and the
replay of the engine fixtures (tests/fixtures/engines)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from mla_core import traffic as T
from mla_core.errors import MLAError
from mla_core.presets import load_gpu, load_model
from mla_core.serving import Deployment, Workload, evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "engines")


@pytest.fixture(scope="module")
def r1():
    """DeepSeek-R1 on 8 H200 at TP8 (the issue's done-when setting), 1k in / 1k out."""
    model, gpu = load_model("deepseek-r1"), load_gpu("h200")
    dep = Deployment(gpu=gpu, num_gpus=8, tp=8)
    wl = Workload(1024, 1024)
    return model, dep, wl, T.BoundStepTimes(model, dep, wl), T.kv_cache_for(model, dep)


def _cfg(**kw):
    base = dict(input_len=1024, output_len=1024, num_prompts=64, max_num_seqs=1024, max_num_batched_tokens=8192)
    return T.TrafficConfig(**{**base, **kw})


def _same(a: T.TrafficResult, b: T.TrafficResult, rel=1e-9):
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("sim_wall_s")
    flat = lambda d: {f"{k}.{j}": w for k, v in d.items() for j, w in (v.items() if isinstance(v, dict) else [("", v)])}
    fa, fb = flat(da), flat(db)
    assert fa.keys() == fb.keys()
    for k in fa:
        if isinstance(fa[k], float) and isinstance(fb[k], float):
            assert fa[k] == pytest.approx(fb[k], rel=rel), k
        else:
            assert fa[k] == fb[k], k


# --- the step times against the bound ----------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 7, 32, 256])
def test_bound_step_times_decode_equals_the_plan_step(r1, batch):
    model, dep, wl, st, _ = r1
    point = evaluate(model, dep, wl, batch)
    got = st.step_s(batch, batch * wl.mean_context, 0, 0)
    # exact on the tabulated token counts (0..64); between them the weights are interpolated (concave in
    # the tokens: experts touched), a hair under the bound
    assert got == pytest.approx(point.step_time_s, rel=1e-12 if batch <= 64 else 1e-6)
    assert got <= point.step_time_s * (1 + 1e-12)
    # the array path gives the same float
    arr = st.step_s(batch, np.array([batch * wl.mean_context, batch * 100.0]), 0, 0)
    assert arr[0] == got


def test_bound_step_times_dp_attention_decode_equals_the_plan_step():
    model, gpu = load_model("deepseek-r1"), load_gpu("h200")
    dep = Deployment(gpu=gpu, num_gpus=8, tp=8, dp_attention=True, ep=8)
    wl = Workload(2048, 512)
    st = T.BoundStepTimes(model, dep, wl)
    for batch in (8, 64, 512):
        want = evaluate(model, dep, wl, batch).step_time_s
        got = st.step_s(batch, batch * wl.mean_context, 0, 0)
        assert got == pytest.approx(want, rel=1e-12 if batch <= 64 else 1e-6) and got <= want * (1 + 1e-12)


def test_lone_request_ttft_is_its_prefill_step(r1):
    model, dep, wl, st, kv = r1
    r = T.simulate(st, kv, _cfg(num_prompts=1, max_concurrency=1))
    # one request alone: TTFT = its prefill, one step of 1,024 tokens (1,024 <= 8,192 a step) = the plan's TTFT
    assert r.ttft_s.mean == pytest.approx(evaluate(model, dep, wl, 1).ttft_s, rel=1e-12)
    assert r.ttft_s.p99 == r.ttft_s.mean


def test_lone_request_chunked_prefill_takes_several_steps(r1):
    model, dep, wl, st, kv = r1
    # 4,096 tokens in chunks of 1,024: four steps of pairs c s + c (c + 1) / 2
    r = T.simulate(st, kv, _cfg(input_len=4096, num_prompts=1, max_concurrency=1, max_num_batched_tokens=1024))
    want = sum(st.step_s(0, 0, 1024, 1024 * s + 1024 * 1025 // 2) for s in (0, 1024, 2048, 3072))
    assert r.ttft_s.mean == pytest.approx(want, rel=1e-12)
    assert r.engine_steps == 4 + 1023


def test_closed_loop_of_one_tpot_is_the_decode_step(r1):
    model, dep, wl, st, kv = r1
    r = T.simulate(st, kv, _cfg(num_prompts=3, max_concurrency=1))
    step = evaluate(model, dep, wl, 1).tpot_s  # the step at the mean context input + output / 2
    # memory bound and linear in the context: the mean of the 1,023 decode steps is the step at their
    # mean context, 1024 + 512 (the plan's 1024 + ceil(1024 / 2))
    assert r.tpot_s.mean == pytest.approx(step, rel=1e-4)
    assert r.itl_s.mean == pytest.approx(r.tpot_s.mean, rel=1e-9)
    assert r.e2e_s.mean == pytest.approx(r.ttft_s.mean + 1023 * r.tpot_s.mean, rel=1e-9)
    assert r.request_throughput == pytest.approx(3 / (3 * r.e2e_s.mean), rel=1e-9)


def test_speculative_decoding_emits_the_accepted_tokens(r1):
    model, dep, _, _, _ = r1
    wl = Workload(1024, 1024, spec_tokens=1, acceptance=0.8)
    st = T.BoundStepTimes(model, dep, wl)
    r = T.simulate(st, T.kv_cache_for(model, dep), _cfg(num_prompts=2, max_concurrency=1, spec_tokens=1,
                                                         acceptance=0.8))
    # (1 - 0.8^2) / (1 - 0.8) = 1.8 tokens a step: ceil(1023 / 1.8) = 569 decode steps
    assert r.engine_steps == 2 * (1 + 569)
    assert r.tpot_s.mean == pytest.approx(evaluate(model, dep, wl, 1).tpot_s, rel=2e-3)


def test_prefix_hits_shorten_the_prefill(r1):
    model, dep, _, st, kv = r1
    cold = T.simulate(st, kv, _cfg(num_prompts=1, max_concurrency=1))
    warm = T.simulate(st, kv, _cfg(num_prompts=1, max_concurrency=1, prefix_hit=0.75))
    # 256 new tokens after 768 cached: pairs 256 x 768 + 256 x 257 / 2
    assert warm.ttft_s.mean == pytest.approx(st.step_s(0, 0, 256, 256 * 768 + 256 * 257 // 2), rel=1e-12)
    assert warm.ttft_s.mean < cold.ttft_s.mean


# --- load ---------------------------------------------------------------------------------------------

def test_p99_ttft_grows_with_the_rate_and_saturates(r1):
    _, _, _, st, kv = r1
    runs = [T.simulate(st, kv, _cfg(num_prompts=2000, rate=rate)) for rate in (1.0, 4.0, 16.0, 64.0)]
    p99 = [r.ttft_s.p99 for r in runs]
    assert p99 == sorted(p99) and p99[-1] > 100 * p99[0]
    tpot = [r.tpot_s.p99 for r in runs]
    assert tpot == sorted(tpot)
    assert [r.saturated for r in runs] == [False, False, False, True]
    assert runs[-1].request_throughput < 0.5 * 64


def test_a_thousand_requests_a_second_on_four_gpus_saturate():
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h200")
    dep = Deployment(gpu=gpu, num_gpus=4, tp=4)
    r = T.plan_traffic(model, dep, _cfg(num_prompts=2000, rate=1000.0))
    assert r.saturated and r.request_throughput < 100
    calm = T.plan_traffic(model, dep, _cfg(num_prompts=200, rate=0.5))
    assert not calm.saturated


def test_closed_loop_never_saturates(r1):
    _, _, _, st, kv = r1
    assert not T.simulate(st, kv, _cfg(num_prompts=128, max_concurrency=64)).saturated


def test_max_num_seqs_queues_requests(r1):
    _, _, _, st, kv = r1
    wide = T.simulate(st, kv, _cfg(num_prompts=64, max_concurrency=16))
    narrow = T.simulate(st, kv, _cfg(num_prompts=64, max_concurrency=16, max_num_seqs=4, max_num_batched_tokens=4096))
    assert narrow.ttft_s.mean > 5 * wide.ttft_s.mean
    assert narrow.request_throughput < wide.request_throughput


def test_a_full_cache_preempts_and_recomputes(r1):
    model, dep, wl, st, kv = r1
    tight = T.kv_cache_for(model, replace(dep, gpu_memory_utilization=0.63))
    assert 0 < tight.budget_bytes < kv.budget_bytes / 4
    r = T.simulate(st, tight, _cfg(num_prompts=96, max_concurrency=96))
    free = T.simulate(st, kv, _cfg(num_prompts=96, max_concurrency=96))
    assert r.preemptions > 0 and free.preemptions == 0
    assert r.simulated_requests == 96 and r.e2e_s.p99 > free.e2e_s.p99
    assert any("preemption" in n for n in r.notes)


def test_a_request_too_long_for_the_cache_is_refused(r1):
    _, _, _, st, kv = r1
    with pytest.raises(MLAError, match="does not fit the KV cache"):
        T.simulate(st, kv, _cfg(input_len=2_000_000, num_prompts=1))


def test_replicas_share_the_requests():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h200")
    one = Deployment(gpu=gpu, num_gpus=1, tp=1)
    four = Deployment(gpu=gpu, num_gpus=4, tp=1)
    a = T.plan_traffic(model, one, _cfg(num_prompts=64, max_concurrency=16))
    b = T.plan_traffic(model, four, _cfg(num_prompts=256, max_concurrency=64))
    assert b.config.replicas == 4
    assert b.request_throughput == pytest.approx(4 * a.request_throughput, rel=1e-6)


# --- determinism and the two loops --------------------------------------------------------------------

def test_same_seed_same_result_other_seed_differs(r1):
    _, _, _, st, kv = r1
    cfg = _cfg(num_prompts=200, rate=8.0, random_range_ratio=0.5)
    a, b = T.simulate(st, kv, cfg), T.simulate(st, kv, cfg)
    _same(a, b, rel=0)
    c = T.simulate(st, kv, replace(cfg, seed=1))
    assert c.ttft_s.p99 != a.ttft_s.p99 and c.mean_input_len != a.mean_input_len


@pytest.mark.parametrize("kw", [
    dict(max_concurrency=32, num_prompts=100),
    dict(rate=6.0, num_prompts=200, random_range_ratio=0.5),
    dict(rate=20.0, num_prompts=150, dataset="azure-conv-2023"),
    dict(rate=3.0, burstiness=0.25, num_prompts=100, prefix_hit=0.5),
    dict(max_concurrency=8, num_prompts=24, spec_tokens=2, acceptance=0.7),
])
def test_runs_give_the_step_loops_figures(r1, kw):
    model, dep, _, st, kv = r1
    cfg = _cfg(**kw)
    if cfg.spec_tokens:
        st = T.BoundStepTimes(model, dep, cfg.workload())
    _same(T.simulate(st, kv, cfg, aggregate=True), T.simulate(st, kv, cfg, aggregate=False))


def test_runs_give_the_step_loops_figures_under_preemption(r1):
    model, dep, _, st, _ = r1
    tight = T.kv_cache_for(model, replace(dep, gpu_memory_utilization=0.63))
    cfg = _cfg(num_prompts=96, max_concurrency=96)
    a, b = T.simulate(st, tight, cfg), T.simulate(st, tight, cfg, aggregate=False)
    assert a.preemptions == b.preemptions > 0
    _same(a, b)


# --- the client side as vllm bench serve --------------------------------------------------------------

def test_arrivals_as_vllm_bench_serve():
    rng = np.random.default_rng(0)
    t = T.arrival_times(20000, 5.0, 1.0, rng)
    # vllm/benchmarks/serve.py get_request: the cumulative gaps are scaled so the last lands at n / rate
    assert t[-1] == pytest.approx(20000 / 5.0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    bursty = np.diff(T.arrival_times(20000, 5.0, 0.25, rng))
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.05)  # gamma shape k: CV 1 / sqrt(k)
    assert np.allclose(np.diff(T.arrival_times(10, 4.0, math.inf, rng)), 0.25)
    assert not T.arrival_times(5, math.inf, 1.0, rng).any()


def test_lengths_as_vllm_and_sglang():
    rng = np.random.default_rng(0)
    i, o = T.sample_lengths(50000, 1000, 100, range_ratio=0.25, rng=rng)
    # vLLM RandomDataset.get_sampling_params: integers in [floor(L (1 - r)), ceil(L (1 + r))]
    assert (i.min(), i.max(), o.min(), o.max()) == (750, 1250, 75, 125)
    assert i.mean() == pytest.approx(1000, rel=0.01)
    i, o = T.sample_lengths(50000, 1000, 100, range_ratio=0.25, convention="sglang", rng=rng)
    # SGLang sample_random_requests: integers in [int(L r), L]
    assert (i.min(), i.max(), o.min(), o.max()) == (250, 1000, 25, 100)
    i, o = T.sample_lengths(10, 1000, 100, range_ratio=1.0, convention="sglang", rng=rng)
    assert set(i) == {1000} and set(o) == {100}


def test_shipped_length_histograms():
    hists = T.length_histograms()
    assert tuple(hists) == T.LENGTH_DATASETS
    conv, code = hists["azure-conv-2023"], hists["azure-code-2023"]
    # Azure LLM inference trace 2023 (Splitwise, ISCA 2024): 19,366 conversation and 8,819 coding requests,
    # mean context 1,154.7 / 2,047.8 and generated 211.1 / 27.9 tokens (computed from the published CSVs)
    assert (conv.requests, code.requests) == (19366, 8819)
    assert sum(c[2] for c in conv.cells) == 19366 and sum(c[2] for c in code.cells) == 8819
    for h, mi, mo in ((conv, 1154.7, 211.13), (code, 2047.85, 27.88)):
        assert (h.trace_mean_input_len, h.trace_mean_output_len) == (mi, mo)
        ei, eo = h.mean_lengths()
        assert ei == pytest.approx(mi, rel=0.03) and eo == pytest.approx(mo, rel=0.03)
        i, o = h.sample(40000, np.random.default_rng(1))
        assert i.mean() == pytest.approx(ei, rel=0.03) and o.mean() == pytest.approx(eo, rel=0.03)
        assert i.min() >= 1 and o.min() >= 1


def test_weighted_percentiles_are_numpys():
    rng = np.random.default_rng(3)
    v, w = rng.random(300), rng.integers(1, 20, 300)
    assert T.weighted_percentiles(v, w, (0, 50, 90, 99, 100)) == pytest.approx(
        list(np.percentile(np.repeat(v, w), (0, 50, 90, 99, 100))), rel=1e-12)


def test_goodput_counts_requests_meeting_every_slo(r1):
    _, _, _, st, kv = r1
    loose = T.simulate(st, kv, _cfg(num_prompts=50, rate=2.0, ttft_ms=1e6, tpot_ms=1e6))
    assert loose.goodput_rps == pytest.approx(loose.request_throughput)
    tight = T.simulate(st, kv, _cfg(num_prompts=50, rate=2.0, ttft_ms=1.0))
    assert tight.goodput_rps == 0.0
    assert T.simulate(st, kv, _cfg(num_prompts=50, rate=2.0)).goodput_rps is None


def test_max_rate_at_slo_is_the_edge(r1):
    _, _, _, st, kv = r1
    cfg = _cfg(num_prompts=300, rate=1.0, ttft_ms=100.0, tpot_ms=25.0)
    found = T.max_rate_at_slo(st, kv, cfg, iterations=8)
    rate = found["rate"]
    assert rate > 0 and found["relative_precision"] < 0.05
    at = T.simulate(st, kv, replace(cfg, rate=rate))
    above = T.simulate(st, kv, replace(cfg, rate=rate * (1 + found["relative_precision"])))
    assert at.ttft_s.p99 <= 0.1 and at.tpot_s.p99 <= 0.025 and not at.saturated
    assert above.saturated or above.ttft_s.p99 > 0.1 or above.tpot_s.p99 > 0.025
    assert T.max_rate_at_slo(st, kv, replace(cfg, ttft_ms=None, tpot_ms=None))["rate"] is None
    assert T.max_rate_at_slo(st, kv, replace(cfg, ttft_ms=1.0))["rate"] == 0.0


def test_vllm_batch_defaults():
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: >= 70 GiB and not an A100: 8192 / 1024
    assert T.vllm_batch_defaults(load_gpu("h200")) == (8192, 1024)
    assert T.vllm_batch_defaults(load_gpu("a100-80gb")) == (2048, 256)
    assert T.vllm_batch_defaults(load_gpu("l40s")) == (2048, 256)


@pytest.mark.parametrize("kw, match", [
    (dict(max_num_seqs=1024, max_num_batched_tokens=512), "must be at least max_num_seqs"),
    (dict(burstiness=0.0), "burstiness"),
    (dict(rate=-1.0), "rate"),
    (dict(random_range_ratio=1.0), r"\[0, 1\)"),
    (dict(dataset="sharegpt"), "dataset"),
    (dict(num_prompts=0), "num_prompts"),
])
def test_bad_settings_are_one_line_errors(kw, match):
    with pytest.raises(MLAError, match=match):
        T.check_config(_cfg(**kw))


# --- the cache ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset, tp", [("deepseek-r1", 8), ("gemma-2-9b", 1), ("jamba-1.5-mini", 2),
                                        ("llama-3.1-70b", 4)])
def test_kv_cache_bytes_are_capacitys(preset, tp):
    from mla_core.capacity import capacity

    model, gpu = load_model(preset), load_gpu("h200")
    kv = T.kv_cache_for(model, Deployment(gpu=gpu, num_gpus=tp, tp=tp))
    for context in (1, 63, 64, 65, 4096, 10_000, 131_072):
        cap = capacity(model, context=context, gpu=gpu, num_gpus=tp, tp=tp)
        assert kv.request_bytes(context) == cap["request_bytes_per_gpu"]
        assert kv.request_bytes(np.array([float(context)]))[0] == cap["request_bytes_per_gpu"]
        assert kv.budget_bytes == cap["kv_budget_bytes_per_gpu"]


# --- replaying the engine fixtures ----------------------------------------------------------------------

def _load(name, **kw):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return T._engines().load_engine_file(f.read(), name, **kw)


def test_replay_vllm_serve_fixture():
    rep = T.replay(_load("vllm_serve_dsv3_h200_tp8.json"), step_times_for=T.BoundStepTimes)
    (p,) = rep.points
    # the file's own settings: 256 prompts, 64 clients, rate inf, 1,000 in / 1,000 out
    assert (p.settings["num_prompts"], p.settings["max_concurrency"], p.settings["rate"]) == (256, 64, None)
    assert p.result.mean_input_len == 1000 and p.result.config.mode == "closed loop"
    metrics = {e["metric"]: e for e in p.errors}
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for stat in ("mean", "median", "p99"):
            assert f"{stat}_{name}" in metrics
    # the fixture's mean TTFT is 1,843.2 ms (tests/fixtures/engines/vllm_serve_dsv3_h200_tp8.json)
    assert metrics["mean_ttft_s"]["measured"] == pytest.approx(1.8432)
    e = metrics["mean_tpot_s"]
    assert e["error_pct"] == pytest.approx((e["simulated"] - e["measured"]) / e["measured"] * 100)
    # step times from the bound: no simulated latency may exceed a served one
    for stat in ("mean", "median"):
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            assert metrics[f"{stat}_{name}"]["simulated"] <= metrics[f"{stat}_{name}"]["measured"]
    assert rep.median_abs_error_pct["mean_tpot_s"] == pytest.approx(abs(e["error_pct"]))


def test_replay_sglang_fixture_uses_sglangs_range_ratio():
    rep = T.replay(_load("sglang_bench_serving_dsv3_h200_tp8.jsonl", model="deepseek-v3", gpu="h200", tp=8))
    assert [p.settings["max_concurrency"] for p in rep.points] == [1, 16, 64]
    for p in rep.points:
        # random_range_ratio 1.0 in SGLang's meaning: lengths fixed at 1,024
        assert p.settings["range_convention"] == "sglang" and p.result.mean_input_len == 1024
        assert p.result.mean_output_len == 1024
    tpots = [p.result.tpot_s.mean for p in rep.points]
    assert tpots == sorted(tpots)  # more clients, bigger decode batches, longer steps
    d = json.loads(json.dumps(rep.to_dict(), allow_nan=False))
    assert d["points"][0]["errors"]


def test_replay_refuses_a_static_batch():
    with pytest.raises(MLAError, match="not traffic"):
        T.replay(_load("sglang_one_batch_dsv3_h200_tp8.jsonl", model="deepseek-v3", gpu="h200", tp=8))


# --- the command line ---------------------------------------------------------------------------------

def _cli(*args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "mla_core", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


PLAN = ("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--tp", "8", "--input-len", "1024",
        "--output-len", "1024")


def test_cli_plan_traffic_json():
    p = _cli(*PLAN, "--max-concurrency", "32", "--num-prompts", "320", "--json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["traffic"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(t[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < t[key]["p50"] <= t[key]["p99"]
    assert t["simulated_requests"] == 320 and t["config"]["max_concurrency"] == 32
    assert t["config"]["max_num_seqs"] == 1024 and t["split"] == "TP8" and not t["saturated"]
    assert t["request_throughput"] > 0 and t["goodput_rps"] is None


def test_cli_plan_traffic_text_and_errors():
    p = _cli(*PLAN, "--rate", "4", "--num-prompts", "100", "--ttft-ms", "500", "--tpot-ms", "50")
    assert p.returncode == 0, p.stderr
    assert "traffic (TP8; step times: vLLM estimate: " in p.stdout and "100 requests, Poisson" in p.stdout
    assert "highest Poisson rate meeting the SLOs at p99" in p.stdout
    for bad in (("--rate", "-1"), ("--dataset", "nope"), ("--max-num-seqs", "16384")):
        q = _cli(*PLAN, *bad)
        assert q.returncode == 2 and len(q.stderr.strip().splitlines()) == 1 and "Traceback" not in q.stderr
    assert "traffic" not in json.loads(_cli(*PLAN, "--json").stdout)
