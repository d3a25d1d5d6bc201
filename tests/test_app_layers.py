"""The pages on per-layer caches (AppTest): the KV page's layer map equals the core's groups, and
every page answers for the hybrid, recurrent, chunked and shared-KV presets."""
import json

import pytest

from apptest_util import chart_specs, metric, no_exceptions, plain, run_page
from mla_core.kv import tp_split_error
from mla_core.layermap import layer_map
from mla_core.capacity import capacity
from mla_core.presets import load_gpu, load_model
from mla_core.units import format_bytes

NEW_PRESETS = ["qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "nemotron-nano-9b-v2", "granite-4.0-h-small",
               "jamba-1.5-mini", "falcon-h1-7b-instruct", "minimax-m1-80k", "minimax-m2",
               "llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct", "gemma-3n-e4b-it",
               "longcat-flash-chat"]


def layer_chart(at):
    for c in chart_specs(at):
        spec = json.loads(c)
        if spec["layout"]["title"]["text"].startswith("What each layer holds"):
            return spec
    raise AssertionError("no layer map on the page")


@pytest.mark.parametrize("preset", ["qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "deepseek-v4-flash"])
def test_layer_map_matches_the_cores_groups(preset):
    at = run_page("pages/kv_cache.py", model=preset, context="131072", kv_dtype="bf16")
    no_exceptions(at)
    lm = layer_map(load_model(preset), 131072, "bf16")
    spec = layer_chart(at)
    drawn = {t["name"]: sorted(t["x"]) for t in spec["data"]}
    want = {label: sorted(c.index for c in lm.cells if (c.kind, c.label) == (kind, label)) for kind, label in lm.legend}
    assert drawn == want
    # Hover carries each cell's exact bytes.
    for t in spec["data"]:
        for x, cd in zip(t["x"], t["customdata"]):
            assert cd[2] == f"{lm.cells[x].bytes:,}"
    assert metric(at, "State, one sequence") == format_bytes(lm.state_bytes_per_sequence)
    assert metric(at, "If every layer were full attention") == format_bytes(lm.all_full_attention_bytes_per_sequence)


@pytest.mark.parametrize("preset", NEW_PRESETS)
def test_capacity_page_counts_the_state(preset):
    at = run_page("pages/capacity.py", model=preset, context="32768", gpu="h200", tp="8", num_gpus="8")
    no_exceptions(at)
    split_error = tp_split_error(load_model(preset), 8)
    if split_error:  # Falcon-H1-7B's 12 query heads do not split over 8 GPUs: the page says what the core says
        assert any(plain(e.value) == split_error for e in at.error), [e.value for e in at.error]
        return
    r = capacity(load_model(preset), context=32768, gpu=load_gpu("h200"), num_gpus=8, tp=8)
    if not r.weights_fit:  # LongCat-Flash at bf16 on 8 H200: the page says so, as the core does
        assert any("Weights do not fit" in e.value for e in at.error)
        return
    assert not at.error, [e.value for e in at.error]
    if r.state_bytes_per_request_per_gpu:
        assert metric(at, "Recurrent state per request") == format_bytes(r.state_bytes_per_request_per_gpu)


@pytest.mark.parametrize("preset", NEW_PRESETS[:6])
def test_roofline_page_answers(preset):
    at = run_page("pages/roofline.py", model=preset, context="32768", gpu="h200")
    no_exceptions(at)
    split_error = tp_split_error(load_model(preset), 8)
    assert not at.error, [e.value for e in at.error]
    if split_error:  # the page still draws, and says engines refuse this TP
        assert any(split_error in plain(w.value) for w in at.warning), [w.value for w in at.warning]


def test_a_map_of_identical_layers_is_a_sentence_with_its_chart_behind_an_expander():
    """DeepSeek-V3's 61 layers all hold the same MLA latent: the page says so in one line (the core's
    cell) and draws the chart only once its expander is opened; a hybrid's map is drawn at once."""
    at = run_page("pages/kv_cache.py", model="deepseek-v3", context="131072", kv_dtype="bf16")
    no_exceptions(at)
    lm = layer_map(load_model("deepseek-v3"), 131072, "bf16")
    assert lm.uniform and not layer_map(load_model("qwen3-next-80b-a3b"), 131072, "bf16").uniform
    cell = lm.cells[0]
    assert f"All 61 layers hold the same: {cell.label}, {format_bytes(cell.bytes)} each" in plain(
        " ".join(c.value for c in at.caption))
    with pytest.raises(AssertionError):
        layer_chart(at)
    at.session_state["_kv_layer_map_open"] = True
    at.run()
    spec = layer_chart(at)
    assert [t["name"] for t in spec["data"]] == [label for _, label in lm.legend]
    assert sorted(spec["data"][0]["x"]) == [c.index for c in lm.cells]

    one = run_page("pages/kv_cache.py", model="custom", attention="gqa", layers="1", heads="32", head_dim="128",
                   kv_heads="8")
    no_exceptions(one)
    assert "The one layer holds full attention" in " ".join(c.value for c in one.caption)


def test_the_layer_map_expander_stays_open_across_a_hybrid_model():
    """Opened on a uniform model, the layer map's expander is not drawn for a hybrid (its chart is
    drawn at once); back on a uniform model it is open again, as the user left it."""
    at = run_page("pages/kv_cache.py", model="deepseek-v3", context="131072", kv_dtype="bf16")
    at.session_state["_kv_layer_map_open"] = True
    at.run()
    layer_chart(at)  # open
    at.selectbox(key="model").set_value("qwen3-next-80b-a3b").run()
    no_exceptions(at)
    assert not layer_map(load_model("qwen3-next-80b-a3b"), 131072, "bf16").uniform
    layer_chart(at)  # a hybrid's map, no expander
    at.selectbox(key="model").set_value("kimi-k2-instruct").run()
    no_exceptions(at)
    assert layer_map(load_model("kimi-k2-instruct"), 131072, "bf16").uniform
    spec = layer_chart(at)  # still open: the chart is drawn
    assert spec["layout"]["title"]["text"].startswith("What each layer holds")


def test_a_kind_with_several_labels_has_a_legend_entry_each():
    """DeepSeek-V4-Flash's 43 layers are all compressed attention, at three rates (config.json's
    compress_ratios: layers 0-1 ratio 0, window only; 21 layers ratio 4 with the indexer; 20 layers
    ratio 128): the legend names each rate with its own cells, hatched apart in the kind's colour."""
    at = run_page("pages/kv_cache.py", model="deepseek-v4-flash", context="131072", kv_dtype="bf16")
    no_exceptions(at)
    spec = layer_chart(at)
    count = {t["name"].split(": ", 1)[1]: len(t["x"]) for t in spec["data"]}
    assert count == {"128-token window only (latent 512)": 2,
                     "128-token window + 1 latent per 4 tokens + index key 128 (latent 512)": 21,
                     "128-token window + 1 latent per 128 tokens (latent 512)": 20}
    assert sorted(spec["data"][0]["x"]) == [0, 1]
    assert len({t["marker"]["color"] for t in spec["data"]}) == 1
    assert len({t["marker"]["pattern"]["shape"] for t in spec["data"]}) == 3
