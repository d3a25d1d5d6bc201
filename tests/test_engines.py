"""Engine results imported (vLLM bench serve, SGLang bench_serving / bench_one_batch): formats,
validation, the history, and the comparison with the serving model."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from mla_core.store import engines, history
from mla_core.store.errors import InvalidResult
from mla_core.store.schema import validate_result
from mla_core.errors import MLAError

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "engines"
VLLM = FIX / "vllm_serve_dsv3_h200_tp8.json"
SGL_SERVE = FIX / "sglang_bench_serving_dsv3_h200_tp8.jsonl"
SGL_BATCH = FIX / "sglang_one_batch_dsv3_h200_tp8.jsonl"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(history.ENV_VAR, str(tmp_path / "history.sqlite3"))
    return tmp_path


def test_vllm_save_result_is_read_with_its_own_settings():
    r = engines.load_engine_file(VLLM.read_bytes(), VLLM.name)
    validate_result(r, kind="engine")
    assert (r["engine"], r["format"]) == ("vllm", "vllm_serve")
    # model_id deepseek-ai/DeepSeek-V3 -> the preset; --metadata gpu=h200 tp=8 -> the split.
    assert r["settings"] | {} == {"model": "deepseek-v3", "gpu": "h200", "num_gpus": 8, "gpus_per_node": 8, "tp": 8,
                                  "dp_attention": False, "ep": 1, "kv_dtype": "auto", "weights_dtype": None}
    (p,) = r["points"]
    raw = json.loads(VLLM.read_text())
    assert p["workload"]["input_len"] == raw["total_input_tokens"] // raw["completed"] == 1000
    assert p["workload"]["batch"] == raw["max_concurrency"] == 64
    assert p["workload"]["request_rate"] is None  # "inf"
    assert p["measured"]["ttft_s"] == pytest.approx(raw["median_ttft_ms"] / 1e3)
    assert p["measured"]["tpot_s"] == pytest.approx(raw["median_tpot_ms"] / 1e3)
    assert p["measured"]["output_tokens_per_s"] == raw["output_throughput"]
    assert r["device"]["name"] == "NVIDIA H200 SXM 141GB"  # data/gpus.json


def test_sglang_bench_serving_lines_are_points_and_infinity_is_read():
    r = engines.load_engine_file(SGL_SERVE.read_bytes(), model="deepseek-v3", gpu="h200", tp=8)
    assert r["format"] == "sglang_bench_serving"
    lines = [json.loads(x) for x in SGL_SERVE.read_text().splitlines()]
    assert math.isinf(lines[0]["request_rate"])  # the file really holds Infinity
    assert [p["workload"]["batch"] for p in r["points"]] == [x["max_concurrency"] for x in lines] == [1, 16, 64]
    assert [p["measured"]["tpot_s"] for p in r["points"]] == pytest.approx([x["median_tpot_ms"] / 1e3 for x in lines])
    validate_result(r, kind="engine")


def test_sglang_one_batch_lines_are_static_batches():
    r = engines.load_engine_file(SGL_BATCH.read_bytes(), model="deepseek-ai/DeepSeek-V3", gpu="h200", tp=8)
    assert r["format"] == "sglang_one_batch"
    first = json.loads(SGL_BATCH.read_text().splitlines()[0])
    p = r["points"][0]
    assert (p["workload"]["batch"], p["workload"]["input_len"], p["workload"]["output_len"]) == (1, 1024, 256)
    assert p["measured"]["ttft_s"] == first["prefill_latency"]
    assert p["measured"]["tpot_s"] == first["median_decode_latency"]
    assert p["measured"]["output_tokens_per_s"] == pytest.approx(first["median_decode_throughput"])


@pytest.mark.parametrize("text, kw, expect", [
    ("", {}, "empty"),
    ("[1, 2]", {}, "not an object"),
    ('{"a": 1}', {}, "line 1 is not a vllm bench serve"),
    ('{"median_decode_latency": 0.1, "batch_size": 2}\n{"x"', {}, "line 2 is not JSON"),
    ('{"median_decode_latency": 0.1, "batch_size": 2, "input_len": 8, "output_len": 8}', {},
     "prefill_latency is missing"),
    ('{"batch_size": "8", "input_len": 8, "output_len": 8, "prefill_latency": 0.1, "median_decode_latency": 0.1}',
     {"model": "deepseek-v3", "gpu": "h200"}, "batch_size is '8', not a number"),
    ('{"batch_size": 8, "input_len": 8, "output_len": 8, "prefill_latency": NaN, "median_decode_latency": 0.1}',
     {"model": "deepseek-v3", "gpu": "h200"}, "not a finite number"),
    ('{"batch_size": 8, "input_len": 8, "output_len": 8, "prefill_latency": 0.1}', {"gpu": "h200"},
     "does not name its model"),
    ('{"batch_size": 8, "input_len": 8, "output_len": 8, "prefill_latency": 0.1}', {"model": "nope/x", "gpu": "h200"},
     "is not a preset"),
    ('{"batch_size": 8, "input_len": 8, "output_len": 8, "prefill_latency": 0.1}', {"model": "deepseek-v3"},
     "which GPU"),
    ('{"batch_size": 8, "input_len": 8, "output_len": 8, "prefill_latency": 0.1}',
     {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "num_gpus": 4}, "multiple of tp"),
])
def test_bad_files_and_settings_are_one_line_errors(text, kw, expect):
    with pytest.raises(MLAError) as e:
        engines.load_engine_file(text.encode(), **kw)
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_serving_run_without_completed_requests_is_refused():
    raw = json.loads(VLLM.read_text()) | {"completed": 0}
    with pytest.raises(InvalidResult, match="no request finished"):
        engines.load_engine_file(json.dumps(raw))


def test_import_cli_stores_the_run_with_its_settings(store):
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "import", str(SGL_SERVE), "--model", "deepseek-v3",
                        "--gpu", "h200", "--tp-size", "8", "--label", "sglang c1-64"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**__import__("os").environ, history.ENV_VAR: str(store / "history.sqlite3")})
    assert p.returncode == 0, p.stderr
    assert "saved as run 1" in p.stdout and "batch 64 (max_concurrency), 1024 in / 1024 out" in p.stdout
    (run,) = history.list_runs()
    assert (run["kind"], run["source"], run["label"], run["device_name"], run["n_results"]) == \
        ("engine", "import", "sglang c1-64", "NVIDIA H200 SXM 141GB", 3)
    stored = history.get_run(run["id"])["result"]
    assert stored["settings"]["tp"] == 8 and len(stored["points"]) == 3
    assert history.list_runs(kind="kernels") == []


@pytest.mark.parametrize("argv, expect", [
    (["missing.json", "--gpu", "h200"], "cannot read"),
    ([str(SGL_BATCH), "--gpu", "h200"], "does not name its model"),
    ([str(SGL_BATCH), "--model", "deepseek-v3", "--gpu", "h900"], "unknown GPU"),
    ([str(SGL_BATCH), "--model", "deepseek-v3", "--gpu", "h200", "--tp", "x"], "invalid int value"),
])
def test_import_cli_bad_input_exits_2_with_one_line(argv, expect, store):
    p = subprocess.run([sys.executable, "-m", "mla_core", "bench", "import", *argv, "--no-save"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and expect in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_metric_error_and_the_bound_flag():
    # Predicted TPOT 20 ms against 25 ms measured: -20 %, the machine is slower than the bound (fine).
    m = engines._metric("tpot_s", 0.025, 0.020, "lower")
    assert m.error_pct == pytest.approx(-20.0) and not m.beats_bound
    # Measured 15 ms against a 20 ms lower bound: faster than physics allows -> a modelling error.
    m = engines._metric("tpot_s", 0.015, 0.020, "lower")
    assert m.error_pct == pytest.approx(100 * 5 / 15) and m.beats_bound
    # Throughput is an upper bound: measuring more than predicted is the error.
    assert engines._metric("output_tokens_per_s", 1200.0, 1000.0, "higher").beats_bound


def test_compare_refuses_other_kinds():
    with pytest.raises(MLAError, match="not an engine result"):
        engines.compare({"kind": "collectives"})


# --- predicted against measured (mla_core.serving) ----------------------------------------------------------

def test_compare_sets_each_point_beside_the_serving_model():
    from mla_core.presets import load_gpu, load_model
    from mla_core.serving import Deployment, Workload, evaluate

    r = engines.load_engine_file(VLLM.read_bytes())
    cmp = engines.compare(r)
    assert cmp.available and len(cmp.points) == 1
    dep = Deployment(gpu=load_gpu("h200"), num_gpus=8, gpus_per_node=8, tp=8)
    plan = evaluate(load_model("deepseek-v3"), dep, Workload(input_len=1000, output_len=1000), batch=64)
    m = {x.name: x for x in cmp.points[0].metrics}
    assert m["tpot_s"].predicted == plan.tpot_s and m["ttft_s"].predicted == plan.ttft_s
    assert m["output_tokens_per_s"].predicted == plan.tokens_per_s
    assert m["tpot_s"].measured == pytest.approx(0.0379)
    assert m["tpot_s"].error_pct == pytest.approx((plan.tpot_s - 0.0379) / 0.0379 * 100)
    # The fixture is slower than every bound: no modelling error.
    assert not cmp.any_modelling_error and cmp.to_dict()["points"][0]["bound"] == plan.bound


def test_a_measurement_faster_than_the_bound_is_flagged():
    line = {"run_name": "x", "batch_size": 8, "input_len": 1024, "output_len": 256, "prefill_latency": 0.9,
            "median_decode_latency": 1e-5}  # 10 us a decode step of DeepSeek-V3: beyond any H200
    cmp = engines.compare(engines.load_engine_file(json.dumps(line), model="deepseek-v3", gpu="h200", tp=8))
    (p,) = cmp.points
    tpot = next(m for m in p.metrics if m.name == "tpot_s")
    assert tpot.beats_bound and p.modelling_error and cmp.any_modelling_error
    assert "MODELLING ERROR" in engines.render_comparison(engines.load_engine_file(
        json.dumps(line), model="deepseek-v3", gpu="h200", tp=8), cmp)


def test_one_batch_ttft_is_the_whole_batch_prefill():
    from mla_core.presets import load_gpu, load_model
    from mla_core.serving import Deployment, Workload, evaluate, prefill_work

    r = engines.load_engine_file(SGL_BATCH.read_bytes(), model="deepseek-v3", gpu="h200", tp=8)
    p32 = engines.compare(r).points[2]
    model, dep = load_model("deepseek-v3"), Deployment(gpu=load_gpu("h200"), num_gpus=8, tp=8)
    wl = Workload(input_len=1024, output_len=256)
    work = prefill_work(model, dep, wl)
    want = max(evaluate(model, dep, wl, batch=32).ttft_s, 32 * work["flops_gpu"] / work["peak_flops"])
    assert next(m for m in p32.metrics if m.name == "ttft_s").predicted == pytest.approx(want)


def test_a_measured_link_bandwidth_changes_the_communication_term():
    r = engines.load_engine_file(VLLM.read_bytes())
    base = {m.name: m.predicted for m in engines.compare(r).points[0].metrics}
    slow = {m.name: m.predicted for m in engines.compare(r, link_bandwidth_Bps=1e9).points[0].metrics}
    assert slow["tpot_s"] > base["tpot_s"]  # 1 GB/s busbw: the TP all-reduces dominate the step


def test_accuracy_compares_every_stored_engine_run(store):
    assert engines.accuracy() == []
    history.save_run(engines.load_engine_file(VLLM.read_bytes()), source="import")
    history.save_run(engines.load_engine_file(SGL_BATCH.read_bytes(), model="deepseek-v3", gpu="h200", tp=8),
                     source="import")
    got = engines.accuracy()
    assert [c.format for c in got] == ["sglang_one_batch", "vllm_serve"]  # newest first
    assert [len(c.points) for c in got] == [3, 1]
    assert got[1].to_dict() == engines.compare(engines.load_engine_file(VLLM.read_bytes())).to_dict()
