"""The what-if model (mla_core.whatif) and the page views (mla_core.views) it feeds.

A what-if must equal the same edit made to the model's own config.json and parsed again: the
KV bytes and the parameter count of `what_if(model, field=value)` are those of
`parse_config({**config, field: value})`."""
import pytest

from mla_core.config import parse_config
from mla_core.errors import MLAError
from mla_core.kv import kv_report
from mla_core.params import params_total
from mla_core.presets import load_gpu, load_model, model_entries
from mla_core.roofline import roofline
from mla_core.views import (capacity_view, context_limit_warning, kv_summary, kv_sweep, kv_variants, roofline_view,
                            step_sweep)
from mla_core.whatif import (BATCH_STOPS, CONTEXT_STOPS, nearest_context_stop, nearest_stop, what_if,
                             what_if_controls, what_if_kv_dtypes, what_if_panel)


def _config(preset: str) -> dict:
    return dict(model_entries()[preset]["config"])


@pytest.mark.parametrize("preset, edit, overrides", [
    ("deepseek-v3", {"kv_lora_rank": 256}, {"kv_lora_rank": 256}),
    ("deepseek-v3", {"qk_rope_head_dim": 32}, {"qk_rope_head_dim": 32}),
    ("deepseek-v3", {"num_attention_heads": 64, "num_key_value_heads": 64}, {"num_attention_heads": 64}),
    ("deepseek-v2-lite", {"qk_nope_head_dim": 64, "v_head_dim": 64}, {"head_dim": 64}),
    ("llama-3.1-8b", {"num_key_value_heads": 1}, {"num_key_value_heads": 1}),
    ("llama-3.1-8b", {"num_attention_heads": 64, "head_dim": 128}, {"num_attention_heads": 64}),
    ("llama-3.1-8b", {"head_dim": 64}, {"head_dim": 64}),
    ("llama-3.1-8b", {"num_hidden_layers": 16}, {"num_hidden_layers": 16}),
    ("mistral-7b-v0.1", {"num_hidden_layers": 40}, {"num_hidden_layers": 40}),
])
def test_what_if_equals_the_edited_config(preset, edit, overrides):
    model = load_model(preset)
    edited = parse_config({**_config(preset), **edit})
    w = what_if(model, **overrides)
    for dtype in ("bf16", "fp8"):
        assert kv_report(w, 131072, 2, dtype)["kv_cache_bytes"] == kv_report(edited, 131072, 2, dtype)["kv_cache_bytes"]
    assert params_total(w) == params_total(edited)
    assert w.name.startswith(f"{model.name} (what-if:")


def test_what_if_pins_deepseek_v3_latent_of_256():
    # (d_c + d_r) x 2 B x 61 layers: (256 + 64) x 2 x 61 = 39,040 B per token, against 70,272 B
    w = what_if(load_model("deepseek-v3"), kv_lora_rank=256)
    assert kv_report(w, 1, 1, "bf16")["kv_bytes_per_token"] == 39040
    assert kv_report(load_model("deepseek-v3"), 1, 1, "bf16")["kv_bytes_per_token"] == 70272


def test_what_if_of_nothing_is_the_model_and_kinds_hold():
    m = load_model("llama-3.1-8b")
    assert what_if(m) is m and what_if(m, num_attention_heads=32, head_dim=None) is m
    mha = load_model("llama-2-70b")
    assert what_if(load_model("falcon-7b"), num_attention_heads=64).kind == "mqa"  # MQA stays MQA
    assert what_if(mha, num_attention_heads=32).attention.num_key_value_heads == 8
    assert what_if(m, num_attention_heads=12).attention.num_key_value_heads == 6  # largest divisor below 8


@pytest.mark.parametrize("preset, overrides, needle", [
    ("llama-3.1-8b", {"kv_lora_rank": 256}, "MLA latent"),
    ("deepseek-v3", {"num_key_value_heads": 8}, "does not apply"),
    ("llama-3.1-8b", {"num_key_value_heads": 5}, "must divide"),
    ("llama-3.1-8b", {"num_hidden_layers": 0}, "at least 1"),
    ("llama-3.1-8b", {"head_dim": True}, "whole number"),
    ("llama-3.1-8b", {"heads": 8}, "unknown what-if field"),
])
def test_what_if_refuses_with_one_line(preset, overrides, needle):
    with pytest.raises(MLAError, match=needle):
        what_if(load_model(preset), **overrides)


def test_layer_patterns_stretch_in_proportion():
    g = load_model("gemma-2-9b")  # alternating sliding / full layers
    w = what_if(g, num_hidden_layers=10)
    assert w.num_sliding_layers == 5 and len(w.layer_windows) == 10
    v3 = what_if(load_model("deepseek-v3"), num_hidden_layers=122)  # 3 dense of 61 -> 6 dense of 122
    assert v3.moe.moe_layers.count(False) == 6 and len(v3.moe.moe_layers) == 122


def test_controls_start_from_the_model_and_offer_its_values():
    m = load_model("deepseek-v3")
    controls = {c.field: c for c in what_if_controls(m, kv_lora_rank=256)}
    assert controls["kv_lora_rank"].own == 512 and controls["kv_lora_rank"].value == 256
    assert not controls["num_key_value_heads"].enabled  # a latent has no KV heads
    assert 61 in controls["num_hidden_layers"].options and controls["num_hidden_layers"].value == 61
    llama = {c.field: c for c in what_if_controls(load_model("llama-3.1-8b"), num_attention_heads=12)}
    assert llama["num_key_value_heads"].options == (1, 2, 3, 4, 6, 12) and llama["num_key_value_heads"].value == 6
    assert not llama["kv_lora_rank"].enabled
    assert "fp8_ds_mla" in what_if_kv_dtypes(m) and "fp8_ds_mla" not in what_if_kv_dtypes(load_model("llama-3.1-8b"))
    assert what_if_kv_dtypes(m)[0] == "fp32" and what_if_kv_dtypes(m)[-1] in ("q4_0", "fp4")


def test_panel_names_what_changed_and_keeps_the_model_on_a_refusal():
    m = load_model("deepseek-v3")
    p = what_if_panel(m, "auto", "fp8", kv_lora_rank=256)
    assert p.changed == ("kv_lora_rank", "kv_dtype") and p.kv_dtype == "fp8" and p.own_kv_dtype == "bf16"
    bad = what_if_panel(load_model("llama-3.1-8b"), "bf16", "", num_key_value_heads=5)
    assert bad.model.name == "llama-3.1-8b" and "must divide" in bad.error
    assert what_if_panel(load_model("llama-3.1-8b"), "fp8_ds_mla").kv_dtype == "fp8"


def test_stops_are_the_sizes_people_use():
    assert CONTEXT_STOPS[:3] == (1024, 2048, 4096) and 131072 in CONTEXT_STOPS and 1 << 20 in CONTEXT_STOPS
    assert CONTEXT_STOPS[-1] == 10 * 2**20  # Llama-4-Scout's 10M: 10,485,760 tokens
    assert nearest_context_stop(131072) == 131072 and nearest_context_stop(100_000) == 131072
    assert nearest_context_stop(1) == 1024 and nearest_context_stop(10**15) == 10 * 2**20
    assert nearest_stop(3, BATCH_STOPS, "batch") == 4  # on a log scale 3 is nearer 4 than 2
    with pytest.raises(MLAError):
        nearest_context_stop(0)


def test_context_limit_warning_follows_max_position_embeddings():
    m = load_model("deepseek-v3")
    assert m.max_position_embeddings == 163840  # config.json of deepseek-ai/DeepSeek-V3
    assert context_limit_warning(m, 163840) is None
    assert "163,840" in context_limit_warning(m, 163841)
    assert context_limit_warning(load_model("falcon-7b"), 10**9) is None  # the config states no limit
    assert "max_position_embeddings" in kv_summary(m, 1 << 20).warnings[0]


def test_views_equal_the_core_functions_they_wrap():
    m, g = load_model("deepseek-v3"), load_gpu("h200")
    s = kv_summary(m, 131072, 2, "fp8_ds_mla", "expanded")
    assert s.cache_layout == "latent" and s.report == kv_report(m, 131072, 2, "fp8_ds_mla", "latent")
    k = kv_variants(m, 131072, gqa_groups=7)
    assert k.gqa_groups == 0 and "does not divide" in k.warnings[0] and len(k.rows) == 5
    sw = kv_sweep(m, 131072, second=load_model("llama-3.1-8b"))
    assert sw.second.y_here == kv_report(load_model("llama-3.1-8b"), 131072)["kv_cache_bytes"]
    assert next(x for x in sw.series if x.is_model).y_here == kv_report(m, 131072)["kv_cache_bytes"]
    rv = roofline_view(m, g, context=32768, tp=8)
    assert rv.step == roofline(m, g, context=32768, tp=8) and rv.own_label == "MLA absorbed"
    assert rv.roof_x[1] == pytest.approx(g.ridge_flop_per_byte)
    st = step_sweep(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), context=128, batch=4)
    assert st.crossover is not None and 4 in st.batches
    cv = capacity_view(m, g, context=131072, num_gpus=6, tp=4, gpu_memory_utilization=0.001)
    assert cv.num_gpus == 4 and cv.gpu_memory_utilization == 0.01 and cv.errors and cv.warnings
