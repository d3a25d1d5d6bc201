"""The roofline page (AppTest) and what it relies on: `attention_roofline`, `format_intensity`
and the measured-point reader `ui.measured`."""
import json
import math

import pytest

from apptest_util import chart_specs, plain, app, metric, no_exceptions, run_page
from mla_core.hardware import custom_gpu
from mla_core.presets import load_gpu, load_model
from mla_core.roofline import attainable_flops, attention_roofline, decode_attention, roofline
from mla_core.spec import as_variant
from mla_core.sweeps import decode_step_vs_batch
from mla_core.units import format_intensity, format_seconds, format_token_rate
from ui import measured, params

PAGE = "pages/roofline.py"
DEEP = dict(model="deepseek-v3", gpu="h800", context="32768", batch="1", kv_dtype="bf16")
TP_DEFAULT = params.PARAMS["tp"].default


def _opened(at):
    """The page with its drawn-when-open sections (the step charts, TP against DP-attention) opened,
    as a user's click on their expanders does."""
    at.session_state["_roofline_step_open"] = True
    at.session_state["_roofline_tp_open"] = True
    return at.run()


def _figures(at) -> list[dict]:
    return [json.loads(el) for el in chart_specs(at)]


def _trace_names(at) -> list[str]:
    return [t.get("name", "") for fig in _figures(at) for t in fig["data"]]


def _fake_result(name="NVIDIA H200", **extra) -> dict:
    rows = [
        {"kernel": "mla_absorbed_decode", "dtype": "bf16", "shape": {"batch": 8, "context": 4096, "heads": 128},
         "bytes": 8 * 4096 * 1152, "flops": 8 * 4096 * 128 * 2176, "median_s": 1e-4, "min_s": 9e-5,
         "achieved_GBps": 377.5, "achieved_TFLOPs": 91.3, "predicted_s": 8e-5},
        {"kernel": "mha_decode", "dtype": "bf16", "shape": {"batch": 8, "context": 4096, "heads": 128},
         "bytes": 2 * 8 * 4096 * 128 * 128 * 2, "flops": 8 * 4096 * 128 * 512, "median_s": 3e-3, "min_s": 2.9e-3,
         "achieved_GBps": 2863.3, "achieved_TFLOPs": 1.43, "predicted_s": 2.3e-3},
        {"kernel": "copy", "dtype": "bf16", "shape": {"n": 1 << 28}, "bytes": 1 << 30, "flops": 0,
         "median_s": 2e-4, "min_s": 2e-4, "achieved_GBps": 4000.0, "achieved_TFLOPs": 0.0},
    ]
    return {"device": {"kind": "cuda", "name": name, "torch_version": "2.9", "dtype": "bf16"}, "results": rows, **extra}


# --- the page ----------------------------------------------------------------------------------------

def test_defaults_run_and_show_the_cores_step():
    at = run_page(PAGE)
    no_exceptions(at)
    assert not at.error, [e.value for e in at.error]
    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    r = roofline(model, gpu, context=131072, batch=1, kv_dtype="auto", mla_path="absorbed", tp=TP_DEFAULT)
    assert metric(at, "Decode step at TP") == format_seconds(r["step_time_s"])
    assert metric(at, "Tokens/s upper bound") == format_token_rate(r['tokens_per_s'])
    assert metric(at, "Ridge point") == format_intensity(gpu.ridge_flop_per_byte)


def test_deep_link_shows_241_8_and_the_variant_table():
    at = _opened(run_page(PAGE, **DEEP))
    no_exceptions(at)
    model = load_model("deepseek-v3")
    want = decode_attention(model, 32768, 1, "bf16", "absorbed")["attention_intensity_flop_per_byte"]
    assert metric(at, "Attention intensity, MLA absorbed") == format_intensity(want) == "241.8 flop/B"
    df = at.dataframe[0].value
    assert list(df["variant"]) == ["MHA", "GQA-8", "MQA", "MLA absorbed (this model)", "MLA recompute", "MLA expanded"]
    gpu = load_gpu("h800")
    mha = attention_roofline(as_variant(model, "mha"), gpu, context=32768, kv_dtype="bf16")
    assert df["intensity (flop/B)"].iloc[0] == pytest.approx(1.0)
    assert df["time lower bound"].iloc[0] == format_seconds(mha["attention_time_s"])
    assert df["intensity (flop/B)"].iloc[3] == pytest.approx(round(want, 2))
    assert list(df["bound"]) == ["memory", "memory", "memory", "memory", "compute", "memory"]
    r = roofline(model, gpu, context=32768, batch=1, kv_dtype="bf16", tp=TP_DEFAULT)
    assert metric(at, "Decode step at TP") == format_seconds(r["step_time_s"])
    # The roofline chart: the roof, the ridge, six variants and the model's TP share.
    names = _trace_names(at)
    assert "roof: NVIDIA H800 SXM5 80GB" in names and "MLA absorbed (this model)" in names
    assert f"MLA absorbed, one GPU at TP {TP_DEFAULT}" in names
    # TP against DP-attention: TP divides MLA's intensity, DP-attention keeps it.
    tp_df = at.dataframe[1].value
    row8 = tp_df[tp_df["TP"] == 8].iloc[0]
    assert row8["MLA absorbed, TP (flop/B)"] == pytest.approx(round(want / 8, 2))
    assert row8["MLA absorbed, DP-attention (flop/B)"] == pytest.approx(round(want, 2))


def test_step_chart_marks_the_crossover_the_core_finds():
    q = dict(model="llama-3.1-8b", gpu="h100-sxm", context="128", batch="4", kv_dtype="bf16", tp="1")
    at = _opened(run_page(PAGE, **q))
    no_exceptions(at)
    s = decode_step_vs_batch(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), range(1, 1025), context=128,
                             kv_dtype="bf16")
    first = next(b for b, c in zip(s["batch"], s["compute_bound"]) if c)
    assert f"compute bound from batch {int(first):,}" in _trace_names(at)
    r = roofline(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), context=128, batch=4, kv_dtype="bf16")
    assert metric(at, "Tokens/s upper bound") == format_token_rate(r['tokens_per_s'])
    before = len(_trace_names(at))
    at.toggle(key="_step_variants").set_value(True).run()
    no_exceptions(at)
    assert len(_trace_names(at)) > before


def test_apple_gpu_warns_then_takes_a_typed_peak():
    at = run_page(PAGE, gpu="apple-m3-max")
    no_exceptions(at)
    assert any("no published" in w.value for w in at.warning)
    at.number_input(key="peak_tflops").set_value(30.0).run()
    no_exceptions(at)
    assert not any("no published dense tensor peak" in w.value for w in at.warning)
    typed = custom_gpu(load_gpu("apple-m3-max").memory_GB, bf16_TFLOPS=30.0, base=load_gpu("apple-m3-max"))
    assert metric(at, "Ridge point") == format_intensity(typed.ridge_flop_per_byte)
    assert at.query_params["peak_tflops"] == "30.0"


def test_bench_result_adds_measured_points():
    at = app(**DEEP).run()
    at.session_state["bench_result"] = _fake_result(name="NVIDIA H200 <b>x</b>")
    at.switch_page(PAGE).run()
    no_exceptions(at)
    fig = _figures(at)[0]
    trace = next(t for t in fig["data"] if t.get("name", "").startswith("measured: "))
    assert trace["name"] == "measured: NVIDIA H200 bx/b"  # markup characters removed
    assert trace["marker"]["symbol"] == "x"
    assert trace["x"] == pytest.approx([128 * 2176 / 1152, 1.0])  # decode kernels only: copy is left out
    assert trace["y"] == pytest.approx([91.3, 1.43])
    assert not at.warning


def test_a_disturbed_bench_result_is_marked_on_the_roofline():
    at = app(**DEEP).run()
    result = _fake_result(name="NVIDIA H200")
    result["disturbed"] = {"disturbed": True, "reasons": ["another benchmark ran on this machine (pid 4242)"],
                           "evidence": {}, "thresholds": {}}
    at.session_state["bench_result"] = result
    at.switch_page(PAGE).run()
    no_exceptions(at)
    names = [t.get("name", "") for t in _figures(at)[0]["data"]]
    assert "measured: NVIDIA H200 (disturbed)" in names
    assert any("disturbed while it ran" in w.value and "pid 4242" in w.value for w in at.warning)
    result["disturbed"]["disturbed"] = False  # an undisturbed run carries no mark
    at.session_state["bench_result"] = result
    at.run()
    assert "measured: NVIDIA H200" in [t.get("name", "") for t in _figures(at)[0]["data"]]
    assert not any("disturbed while it ran" in w.value for w in at.warning)


def test_malformed_bench_results_are_ignored_with_a_warning():
    at = app(**DEEP).run()
    at.session_state["bench_result"] = "not a result"
    at.switch_page(PAGE).run()
    no_exceptions(at)
    assert any("Ignored the benchmark result" in w.value for w in at.warning)
    assert not any(n.startswith("measured") for n in _trace_names(at))
    bad = _fake_result()
    bad["results"] += [{"kernel": "mqa_decode", "bytes": -1}, 7, {"kernel": ["x"]},
                       {"kernel": "gqa_decode", "bytes": 10, "flops": 10, "median_s": float("nan"),
                        "achieved_GBps": 1, "achieved_TFLOPs": 1}]
    at.session_state["bench_result"] = bad
    at.run()
    no_exceptions(at)
    assert any("Skipped 4 malformed" in w.value for w in at.warning)
    assert any(n.startswith("measured: NVIDIA H200") for n in _trace_names(at))


def test_garbage_query_params_warn_and_fall_back():
    at = app(tp="abc", mla_path="sideways", peak_tflops="nan", weights_dtype="int2", gqa_groups="-3").run()
    at.switch_page(PAGE).run()
    no_exceptions(at)
    text = " ".join(plain(w.value) for w in at.warning)
    for name in ("tp", "mla_path", "peak_tflops", "weights_dtype", "gqa_groups"):
        assert name in text
    assert metric(at, "Attention intensity")  # the defaults stand and the page answers


def test_fp8_ds_mla_with_the_expanded_path_falls_back_to_absorbed():
    at = run_page(PAGE, model="deepseek-v3", kv_dtype="fp8_ds_mla", mla_path="expanded")
    no_exceptions(at)
    assert any("fp8_ds_mla" in plain(w.value) for w in at.warning)
    assert "MLA expanded" not in list(at.dataframe[0].value["variant"])


# --- the core function the page plots ------------------------------------------------------------

@pytest.mark.parametrize("tp", [1, 8])
def test_attention_roofline_agrees_with_roofline(tp):
    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    full = roofline(model, gpu, context=8192, batch=4, kv_dtype="bf16", tp=tp)
    r = attention_roofline(model, gpu, context=8192, batch=4, kv_dtype="bf16", tp=tp)
    assert r["attention_time_s"] == full["attention_time_s"]
    assert r["bound"] == full["attention_bound"]
    assert r["attention_intensity_flop_per_byte"] == full["attention_intensity_flop_per_byte"]
    assert r["heads_per_gpu"] == 128 // tp
    bw, peak = gpu.bandwidth_Bps, gpu.peak_flops("bf16")
    assert r["attainable_flops"] == min(peak, bw * r["attention_intensity_flop_per_byte"])
    assert r["attainable_flops"] == attainable_flops(r["attention_intensity_flop_per_byte"], gpu)


def test_attention_roofline_dp_attention_keeps_every_head():
    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    one = attention_roofline(model, gpu, context=4096)
    dp = attention_roofline(model, gpu, context=4096, tp=8, dp_attention=True)
    assert dp["attention_intensity_flop_per_byte"] == one["attention_intensity_flop_per_byte"]
    assert dp["heads_per_gpu"] == 128


def test_format_intensity():
    assert format_intensity(128 * 2176 / 1152) == "241.8 flop/B"
    assert format_intensity(1.0) == "1.00 flop/B"
    assert format_intensity(29198.2) == "29,198.2 flop/B"
    assert format_intensity(float("nan")) == "n/a"


# --- ui.measured ---------------------------------------------------------------------------------

@pytest.mark.parametrize("result, n_points, n_problems", [
    (None, 0, 0),
    ("text", 0, 1),
    ([1, 2], 0, 1),
    ({"results": "x"}, 0, 1),
    ({"results": []}, 0, 0),
    ({"results": [None, {}, {"kernel": "mla_absorbed_decode", "bytes": True, "flops": 1}]}, 0, 3),
    ({"results": [{"kernel": "mha_decode", "bytes": 10, "flops": 10, "median_s": 1, "achieved_GBps": 1,
                   "achieved_TFLOPs": float("inf")}]}, 0, 1),
    ({"results": [{"kernel": "matmul", "bytes": 10, "flops": 10}]}, 0, 0),
])
def test_measured_points_never_raise(result, n_points, n_problems):
    points, problems = measured.measured_points(result)
    assert (len(points), len(problems)) == (n_points, n_problems)


def test_measured_points_read_a_result_and_its_ceilings():
    r = _fake_result(ceilings={"read_GBps": 4200.0, "copy_GBps": None, "matmul_TFLOPs": 700.0})
    points, problems = measured.measured_points(r)
    assert not problems
    assert [p.label for p in points] == ["MLA absorbed", "MHA"]
    assert points[0].intensity_flop_per_byte == pytest.approx(128 * 2176 / 1152)
    assert measured.ceilings(r) == (4200.0, 700.0)
    assert measured.ceilings({"ceilings": {"read_GBps": float("nan")}}) == (None, None)
    assert measured.device_name({"device": {"name": "<script>\u0000GPU"}}) == "scriptGPU"
    assert measured.device_name({"device": 3}) == "unknown device"


def test_samples_folder(tmp_path):
    assert measured.sample_files(str(tmp_path / "absent")) == []
    (tmp_path / "good.json").write_text(json.dumps(_fake_result()))
    (tmp_path / "bad.json").write_text("{not json")
    assert measured.sample_files(str(tmp_path)) == ["bad.json", "good.json"]
    data, error = measured.load_sample("good.json", str(tmp_path))
    assert error is None and len(measured.measured_points(data)[0]) == 2
    data, error = measured.load_sample("bad.json", str(tmp_path))
    assert data is None and "cannot be read" in error
    assert measured.load_sample("../secrets.json", str(tmp_path))[0] is None
    assert math.isfinite(measured.measured_points(_fake_result())[0][1].achieved_TFLOPs)


def test_variant_csv_holds_the_cores_raw_numbers(monkeypatch):
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    import io

    import pandas as pd

    seen = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def spy(self, path_or_data, mimetype, kind, filename=None):
        seen[filename] = path_or_data
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", spy)
    at = run_page(PAGE, **DEEP)
    no_exceptions(at)
    data = seen["decode_roofline_variants.csv"]
    csv = pd.read_csv(io.BytesIO(data if isinstance(data, bytes) else data.encode()))
    row = csv[csv["variant"] == "MLA absorbed"].iloc[0]
    want = attention_roofline(load_model("deepseek-v3"), load_gpu("h800"), context=32768, kv_dtype="bf16")
    assert row["attention_bytes"] == want["attention_bytes"] == 2302672896
    assert row["intensity_flop_per_byte"] == pytest.approx(want["attention_intensity_flop_per_byte"], rel=1e-12)
    assert bool(row["is_model"])


def test_per_gpu_intensity_follows_tp_and_weights_that_cannot_fit_are_flagged():
    at = run_page(PAGE, model="deepseek-v3", gpu="h200", tp="8", kv_dtype="bf16", context="32768")
    no_exceptions(at)
    model = load_model("deepseek-v3")
    per_gpu = decode_attention(model, 32768, 1, "bf16", tp=8)["attention_intensity_flop_per_byte"]
    assert metric(at, "Per GPU at TP 8") == format_intensity(per_gpu) == "30.2 flop/B"
    assert not any("cannot run" in plain(w.value) for w in at.warning)  # 671B fp8 / 8 fits in 141 GB
    at = run_page(PAGE, model="deepseek-v3", gpu="h800", tp="1", context="32768")
    no_exceptions(at)
    assert any("cannot run" in plain(w.value) for w in at.warning)


def test_step_charts_mark_the_largest_batch_that_fits_and_the_whole_step_intensity():
    # DeepSeek-V3 on 8 H200 at TP8, 32K: Capacity's rule gives the sequences that fit; the curves
    # past that batch are drawn grey and dotted.
    from mla_core.serving import largest_batch_that_fits

    at = _opened(run_page(PAGE, model="deepseek-v3", gpu="h200", context="32768", batch="64", tp="8", kv_dtype="auto"))
    no_exceptions(at)
    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    cap = largest_batch_that_fits(model, gpu, context=32768, tp=8)
    assert cap == 22  # the figure: "Capacity says 22 such requests fit"
    assert metric(at, "Largest batch that fits at TP 8") == f"{cap:,} sequences"
    r = roofline(model, gpu, context=32768, batch=64, tp=8)
    assert metric(at, "Whole-step intensity") == format_intensity(r["step_intensity_flop_per_byte"])
    names = _trace_names(at)
    assert f"memory holds {cap:,} sequences" in names
    step_fig = _figures(at)[1]
    grey = [t for t in step_fig["data"] if t.get("name", "").endswith("does not fit in memory")]
    assert grey and min(grey[0]["x"]) <= cap < max(grey[0]["x"])
    solid = next(t for t in step_fig["data"] if t.get("name", "").endswith("(this model)"))
    assert max(solid["x"]) <= cap


def _points(at) -> list[dict]:
    """The traces of the roofline chart (the first chart)."""
    return _figures(at)[0]["data"]


def test_one_control_for_the_mla_variants_d_c_and_d_r():
    """An MLA model's d_c and d_r: the what-if sliders only; a model without MLA: the variant's boxes."""
    mla = run_page("pages/roofline.py", model="deepseek-v3")
    no_exceptions(mla)
    keys = {w.key for w in mla.number_input}
    assert "cmp_kv_lora_rank" not in keys and "cmp_rope_dim" not in keys
    assert mla.select_slider(key="_wi_kv_lora_rank").value == 512
    # a value left by the KV page's comparison settings does not move an MLA model's own point
    moved = run_page("pages/roofline.py", model="deepseek-v3", cmp_kv_lora_rank="128")
    own = [p for p in _points(moved) if p.get("name", "").endswith("(this model)")]
    assert own and own[0]["x"] == [p["x"] for p in _points(mla) if p.get("name", "").endswith("(this model)")][0]
    dense = run_page("pages/roofline.py", model="llama-3.1-70b")
    assert {"cmp_kv_lora_rank", "cmp_rope_dim"} <= {w.key for w in dense.number_input}
    assert not [s for s in dense.select_slider if s.key == "_wi_kv_lora_rank"]


def test_secondary_sections_are_drawn_only_when_opened():
    # The roofline alone by default (the step charts and the TP comparison cost every rerun when
    # always drawn: benchmarks/browser.py); opened, the step charts' two figures and the TP chart follow.
    at = run_page(PAGE, **DEEP)
    no_exceptions(at)
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    assert len(titles) == 1 and len(at.dataframe) == 1, titles
    at = _opened(at)
    titles = [f["layout"]["title"]["text"] for f in _figures(at)]
    assert len(titles) == 4 and titles[2].startswith("Tokens/s, upper bound") and \
        titles[3] == "Attention intensity per GPU against TP degree", titles
