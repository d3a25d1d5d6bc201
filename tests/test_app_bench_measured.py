"""The Benchmark page's sections for collectives and imported engine runs (ui/collectives.py,
ui/engine_runs.py), and its run settings following the sidebar's model (ui/bench_model.py).
Every value the page shows is compared with the core function's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from apptest_util import metric, no_exceptions, plain, run_page, shown
from mla_core.bench import comm
from mla_core.store import engines, history
from mla_core.units import format_seconds

PAGE = "pages/benchmark.py"
FIX = Path(__file__).resolve().parent / "fixtures" / "engines"


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(history.ENV_VAR, str(tmp_path / "history.sqlite3"))
    history.pop_notices()


def collectives_result() -> dict:
    """A schema-valid 8-rank NCCL result built with the core's own formulas."""
    rows = []
    for op in comm.OPS:
        for size, t in ((1 << 20, 40e-6), (1 << 30, 4.8e-3)):
            alg, bus = comm.bandwidths(op, size, t, 8)
            _a, best = comm.bandwidths(op, size, t * 0.95, 8)
            rows.append({"op": op, "dtype": "bf16", "bytes": size, "median_s": t, "min_s": t * 0.95, "reps": 50,
                         "algbw_GBps": alg, "busbw_GBps": bus, "busbw_best_GBps": best})
    return {"schema_version": 1, "kind": "collectives", "created": "2026-01-02T03:04:05Z",
            "config": {"device": "cuda", "sizes": [1 << 20, 1 << 30]},
            "device": {"kind": "cuda", "backend": "nccl", "name": "NVIDIA H200", "torch_version": "2.13.0",
                       "dtype": "bf16", "world_size": 8, "nodes": 1},
            "results": rows, "notes": []}


def test_collectives_section_shows_the_cores_busbw_and_link_figure():
    result = collectives_result()
    history.save_run(result, source="import", label="8xH200")
    at = run_page(PAGE)
    no_exceptions(at)
    table = next(df.value for df in at.dataframe if "busbw (GB/s)" in df.value.columns)
    view = comm.collectives_view(result)
    assert list(table["busbw (GB/s)"]) == pytest.approx([r.busbw_GBps for r in view.rows])
    link = comm.link_bandwidth(result)
    assert metric(at, "all_reduce busbw at 1.00 GiB") == f"{link.link_bandwidth_Bps / 1e9:,.1f} GB/s"
    # 1 GiB in 4.8 ms over 8 ranks: 223.7 GB/s algbw, x 1.75 = 391.5 GB/s busbw.
    assert link.link_bandwidth_Bps / 1e9 == pytest.approx(391.48, rel=1e-4)
    # The kernel sections do not offer the collectives run.
    options = at.selectbox(key="_bench_show").options  # the committed samples only
    assert options and not any("8xH200" in o or "#1" in o for o in options)


def test_engine_run_is_compared_with_the_serving_model_on_the_page():
    r = engines.load_engine_file((FIX / "vllm_serve_dsv3_h200_tp8.json").read_bytes(), "vllm.json")
    history.save_run(r, source="import", label="vllm dsv3")
    at = run_page(PAGE)
    no_exceptions(at)
    table = next(df.value for df in at.dataframe if "beats the bound" in df.value.columns)
    cmp = engines.compare(r)
    tpot = next(m for m in cmp.points[0].metrics if m.name == "tpot_s")
    row = table[table["metric"] == "TPOT"].iloc[0]
    assert row["measured"] == format_seconds(tpot.measured) and row["predicted"] == format_seconds(tpot.predicted)
    assert row["error (%)"] == pytest.approx(tpot.error_pct)
    assert "MODELLING ERROR" not in list(table["beats the bound"])


def test_engine_run_replay_errors_are_the_cores():
    from mla_core.traffic import replay

    r = engines.load_engine_file((FIX / "vllm_serve_dsv3_h200_tp8.json").read_bytes(), "vllm.json")
    history.save_run(r, source="import", label="vllm dsv3")
    at = run_page(PAGE)
    no_exceptions(at)
    assert not any("error (%)" in df.value.columns and "simulated" in df.value.columns for df in at.dataframe)
    at.session_state["_eng_replay_open"] = True
    at.run(timeout=300)
    no_exceptions(at)
    table = next(df.value for df in at.dataframe if "simulated" in df.value.columns)
    rep = replay(r)
    errors = rep.points[0].errors
    assert list(table["metric"]) == [e["metric"] for e in errors]
    assert list(table["error (%)"]) == pytest.approx([e["error_pct"] for e in errors], rel=1e-9)
    # the file's own mean TTFT, 1,843.2 ms (tests/fixtures/engines/vllm_serve_dsv3_h200_tp8.json)
    row = table[table["metric"] == "mean_ttft_s"].iloc[0]
    assert row["measured"] == pytest.approx(1.8432) and row["clients"] == 64
    assert rep.step_times.startswith("vLLM estimate: ")


def test_a_modelling_error_is_flagged_on_the_page():
    line = {"run_name": "x", "batch_size": 8, "input_len": 1024, "output_len": 256, "prefill_latency": 0.9,
            "median_decode_latency": 1e-5}
    history.save_run(engines.load_engine_file(json.dumps(line), model="deepseek-v3", gpu="h200", tp=8),
                     source="import")
    at = run_page(PAGE)
    no_exceptions(at)
    assert "beats the model's bound" in shown(at.error)
    table = next(df.value for df in at.dataframe if "beats the bound" in df.value.columns)
    assert table[table["metric"] == "TPOT"].iloc[0]["beats the bound"] == "MODELLING ERROR"


def test_run_settings_follow_the_sidebar_model():
    at = run_page(PAGE, model="llama-3.1-8b", context=8192, batch=1)
    at.button(key="_bench_setup_button").click().run()
    no_exceptions(at)
    from mla_core.bench import run as brun

    want = brun.default_config("cpu", True, model="llama-3.1-8b", target_batch=1, target_context=8192)
    assert (at.number_input(key="_bench_heads").value, at.selectbox(key="_bench_gqa").value) == (32, 8)
    assert at.number_input(key="_bench_context").value == want.contexts[0]
    assert plain(want.scaling) in shown(at.info)
    # Switching the sidebar model re-sizes the settings.
    at.session_state["model"] = "deepseek-v3"
    at.run()
    assert at.number_input(key="_bench_heads").value == 128


def test_a_shown_result_states_its_scaling():
    from mla_core.bench import run as brun

    cfg = brun.default_config("cpu", True)
    result = brun.run_benchmark({**cfg.to_dict(), "kernels": ["mqa_decode"], "reps": 1, "min_reps": 1,
                                 "budget_s": 0.01, "contexts": [512], "batches": [1]})
    assert result["config"]["scaling"] == cfg.scaling  # kept through a run request laid over the defaults
    run_id = history.save_run(result)
    at = run_page(PAGE)
    at.selectbox(key="_bench_show").set_value(f"run:{run_id}").run()
    no_exceptions(at)
    assert plain(f"Shape: {cfg.scaling}.") in shown(at.info)


def test_imported_engine_runs_join_the_accuracy_section():
    r = engines.load_engine_file((FIX / "vllm_serve_dsv3_h200_tp8.json").read_bytes(), "vllm.json")
    history.save_run(r, source="import", label="vllm dsv3")
    at = run_page("pages/claims.py")
    no_exceptions(at)
    table = next(df.value for df in at.dataframe if "modelling error" in df.value.columns)
    (cmp,) = engines.accuracy()
    want = [m for p in cmp.points for m in p.metrics]
    assert list(table["metric"]) == [m.name for m in want]
    assert list(table["error (%)"]) == pytest.approx([m.error_pct for m in want])
    assert "YES" not in list(table["modelling error"])
