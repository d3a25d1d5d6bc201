"""The small rules of mla_core.views that the pages' charts and tables follow (hand-computed cases)."""
import shlex

from mla_core.views import command_lines, legend_name, same_as


def test_same_as_names_the_first_line_a_later_one_sits_on():
    lines = [("a", (1, 2, 3)), ("b", (1, 2, 3)), ("c", (100, 200, 300.0)), ("d", (102, 205, 302)), ("e", (1, 2, 4))]
    same = same_as(lines)
    assert same == {"b": ("a", True), "d": ("c", False)}  # d is 2.5% off c at most; e is 33% off a at its end
    assert legend_name("b", same) == "b (same as a)" and legend_name("d", same) == "d (within 3% of c)"
    assert legend_name("e", same) == "e"
    assert same_as([("x", (None, 5)), ("y", (None, 5)), ("z", (0, 5))]) == {"y": ("x", True)}  # None is not 0
    assert same_as([("p", ((1.0, 2.0), (3.0, 4.0))), ("q", ((1.0, 2.0), (3.0, 4.0)))]) == {"q": ("p", True)}
    # whole counts: floors of values within 3% may be one step further apart, and no more
    assert same_as([("f", (22, 100)), ("g", (23, 100))]) == {}
    assert same_as([("f", (22, 100)), ("g", (23, 100))], step=1) == {"g": ("f", False)}
    assert same_as([("f", (1, 100)), ("g", (3, 100))], step=1) == {}


def test_a_command_goes_one_flag_a_line_and_pastes_as_the_same_words():
    cmd = shlex.join(["vllm", "serve", "org/model", "--tensor-parallel-size", "8", "--speculative-config",
                      '{"method": "mtp", "num_speculative_tokens": 1}', "--trust-remote-code"])
    text = command_lines(cmd)
    assert text.splitlines() == ["vllm serve org/model \\", "  --tensor-parallel-size 8 \\",
                                 "  --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}' \\",
                                 "  --trust-remote-code"]
    assert shlex.split(text.replace("\\\n", "")) == shlex.split(cmd)
    assert command_lines(None) is None


# --- Serving plan page --------------------------------------------------------------------------

import math  # noqa: E402
from dataclasses import replace as _replace  # noqa: E402

import pytest  # noqa: E402

from mla_core import views  # noqa: E402
from mla_core.presets import load_gpu, load_model  # noqa: E402
from mla_core.serving import Deployment, Workload, search  # noqa: E402


@pytest.fixture(scope="module")
def plan16():
    return search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 1024), ttft_ms=2000, tpot_ms=50, kernel_tables="uncalibrated")


def test_the_frontier_is_the_estimates_with_the_bounds_behind(plan16):
    fr = views.serving_frontier(plan16)
    assert fr.estimated
    assert fr.pareto == tuple((p.estimate.tokens_per_s_per_user, p.estimate.tokens_per_s_per_gpu)
                              for p in plan16.pareto)
    assert fr.bound_pareto == tuple((p.tokens_per_s_per_user, p.tokens_per_s_per_gpu) for p in plan16.bound_pareto)
    b = plan16.best
    assert fr.best == (b.estimate.tokens_per_s_per_user, b.estimate.tokens_per_s_per_gpu)
    assert fr.best_bound == (b.tokens_per_s_per_user, b.tokens_per_s_per_gpu)
    for est, bound in zip(fr.lines, fr.bound_lines):
        assert est.label == bound.label
        assert all(e <= u * (1 + 1e-9) for e, u in zip(est.y, bound.y))  # no estimate beats its bound
    # a slide's three lines are the three splits whose best points rank highest
    top = views.serving_frontier(plan16, max_lines=3)
    ranked = sorted((s for s in plan16.splits if s.best), key=lambda s: (-s.best.rate_per_gpu, -s.best.rate_per_user))
    assert [ln.label for ln in top.lines] == [s.split for s in ranked[:3]]
    assert top.lines_left_out == len(fr.lines) - 3
    assert top.pareto == fr.pareto


def test_the_frontier_without_estimates_is_the_bounds():
    plan = search(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), num_gpus=2, workload=Workload(1024, 256),
                  engine=None)
    fr = views.serving_frontier(plan)
    assert not fr.estimated and fr.bound_lines == () and fr.bound_pareto == ()
    assert fr.pareto == tuple((p.tokens_per_s_per_user, p.tokens_per_s_per_gpu) for p in plan.pareto)
    h = views.serving_headline(plan)
    assert not h.estimated and h.tpot_s == plan.best.tpot_s and h.kind == "bound"


def test_the_headline_is_the_best_points_estimate_and_bound(plan16):
    h = views.serving_headline(plan16)
    e, b = plan16.best.estimate, plan16.best
    assert (h.ttft_s, h.tpot_s, h.tokens_per_s_per_user, h.tokens_per_s_per_gpu) == (
        e.ttft_s, e.tpot_s, e.tokens_per_s_per_user, e.tokens_per_s_per_gpu)
    assert (h.bound_ttft_s, h.bound_tpot_s, h.bound_tokens_per_s_per_gpu) == (b.ttft_s, b.tpot_s, b.tokens_per_s_per_gpu)
    assert h.tpot_s >= h.bound_tpot_s
    assert h.kind == "uncalibrated" and h.confidence == "low" and h.tables == ("uncalibrated",)
    assert h.engine == "vLLM" and "uncalibrated" in h.sentence and "confidence low" in h.sentence
    assert h.to_dict()["split"] == b.split


def test_the_breakdown_parts_add_up_to_each_phase(plan16):
    bd = views.serving_breakdown(plan16)
    dec, pre = bd.phases
    assert (dec.phase, pre.phase) == ("decode step", "prefill")
    est = plan16.estimate
    assert dec.time_s == pytest.approx(est["decode_step"]["time_s"])
    assert pre.time_s == pytest.approx(sum(s["time_s"] for s in est["prefill"]))
    for ph in bd.phases:
        assert sum(p.share for p in ph.parts) == pytest.approx(1.0)
        assert sum(p.time_s for p in ph.parts) == pytest.approx(ph.time_s + ph.hidden_s)
        assert sum(t for *_, t in ph.ops) == pytest.approx(sum(p.time_s for p in ph.parts
                                                               if p.name not in (views.OVERHEAD, views.LAUNCHES)))
    gemm = next(p for p in dec.parts if p.name == "gemm")
    assert gemm.time_s == est["decode_step"]["by_class_s"]["gemm"]
    assert set(bd.classes) >= {p.name for ph in bd.phases for p in ph.parts}
    assert views.serving_breakdown(_replace(plan16, estimate=None)) is None


def test_split_rows_carry_pp_and_the_moe_split(plan16):
    rows = views.serving_split_rows(plan16)
    for row, s in zip(rows, plan16.splits):
        assert (row["pp"], row["moe_tp"], row["ep"]) == (s.pp, s.moe_tp, s.ep)
        assert s.moe_tp * s.ep == s.tp
    assert any(r["pp"] > 1 for r in rows)
    served = next(s for s in plan16.splits if s.best)
    row = rows[plan16.splits.index(served)]
    from mla_core.units import format_seconds

    assert row["TPOT"] == format_seconds(served.best.estimate.tpot_s)
    assert row["TPOT bound"] == format_seconds(served.best.tpot_s)


def test_the_traffic_view_is_the_cores_simulation(plan16):
    from mla_core.traffic import (TrafficConfig, estimate_or_bound, kv_cache_for, max_rate_at_slo, simulate,
                                  vllm_batch_defaults)

    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    t = views.traffic_view(model, gpu, plan16, rate=2.0, num_prompts=120, kernel_tables="uncalibrated")
    assert t.available and t.split == plan16.best.split
    b = plan16.best
    dep = Deployment(gpu=gpu, num_gpus=16, gpus_per_node=8, tp=b.tp, dp_attention=b.dp_attention, ep=b.ep)
    batched, seqs = vllm_batch_defaults(gpu)
    cfg = TrafficConfig(4096, 1024, num_prompts=120, rate=2.0, max_num_seqs=seqs, max_num_batched_tokens=batched,
                        replicas=dep.replicas, ttft_ms=2000, tpot_ms=50)
    st, _ = estimate_or_bound(model, dep, cfg.workload(), kernel_tables="uncalibrated")
    kv = kv_cache_for(model, dep)
    r = simulate(st, kv, cfg)
    assert t.result.ttft_s == r.ttft_s and t.result.tpot_s == r.tpot_s and t.goodput_rps == r.goodput_rps
    cap = simulate(st, kv, _replace(cfg, rate=math.inf, max_concurrency=seqs * dep.replicas)).request_throughput
    assert t.capacity_rps == cap and t.rates == tuple(cap * f for f in views.SWEEP_FACTORS)
    at_cap = simulate(st, kv, _replace(cfg, rate=t.rates[4]))
    assert t.ttft_p99[4] == at_cap.ttft_s.p99 and t.tpot_p50[4] == at_cap.tpot_s.p50
    assert t.max_rate_at_slo == max_rate_at_slo(st, kv, cfg, iterations=views.MAX_RATE_ITERATIONS)["rate"]
    assert t.result.max_rate_at_slo == t.max_rate_at_slo
    # p99 TTFT grows with the rate; a saturated sweep point marks the saturation
    assert t.ttft_p99[-1] >= t.ttft_p99[0]
    assert t.saturation_rps == next((x for x, s in zip(t.rates, t.saturated) if s), None)
    assert (t.ttft_slo_s, t.tpot_slo_s) == (2.0, 0.05)
    with pytest.raises(views.MLAError):
        views.traffic_view(model, gpu, plan16, mode="bursts")


def test_the_traffic_view_refuses_pipeline_stages_with_a_reason():
    plan = search(load_model("deepseek-v3"), load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                  workload=Workload(4096, 1024), pp=2, kernel_tables="uncalibrated")
    t = views.traffic_view(load_model("deepseek-v3"), load_gpu("h200"), plan, num_prompts=50)
    assert not t.available and "pipeline stages" in t.reason


def test_the_disagg_view_is_the_cores_pair(plan16):
    from mla_core.serving.disagg import disaggregate

    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    d = views.disagg_view(model, gpu, plan16, prefill_gpus=8, decode_gpus=8, kernel_tables="uncalibrated")
    r = disaggregate(model, gpu, prefill_gpus=8, decode_gpus=8, workload=plan16.workload, gpus_per_node=8,
                     ttft_ms=2000, tpot_ms=50, kernel_tables="uncalibrated")
    assert d.available and d.result.kv_transfer_s == r.kv_transfer_s and d.result.ttft_s == r.ttft_s
    assert d.result.prefill.split == r.prefill.split and d.result.decode.split == r.decode.split
    assert d.commands[0] == ("vLLM", "prefill", r.commands["prefill"]["vllm_command"])
    assert [c[0] for c in d.commands] == ["vLLM", "vLLM", "SGLang", "SGLang", "TensorRT-LLM", "TensorRT-LLM"]
    assert d.aggregated["tpot_s"] == plan16.best.estimate.tpot_s
    searched = views.disagg_view(model, gpu, plan16, kernel_tables="uncalibrated")
    assert searched.searched and searched.result.prefill_gpus + searched.result.decode_gpus == 16
    half = views.disagg_view(model, gpu, plan16, prefill_gpus=8)
    assert not half.available and "both pool sizes" in half.reason


def test_the_rate_slider_is_a_log_scale():
    r = views.TRAFFIC_RATES
    assert r == tuple(sorted(r)) and r[0] == 0.01 and 1.0 in r and 2.0 in r and 5.0 in r
    assert all(b / a in (2.0, 2.5) for a, b in zip(r, r[1:]))
