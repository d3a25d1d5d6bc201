"""The serving estimate (mla_core.serving: ops, tables, aic, engines, step; issue 18): hand-computed
op times, the interpolation, the kernel tables' precedence, aiconfigurator-core's tables read
as published, the engines' capture rules, `plan --engine`, and the rule that an estimate is
never faster than the bound, over every preset and every split the search tries."""
from __future__ import annotations

import json
import math

import pytest

from test_cli import run, run_json
from mla_core.errors import MLAError
from mla_core.presets import load_gpu, load_model, model_entries
from mla_core.serving import Deployment, Workload, evaluate, search
from mla_core.serving.engines import ENGINES, engine_rules
from mla_core.serving.interp import Grid
from mla_core.serving.ops import AttentionDecode, Collective, Elementwise, Gemm
from mla_core.serving.tables import UNCALIBRATED, ProfileTable, UncalibratedTable, bind, kernel_tables

H200 = load_gpu("h200")
R1 = load_model("deepseek-r1")
DEP8 = Deployment(gpu=H200, num_gpus=8, tp=8)
RTX8 = Deployment(gpu=load_gpu("rtx-pro-6000"), num_gpus=8, tp=8)
aic = pytest.importorskip  # aiconfigurator-core is the optional extra `aic` (requirements-dev.txt installs it)


def _uncal(dep=DEP8):
    return bind((UncalibratedTable(),), dep.gpu, dep)


# --- ops and the uncalibrated model, by hand ---------------------------------------------------------

def test_an_uncalibrated_gemm_by_hand():
    # 1 x 7168 @ 7168 x 7168 in bf16 on an H200 (4.8 TB/s, 989.4 TFLOP/s dense bf16):
    # bytes = 7168^2 x 2 + 2 x (7168 + 7168) = 102,789,120; flops = 2 x 7168^2 = 102,760,448.
    op = Gemm("o_proj", 1, m=1, n=7168, k=7168, dtype="bf16")
    assert op.work() == (102_789_120, 102_760_448.0)
    floor, eff_mem, eff_cmp, _ = UNCALIBRATED["gemm"]
    t = op.time(_uncal())
    expected = floor + max(102_789_120 / (eff_mem * 4.8e12), 102_760_448 / (eff_cmp * 989.4e12))
    assert t.per_call_s == pytest.approx(expected)
    assert t.roofline_s == pytest.approx(102_789_120 / 4.8e12)
    assert t.source == "uncalibrated" and not t.measured


def test_an_op_never_runs_below_its_roofline():
    # A profile that claims a 16384^2 bf16 GEMM in 1 ns: the roofline (its 537 MB over 4.8 TB/s) is used.
    prof = {"kind": "profile", "model": "x", "tp": 1, "ops": {"gemm": [
        {"m": 1, "n": 16384, "k": 16384, "dtype": "bf16", "latency_s": 1e-9},
        {"m": 64, "n": 16384, "k": 16384, "dtype": "bf16", "latency_s": 2e-9}]}}
    op = Gemm("big", 1, m=1, n=16384, k=16384, dtype="bf16")
    t = op.time(bind((ProfileTable(prof), UncalibratedTable()), H200, DEP8))
    assert t.per_call_s == pytest.approx(op.work()[0] / 4.8e12) and "roofline used" in t.note


def test_collective_roofline_is_the_bounds_wire_formula():
    # TP8 all-reduce of 1 MiB within a node: 2 x 7/8 x 1 MiB over one direction of NVLink (450 GB/s).
    op = Collective("TP all-reduce", 1, op="all_reduce", bytes=float(1 << 20), ranks=8)
    hw = _uncal().hw
    assert op.roofline_s(hw) == pytest.approx(2 * 7 / 8 * (1 << 20) / 450e9)


def test_an_ops_answer_is_kept_per_shape_and_hardware_and_scaled_by_its_own_calls():
    """Op.time keeps the per-call answer by shape, table chain and hardware: another op at the same
    shape gets it under its own name and calls; another GPU, or a collective over other links,
    gets its own answer."""
    from mla_core.serving.ops import _PER_CALL

    _PER_CALL.clear()
    chain = (UncalibratedTable(),)
    a = Gemm("o_proj", 1, m=1, n=7168, k=7168, dtype="bf16").time(bind(chain, H200, DEP8))
    b = Gemm("q_b_proj", 61, layer="dense", m=1, n=7168, k=7168, dtype="bf16").time(bind(chain, H200, DEP8))
    assert len(_PER_CALL) == 1 and (b.name, b.layer, b.calls) == ("q_b_proj", "dense", 61)
    assert b.per_call_s == a.per_call_s and b.time_s == pytest.approx(61 * a.time_s)
    assert b.bytes == pytest.approx(61 * a.bytes) and b.roofline_s == pytest.approx(61 * a.roofline_s)
    b200 = Deployment(gpu=load_gpu("b200"), num_gpus=8, tp=8)
    c = Gemm("o_proj", 1, m=1, n=7168, k=7168, dtype="bf16").time(bind(chain, b200.gpu, b200))
    assert c.roofline_s == pytest.approx(a.bytes / 8e12) and c.per_call_s < a.per_call_s  # B200: 8 TB/s
    ar = Collective("TP all-reduce", 1, op="all_reduce", bytes=float(1 << 20), ranks=8)
    nvlink = ar.time(bind(chain, H200, DEP8)).roofline_s
    measured = ar.time(bind(chain, H200, Deployment(gpu=H200, num_gpus=8, tp=8, link_bandwidth_Bps=100e9))).roofline_s
    assert nvlink == pytest.approx(2 * 7 / 8 * (1 << 20) / 450e9)
    assert measured == pytest.approx(2 * 7 / 8 * (1 << 20) / 100e9)


# --- interpolation -----------------------------------------------------------------------------------

def test_log_space_interpolation_is_exact_on_a_power_law_and_marks_what_is_outside():
    g = Grid.from_points([(1,), (4,), (16,)], [1e-5, 2e-5, 4e-5])  # t = 1e-5 sqrt(m)
    hit = g(2)
    assert hit.value == pytest.approx(1e-5 * math.sqrt(2)) and not hit.outside
    out = g(64)
    assert out.outside and out.point == (16.0,) and out.value == pytest.approx(4e-5)
    # two axes with a gap: the query needs an unmeasured cell, so it is the nearest measured point
    g2 = Grid.from_points([(1, 1), (1, 8), (8, 1)], [1.0, 2.0, 3.0])
    assert g2(2, 2).outside


def test_the_profile_comes_first_and_an_op_it_lacks_goes_to_the_next_table(tmp_path):
    prof = {"kind": "profile", "run_id": "run-7", "model": "m", "tp": 1, "ops": {"gemm": [
        {"m": 1, "n": 4096, "k": 4096, "dtype": "bf16", "latency_s": 10e-6},
        {"m": 16, "n": 4096, "k": 4096, "dtype": "bf16", "latency_s": 40e-6}]}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(prof))
    chain = bind((ProfileTable(str(path)), UncalibratedTable()), H200, DEP8)
    t = Gemm("qkv", 1, m=4, n=4096, k=4096, dtype="bf16").time(chain)
    assert t.per_call_s == pytest.approx(20e-6) and t.source == "own profile run-7"  # sqrt(10 x 40)
    far = Gemm("qkv", 1, m=4096, n=4096, k=4096, dtype="bf16").time(chain)
    assert "outside the measured shapes" in far.note and far.source == "own profile run-7"
    att = AttentionDecode("attention", 1, batch=1, context=100, token_bytes=256, flops_per_token=512).time(chain)
    assert att.source == "uncalibrated"


@pytest.mark.parametrize("bad", [{"kind": "roofline"}, {"kind": "profile"},
                                 {"kind": "profile", "ops": {"gemm": [{"m": 1}]}}])
def test_a_bad_profile_is_one_line(bad):
    with pytest.raises(MLAError) as e:
        ProfileTable(bad)
    assert "\n" not in str(e.value)


def test_a_missing_profile_file_is_one_line(tmp_path):
    with pytest.raises(MLAError, match="profile"):
        ProfileTable(str(tmp_path / "none.json"))


# --- aiconfigurator-core's tables --------------------------------------------------------------------

def test_aiconfigurator_gemm_read_as_published():
    aic("aiconfigurator_core")
    from mla_core.serving.aic import aic_table

    table = aic_table("h200", "vllm")
    # aiconfigurator-core 0.12.0, systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet: the bf16 row
    # m=1, n=k=16384 has latency 0.125006 ms.
    look = table.lookup(Gemm("g", 1, m=1, n=16384, k=16384, dtype="bf16"), _uncal().hw)
    assert look.latency_s == pytest.approx(0.125006e-3, rel=1e-5)
    assert look.source == "aiconfigurator-core 0.12.0 h200_sxm/vllm 0.24.0" and look.note == ""
    assert any("mem_bw_empirical_scaling_factor" in n for n in table.describe()["notes"])
    # a shape past the table (m = 200,000 tokens) is scaled by the roofline, with a note
    big = table.lookup(Gemm("g", 1, m=200_000, n=16384, k=16384, dtype="bf16"), _uncal().hw)
    assert "outside" in big.note and big.latency_s > 0.125006e-3


def test_a_block_scaled_table_that_stops_short_gives_way_to_the_per_tensor_one():
    # aiconfigurator-core 0.12.0, systems/data/rtx_pro_6000_server/gemm/vllm/0.24.0/gemm_perf.parquet: its
    # fp8_block rows stop at n, k <= 128 (518 rows), its fp8 rows reach 65,536. DeepSeek-R1's o_proj at TP8 on
    # a decode batch of 81 (m 81, n 7168, k 2048) is read from the fp8 rows, not the n 128, k 64 block kernel
    # scaled up 1,000-fold by the roofline (which made a decode step 13.6 s).
    aic("aiconfigurator_core")
    from mla_core.serving.aic import aic_table

    table = aic_table("rtx-pro-6000", "vllm")
    hw = _uncal(RTX8).hw
    block = table.lookup(Gemm("o_proj", 1, m=81, n=7168, k=2048, dtype="fp8", block_fp8=True), hw)
    plain = table.lookup(Gemm("o_proj", 1, m=81, n=7168, k=2048, dtype="fp8"), hw)
    assert "per-tensor fp8" in block.note and block.latency_s == plain.latency_s
    assert block.latency_s < 1e-3  # a 15 MB weight read on a 1.8 TB/s card: tens of microseconds, not 70 ms


def test_aiconfigurator_custom_allreduce_in_and_out_of_a_graph():
    aic("aiconfigurator_core")
    from mla_core.serving.aic import aic_table

    table = aic_table("h200", "vllm")
    hw = _uncal().hw
    # custom_allreduce_perf (comm/vllm/0.24.0): TP8 at 128 bf16 elements, 4.7 us in a CUDA graph, 20.7 us eager
    graph = table.lookup(Collective("ar", 1, op="all_reduce", bytes=256.0, ranks=8, graph=True), hw)
    eager = table.lookup(Collective("ar", 1, op="all_reduce", bytes=256.0, ranks=8, graph=False), hw)
    assert graph.latency_s == pytest.approx(4.7e-6, rel=0.05) and eager.latency_s == pytest.approx(20.7e-6, rel=0.05)
    # a group over two nodes is not in the tables: the next table answers
    assert table.lookup(Collective("ar", 1, op="all_reduce", bytes=256.0, ranks=16, nodes=2), hw) is None


def test_gpus_without_measured_systems_get_the_uncalibrated_model():
    plan = search(load_model("llama-3.1-8b"), load_gpu("mi300x"), num_gpus=1, tp=1, batch=1,
                  workload=Workload(1024, 128))
    e = plan.best.estimate
    assert e.source == "uncalibrated (100%)" and e.confidence == "low"
    assert plan.kernel_tables == ("uncalibrated",)


# --- engines and the step ----------------------------------------------------------------------------

def test_decode_is_captured_up_to_the_engines_graph_batch_and_prefill_never():
    m, gpu, wl = load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(512, 64)
    dep = Deployment(gpu=gpu, num_gpus=1, tp=1)
    # vLLM captures up to 512 (min(2 x max_num_seqs, 512)); TensorRT-LLM's default graphs stop at 128
    assert engine_rules("vllm").graph_max_batch(80, 1) == 512 and engine_rules("trtllm").graph_max_batch(80, 1) == 128
    # SGLang's cuda_graph_max_bs by memory tier: 80 GB and tp 1 -> 256; 141 GB and tp 8 -> 512
    assert engine_rules("sglang").graph_max_batch(80, 1) == 256 and engine_rules("sglang").graph_max_batch(141, 8) == 512
    p_vllm = evaluate(m, dep, wl, 256, engine="vllm").estimate
    p_trt = evaluate(m, dep, wl, 256, engine="trtllm").estimate
    assert p_vllm.captured and not p_trt.captured
    plan = search(m, gpu, num_gpus=1, tp=1, batch=256, workload=wl)
    assert plan.estimate["prefill"][0]["captured"] is False and plan.estimate["decode_step"]["captured"] is True


def test_the_step_is_its_ops_summed_in_one_place():
    plan = search(R1, H200, num_gpus=8, tp=8, batch=4, workload=Workload(3200, 800), kernel_tables="uncalibrated")
    d = plan.estimate["decode_step"]
    # vLLM runs the shared experts beside the routed ones at 4 tokens: the step is the ops' sum less what
    # that overlap hides, plus the engine's per-step overhead
    ops_sum = sum(o["time_s"] for o in d["ops"])
    assert d["gpu_s"] == pytest.approx(ops_sum - d["overlap_saved_s"]) and d["overlap_saved_s"] > 0
    assert d["time_s"] == pytest.approx(d["gpu_s"] + engine_rules("vllm").step_overhead_s)
    names = {o["name"] for o in d["ops"]}
    assert {"q_a + kv_a", "W_UK (absorbed)", "attention", "routed experts", "shared experts gate_up",
            "TP all-reduce", "lm_head", "sampling"} <= names
    # MoE: 58 layers of routed experts over 4 tokens x top-8 rows
    moe = next(o for o in d["ops"] if o["name"] == "routed experts")
    assert moe["calls"] == 58


def test_what_engines_keep_unquantized_runs_at_the_weights_own_float_dtype():
    """The absorbed W_UK / W_UV, the router and the LM head stay bf16 under DeepSeek-R1's fp8
    checkpoint (vLLM's MLA backends and fused_moe gate), and at the model's own dtype otherwise:
    a reduced model profiled in fp32 on a CPU looks them up as fp32 GEMMs, as it ran them (before,
    their weights counted at 2 bytes left an 'other weights' read the torch model never did:
    +6.5 % on the reduced DeepSeek-V2-Lite's decode step, benchmarks/reduced_model.md)."""
    from dataclasses import replace

    from mla_core.serving.step import forward_ops

    kept = {"W_UK (absorbed)", "W_UV (absorbed)", "router", "lm_head"}

    def dtypes(model, weights_dtype):
        dep = Deployment(gpu=H200, num_gpus=1, tp=1, weights_dtype=weights_dtype, kv_dtype="bf16")
        ops = forward_ops(model, dep, Workload(512, 1), decode_seqs=4, context=512)
        got = {o.name: o.dtype for o in ops if isinstance(o, Gemm) and o.name in kept}
        assert set(got) == kept
        return set(got.values())

    assert dtypes(R1, "fp8") == {"bf16"}
    assert dtypes(replace(load_model("deepseek-v2-lite"), torch_dtype="fp32"), "fp32") == {"fp32"}


def test_a_mixed_step_reads_the_weights_once():
    from mla_core.serving.step import estimate_step

    dep = Deployment(gpu=H200, num_gpus=8, tp=8)
    wl = Workload(2048, 256)
    tables, rules = _uncal(dep), engine_rules("vllm")
    decode = estimate_step(R1, dep, wl, tables, rules, decode_seqs=32, context=2176)
    prefill = estimate_step(R1, dep, wl, tables, rules, prefill_tokens=2048)
    mixed = estimate_step(R1, dep, wl, tables, rules, decode_seqs=32, context=2176, prefill_tokens=2048)
    assert mixed.phase == "mixed" and not mixed.captured
    assert max(decode.time_s, prefill.time_s) < mixed.time_s < decode.time_s + prefill.time_s


def test_a_stored_profile_needs_the_store():
    import importlib.util

    if importlib.util.find_spec("mla_core.store") is not None:
        pytest.skip("the store is installed: run ids are its to check")
    with pytest.raises(MLAError, match="mla_core.store"):
        ProfileTable(12)


# --- never faster than the bound ---------------------------------------------------------------------

def _assert_not_below_bound(plan):
    for p in plan.points:
        assert p.estimate.decode_step_s >= p.step_time_s * (1 - 1e-9), (plan.model, p.split, p.batch)
        assert p.estimate.ttft_s >= p.ttft_s * (1 - 1e-9), (plan.model, p.split, p.batch)


@pytest.mark.parametrize("gpu", ["h200", "mi300x"])
def test_no_estimate_is_faster_than_the_bound_for_any_preset_and_split(gpu):
    # h200: aiconfigurator-core's vLLM tables where installed; mi300x: the uncalibrated model
    wl = Workload(2048, 512)
    tried = 0
    for mid in model_entries():
        plan = search(load_model(mid), load_gpu(gpu), num_gpus=8, workload=wl, engine="vllm")
        _assert_not_below_bound(plan)
        tried += len(plan.points)
    assert tried > 1000


# Splits the search leaves out but a user may give: MoE TP x EP inside a TP or a DP-attention
# group, and pipeline stages at every depth (the search tries them where they fill a node).
GIVEN_SPLITS = (dict(tp=8, ep=2), dict(tp=8, ep=4), dict(tp=8, ep=4, dp_attention=True),
                dict(tp=4, ep=2, pp=2), dict(tp=2, pp=4), dict(tp=1, pp=8), dict(tp=8, pp=2))


@pytest.mark.parametrize("gpu", ["h200", "mi300x"])
def test_no_estimate_is_faster_than_the_bound_for_pipeline_stages_and_moe_tp_splits(gpu):
    wl = Workload(2048, 512)
    tried = {"pp": 0, "moe_tp": 0}
    for mid in model_entries():
        model = load_model(mid)
        for split in GIVEN_SPLITS:
            n = 16 if split.get("pp", 1) * split["tp"] > 8 else 8
            try:
                plan = search(model, load_gpu(gpu), num_gpus=n, workload=wl, engine="vllm", **split)
            except MLAError:  # a split the model cannot take (heads, experts, layers): refused in one line
                continue
            _assert_not_below_bound(plan)
            for p in plan.points:
                tried["pp"] += p.pp > 1
                tried["moe_tp"] += 1 < p.moe_tp < p.tp
    assert tried["pp"] > 500 and tried["moe_tp"] > 200, tried


def test_a_pipeline_step_is_its_stages_and_sends():
    # TP4 x PP2 of DeepSeek-R1: the decode step's estimate is bound.pipeline_time of its two
    # stages (31 and 30 layers) and one PP send, its ops every stage's plus the send.
    from mla_core.serving.bound import micro_batches, pipeline_time
    p = evaluate(R1, Deployment(gpu=H200, num_gpus=8, tp=4, pp=2), Workload(1024, 1024), 64)
    d = search(R1, H200, num_gpus=8, workload=Workload(1024, 1024), tp=4, pp=2, batch=64).estimate["decode_step"]
    assert d["stages"] == 2 and len(d["stage_gpu_s"]) == 2 and micro_batches(2, 64) == (2, 32)
    sends = [o for o in d["ops"] if o["name"] == "PP send"]
    assert len(sends) == 1 and sends[0]["calls"] == 1
    # 2 tensors (hidden, residual) x 32 tokens x 7168 x 2 bytes / 4 TP ranks
    assert sends[0]["bytes"] == 2 * 32 * 7168 * 2 / 4
    assert d["gpu_s"] == pytest.approx(pipeline_time([(t, 1) for t in d["stage_gpu_s"]], sends[0]["time_s"], 2))
    assert {o["layer"].split(":")[0] for o in d["ops"]} >= {"stage 1 of 2", "stage 2 of 2"}
    assert p.estimate.decode_step_s == pytest.approx(d["time_s"]) and p.estimate.decode_step_s >= p.step_time_s
    lm = [o for o in d["ops"] if o["name"] == "lm_head"]
    assert len(lm) == 1 and lm[0]["layer"].startswith("stage 2 of 2")  # the LM head on the last stage only


@pytest.mark.parametrize("engine", ENGINES)
def test_no_estimate_is_faster_than_the_bound_for_each_engine(engine):
    for mid in ("deepseek-v3", "llama-3.1-70b", "qwen3-next-80b-a3b", "gpt-oss-120b", "gemma-3-27b",
                "nemotron-nano-9b-v2", "longcat-flash-chat"):
        _assert_not_below_bound(search(load_model(mid), H200, num_gpus=16, workload=Workload(4096, 1024),
                                       engine=engine))


# --- the command line --------------------------------------------------------------------------------

DONE_WHEN = ("plan", "--model", "deepseek-r1", "--gpu", "h200", "--num-gpus", "8", "--tp", "8", "--batch", "4",
             "--input-len", "3200", "--output-len", "800")


def test_plan_json_gives_the_estimate_with_its_source_and_breakdown_beside_the_bound():
    d = run_json(*DONE_WHEN, "--engine", "vllm")
    e = d["estimate"]
    for key in ("ttft_s", "tpot_s", "tokens_per_s_per_user", "tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
                "source", "confidence", "decode_step", "prefill", "bound", "engine_rules", "kernel_tables"):
        assert key in e
    assert e["tpot_s"] >= e["bound"]["tpot_s"] == d["tpot_s"] and e["ttft_s"] >= d["ttft_s"]
    assert e["tokens_per_s_per_user"] == pytest.approx(1 / e["tpot_s"])
    assert e["tokens_per_s_per_gpu"] == pytest.approx(4 / e["tpot_s"] / 8)
    assert all(o["source"] and o["time_s"] > 0 for o in e["decode_step"]["ops"])
    assert d["engine"] == "vllm" and d["launch_command"].startswith("vllm serve")
    json.dumps(d, allow_nan=False)


def test_another_engine_differs_where_the_engines_differ():
    v = run_json(*DONE_WHEN, "--engine", "vllm")
    s = run_json(*DONE_WHEN, "--engine", "sglang")
    assert s["engine"] == "sglang" and s["launch_command"].startswith("python -m sglang.launch_server")
    assert v["estimate"]["engine_rules"]["step_overhead_s"] != s["estimate"]["engine_rules"]["step_overhead_s"]
    assert v["estimate"]["tpot_s"] != s["estimate"]["tpot_s"]
    assert v["tpot_s"] == s["tpot_s"]  # the bound is the engine's neither
    if "aiconfigurator" in v["estimate"]["source"]:
        assert "/sglang " in s["estimate"]["source"] and "/vllm " in v["estimate"]["source"]


def test_plan_text_leads_with_the_estimate():
    out = run(*DONE_WHEN, "--engine", "trtllm").stdout.splitlines()
    assert out[1].startswith("estimate for TensorRT-LLM") and "bound" in out[3]
    assert any(line.startswith("TensorRT-LLM: trtllm-serve") for line in out)
    first_cmd = next(line for line in out if line.startswith(("vLLM:", "SGLang:", "TensorRT-LLM:")))
    assert first_cmd.startswith("TensorRT-LLM:")


def test_asking_for_tables_a_gpu_lacks_is_one_line():
    with pytest.raises(MLAError, match="aiconfigurator"):
        search(load_model("llama-3.1-8b"), load_gpu("mi300x"), num_gpus=1, workload=Workload(512, 64),
               kernel_tables="aiconfigurator")


def test_plan_bad_engine_and_profile_exit_2_with_one_line(tmp_path):
    r = run(*DONE_WHEN, "--engine", "tgi")
    assert r.returncode == 2
    r = run(*DONE_WHEN, "--profile", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "profile" in r.stderr and len(r.stderr.strip().splitlines()) == 1
