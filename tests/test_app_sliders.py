"""The sliders (AppTest): the context and batch sliders with their number boxes, the what-if
sliders of the KV and Roofline pages, the second model on the KV page, the links they write, and
presentation mode's narrow tables. Every displayed number is compared with the core's."""
import json

import pytest

from apptest_util import chart_specs, app, metric, no_exceptions, plain, run_page
from mla_core.kv import compare_variants, kv_report
from mla_core.presets import load_model
from mla_core.roofline import decode_attention
from mla_core.units import format_bytes, format_intensity, format_tokens
from mla_core.views import kv_ratio, kv_summary
from mla_core.whatif import what_if

KV, ROOF = "pages/kv_cache.py", "pages/roofline.py"


def _context_chart(at) -> dict:
    """The KV page's chart of the cache against context (the layer map is drawn above it)."""
    figs = [json.loads(c) for c in chart_specs(at)]
    return next(f for f in figs if "against context" in str(f["layout"].get("title", "")))


def _slider(at, key):
    return at.select_slider(key=key)


def test_context_slider_and_number_box_agree():
    at = app(model="deepseek-v3", kv_dtype="bf16").run()
    _slider(at, "_context_stop").set_value(1 << 20).run()
    no_exceptions(at)
    assert at.session_state["context"] == 1 << 20
    want = kv_report(load_model("deepseek-v3"), 1 << 20, 1, "bf16")["kv_cache_bytes_per_sequence"]
    assert metric(at, "Per sequence") == format_bytes(want)
    at.number_input(key="context").set_value(100_000).run()  # any count: the slider moves to its nearest stop
    assert _slider(at, "_context_stop").value == 131072
    assert metric(at, "Per sequence") == format_bytes(kv_report(load_model("deepseek-v3"), 100_000, 1,
                                                                "bf16")["kv_cache_bytes_per_sequence"])
    assert any("100,000" in c.value for c in at.caption)
    assert at.query_params["context"] == "100000"


def test_batch_slider_sets_the_batch():
    at = app(model="llama-3.1-8b").run()
    _slider(at, "_batch_stop").set_value(64).run()
    assert at.session_state["batch"] == 64 and at.query_params["batch"] == "64"
    assert metric(at, "Batch of 64") == format_bytes(kv_report(load_model("llama-3.1-8b"), 131072, 64)["kv_cache_bytes"])


def test_beyond_max_position_embeddings_warns():
    at = run_page(KV, model="llama-3.1-8b", context="262144")
    no_exceptions(at)
    assert any("max_position_embeddings" in plain(w.value) and "131,072" in plain(w.value) for w in at.warning)
    at = run_page(KV, model="llama-3.1-8b", context="131072")
    assert not any("max_position_embeddings" in plain(w.value) for w in at.warning)


def test_what_if_sliders_move_the_kv_page_and_reset():
    at = run_page(KV, model="deepseek-v3", kv_dtype="bf16")
    base = load_model("deepseek-v3")
    assert metric(at, "KV bytes per token") == format_bytes(70272)
    _slider(at, "_wi_kv_lora_rank").set_value(256).run()
    _slider(at, "_wi_layers").set_value(30).run()
    no_exceptions(at)
    want = kv_report(what_if(base, kv_lora_rank=256, num_hidden_layers=30), 131072, 1, "bf16")
    assert metric(at, "KV bytes per token") == format_bytes(want["kv_bytes_per_token"]) == format_bytes(19200)
    assert at.query_params["wi_kv_lora_rank"] == "256" and at.query_params["wi_layers"] == "30"
    # the table and the chart follow the what-if model
    rows = compare_variants(what_if(base, kv_lora_rank=256, num_hidden_layers=30), 131072, 1, "bf16")
    assert list(at.dataframe[0].value["per token"]) == [format_bytes(r["kv_bytes_per_token"]) for r in rows]
    fig = _context_chart(at)
    dots = fig["data"][-1]
    assert dots["y"][3] * 2**30 == pytest.approx(want["kv_cache_bytes"])
    # a link with the sliders reopens the same what-if
    again = run_page(KV, **dict(at.query_params))
    assert metric(again, "KV bytes per token") == format_bytes(19200)
    at.button(key="_wi_reset").click().run()
    assert metric(at, "KV bytes per token") == format_bytes(70272)
    assert "wi_kv_lora_rank" not in at.query_params and _slider(at, "_wi_kv_lora_rank").value == 512


def test_what_if_dtype_slider_and_gqa_heads():
    at = run_page(KV, model="llama-3.1-8b")
    _slider(at, "_wi_kv_dtype").set_value("fp8").run()
    _slider(at, "_wi_kv_heads").set_value(1).run()
    no_exceptions(at)
    want = kv_report(what_if(load_model("llama-3.1-8b"), num_key_value_heads=1), 131072, 1, "fp8")
    assert metric(at, "KV bytes per token") == format_bytes(want["kv_bytes_per_token"]) == format_bytes(8192)
    assert at.query_params["wi_kv_dtype"] == "fp8"


def test_a_new_model_starts_the_sliders_from_its_own_values():
    at = run_page(KV, model="deepseek-v3")
    _slider(at, "_wi_kv_lora_rank").set_value(256).run()
    at.selectbox(key="model").set_value("kimi-k2-instruct").run()
    no_exceptions(at)
    assert at.session_state["wi_kv_lora_rank"] == 0
    assert metric(at, "KV bytes per token") == format_bytes(kv_report(load_model("kimi-k2-instruct"), 1)["kv_bytes_per_token"])


def test_what_if_holds_on_the_roofline_page():
    at = run_page(KV, model="deepseek-v3", gpu="h200", kv_dtype="bf16", context="32768")
    _slider(at, "_wi_heads").set_value(64).run()
    at.switch_page(ROOF).run()
    no_exceptions(at)
    w = what_if(load_model("deepseek-v3"), num_attention_heads=64)
    want = decode_attention(w, 32768, 1, "bf16")["attention_intensity_flop_per_byte"]
    assert metric(at, "Attention intensity") == format_intensity(want)
    _slider(at, "_wi_heads").set_value(128).run()  # back to the model's own: off the link
    assert "wi_heads" not in at.query_params
    assert metric(at, "Attention intensity") == format_intensity(
        decode_attention(load_model("deepseek-v3"), 32768, 1, "bf16")["attention_intensity_flop_per_byte"])


def test_second_model_in_its_own_column():
    at = run_page(KV, model="deepseek-v3", kv_model2="llama-3.1-70b", kv_dtype="bf16")
    no_exceptions(at)
    assert metric(at, "KV bytes per token") == format_bytes(70272)
    want = kv_report(load_model("llama-3.1-70b"), 131072, 1, "bf16")
    assert metric(at, "KV bytes per token, second model") == format_bytes(want["kv_bytes_per_token"])
    names = [t.get("name", "") for t in _context_chart(at)["data"]]
    assert any(n.startswith("llama-3.1-70b") for n in names)
    # their ratio, the core's (views.kv_ratio of the two summaries the columns show)
    first = kv_summary(load_model("deepseek-v3"), 131072, 1, "bf16")
    other = kv_summary(load_model("llama-3.1-70b"), 131072, 1, "bf16")
    r = kv_ratio(first, other)
    assert r.per_token == pytest.approx(want["kv_bytes_per_token"] / 70272)
    assert any(plain(m.value) == f"**{r.sentence}**" for m in at.markdown), [m.value for m in at.markdown][:8]
    assert f"{r.per_sequence:.2f}x more" in r.sentence and "llama-3.1-70b caches" in r.sentence


def test_heading_counts_the_rows_of_its_table():
    at = run_page(KV, model="deepseek-v3")
    heading = next(h.value for h in at.subheader if h.value.startswith("The same width"))
    n = len(at.dataframe[0].value)
    assert heading == f"The same width, {n} ways, at 128K tokens, batch 1" and n == 5


@pytest.mark.parametrize("page, keep", [
    (KV, ["variant", "per token", "whole batch", "MHA / this"]),
    (ROOF, ["variant", "intensity (flop/B)", "time lower bound", "bound"]),
])
def test_presentation_tables_keep_the_columns_that_matter(page, keep):
    at = run_page(page, model="deepseek-v3", present="1")
    no_exceptions(at)
    assert list(at.dataframe[0].value.columns) == keep


def test_session_keys_never_come_from_a_link():
    at = app(_bench_device="cuda", _step_variants="1").run()
    no_exceptions(at)
    assert "_bench_device" not in at.session_state or at.session_state["_bench_device"] is None
    assert sum("Ignored unknown link parameter" in plain(w.value) for w in at.warning) == 2


def test_tp_is_one_setting_shared_by_capacity_and_roofline():
    at = run_page("pages/capacity.py", model="deepseek-v3", gpu="h200")
    label = next(n.label for n in at.number_input if n.key == "tp")
    assert "shared with the Roofline page" in label
    at.number_input(key="tp").set_value(4).run()
    at.switch_page(ROOF).run()
    assert next(n for n in at.number_input if n.key == "tp").value == 4
    assert "shared with the Capacity page" in next(n.label for n in at.number_input if n.key == "tp")
    assert metric(at, "Per GPU at TP 4") == format_intensity(
        decode_attention(load_model("deepseek-v3"), 131072, 1, tp=4)["attention_intensity_flop_per_byte"])


def test_start_from_the_current_model_then_use_it_by_hand():
    from apptest_util import own_model

    at = own_model(run_page(KV, model="deepseek-v3", kv_dtype="bf16"))
    at.button[[b.label for b in at.button].index("Start from the current model")].click().run()
    at.button[[b.label for b in at.button].index("Use this architecture")].click().run()
    no_exceptions(at)
    assert at.session_state["model"] == "custom"
    assert metric(at, "KV bytes per token") == format_bytes(70272)  # DeepSeek-V3's latent, rebuilt by hand


def _re_set(at) -> list[str]:
    """The widgets this run told the browser to set anew (proto set_value: the browser draws them
    again instead of keeping them)."""
    widgets = [*at.select_slider, *at.slider, *at.number_input, *at.selectbox, *at.toggle]
    return [w.label for w in widgets if getattr(w.proto, "set_value", False)]


@pytest.mark.parametrize("page", ["pages/kv_cache.py", "pages/capacity.py", "pages/roofline.py",
                                  "pages/serving.py"])
def test_a_rerun_sets_anew_only_the_widget_whose_value_it_changed(page):
    at = run_page(page, model="deepseek-v3", gpu="h200")
    at.run()
    assert _re_set(at) == []  # nothing moved: every slider (what-if ones too) is kept as drawn
    _slider(at, "_context_stop").set_value(262144).run()
    no_exceptions(at)
    assert _re_set(at) == ["Context, tokens per sequence"]  # the number box follows the slider
    at.number_input(key="context").set_value(5000).run()
    assert _re_set(at) == ["Context, on a log scale"] and _slider(at, "_context_stop").value == 4096
    _slider(at, "_batch_stop").set_value(64).run()
    assert _re_set(at) == ["Batch, sequences"] and at.number_input(key="batch").value == 64


def test_sliders_new_to_a_page_start_from_the_state_not_their_first_option():
    """Streamlit's widget ids differ by page: the what-if sliders of the Roofline page are new
    widgets after the KV page, and must be set from the state (not left at 1 head, 1 layer)."""
    at = app(model="deepseek-v3", gpu="h200", wi_layers="30", context="262144").run()
    for page in (ROOF, KV, ROOF):
        at.switch_page(page).run()
        no_exceptions(at)
        want = {"Query heads n_h": 128, "Layers": 30, "MLA latent d_c (kv_lora_rank)": 512,
                "KV dtype (kv_cache_dtype)": "bf16", "Context, on a log scale": 262144}
        assert {w.label: w.value for w in at.select_slider if w.label in want} == want, page
        at.run()
        assert _re_set(at) == [] and {w.label: w.value for w in at.select_slider if w.label in want} == want
