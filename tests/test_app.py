"""The app as a whole (AppTest): pages, deep links, shared state, the URL, hostile links and uploads."""
import json

import pytest

from apptest_util import PAGES, app, metric, metrics, no_exceptions, own_model, run_page, shown
from mla_core.config import parse_config
from mla_core.kv import compare_variants, kv_report
from mla_core.presets import load_model, model_entries
from mla_core.units import format_bytes
from ui import params


def test_kv_page_deep_link_shows_the_cores_numbers():
    # The example: DeepSeek-V3 at 128K tokens, bf16: 68.6 KiB per token, 8.58 GiB.
    at = run_page("pages/kv_cache.py", model="deepseek-v3", context="131072", kv_dtype="bf16")
    no_exceptions(at)
    r = kv_report(load_model("deepseek-v3"), 131072, 1, "bf16")
    assert metric(at, "KV bytes per token") == format_bytes(r["kv_bytes_per_token"]) == "68.6 KiB"
    assert metric(at, "Per sequence") == format_bytes(r["kv_cache_bytes_per_sequence"]) == "8.58 GiB"
    assert any("GQA with 2.25 groups" in m.value for m in at.markdown)


def test_kv_page_table_matches_compare_variants():
    at = run_page("pages/kv_cache.py", model="llama-3.1-70b", context="32768", batch="2", kv_dtype="fp8")
    no_exceptions(at)
    df = at.dataframe[0].value
    rows = compare_variants(load_model("llama-3.1-70b"), 32768, 2, "fp8")
    assert list(df["per token"]) == [format_bytes(r["kv_bytes_per_token"]) for r in rows]
    assert list(df.iloc[:, 4]) == [format_bytes(r["kv_cache_bytes"]) for r in rows]


@pytest.mark.parametrize("preset", list(model_entries()))
def test_kv_page_answers_for_every_preset(preset):
    at = run_page("pages/kv_cache.py", model=preset, context="65536")
    no_exceptions(at)
    assert not at.error
    want = kv_report(load_model(preset), 65536)["kv_bytes_per_token"]
    assert metric(at, "KV bytes per token") == format_bytes(want)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_on_defaults(page):
    at = app()
    at.switch_page(page).run()
    no_exceptions(at)
    assert not at.error, [e.value for e in at.error]


def test_widget_value_survives_a_visit_to_every_other_page():
    at = app().run()
    at.number_input(key="context").set_value(65536).run()
    at.selectbox(key="model").set_value("kimi-k2-instruct").run()
    assert not [s for s in at.selectbox if s.key == "gqa_groups"]  # the comparison settings start closed
    at.session_state["_kv_comparison_open"] = True
    at.run()
    at.selectbox(key="gqa_groups").set_value(4).run()  # a page widget, dropped when not drawn
    for page in PAGES[1:]:
        at.switch_page(page).run()
        no_exceptions(at)
        assert at.session_state["context"] == 65536
    at.switch_page(PAGES[0]).run()
    assert at.session_state["model"] == "kimi-k2-instruct"
    assert at.session_state["gqa_groups"] == 4
    assert at.number_input(key="context").value == 65536
    assert at.query_params["context"] == "65536" and at.query_params["gqa_groups"] == "4"
    want = kv_report(load_model("kimi-k2-instruct"), 65536)["kv_cache_bytes_per_sequence"]
    assert metric(at, "Per sequence") == format_bytes(want)


def test_url_carries_only_what_differs_from_the_defaults():
    at = app(model="mistral-7b-v0.1", batch="4").run()
    assert dict(at.query_params) == {"model": "mistral-7b-v0.1", "batch": "4"}
    at.select_slider(key="_context_stop").set_value(32768).run()
    assert dict(at.query_params) == {"model": "mistral-7b-v0.1", "batch": "4", "context": "32768"}
    at.select_slider(key="_context_stop").set_value(params.PARAMS["context"].default).run()
    assert "context" not in at.query_params  # back to the default: gone from the link
    # Opening the URL it wrote reproduces the view.
    again = app(**{k: v for k, v in at.query_params.items()}).run()
    assert [m.value for m in metrics(again)] == [m.value for m in metrics(at)] != []
    assert len(params.to_query(params.defaults())) == 0


@pytest.mark.parametrize("query, needle", [
    ({"context": "abc"}, "context"),
    ({"context": "-5"}, "context"),
    ({"context": "0"}, "context"),
    ({"context": "9" * 10000}, "context"),
    ({"batch": "1e9"}, "batch"),
    ({"model": "<script>alert(1)</script>"}, "model"),
    ({"model": "x" * 10000}, "model"),
    ({"kv_dtype": "int3"}, "kv_dtype"),
    ({"gpu": "tpu-v9"}, "gpu"),
    ({"present": "maybe"}, "present"),
    ({"gpu_memory_utilization": "nan"}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": "2"}, "gpu_memory_utilization"),
    ({"no_such_param": "1"}, "no_such_param"),
    ({"config": "!!!not-base64!!!"}, "config"),
    ({"model": "upload"}, "upload"),
])
def test_garbage_link_gives_a_warning_and_the_default(query, needle):
    at = app(**query).run()
    no_exceptions(at)
    warnings = shown(at.warning)
    assert needle in warnings
    for key in query:
        if key in params.PARAMS and key != "model" or query.get("model") == "upload":
            continue
    # The fallback is the default and the page still answers.
    assert metric(at, "KV bytes per token")


def test_markup_in_a_link_is_never_rendered():
    at = app(model="<img src=x onerror=alert(1)>").run()
    no_exceptions(at)
    assert all("<img" not in m.value or "\\<img" in m.value for m in at.markdown)


def _upload(at, data: bytes, name="config.json"):
    own_model(at)
    at.file_uploader(key="_upload").upload(name, data, "application/json")
    return at.run()


def test_uploaded_real_config_is_used():
    from conftest import case_config

    data = open(case_config("deepseek-v2-lite.json"), "rb").read()
    at = _upload(app(model="llama-3.1-8b").run(), data)
    no_exceptions(at)
    assert at.session_state["model"] == "upload"
    assert metric(at, "KV bytes per token") == format_bytes(31104)
    at.switch_page("pages/capacity.py").run()  # the uploaded model holds on other pages
    no_exceptions(at)
    assert at.session_state["model"] == "upload"


@pytest.mark.parametrize("data, needle", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "UTF-8"),
    (b" " * ((1 << 20) + 1), "1 MiB"),
    (b'{"num_hidden_layers": Infinity}', "Infinity"),
    (b'{"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 64, "text_config": 5}', "text_config"),
    (b'{"num_hidden_layers": true, "num_attention_heads": 2, "hidden_size": 64}', "integer"),
])
def test_bad_upload_gives_an_error_and_keeps_the_model(data, needle):
    at = _upload(app(model="llama-3.1-8b").run(), data)
    no_exceptions(at)
    assert needle in shown(at.error)
    assert at.session_state["model"] == "llama-3.1-8b"
    assert metric(at, "KV bytes per token") == format_bytes(131072)


def test_pasted_config_is_used_and_carried_in_the_link():
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
           "num_key_value_heads": 4, "torch_dtype": "bfloat16"}
    at = own_model(app().run())
    at.text_area(key="_paste").input(json.dumps(cfg)).run()
    at.button[[b.label for b in at.button].index("Use the pasted config")].click().run()
    no_exceptions(at)
    assert at.session_state["model"] == "upload"
    want = kv_report(parse_config(cfg), 131072)["kv_bytes_per_token"]
    assert metric(at, "KV bytes per token") == format_bytes(want)
    # The link carries the config: a fresh session opened from it shows the same numbers.
    again = app(**dict(at.query_params)).run()
    assert metric(again, "KV bytes per token") == format_bytes(want)


@pytest.mark.parametrize("text, needle", [
    ("[1, 2, 3]", "object"),
    ('{"num_hidden_layers": NaN}', "NaN"),
    ('{"num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 60}', "divisible"),
    ("{" * 3000, "JSON"),
    ('{"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "kv_lora_rank": 32}', "MLA"),
])
def test_bad_pasted_config_gives_an_error_and_keeps_the_model(text, needle):
    at = own_model(app(model="llama-3.1-8b").run())
    at.text_area(key="_paste").input(text).run()
    at.button[[b.label for b in at.button].index("Use the pasted config")].click().run()
    no_exceptions(at)
    assert needle in shown(at.error)
    assert at.session_state["model"] == "llama-3.1-8b"


def test_architecture_by_hand():
    at = own_model(app().run())
    at.selectbox(key="attention").set_value("gqa").run()
    at.number_input(key="layers").set_value(32).run()
    at.number_input(key="heads").set_value(32).run()
    at.number_input(key="kv_heads").set_value(8).run()
    at.button[[b.label for b in at.button].index("Use this architecture")].click().run()
    no_exceptions(at)
    assert at.session_state["model"] == "custom"
    assert metric(at, "KV bytes per token") == format_bytes(131072)  # Llama-3.1-8B's shape


def test_presentation_mode_from_the_link():
    at = app(present="1").run()
    no_exceptions(at)
    assert at.session_state["present"] is True
    assert any("<style>" in m.value for m in at.markdown)


def test_encoded_config_round_trips_every_preset():
    for preset_id, entry in model_entries().items():
        cfg = entry["config"]
        back = parse_config(params.decode_config(params.encode_config(cfg)), name=preset_id)
        assert back == parse_config(cfg, name=preset_id), preset_id


def test_analytic_pages_never_import_torch():
    """Every analytic page, in a fresh interpreter (other tests here may have loaded torch)."""
    import subprocess
    import sys

    from apptest_util import ROOT

    code = (
        "import sys, json\n"
        "sys.path.insert(0, 'tests')\n"
        "from apptest_util import app\n"
        "at = app(model='deepseek-v3').run()\n"
        "for p in ['pages/capacity.py', 'pages/roofline.py', 'pages/claims.py', 'pages/kv_cache.py']:\n"
        "    at.switch_page(p).run()\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'exc': [e.value for e in at.exception]}))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"torch": False, "exc": []}, p.stderr[-2000:]


def _values_script():
    import streamlit as st

    from ui import state

    state.init()
    first = state.values()
    first["num_gpus"] = -1  # a copy: a later reading of the same run is not changed by it
    again = state.values()
    st.number_input("GPUs", 1, 4096, persist_state="session", key="num_gpus")
    if st.session_state.get("_set_tp"):
        state.set_values(tp=st.session_state["_set_tp"])  # before tp's widget: the run's next reading has it
    after = state.values()
    st.text(f"{again['num_gpus']} {after['num_gpus']} {again['tp']} {after['tp']}")


def test_the_state_is_read_once_a_run_and_a_write_within_the_run_is_seen():
    """ui.state.values() keeps one reading for the run in progress (ui/state.py): a copy each call,
    a new reading on the next run, and set_values() within the run drops the kept one."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_values_script, default_timeout=60)
    at.run()
    no_exceptions(at)
    assert at.text[0].value == "8 8 8 8" == " ".join(str(params.PARAMS[k].default) for k in
                                                       ("num_gpus", "num_gpus", "tp", "tp"))
    at.number_input(key="num_gpus").set_value(16).run()  # the next run reads the state again
    assert at.text[0].value == "16 16 8 8"
    at.session_state["_set_tp"] = 4
    at.run()
    no_exceptions(at)
    assert at.text[0].value == "16 16 8 4"
