"""Serving plan (mla_core.serving, mla_core.serving.commands, `python -m mla_core plan`): hand-computed
prefill flops, communication bytes and a frontier point; properties; the launch commands; the
published figures under their bounds; bad input."""
import dataclasses
import json
import math
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_cli import run, run_json
from mla_core.errors import MLAError
from mla_core.presets import load_gpu, load_model
from mla_core.roofline import roofline
from mla_core.serving import (Deployment, Workload, communication, communication_calls, evaluate,
                              prefill_attention_pairs, prefill_work, published_checks, search)
from mla_core.config import synthetic_model
from mla_core.kv import kv_report
from mla_core.layers import LayerSpec, SharedKV, attention_cache

V3 = load_model("deepseek-v3")
H200 = load_gpu("h200")
WL = Workload(input_len=4096, output_len=1024)


# --- hand computations ------------------------------------------------------------------------------

def test_prefill_pairs_and_flops_by_hand():
    # DeepSeek-V3, 4,096 new tokens: 61 layers x 4096 * 4097 / 2 causal pairs; MLA prefill runs as MHA,
    # 128 heads x (2 * (128 + 64) + 2 * 128) = 81,920 flops a pair.
    assert prefill_attention_pairs(V3, 4096, 4096) == 61 * 8_390_656 == 511_830_016
    pre = prefill_work(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL)
    assert pre["new_tokens"] == 4096
    assert pre["attention_flops"] == 511_830_016 * 81_920
    # 2 flops a parameter a token: DeepSeek-V3 streams 36,625,603,584 parameters a token (k = 8 of 256 experts),
    # the LM head's 129,280 x 7,168 of them for the sampled token only (engines compute the last logits).
    lm = 129_280 * 7168
    assert pre["flops"] == 2 * (36_625_603_584 - lm) * 4096 + 2 * lm + 511_830_016 * 81_920
    assert pre["flops_gpu"] == pytest.approx(pre["flops"] / 8)
    # Half the prompt cached: 2,048 new tokens, each attending to the 2,048 cached ones too.
    half = Workload(input_len=4096, output_len=1, prefix_hit=0.5)
    assert half.new_prefill_tokens == 2048
    assert prefill_attention_pairs(V3, 4096, 2048) == 61 * (2048 * 2049 // 2 + 2048 * 2048)


def test_prefill_pairs_on_a_sliding_window():
    # Window 4, 10 tokens: keys a query sees are 1, 2, 3, 4, 4, 4, 4, 4, 4, 4 = 34 a layer.
    m = synthetic_model("gqa", layers=2, heads=8, kv_heads=2)
    sliding, full = LayerSpec((attention_cache(m.attention, window=4),)), LayerSpec((attention_cache(m.attention),))
    m = dataclasses.replace(m, layers=(sliding, full))
    assert prefill_attention_pairs(m, 10, 10) == 34 + 55
    # The last 3 tokens of 10: 4 + 4 + 4 on the sliding layer, 8 + 9 + 10 on the full one.
    assert prefill_attention_pairs(m, 10, 3) == 12 + 27


def test_prefill_pairs_on_a_chunked_layer_and_on_shared_kv_layers():
    # Chunks of 4, 10 tokens: a query sees its chunk so far: 1, 2, 3, 4, 1, 2, 3, 4, 1, 2 = 23 keys
    # (a window of 4 would be 34); the last 3 of 10 tokens (positions 7, 8, 9): 4 + 1 + 2.
    m = synthetic_model("gqa", layers=2, heads=8, kv_heads=2)
    chunked, full = LayerSpec((attention_cache(m.attention, chunk=4),)), LayerSpec((attention_cache(m.attention),))
    m = dataclasses.replace(m, layers=(chunked, full))
    assert prefill_attention_pairs(m, 10, 10) == 23 + 55
    assert prefill_attention_pairs(m, 10, 3) == 7 + 27
    # A shared-KV layer holds no cache but attends over an earlier one's: its pairs count, with its window.
    sliding = LayerSpec((attention_cache(m.attention, window=4),))
    src = full.caches[0]
    m = dataclasses.replace(m, layers=(sliding, full, LayerSpec((SharedKV(src, 4),)), LayerSpec((SharedKV(src, None),))))
    assert prefill_attention_pairs(m, 10, 10) == 2 * (34 + 55)
    # Gemma-3n E4B: 35 layers attend (the last 15 over the first 20 layers' caches), 28 of them on
    # the 512-token window (4 sliding for 1 full, as layer_types says), 7 full; 20 hold a cache.
    g = load_model("gemma-3n-e4b-it")
    sliding = 512 * 513 // 2 + (4096 - 512) * 512
    assert prefill_attention_pairs(g, 4096, 4096) == 28 * sliding + 7 * (4096 * 4097 // 2)
    assert kv_report(g, 4096).kv_layers == 20
    # Llama 4 Scout: 36 chunked layers of 8,192 and 12 global ones; 20,000 tokens = 2 whole chunks + 3,616.
    scout = load_model("llama-4-scout-17b-16e-instruct")
    chunked = 2 * (8192 * 8193 // 2) + 3616 * 3617 // 2
    assert prefill_attention_pairs(scout, 20000, 20000) == 36 * chunked + 12 * (20000 * 20001 // 2)


def test_tp_allreduce_bytes_by_hand():
    # TP8, 64 tokens: two all-reduces a layer of 64 * 7168 * 2 B, 2 * 7/8 of it sent per GPU.
    dep = Deployment(gpu=H200, num_gpus=8, tp=8)
    c = communication(V3, dep, 64, 64)
    assert c["allreduce_bytes"] == 2 * 61 * 2 * 7 / 8 * 64 * 7168 * 2 == 195_887_104
    assert c["network_bytes"] == 0
    assert c["time_s"] == pytest.approx(195_887_104 / 450e9)  # NVLink 4: 900 GB/s both ways, 450 each


def test_ep_alltoall_bytes_by_hand():
    # DP-attention 16 + EP16 over 2 nodes, 10 tokens on this GPU (160 in the group).
    dep = Deployment(gpu=H200, num_gpus=16, gpus_per_node=8, tp=16, dp_attention=True, ep=16)
    c = communication(V3, dep, 160, 10)
    token = 10 * 7168 * 2
    # dispatch + combine, 58 MoE layers, top-8, 15/16 of the experts elsewhere
    assert c["alltoall_bytes"] == pytest.approx(2 * 58 * token * 8 * 15 / 16)
    # the network carries each token once to the other node when one of its 8 experts is there
    assert c["network_bytes"] == pytest.approx(2 * 58 * token * (1 - 0.5 ** 8)
                                               + 3 * 2 * (2 - 1) / 2 * 160 * 7168 * 2 / 8)
    # the 3 dense layers' MLP is sharded over the group: all-gather + reduce-scatter = one all-reduce
    assert c["allreduce_bytes"] == pytest.approx(3 * 2 * 15 / 16 * 160 * 7168 * 2)
    assert c["time_s"] == pytest.approx(max(c["nvlink_bytes"] / 450e9, c["network_bytes"] / 50e9))


def test_a_frontier_point_by_hand():
    # DeepSeek-V3 on 8 H200 at TP8, 64 sequences at the mean context 4096 + 512: the KV read is
    # 64 x 4608 tokens x 61 layers x 1,152 B (the latent is whole on every rank).
    p = evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=64)
    assert p.kv_bytes_per_gpu == 64 * 4608 * 61 * 1152 == 20_724_056_064
    r = roofline(V3, H200, context=4608, batch=64, tp=8)
    assert p.step_bytes_per_gpu == r["step_bytes"]
    assert p.memory_time_s == pytest.approx(r["step_bytes"] / 4.8e12)
    assert p.bound == "memory" and p.step_time_s == p.memory_time_s
    assert p.tokens_per_s_per_user == pytest.approx(1 / p.step_time_s)
    assert p.tokens_per_s_per_gpu == pytest.approx(64 / p.step_time_s / 8)
    assert p.step_serial_s == pytest.approx(p.memory_time_s + 195_887_104 / 450e9)
    # the memory cap: capacity()'s whole requests at the mean context
    from mla_core.capacity import capacity

    assert p.max_batch == capacity(V3, context=4608, gpu=H200, num_gpus=8, tp=8)["max_concurrent_requests"]


def test_speculative_tokens_per_step():
    assert Workload(10, 10, spec_tokens=1, acceptance=0.8).tokens_per_step == pytest.approx(1.8)
    assert Workload(10, 10, spec_tokens=3, acceptance=0.5).tokens_per_step == pytest.approx(1.875)
    assert Workload(10, 10).tokens_per_step == 1.0


def test_cost_by_hand():
    p = evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=64, usd_per_gpu_hour=3.0)
    assert p.usd_per_million_output_tokens == pytest.approx(3.0 * 8 / (p.tokens_per_s * 3600) * 1e6)
    assert p.usd_per_million_input_tokens == pytest.approx(3.0 / (p.input_tokens_per_s_per_gpu * 3600) * 1e6)


# --- the search ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan16():
    return search(V3, H200, num_gpus=16, gpus_per_node=8, workload=WL, ttft_ms=2000, tpot_ms=50,
                  usd_per_gpu_hour=3.0)


def test_search_best_meets_the_slos_and_is_on_the_frontier(plan16):
    best = plan16.best
    assert best is not None and best.meets_slo and best.fits
    assert best.ttft_s <= 2.0 and best.tpot_s <= 0.050
    assert best.batch <= best.max_batch
    ok = [p for p in plan16.points if p.meets_slo and p.fits]
    # the search ranks by the estimate (issue 18): the best has the most estimated tokens/s per GPU
    assert best.estimate.tokens_per_s_per_gpu == max(p.estimate.tokens_per_s_per_gpu for p in ok)
    assert best.estimate.ttft_s <= 2.0 and best.estimate.tpot_s <= 0.050
    # nothing on either Pareto set is beaten on both of its axes by any feasible point
    for f in plan16.pareto:
        assert not any(p.estimate.tokens_per_s_per_user > f.estimate.tokens_per_s_per_user and
                       p.estimate.tokens_per_s_per_gpu > f.estimate.tokens_per_s_per_gpu
                       for p in plan16.points if p.fits)
    for f in plan16.bound_pareto:
        assert not any(p.tokens_per_s_per_user > f.tokens_per_s_per_user and
                       p.tokens_per_s_per_gpu > f.tokens_per_s_per_gpu for p in plan16.points if p.fits)
    assert plan16.vllm_command and plan16.sglang_command
    d = plan16.to_dict()
    for key in ("ttft_s", "tpot_s", "tokens_per_s_per_user", "tokens_per_s_per_gpu", "max_batch", "bound",
                "usd_per_million_output_tokens", "pareto", "best", "vllm_command", "sglang_command"):
        assert key in d
    json.dumps(d, allow_nan=False)


def test_weights_that_do_not_fit_are_reported_not_planned(plan16):
    tp1 = next(s for s in plan16.splits if s.tp == 1)
    assert tp1.best is None and tp1.max_batch == 0 and "weights" in tp1.reason


def test_one_point_search_is_that_point():
    plan = search(V3, H200, num_gpus=8, workload=WL, tp=8, batch=64)
    assert plan.best == evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=64) or \
        dataclasses.replace(plan.best, limit="") == dataclasses.replace(
            evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=64), limit="")


def test_search_fast_path_equals_evaluate(plan16):
    for p in plan16.points[::7]:
        dep = Deployment(gpu=H200, num_gpus=16, gpus_per_node=8, tp=p.tp, dp_attention=p.dp_attention, ep=p.ep,
                         pp=p.pp)
        q = evaluate(V3, dep, WL, p.batch, usd_per_gpu_hour=3.0, ttft_ms=2000, tpot_ms=50)
        assert dataclasses.replace(q, limit=p.limit) == p


# --- properties -------------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(n=st.sampled_from([1, 2, 4, 8, 16]), more=st.sampled_from([2, 3, 4]), h=st.floats(0, 0.9),
       model=st.sampled_from(["deepseek-v3", "llama-3.1-70b", "qwen3-30b-a3b"]))
def test_more_gpus_never_raise_the_ttft_bound(n, more, h, model):
    # Every split of n GPUs is a split of n * more GPUs, so the best TTFT bound cannot rise.
    m, wl = load_model(model), Workload(input_len=8192, output_len=256, prefix_hit=h)

    def best_ttft(gpus):
        plan = search(m, H200, num_gpus=gpus, workload=wl)
        return min((p.ttft_s for p in plan.points if p.fits), default=math.inf)

    assert best_ttft(n * more) <= best_ttft(n)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 6), a=st.floats(0, 0.98), da=st.floats(0, 0.5))
def test_higher_acceptance_never_lowers_tokens_per_step(k, a, da):
    b = min(0.99, a + da)
    assert Workload(10, 10, spec_tokens=k, acceptance=b).tokens_per_step >= \
        Workload(10, 10, spec_tokens=k, acceptance=a).tokens_per_step
    assert 1 <= Workload(10, 10, spec_tokens=k, acceptance=a).tokens_per_step <= k + 1


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["deepseek-v3", "llama-3.1-70b", "deepseek-v2-lite", "qwen3-30b-a3b"]),
       n=st.sampled_from([1, 2, 8, 16]), ttft=st.floats(20, 5000), tpot=st.floats(5, 200),
       inp=st.sampled_from([512, 4096, 32768]))
def test_the_best_point_meets_the_slos_it_was_asked_for(model, n, ttft, tpot, inp):
    plan = search(load_model(model), H200, num_gpus=n, workload=Workload(inp, 512), ttft_ms=ttft, tpot_ms=tpot)
    if plan.best is not None:
        assert plan.best.ttft_s * 1000 <= ttft and plan.best.tpot_s * 1000 <= tpot and plan.best.fits
    else:
        assert not any(p.meets_slo and p.fits for p in plan.points)


# --- launch commands --------------------------------------------------------------------------------

def _flags(command: str) -> dict:
    args = shlex.split(command)
    out = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            out[a] = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True
    return out


def test_commands_parse_and_hold_the_chosen_values(plan16):
    best = plan16.best
    v, s = _flags(plan16.vllm_command), _flags(plan16.sglang_command)
    assert shlex.split(plan16.vllm_command)[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
    assert shlex.split(plan16.sglang_command)[:3] == ["python", "-m", "sglang.launch_server"]
    assert s["--model-path"] == "deepseek-ai/DeepSeek-V3" and s["--tp-size"] == str(best.tp)
    assert v["--max-model-len"] == s["--context-length"] == str(4096 + 1024)
    assert v["--gpu-memory-utilization"] == s["--mem-fraction-static"] == "0.9"
    assert v["--block-size"] == s["--page-size"] == "64"
    assert s["--max-running-requests"] == str(best.batch_per_replica)
    if best.dp_attention:
        assert v["--data-parallel-size"] == str(best.tp) and v["--tensor-parallel-size"] == "1"
        assert s["--dp-size"] == str(best.tp) and s["--enable-dp-attention"] is True
        assert int(v["--max-num-seqs"]) == math.ceil(best.batch_per_replica / best.tp)
    if best.ep > 1:
        assert v["--enable-expert-parallel"] is True and s["--ep-size"] == str(best.ep)
    if best.tp > 8:
        assert s["--nnodes"] == str(best.tp // 8) and s["--node-rank"] == "0"


@pytest.mark.parametrize("kv, vllm, sglang", [("fp8", "fp8", "fp8_e4m3"), ("bf16", "auto", "auto"),
                                               ("fp8_ds_mla", "fp8_ds_mla", None), ("q4_0", None, None)])
def test_kv_dtype_in_each_engines_spelling(kv, vllm, sglang):
    plan = search(V3, H200, num_gpus=8, workload=Workload(4096, 1024, spec_tokens=1, acceptance=0.8), kv_dtype=kv,
                  tp=8, dp_attention=True, ep=8, batch=256)
    for cmd, want, flag in ((plan.vllm_command, vllm, "--kv-cache-dtype"), (plan.sglang_command, sglang, "--kv-cache-dtype")):
        if want is None:
            assert cmd is None and any("kv" in n.lower() for n in plan.notes)
        else:
            assert _flags(cmd)[flag] == want
    if plan.vllm_command:
        spec = json.loads(_flags(plan.vllm_command)["--speculative-config"])
        assert spec == {"method": "mtp", "num_speculative_tokens": 1}
    if plan.sglang_command:
        f = _flags(plan.sglang_command)
        assert f["--speculative-num-steps"] == "1" and f["--speculative-num-draft-tokens"] == "2"


# --- published figures ------------------------------------------------------------------------------

def test_no_published_measurement_exceeds_its_bound():
    rows = published_checks()
    assert len(rows) >= 20
    for r in rows:
        assert r["source"] and r["gpu"] and r["parallelism"] and r["workload"]
        assert r["within_bound"], (r["id"], r["measured_per_gpu"], r["bound_per_gpu"])
        assert 0 < r["efficiency"] <= 1
    # the FlashMLA figures against the H800 roof: 3000 of 3350 GB/s, 660 of 989.4 TFLOP/s
    by_id = {r["id"]: r for r in rows}
    assert by_id["flashmla-memory-bound-h800"]["efficiency"] == pytest.approx(3000 / 3350)
    assert by_id["flashmla-compute-bound-h800"]["efficiency"] == pytest.approx(660 / 989.4)
    assert by_id["deepseek-v3-decode-h800"]["measured_per_gpu"] == 14800 / 8
    # TensorRT-LLM perf-overview (v1.0 tables): Llama 3.1 405B FP8, 8 H200 TP8, 128/2048: 5,348 tokens/s on 8 GPUs
    assert by_id["trtllm-1.0-llama-3.1-405b-fp8-h200-tp8-128-2048"]["measured_per_gpu"] == 5348 / 8
    # a time is a lower bound: dstack's vLLM DeepSeek-R1 run on 8 H200 at 4 concurrent (mean TPOT 25.73 ms,
    # mean TTFT 975.65 ms, dstackai/benchmarks raw_data/online_results.csv) sits above the plan's times
    tpot, ttft = by_id["dstack-deepseek-r1-h200-vllm-tp8-c4-tpot"], by_id["dstack-deepseek-r1-h200-vllm-tp8-c4-ttft"]
    assert tpot["measured_per_gpu"] == 0.02572997376 and tpot["batch"] == 4
    assert tpot["bound_per_gpu"] < tpot["measured_per_gpu"] and tpot["efficiency"] == pytest.approx(
        tpot["bound_per_gpu"] / 0.02572997376)
    assert ttft["measured_per_gpu"] == 0.9756508477 and ttft["bound_per_gpu"] < 0.9756508477


def test_published_time_rows_are_checked(monkeypatch):
    """A TPOT without its batch, or a time spread over GPUs, is refused with one line."""
    from mla_core import presets

    base = next(m for m in presets._load("serving_measurements.json")["measurements"]
                if m["id"] == "dstack-deepseek-r1-h200-vllm-tp8-c4-tpot")
    for change, message in (({"batch": None}, "without the batch"), ({"measured_over_gpus": 8}, "at most 1"),
                            ({"measured": 0}, "greater than 0")):
        monkeypatch.setitem(presets._cache, "serving_measurements.json", {"measurements": [{**base, **change}]})
        with pytest.raises(MLAError, match=message):
            published_checks()


def test_traffic_runs_data():
    """data/traffic_runs.json (issue 19's published runs): every run names presets that load, a split that
    tiles its GPUs, and points whose percentiles are ordered; figures pinned to their sources."""
    from mla_core import presets

    runs = presets._load("traffic_runs.json")["runs"]
    assert len(runs) >= 6 and len({r["id"] for r in runs}) == len(runs)
    for r in runs:
        load_model(r["model"]), load_gpu(r["gpu"])
        par = r["parallelism"]
        assert r["source"] and r["engine"] and par["num_gpus"] % par["tp"] == 0, r["id"]
        assert par["ep"] * par.get("moe_tp", par["tp"] // par["ep"]) == par["tp"], r["id"]
        assert r["arrival"] in ("max_concurrency", "request_rate", "burst") and r["points"], r["id"]
        for pt in r["points"]:
            timed = [pt[k] for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s") if k in pt]
            assert timed and pt["source"], r["id"]
            for t in timed:
                assert all(v > 0 for v in t.values()), (r["id"], t)
                assert t.get("median", 0) <= t.get("p99", math.inf), (r["id"], t)
    by_id = {r["id"]: r for r in runs}
    # dstackai/benchmarks raw_data/online_results.csv, h200 / vllm / max_concurrency 4: mean TPOT 25.72997376 ms,
    # p99 TTFT 1030.92695 ms; max_concurrency 128: output throughput 744.7829125 tok/s
    dstack = {p["max_concurrency"]: p for p in by_id["dstack-deepseek-r1-h200-vllm-3200-800-concurrency"]["points"]}
    assert sorted(dstack) == [4, 8, 16, 32, 64, 128]
    assert dstack[4]["tpot_s"]["mean"] == 0.02572997376 and dstack[4]["ttft_s"]["p99"] == 1.03092695
    assert dstack[128]["output_tokens_per_s"] == 744.7829125
    # TensorRT-LLM perf-overview (0.14 online table), LLaMA 3.1 70B, H100, TP 4, 467/256, QPS 8: mean TTFT 92 ms
    trt = by_id["trtllm-0.14-llama-3.1-70b-h100-sxm-tp4-467-256-rate"]["points"]
    assert [p["request_rate"] for p in trt] == [2, 4, 8, 16, 32, None] and trt[2]["ttft_s"] == {"mean": 0.092}


# --- the command line and bad input -----------------------------------------------------------------

def test_cli_done_when():
    d = run_json("plan", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "16", "--gpus-per-node", "8",
                 "--input-len", "4096", "--output-len", "1024", "--ttft-ms", "2000", "--tpot-ms", "50",
                 "--usd-per-gpu-hour", "3")
    plan = search(V3, H200, num_gpus=16, workload=WL, ttft_ms=2000, tpot_ms=50, usd_per_gpu_hour=3.0)
    assert d["best"]["split"] == plan.best.split and d["split"] == plan.best.split
    assert d["usd_per_million_output_tokens"] == pytest.approx(plan.best.usd_per_million_output_tokens)
    assert d["vllm_command"] == plan.vllm_command and d["sglang_command"] == plan.sglang_command
    assert d["pareto"] and all("split" in p for p in d["pareto"])


def test_cli_one_point_and_table():
    d = run_json("plan", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--batch", "64",
                 "--input-len", "4096", "--output-len", "1024")
    p = evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=64)
    assert d["best"]["tpot_s"] == pytest.approx(p.tpot_s) and d["points"] == 1
    t = run("plan", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--input-len", "4096",
            "--output-len", "1024")
    assert t.returncode == 0 and "vllm serve" in t.stdout and "sglang.launch_server" in t.stdout


@pytest.mark.parametrize("extra", [
    ["--num-gpus", "0"],
    ["--num-gpus", "16", "--tp", "3", "--batch", "8"],
    ["--num-gpus", "8", "--tp", "8", "--ep", "512", "--dp-attention", "--batch", "8"],
    ["--num-gpus", "8", "--spec-tokens", "1", "--acceptance", "1.0"],
    ["--num-gpus", "8", "--spec-tokens", "1", "--acceptance", "-0.1"],
    ["--num-gpus", "8", "--usd-per-gpu-hour", "-3"],
    ["--num-gpus", "8", "--prefix-hit", "1"],
    ["--num-gpus", "8", "--ttft-ms", "0"],
    ["--num-gpus", "8", "--batch", "8"],
    ["--num-gpus", "8", "--internode-gbps", "nan"],
    ["--num-gpus", "8", "--tp", "8", "--ep", "3"],
    ["--num-gpus", "8", "--pp", "3"],
    ["--num-gpus", "8", "--tp", "4", "--pp", "2", "--dp-attention"],
    ["--num-gpus", "8", "--pp", "0"],
])
def test_plan_bad_input_exits_2_with_one_line(extra):
    p = run("plan", "--model", "deepseek-v3", "--gpu", "h200", "--input-len", "4096", "--output-len", "1024", *extra)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kwargs, wl", [
    (dict(num_gpus=0), WL),
    (dict(num_gpus=16, tp=3), WL),
    (dict(num_gpus=8, tp=8, dp_attention=True, ep=512), WL),
    (dict(num_gpus=8, tp=8, ep=3), WL),  # ep must divide tp
    (dict(num_gpus=8, tp=4, pp=2, dp_attention=True), WL),  # pp with DP-attention is not planned
    (dict(num_gpus=8, tp=1, pp=16), WL),  # more stages than GPUs
    (dict(num_gpus=128, tp=2, pp=64), WL),  # more stages than DeepSeek-V3's 61 layers
    (dict(num_gpus=8, tp=8), Workload(4096, 1024, spec_tokens=1, acceptance=1.0)),
    (dict(num_gpus=8, tp=8, gpu_memory_utilization=0), WL),
])
def test_evaluate_bad_input_raises_one_line(kwargs, wl):
    with pytest.raises(MLAError) as e:
        evaluate(V3, Deployment(gpu=H200, **kwargs), wl, batch=8)
    assert "\n" not in str(e.value)
    with pytest.raises(MLAError):
        evaluate(V3, Deployment(gpu=H200, num_gpus=8, tp=8), WL, batch=8, usd_per_gpu_hour=-1.0)
    with pytest.raises(MLAError):
        evaluate(load_model("llama-3.1-8b"), Deployment(gpu=H200, num_gpus=2, tp=2, ep=2), WL, batch=8)


# --- per-layer caches in the plan (issue 9 meets issue 10) ------------------------------------------

def test_plan_reads_and_writes_a_hybrids_state():
    from mla_core.kv import state_bytes_per_sequence
    from mla_core.serving import decode_work

    m = load_model("qwen3-next-80b-a3b")
    dep = Deployment(gpu=load_gpu("h200"), num_gpus=2, tp=2)
    wl = Workload(input_len=4096, output_len=1024)
    w = decode_work(m, dep, wl, 8)
    assert w["state_bytes"] == 2 * 8 * state_bytes_per_sequence(m, tp=2) == 2 * 8 * 36 * 548_864
    assert w["step_bytes"] == w["weights_bytes"] + w["kv_bytes"] + w["state_bytes"]
    # The memory cap counts each request's state: capacity's request bytes include it.
    p = evaluate(m, dep, wl, 8)
    assert p.fits


def test_speculative_tokens_bring_the_models_mtp_layers():
    m = load_model("deepseek-v3")
    wl = Workload(input_len=4096, output_len=1024, spec_tokens=1, acceptance=0.8)
    plan = search(m, load_gpu("h200"), num_gpus=8, workload=wl, tp=8, batch=8)
    assert any("MTP draft" in n for n in plan.notes)
    plain = search(m, load_gpu("h200"), num_gpus=8, workload=Workload(input_len=4096, output_len=1024), tp=8, batch=8)
    assert not any("MTP draft" in n for n in plain.notes)


def test_mxfp4_experts_are_costed_at_4_25_bits_in_the_plan():
    from mla_core.serving import decode_work

    m = load_model("gpt-oss-120b")
    dep = Deployment(gpu=load_gpu("h100-sxm"), num_gpus=1, tp=1)
    p = evaluate(m, dep, Workload(input_len=1024, output_len=256), 1)
    assert p.fits  # 60.7 GiB of weights on one 80 GB H100 (vllm#33155 loads it in 64.38 GiB)
    bf16 = decode_work(m, Deployment(gpu=load_gpu("h100-sxm"), weights_dtype="bf16"), Workload(1024, 256), 1)
    mx = decode_work(m, dep, Workload(1024, 256), 1)
    from mla_core.params import params_streamed_per_step, routed_params_streamed_per_step

    routed, streamed = routed_params_streamed_per_step(m, 1), params_streamed_per_step(m, 1)
    assert routed == 4 * 36 * 24_891_840  # top-4 of 128 experts in 36 layers at batch 1
    assert mx["weights_bytes"] == -(-routed * 17 // 32) + 2 * (streamed - routed)
    assert bf16["weights_bytes"] == 2 * streamed


def test_bad_state_dtype_is_one_line():
    with pytest.raises(MLAError, match="state_dtype"):
        evaluate(load_model("qwen3-next-80b-a3b"), Deployment(gpu=load_gpu("h200"), state_dtype="int4"),
                 Workload(1024, 256), 1)


# --- found by trying to break it -------------------------------------------------------------------

def test_groups_must_lay_out_on_nodes():
    from mla_core.serving import group_layout_error

    assert group_layout_error(8, 8) is None and group_layout_error(16, 8) is None and group_layout_error(2, 8) is None
    assert "part-filled" in group_layout_error(12, 8) and "tile" in group_layout_error(3, 8)
    m = load_model("deepseek-v3")
    with pytest.raises(MLAError, match="part-filled"):
        evaluate(m, Deployment(gpu=load_gpu("h200"), num_gpus=8, gpus_per_node=3, tp=8), Workload(4096, 1024), 8)
    plan = search(m, load_gpu("h200"), num_gpus=24, gpus_per_node=8, workload=Workload(4096, 1024))
    assert {p.tp for p in plan.points} <= {1, 2, 4, 8, 24 // 8 * 8} and all(p.tp % 8 == 0 or 8 % p.tp == 0
                                                                          for p in plan.points)
    assert any("skipped" in n for n in plan.notes)
    # Every multi-node command starts as many ranks on each node as the node has GPUs.
    best = search(m, load_gpu("h200"), num_gpus=16, gpus_per_node=8, workload=Workload(4096, 1024)).best
    if best.dp_attention:
        args = shlex.split(search(m, load_gpu("h200"), num_gpus=16, gpus_per_node=8,
                                  workload=Workload(4096, 1024)).vllm_command)
        local = int(args[args.index("--data-parallel-size-local") + 1])
        assert int(args[args.index("--data-parallel-size") + 1]) % local == 0 and local == 8


def test_tp_must_split_the_heads_as_engines_do():
    from mla_core.capacity import capacity
    from mla_core.kv import tp_split_error

    m = load_model("nemotron-nano-9b-v2")  # 40 query heads, 8 KV heads, 128 Mamba-2 heads
    assert "40 query heads" in tp_split_error(m, 3)
    assert tp_split_error(m, 8) is None and tp_split_error(load_model("llama-3.1-70b"), 16) is None  # KV replicated
    with pytest.raises(MLAError, match="query heads"):
        capacity(m, context=8192, gpu=load_gpu("h100-sxm"), tp=3, num_gpus=3)
    assert all(tp_split_error(m, p.tp) is None
               for p in search(m, load_gpu("h100-sxm"), num_gpus=6, workload=Workload(1024, 256)).points)


def test_a_given_batch_past_the_memory_cap_says_so_and_gets_no_command():
    m = load_model("deepseek-v3")
    plan = search(m, load_gpu("h200"), num_gpus=8, workload=Workload(4096, 1024), tp=8, batch=100_000,
                  usd_per_gpu_hour=2.0)
    assert not plan.best.fits and plan.vllm_command is None and plan.sglang_command is None
    assert any("does not fit" in n for n in plan.notes)
    p = run("plan", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--tp", "8",
            "--batch", "100000", "--input-len", "4096", "--output-len", "1024")
    assert p.returncode == 0 and "DOES NOT FIT" in p.stdout and "1 point tried" in p.stdout
    assert "tokens/s)" in p.stdout and "K)" not in p.stdout


def test_the_state_dtype_reaches_the_launch_commands():
    m = load_model("nemotron-nano-9b-v2")
    plan = search(m, load_gpu("h100-sxm"), num_gpus=2, workload=Workload(4096, 1024), state_dtype="fp32")
    v, s = shlex.split(plan.vllm_command), shlex.split(plan.sglang_command)
    assert v[v.index("--mamba-cache-dtype") + 1] == "float32" and s[s.index("--mamba-ssm-dtype") + 1] == "float32"
    auto = search(m, load_gpu("h100-sxm"), num_gpus=2, workload=Workload(4096, 1024))
    assert "--mamba-cache-dtype" not in auto.vllm_command
    dense = search(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), num_gpus=1, workload=Workload(4096, 1024),
                   state_dtype="fp32")
    assert "--mamba-cache-dtype" not in dense.vllm_command  # no recurrent layers, nothing to set


# --- pipeline stages, the MoE split, the NVLink domain (issue 19) ------------------------------------

R1 = load_model("deepseek-r1")


def test_pipeline_stages_split_the_layers_as_vllm_does_and_keep_every_parameter():
    from mla_core.params import params_total
    from mla_core.spec import pipeline_stages, pp_layer_counts

    # vllm/distributed/utils.py get_pp_indices: 61 // 2 = 30 each, the remainder to the stage before the last
    assert pp_layer_counts(61, 2) == (31, 30) and pp_layer_counts(61, 4) == (15, 15, 16, 15)
    assert pp_layer_counts(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)  # Llama-3.1-405B on 8 stages
    first, last = pipeline_stages(R1, 2)
    assert (first.num_hidden_layers, last.num_hidden_layers) == (31, 30)
    assert sum(params_total(st) for st in (first, last)) == params_total(R1) == 671_026_404_352
    # the embedding on the first stage, the LM head on the last: 129,280 x 7,168 each
    from mla_core.params import param_breakdown

    assert param_breakdown(first)["embed_tokens"] == param_breakdown(last)["lm_head"] == 129_280 * 7168
    assert param_breakdown(first)["lm_head"] == param_breakdown(last)["embed_tokens"] == 0


def test_pipeline_stages_hold_their_layers_cache_and_the_tightest_stage_sets_the_cap():
    from mla_core.capacity import capacity
    from mla_core.serving.bound import _group_capacity
    from mla_core.spec import pipeline_stages

    dep = Deployment(gpu=H200, num_gpus=8, tp=4, pp=2)
    # the latent (512 + 64) x 2 B is whole on every TP rank: a stage's GPU holds its own layers'
    caps = [capacity(st, context=1536, gpu=H200, num_gpus=4, tp=4) for st in pipeline_stages(R1, 2)]
    assert [c["kv_bytes_per_token_per_gpu"] for c in caps] == [31 * 1152, 30 * 1152]
    cap = _group_capacity(R1, dep, 1536)
    assert cap["max_concurrent_requests"] == min(c["max_concurrent_requests"] for c in caps)
    # DeepSeek-R1 on TP4 does not fit an H200 (168 GB of fp8 weights a GPU); over two stages it does
    wl = Workload(1024, 1024)
    assert not evaluate(R1, Deployment(gpu=H200, num_gpus=4, tp=4), wl, batch=1).max_batch
    assert evaluate(R1, dep, wl, batch=1).max_batch == cap["max_concurrent_requests"] > 0


def test_a_pipeline_decode_step_by_hand():
    # TP4 x PP2, 64 sequences: 2 micro-batches of 32, each stage's step its own layers; the send is
    # the hidden states and the residual of 32 tokens, 2 x 32 x 7,168 x 2 B split over 4 ranks, over
    # one direction of NVLink (450 GB/s): the step is max(stage 1 + stage 2 + send, 2 x the slower).
    from mla_core.serving import decode_work
    from mla_core.serving.bound import _times
    from mla_core.spec import pipeline_stages

    dep = Deployment(gpu=H200, num_gpus=8, tp=4, pp=2)
    wl = Workload(1024, 1024)
    stage = []
    for st in pipeline_stages(R1, 2):
        w = decode_work(st, dep, wl, 32)
        stage.append(_times(w["step_bytes"], w["step_flops"], w["peak_flops"], dep,
                            communication(st, dep, 32, 32)["time_s"])[3])
    send = 2 * 32 * 7168 * 2 / 4 / 450e9
    p = evaluate(R1, dep, wl, batch=64, engine=None)
    assert p.pp == 2 and p.micro_batches == 2 and p.pp_send_s == pytest.approx(send)
    assert p.stage_step_s == pytest.approx(max(stage))
    assert p.step_time_s == pytest.approx(max(sum(stage) + send, 2 * max(stage)))
    # one sequence: one micro-batch passes both stages, the latency is their sum plus the send
    one = evaluate(R1, dep, wl, batch=1, engine=None)
    assert one.micro_batches == 1 and one.step_time_s > one.stage_step_s
    # stages across nodes: TP8 x PP2 on two nodes of 8 sends over the network (400 Gb/s = 50 GB/s a GPU)
    two = evaluate(R1, Deployment(gpu=H200, num_gpus=16, tp=8, pp=2), wl, batch=64, engine=None)
    assert two.pp_send_s == pytest.approx(2 * 32 * 7168 * 2 / 8 / 50e9)


def test_the_moe_split_inside_a_tp_group():
    from mla_core.serving.step import forward_ops
    from mla_core.serving.ops import MoE

    wl = Workload(1024, 1024)
    tp8 = evaluate(R1, Deployment(gpu=H200, num_gpus=8, tp=8), wl, batch=64, engine=None)
    split = evaluate(R1, Deployment(gpu=H200, num_gpus=8, tp=8, ep=4), wl, batch=64, engine=None)
    # the same bytes, flops and all-reduces a step (every rank holds every token; E / ep experts,
    # 1 / moe_tp of each, are tp-th of the experts' weights in expectation) ...
    assert split.step_time_s == pytest.approx(tp8.step_time_s) and split.moe_tp == 2 and split.ep == 4
    assert split.split == "TP8 + MoE TP2 x EP4"
    # ... but the MoE kernel the tables are asked for is TensorRT-LLM's moe_tp_size 2 x moe_ep_size 4
    moe = [o for o in forward_ops(R1, Deployment(gpu=H200, num_gpus=8, tp=8, ep=4), wl, decode_seqs=64, context=1536)
           if isinstance(o, MoE)]
    assert {(o.experts_local, o.moe_tp, o.num_experts) for o in moe} == {(64, 2, 256)}
    # DP-attention with 1 < ep < tp gathers the group's tokens as with ep 1 (no all-to-all)
    dp = Deployment(gpu=H200, num_gpus=8, tp=8, dp_attention=True, ep=4)
    assert {op for op, _, _ in communication_calls(R1, dp, 64, 8)} == {"all_gather", "reduce_scatter"}


def test_moe_split_and_pipeline_commands():
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--tp", "8", "--ep", "4",
                 "--input-len", "1024", "--output-len", "1024")
    assert d["split"] == "TP8 + MoE TP2 x EP4" and d["best"]["moe_tp"] == 2
    sgl, trt = shlex.split(d["sglang_command"]), shlex.split(d["trtllm_command"])
    assert sgl[sgl.index("--tp-size") + 1] == "8" and sgl[sgl.index("--ep-size") + 1] == "4"
    assert trt[trt.index("--tp_size") + 1] == "8" and trt[trt.index("--ep_size") + 1] == "4"
    assert d["vllm_command"] is None and any("vLLM has no MoE TP x EP split" in n for n in d["notes"])
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--pp", "2",
                 "--input-len", "1024", "--output-len", "1024")
    assert d["split"] == "TP4 + PP2" and d["best"]["pp"] == 2
    vllm, sgl, trt = (shlex.split(d[k]) for k in ("vllm_command", "sglang_command", "trtllm_command"))
    assert vllm[vllm.index("--tensor-parallel-size") + 1] == "4" and vllm[vllm.index("--pipeline-parallel-size") + 1] == "2"
    assert sgl[sgl.index("--pp-size") + 1] == "2" and trt[trt.index("--pp_size") + 1] == "2"
    assert any("31, 30 decoder layers" in n for n in d["notes"])
    # TP8 x PP2 on two nodes: vLLM over Ray, SGLang over 2 nodes
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "16", "--tp", "8", "--pp", "2",
                 "--input-len", "1024", "--output-len", "1024")
    sgl = shlex.split(d["sglang_command"])
    assert sgl[sgl.index("--nnodes") + 1] == "2" and "ray" in d["vllm_command"]


def test_the_search_tries_pipeline_stages_where_they_fill_a_node():
    from mla_core.serving import splits

    got = {(t, p) for t, dp, e, p in splits(R1, 16, 8) if p > 1}
    # TP x PP = the node (8), and TP8 with stages across nodes
    assert got == {(1, 8), (2, 4), (4, 2), (8, 2)}
    assert all(p == 1 for t, dp, e, p in splits(R1, 16, 8) if dp)


def test_an_nvl72_plans_as_one_nvlink_domain():
    from mla_core.serving.inputs import default_gpus_per_node

    assert default_gpus_per_node(load_gpu("gb200-nvl72")) == 72 and default_gpus_per_node(H200) == 8
    assert default_gpus_per_node(load_gpu("h100-nvl")) == 8  # 2-GPU bridges in 8-GPU hosts
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "gb200-nvl72", "--num-gpus", "72",
                 "--input-len", "1024", "--output-len", "1024")
    assert d["gpus_per_node"] == 72 and d["launch_command"] and d["sglang_command"]
    assert {s["tp"] for s in d["splits"]} >= {12, 24, 36, 72}  # groups over the whole rack, no node boundary
    assert not any("skipped" in n for n in d["notes"])
    # 128 heads: TP attention up to 8; the rack-wide group is DP-attention 72 + EP72, NVLink only
    ep72 = next(s for s in d["splits"] if s["tp"] == 72 and s["ep"] == 72)
    assert ep72["split"] == "DP-attention 72 + EP72" and ep72["best"]["communication_bytes_per_gpu"] > 0
    dep = Deployment(gpu=load_gpu("gb200-nvl72"), num_gpus=72, gpus_per_node=72, tp=72, dp_attention=True, ep=72)
    c = communication(R1, dep, 72 * 8, 8)
    assert c["network_bytes"] == 0 and c["alltoall_bytes"] > 0


# --- prefill/decode disaggregation (issue 19) ------------------------------------------------------

def test_the_kv_transfer_by_hand():
    from mla_core.serving.disagg import kv_transfer

    wl = Workload(1024, 1024)
    # DeepSeek-R1's latent, 1,024 tokens x 61 layers x (512 + 64) x 2 B, whole on a DP-attention GPU
    # and on every TP rank; two pools of 8 on nodes of 8 move it over the network, 400 Gb/s = 50 GB/s a GPU
    pre, dec = Deployment(gpu=H200, num_gpus=8, tp=8), Deployment(gpu=H200, num_gpus=8, tp=8, dp_attention=True)
    x = kv_transfer(R1, pre, dec, wl)
    assert x["bytes"] == x["bytes_per_gpu"] == 1024 * 61 * 1152 == 71_958_528
    assert x["link"] == "network" and x["time_s"] == pytest.approx(71_958_528 / 50e9)
    # the TP8 prefill side sends the latent from each of its 8 ranks: min(8, 8) links carry 8 x that a request
    assert x["requests_per_s"] == pytest.approx(8 * 50e9 / (8 * 71_958_528))
    # both pools in one NVL72 rack: NVLink 5, 1.8 TB/s both ways, 900 GB/s each
    nvl = load_gpu("gb200-nvl72")
    x = kv_transfer(R1, replace_gpu(pre, nvl, 72), replace_gpu(dec, nvl, 72), wl)
    assert x["link"] == "NVLink" and x["time_s"] == pytest.approx(71_958_528 / 900e9)
    # Llama-3.1-70B's GQA cache, 4,096 tokens x 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 1,342,177,280 B:
    # a TP4 rank holds 2 of the 8 heads, a TP1 x PP4 stage GPU 20 of the 80 layers: a quarter each
    llama = load_model("llama-3.1-70b")
    x = kv_transfer(llama, Deployment(gpu=H200, num_gpus=4, tp=1, pp=4), Deployment(gpu=H200, num_gpus=4, tp=4),
                    Workload(4096, 512))
    assert x["bytes"] == 80 * 2 * 8 * 128 * 2 * 4096 == 1_342_177_280 and x["bytes_per_gpu"] == 1_342_177_280 // 4
    assert x["link"] == "NVLink" and x["time_s"] == pytest.approx(1_342_177_280 / 4 / 450e9)


def replace_gpu(dep, gpu, gpn):
    return dataclasses.replace(dep, gpu=gpu, gpus_per_node=gpn)


def test_a_disaggregated_pair_adds_its_pools_up():
    from mla_core.serving.disagg import disaggregate

    wl = Workload(1024, 1024)
    r = disaggregate(R1, H200, prefill_gpus=8, decode_gpus=8, workload=wl, tpot_ms=50)
    assert r.ttft_s == pytest.approx(r.prefill.ttft_s + r.kv_transfer_s)
    assert r.tpot_s == r.decode.point.estimate.tpot_s <= 0.050 and r.meets_slo
    assert r.request_rate == min(r.prefill.requests_per_s, r.decode.requests_per_s) and r.limit != "transfer"
    assert r.output_tokens_per_s_per_gpu == pytest.approx(r.request_rate * 1024 / 16)
    # the decode pool makes output_len - 1 tokens a request at its decode tokens/s
    d = r.decode.point
    assert r.decode.requests_per_s == pytest.approx(d.estimate.tokens_per_s_per_gpu * 8 / 1023)
    # no estimate is faster than its bound
    b = r.bound
    assert r.ttft_s >= b["ttft_s"] and r.tpot_s >= b["tpot_s"] and r.request_rate <= b["request_rate"]
    assert r.prefill.requests_per_s <= r.prefill.requests_per_s_bound
    json.dumps(r.to_dict(), allow_nan=False)


def test_the_prefill_pool_never_beats_its_bound():
    # the prefill pool's rate: a full chunk of prompts on every attention rank, one step every interval
    from mla_core.serving.disagg import _prefill_candidate
    from mla_core.serving.search import estimator, splits
    from mla_core.serving.inputs import check_deployment

    est, tried = estimator(H200, "vllm"), 0
    for mid in ("deepseek-v3", "llama-3.1-8b", "gemma-3-1b", "qwen2-57b-a14b", "jamba-1.5-mini", "gpt-oss-120b"):
        m = load_model(mid)
        for wl in (Workload(1024, 128), Workload(16384, 128), Workload(300, 10, prefix_hit=0.5)):
            for t, dp, e, pp in splits(m, 8, 8):
                try:
                    dep = check_deployment(m, Deployment(gpu=H200, num_gpus=8, tp=t, dp_attention=dp, ep=e, pp=pp))
                except MLAError:
                    continue
                c = _prefill_candidate(m, dep, wl, est)
                if c is not None:
                    tried += 1
                    assert c["rate"] <= c["rate_bound"] * (1 + 1e-9) and c["ttft_s"] >= c["ttft_bound_s"], (mid, dep.split)
    assert tried > 100


def test_disaggregation_on_the_command_line():
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--prefill-gpus", "8", "--decode-gpus", "8",
                 "--input-len", "1024", "--output-len", "1024", "--engine", "sglang")
    g = d["disagg"]
    assert d["num_gpus"] == 16 and g["prefill_gpus"] == 8 and g["decode_gpus"] == 8
    for key in ("prefill_split", "decode_split", "kv_transfer_s", "kv_transfer_bytes", "ttft_s", "tpot_s",
                "request_rate", "output_tokens_per_s_per_gpu", "commands", "bound", "aggregated"):
        assert key in g
    c = g["commands"]
    vp, vd = shlex.split(c["prefill"]["vllm_command"]), shlex.split(c["decode"]["vllm_command"])
    assert json.loads(vp[vp.index("--kv-transfer-config") + 1]) == {"kv_connector": "NixlConnector",
                                                                     "kv_role": "kv_producer"}
    assert json.loads(vd[vd.index("--kv-transfer-config") + 1])["kv_role"] == "kv_consumer"
    sp, sd = shlex.split(c["prefill"]["sglang_command"]), shlex.split(c["decode"]["sglang_command"])
    assert sp[sp.index("--disaggregation-mode") + 1] == "prefill" and sd[sd.index("--disaggregation-mode") + 1] == "decode"
    assert sp[sp.index("--disaggregation-transfer-backend") + 1] == "mooncake"
    router = shlex.split(c["sglang_router_command"])
    assert router[:4] == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    assert router[router.index("--prefill") + 1].endswith(":30000") and sp[sp.index("--port") + 1] == "30000"
    # the pools' splits can be given
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--prefill-gpus", "8", "--decode-gpus", "8",
                 "--prefill-tp", "8", "--decode-tp", "8", "--decode-dp-attention", "--decode-ep", "8",
                 "--input-len", "1024", "--output-len", "1024")
    assert d["disagg"]["prefill_split"] == "TP8" and d["disagg"]["decode_split"] == "DP-attention 8 + EP8"
    t = run("plan", "--model", "deepseek-r1", "--gpu", "h200", "--prefill-gpus", "8", "--decode-gpus", "8",
            "--input-len", "1024", "--output-len", "1024")
    assert t.returncode == 0 and "disaggregated (estimate): 8 prefill GPUs" in t.stdout and "SGLang router:" in t.stdout


def test_the_pool_sizes_are_searched_for_the_workload():
    d = run_json("plan", "--model", "llama-3.1-70b", "--gpu", "h200", "--num-gpus", "8", "--disagg",
                 "--input-len", "4096", "--output-len", "512", "--ttft-ms", "1000", "--tpot-ms", "40")["disagg"]
    tried = d["searched"]
    # 70B in bf16 needs 2 H200s a pool: 2 + 6, 4 + 4, 6 + 2
    assert [(t["prefill_gpus"], t["decode_gpus"]) for t in tried] == [(2, 6), (4, 4), (6, 2)]
    ok = [t for t in tried if t["meets_slo"]]
    assert d["meets_slo"] and d["output_tokens_per_s_per_gpu"] == max(t["output_tokens_per_s_per_gpu"] for t in ok)
    assert d["prefill_gpus"] + d["decode_gpus"] == 8


@pytest.mark.parametrize("extra", [
    ["--prefill-gpus", "8"],
    ["--prefill-gpus", "8", "--decode-gpus", "8", "--num-gpus", "8"],
    ["--num-gpus", "8", "--prefill-tp", "8"],
    ["--disagg"],
    ["--disagg", "--num-gpus", "8", "--prefill-gpus", "4", "--decode-gpus", "4"],
    ["--prefill-gpus", "2", "--decode-gpus", "8"],  # DeepSeek-R1 does not fit two H200s
])
def test_disaggregation_bad_input_exits_2_with_one_line(extra):
    p = run("plan", "--model", "deepseek-r1", "--gpu", "h200", "--input-len", "1024", "--output-len", "1024", *extra)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (p.returncode, p.stderr)


def test_traffic_at_a_pipeline_split_says_it_is_not_modelled():
    d = run_json("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--pp", "2",
                 "--input-len", "1024", "--output-len", "1024", "--rate", "2", "--num-prompts", "20")
    assert d["traffic"]["available"] is False and "pipeline stages" in d["traffic"]["reason"]


def test_the_step_caches_keep_steps_across_memory_settings_and_never_their_caps():
    """search's step caches key a split by search.timing_deployment (gpu_memory_utilization,
    block_size and reserve_bytes at their defaults: only the cache's size reads them). A search
    after another with other memory settings is the cold search of its own settings, point for
    point (caps, batches, TTFT, estimates), and the settings do change the caps."""
    from mla_core.serving.search import clear_caches, search

    wl = Workload(4096, 1024)
    settings = [dict(gpu_memory_utilization=0.9), dict(gpu_memory_utilization=0.8),
                dict(gpu_memory_utilization=0.8, block_size=128, reserve_bytes=4 << 30)]
    cold = []
    for kw in settings:
        clear_caches()
        cold.append(search(V3, H200, num_gpus=16, gpus_per_node=8, workload=wl, ttft_ms=2000, tpot_ms=50, **kw))
    clear_caches()
    warm = [search(V3, H200, num_gpus=16, gpus_per_node=8, workload=wl, ttft_ms=2000, tpot_ms=50, **kw)
            for kw in settings]
    assert [p.to_dict() for p in warm] == [p.to_dict() for p in cold]
    caps = [{s.split: s.max_batch for s in p.splits} for p in cold]
    assert caps[0] != caps[1] != caps[2], caps  # each setting its own caps, not the first search's
