"""The capacity page (pages/capacity.py): what it shows equals mla_core for the same inputs.

Also the two small core functions the page added: `capacity_variants` and `memory_breakdown`.
"""
import json
import re

import pytest

from mla_core.capacity import allocator_waste, capacity, capacity_variants, memory_breakdown
from mla_core.errors import MLAError
from mla_core.hardware import custom_gpu
from mla_core.presets import load_gpu, load_model
from mla_core.spec import as_variant
from mla_core.units import format_bytes, format_tokens, gib_to_bytes

from apptest_util import chart_specs, plain, metric, metrics, no_exceptions, run_page

PAGE = "pages/capacity.py"
V3_8xH200 = dict(model="deepseek-v3", gpu="h200", num_gpus="8", tp="8", kv_dtype="fp8", context="131072")


def core(model="deepseek-v3", gpu="h200", **kw):
    args = dict(context=131072, gpu=load_gpu(gpu), num_gpus=8, tp=8, kv_dtype="fp8")
    args.update(kw)
    return capacity(load_model(model), **args)


def whole(n: int) -> str:
    return f"{n:,}"


def texts(elements) -> str:
    return " | ".join(plain(str(e.value)) for e in elements)


# --- the page -------------------------------------------------------------------------------------

def test_runs_on_defaults():
    at = run_page(PAGE)
    no_exceptions(at)
    assert not at.error and not at.warning
    want = capacity(load_model("deepseek-v3"), context=131072, gpu=load_gpu("h200"), num_gpus=8, tp=8)
    assert metric(at, "Whole requests of") == whole(want["max_concurrent_requests"])


def test_deep_link_metrics_equal_core():
    at = run_page(PAGE, **V3_8xH200)
    no_exceptions(at)
    assert not at.error and not at.warning
    r = core()
    assert metric(at, f"Whole requests of {format_tokens(131072)}") == whole(r["max_concurrent_requests"])
    assert metric(at, "KV budget per GPU") == format_bytes(r["kv_budget_bytes_per_gpu"])
    assert metric(at, "Weights per GPU") == format_bytes(r["weights_bytes_per_gpu"])
    assert metric(at, "KV bytes per token per GPU") == format_bytes(r["kv_bytes_per_token_per_gpu"])
    assert metric(at, "Max tokens per GPU") == format_tokens(r["max_tokens_per_gpu"])
    assert metric(at, "Max tokens in the deployment") == format_tokens(r["max_tokens_total"])
    assert metric(at, "Max concurrency") == f"{r['max_concurrency']:.2f}x"
    # TP8 and DP-attention side by side (the "how many 128K sessions on 8 H200s" question).
    assert metric(at, "With TP8") == whole(r["max_concurrent_requests"])
    assert metric(at, "With DP-attention") == whole(core(dp_attention=True)["max_concurrent_requests"])


def test_variant_table_and_chart_equal_core():
    at = run_page(PAGE, **V3_8xH200)
    no_exceptions(at)
    rows = capacity_variants(load_model("deepseek-v3"), context=131072, gpu=load_gpu("h200"), num_gpus=8, tp=8,
                             kv_dtype="fp8")
    table = at.dataframe[0].value
    # The heading names the context; the column keeps its name as the context moves.
    assert any(f"ways, requests of {format_tokens(131072)}:" in h.value for h in at.subheader)
    col = "whole requests"
    assert list(table[col]) == [r["max_concurrent_requests"] for r in rows]
    assert list(table["KV budget per GPU"]) == [format_bytes(r["kv_budget_bytes_per_gpu"]) for r in rows]
    # The requests-vs-context chart marks the chosen context with the same counts.
    charts = [json.loads(c) for c in chart_specs(at)]
    chart = next(c for c in charts if "against context" in c["layout"]["title"]["text"])
    dots = next(t for t in chart["data"] if t.get("mode") == "markers")
    assert dots["x"][0] == 131072
    assert dots["y"] == [r["max_concurrent_requests"] for r in rows if r["max_concurrent_requests"]]


def test_changing_widgets_recomputes():
    at = run_page(PAGE, **V3_8xH200)
    at.number_input(key="tp").set_value(4)
    at.toggle(key="dp_attention").set_value(True)
    at.number_input(key="reserve_gib").set_value(2.0)
    at.run()
    no_exceptions(at)
    r = core(tp=4, dp_attention=True, reserve_bytes=gib_to_bytes(2))
    assert metric(at, "Whole requests of") == whole(r["max_concurrent_requests"])
    assert metric(at, "KV budget per GPU") == format_bytes(r["kv_budget_bytes_per_gpu"])


def test_typed_memory_and_weights_dtype():
    at = run_page(PAGE, **V3_8xH200, gpu_memory_gib="139.8", weights_dtype="fp4", gpu_memory_utilization="0.85")
    no_exceptions(at)
    gpu = custom_gpu(139.8, base=load_gpu("h200"))
    r = capacity(load_model("deepseek-v3"), context=131072, gpu=gpu, num_gpus=8, tp=8, kv_dtype="fp8",
                 weights_dtype="fp4", gpu_memory_utilization=0.85)
    assert metric(at, "Memory per GPU") == format_bytes(gpu.memory_bytes)
    assert metric(at, "KV budget per GPU") == format_bytes(r["kv_budget_bytes_per_gpu"])
    assert metric(at, "Whole requests of") == whole(r["max_concurrent_requests"])


def test_comparison_configuration_2_equals_core():
    at = run_page(PAGE, **V3_8xH200, cmp2_model="llama-3.1-405b", cmp2_gpu="h200", cmp2_num_gpus="8",
                  cmp2_tp="8", cmp2_kv_dtype="fp8")
    no_exceptions(at)
    r2 = core("llama-3.1-405b")
    assert metric(at, "Config 2: whole requests") == whole(r2["max_concurrent_requests"])
    assert metric(at, "Config 2: KV budget per GPU") == format_bytes(r2["kv_budget_bytes_per_gpu"])
    assert metric(at, "Config 1: whole requests") == whole(core()["max_concurrent_requests"])
    titles = [json.loads(c)["layout"]["title"]["text"] for c in chart_specs(at)]
    assert any("by configuration" in t for t in titles)


def test_example_button_sets_three_configurations():
    at = run_page(PAGE)
    # Closed at first (no configuration 2 or 3 in the link): its controls are not drawn.
    assert not [b for b in at.button if b.label.startswith("Example")]
    assert not [s for s in at.selectbox if s.key == "cmp2_model"]
    at.session_state["_capacity_configs_open"] = True
    at.run()
    next(b for b in at.button if b.label.startswith("Example")).click().run()
    no_exceptions(at)
    assert metric(at, "Config 2: whole requests") == whole(core("llama-3.1-405b")["max_concurrent_requests"])
    assert metric(at, "Config 3: whole requests") == whole(core(dp_attention=True)["max_concurrent_requests"])
    assert at.query_params["cmp2_model"] in ("llama-3.1-405b", ["llama-3.1-405b"])  # the URL carries it


def test_garbage_parameters_warn_and_fall_back():
    at = run_page(PAGE, tp="abc", num_gpus="-3", gpu_memory_utilization="2", cmp2_tp="<script>")
    no_exceptions(at)
    shown = texts(at.warning)
    for name in ("tp", "num_gpus", "gpu_memory_utilization", "cmp2_tp"):
        assert f"Link parameter {name}" in shown
    # The defaults stand (8 GPUs, TP8, 0.9).
    r = capacity(load_model("deepseek-v3"), context=131072, gpu=load_gpu("h200"), num_gpus=8, tp=8)
    assert metric(at, "Whole requests of") == whole(r["max_concurrent_requests"])


def test_tiny_gpu_memory_utilization_is_raised_to_the_widget_floor():
    at = run_page(PAGE, gpu_memory_utilization="0.001")
    no_exceptions(at)
    assert "below" in texts(at.warning)


def test_tp_not_dividing_num_gpus_shows_error_and_falls_back():
    at = run_page(PAGE, **{**V3_8xH200, "num_gpus": "6", "tp": "4"})
    no_exceptions(at)
    assert "must divide" in texts(at.error)
    r = core(num_gpus=4, tp=4)  # the fallback: one TP group
    assert metric(at, "Whole requests of") == whole(r["max_concurrent_requests"])


@pytest.mark.parametrize("query, want", [
    (dict(kv_dtype="bf16"), "8.9x"),  # the expanded heads split 16 per GPU under TP8
    (dict(kv_dtype="bf16", dp_attention="1"), "71.1x"),  # every head stays on the GPU
    (dict(kv_dtype="fp8_ds_mla"), None),
])
def test_waste_factor_equals_allocator_waste(query, want):
    at = run_page(PAGE, **{**V3_8xH200, **query})
    no_exceptions(at)
    w = allocator_waste(load_model("deepseek-v3"), context=131072, gpu=load_gpu("h200"), num_gpus=8, tp=8,
                        kv_dtype=query["kv_dtype"], dp_attention=query.get("dp_attention") == "1")
    assert metric(at, "Waste factor") == f"{w['waste_factor']:.1f}x"
    if want:
        assert metric(at, "Waste factor") == want
    assert metric(at, "Requests admitted, MHA formula") == whole(w["expanded"]["max_concurrent_requests"])


def test_gqa_model_has_no_waste_section_and_weights_that_do_not_fit():
    at = run_page(PAGE, model="llama-3.1-405b", gpu="rtx-4090", num_gpus="1", tp="1")
    no_exceptions(at)
    assert "Weights do not fit" in texts(at.error)
    assert metric(at, "Whole requests of") == "0"
    assert metric(at, "KV budget per GPU") == format_bytes(0)
    assert "nothing is wasted" in texts(at.info)
    assert metrics(at) and not [m for m in metrics(at) if m.label.startswith("Waste factor")]


def test_uploaded_model_name_is_shown_as_text():
    from ui.params import encode_config

    cfg = {"_name_or_path": "<img src=x onerror=alert(1)>**bold**", "model_type": "llama", "num_hidden_layers": 2,
           "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
           "vocab_size": 1000, "torch_dtype": "bfloat16"}
    at = run_page(PAGE, model="upload", config=encode_config(cfg), num_gpus="1", tp="1", cmp2_model="llama-3.1-8b",
                  cmp2_num_gpus="1", cmp2_tp="1")
    no_exceptions(at)
    shown = " | ".join(str(e.value) for e in [*at.caption, *at.markdown])  # the Markdown source, escapes kept
    assert r"\<img" in shown and not re.search(r"(?<!\\)<img", shown)  # every "<" escaped
    specs = " ".join(c for c in chart_specs(at))
    assert "&lt;img" in specs and "<img" not in specs and "\\u003cimg" not in specs  # Plotly renders some HTML


# --- the core functions the page added ----------------------------------------------------------------

def test_capacity_variants_model_row_is_capacity():
    m, gpu = load_model("deepseek-v3"), load_gpu("h200")
    rows = capacity_variants(m, context=131072, gpu=gpu, num_gpus=8, tp=8, kv_dtype="fp8")
    assert [r["variant"] for r in rows] == ["MHA", "GQA-8", "MQA", "MLA (latent)", "MLA expanded"]
    (own,) = [r for r in rows if r["is_model"]]
    want = core()
    assert {k: own[k] for k in want if k != "model"} == {k: want[k] for k in want if k != "model"}
    assert own["requests_vs_model"] == 1.0 and own["kv_bytes_vs_model"] == 1.0
    # Each variant is costed with its own weights (own attention projections), so its own budget.
    mha = rows[0]
    assert mha["weights_bytes_per_gpu"] != own["weights_bytes_per_gpu"]
    assert mha["kv_budget_bytes_per_gpu"] == capacity(as_variant(m, "mha"), context=131072, gpu=gpu, num_gpus=8,
                                                      tp=8, kv_dtype="fp8")["kv_budget_bytes_per_gpu"]
    # MLA expanded is the MHA-formula allocator's cache.
    assert rows[-1]["kv_bytes_per_token_per_gpu"] == allocator_waste(
        m, context=131072, gpu=gpu, num_gpus=8, tp=8, kv_dtype="fp8")["expanded"]["kv_bytes_per_token_per_gpu"]


def test_capacity_variants_when_nothing_fits():
    rows = capacity_variants(load_model("llama-3.1-405b"), context=8192, gpu=load_gpu("rtx-4090"))
    assert all(r["requests_vs_model"] is None for r in rows)
    assert all(r["max_concurrent_requests"] == 0 for r in rows)


def test_memory_breakdown_adds_up():
    r = core(reserve_bytes=gib_to_bytes(3))
    b = memory_breakdown(r)
    assert b["weights"] + b["kv_in_use"] + b["kv_free"] + b["reserve"] + b["headroom"] == b["memory"]
    assert b["kv_in_use"] == r["kv_used_bytes_per_gpu"] and b["over"] == 0 and b["kv_free"] >= 0
    no_fit = capacity(load_model("llama-3.1-405b"), context=8192, gpu=load_gpu("rtx-4090"))
    b = memory_breakdown(no_fit)
    assert b["kv_in_use"] == b["kv_free"] == 0
    assert b["weights"] + b["reserve"] + b["headroom"] == b["memory"] + b["over"] and b["over"] > 0
    with pytest.raises(MLAError):
        memory_breakdown(capacity(load_model("llama-3.1-8b"), context=10, kv_budget_bytes=1 << 30))


def test_an_mla_model_in_bf16_is_told_what_fp8_would_hold():
    at = run_page(PAGE, **dict(V3_8xH200, kv_dtype="bf16"))
    no_exceptions(at)
    bf16, fp8 = core(kv_dtype="bf16"), core(kv_dtype="fp8")
    assert fp8["max_concurrent_requests"] > bf16["max_concurrent_requests"] > 0
    note = texts(at.info)
    assert (f"would hold {fp8['max_concurrent_requests']:,} whole requests of 128K tokens at once instead of "
            f"{bf16['max_concurrent_requests']:,} "
            f"({fp8['max_concurrent_requests'] / bf16['max_concurrent_requests']:.2f}x)") in note
    # already at fp8, or a model without MLA: nothing to say
    for query in (V3_8xH200, dict(V3_8xH200, model="llama-3.1-70b", kv_dtype="bf16")):
        assert "would hold" not in texts(run_page(PAGE, **query).info)


def test_coinciding_curves_say_same_as():
    from mla_core.views import capacity_variants_view, capacity_view

    at = run_page(PAGE, **V3_8xH200)
    no_exceptions(at)
    m, g = load_model("deepseek-v3"), load_gpu("h200")
    cvv = capacity_variants_view(m, capacity_view(m, g, context=131072, num_gpus=8, tp=8, kv_dtype="fp8"))
    by = {s.label: s for s in cvv.series}
    # TP 8 leaves GQA-8 one KV head a GPU, as MQA: only their weights differ (k_proj, v_proj), by under 3%
    assert by["GQA-8"].y != by["MQA"].y
    assert all(abs(a - b) <= 0.03 * max(a, b) for a, b in zip(by["GQA-8"].y, by["MQA"].y))
    assert cvv.same_as == {"MQA": ("GQA-8", False)}
    fig = next(json.loads(c) for c in chart_specs(at)
               if "against context" in json.loads(c)["layout"]["title"]["text"])
    names = [t.get("name") for t in fig["data"] if t.get("name")]
    assert "MQA (within 3% of GQA-8)" in names and "GQA-8" in names


def test_curves_one_whole_request_apart_from_rounding_still_say_within():
    """bf16 KV: GQA-8 and MQA hold the same bytes a request; their budgets differ by 0.2%, so the
    floors differ by one request where the count is small (22 and 23 at 72,301 tokens, 4.3%)."""
    from mla_core.views import capacity_variants_view, capacity_view

    m, g = load_model("deepseek-v3"), load_gpu("h200")
    cv = capacity_view(m, g, context=131072, num_gpus=8, tp=8, kv_dtype="bf16")
    cvv = capacity_variants_view(m, cv)
    by = {s.label: s for s in cvv.series}
    gap = max(abs(a - b) / max(a, b) for a, b in zip(by["GQA-8"].y, by["MQA"].y) if max(a, b))
    assert gap > 0.03 and all(abs(a - b) <= 1 + 0.03 * max(a, b) for a, b in zip(by["GQA-8"].y, by["MQA"].y))
    assert cvv.same_as == {"MQA": ("GQA-8", False)}
    at = run_page(PAGE, **dict(V3_8xH200, kv_dtype="bf16"))
    no_exceptions(at)
    fig = next(json.loads(c) for c in chart_specs(at)
               if "against context" in json.loads(c)["layout"]["title"]["text"])
    assert "MQA (within 3% of GQA-8)" in [t.get("name") for t in fig["data"]]


def test_across_gpu_presets_is_drawn_when_opened_with_the_cores_counts():
    from mla_core.presets import gpu_ids

    at = run_page(PAGE, model="deepseek-v3", gpu="h200", num_gpus="8", tp="8", context="131072", kv_dtype="bf16")
    no_exceptions(at)
    title = "Whole requests of 128K tokens on 8"
    assert not any(json.loads(c)["layout"]["title"]["text"].startswith(title) for c in chart_specs(at))
    at.session_state["_capacity_across_open"] = True
    at.run()
    no_exceptions(at)
    fig = next(json.loads(c) for c in chart_specs(at)
               if json.loads(c)["layout"]["title"]["text"].startswith(title))
    bars = fig["data"][0]
    assert len(bars["x"]) == len(gpu_ids()) and "<b>h200</b>" in bars["x"]
    want = core(gpu="b200", kv_dtype="bf16")
    assert bars["y"][bars["x"].index("b200")] == want["max_concurrent_requests"]
