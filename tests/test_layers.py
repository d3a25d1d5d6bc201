"""Every layer its own cache: hybrid, recurrent, chunked, shared and draft layers (docs/model.md,
"Every layer its own cache"), pinned to engine logs and real configs (data/models.json)."""
import importlib
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_core.capacity import capacity
from mla_core.config import parse_config
from mla_core.kv import kv_cache_bytes, kv_report, state_bytes_per_layer, state_bytes_per_sequence
from mla_core.params import params_total, weights_bytes
from mla_core.presets import load_gpu, load_model, model_entries, model_ids
from mla_core.roofline import roofline
from mla_core.layers import full_attention_layer
from mla_core.spec import with_draft_layers
from mla_core.sweeps import decode_step_vs_batch

GiB = 2**30


def kinds(model):
    return [(g.kind, g.layers) for g in kv_report(model, 4096).layers]


# --- engine checks --------------------------------------------------------------------------------

def test_nemotron_nano_mamba2_layer_matches_vllm():
    # vllm#24280: vLLM sized its attention page to 672 tokens to hold one Mamba-2 layer:
    # 1,347,584 elements = 2,695,168 B at bf16.
    m = load_model("nemotron-nano-9b-v2")
    assert m.recurrent.elements() == 1_347_584
    assert state_bytes_per_layer(m) == 2_695_168
    r = kv_report(m, 131072, kv_dtype="bf16")
    assert r.kv_bytes_per_token == 16_384  # 4 attention layers x 8 KV heads x 2 x 128 x 2 B
    assert r.state_bytes_per_sequence == 27 * 2_695_168
    assert r.kv_cache_bytes == 2_147_483_648


def test_qwen3_next_deltanet_layer_matches_vllm_and_trtllm():
    m = load_model("qwen3-next-80b-a3b")
    # vllm#26646: 548,864 elements a Gated DeltaNet layer = 1,097,728 B at bf16, 548,864 B per GPU at TP2.
    assert m.recurrent.elements() == 548_864
    assert state_bytes_per_layer(m) == 1_097_728
    assert state_bytes_per_layer(m, tp=2) == 548_864
    # TensorRT-LLM#9072: 12 of 48 layers hold KV, 24,576 B per token.
    r = kv_report(m, 262144, kv_dtype="bf16")
    assert r.kv_bytes_per_token == 24_576 and r.kv_layers == 12 and r.recurrent_layers == 36
    assert r.state_bytes_per_sequence == 39_518_208
    # The same model costed as if every layer were full attention: 4x the per-token bytes.
    assert r.all_full_attention_kv_bytes_per_token == 4 * 24_576


@pytest.mark.parametrize("preset, expected", [
    ("qwen3-next-80b-a3b", [("gdn", 36), ("full", 12)]),  # full_attention_interval 4
    ("nemotron-nano-9b-v2", [("mamba2", 27), ("none", 25), ("full", 4)]),  # hybrid_override_pattern
    ("kimi-linear-48b-a3b", [("kda", 20), ("full", 7)]),  # linear_attn_config, 1-based
    ("minimax-m1-80k", [("lightning", 70), ("full", 10)]),  # attn_type_list
    ("jamba-1.5-mini", [("mamba1", 28), ("full", 4)]),  # attn_layer_period 8, offset 4
    ("granite-4.0-h-small", [("mamba2", 36), ("full", 4)]),  # layer_types mamba / attention
    ("falcon-h1-7b-instruct", [("full+mamba2", 44)]),  # attention and Mamba-2 in every layer
    ("llama-4-scout-17b-16e-instruct", [("chunked", 36), ("full", 12)]),  # NoPE global every 4th
    # num_kv_shared_layers 15: they keep their kind's window to attend with (12 sliding, 3 full)
    ("gemma-3n-e4b-it", [("sliding", 16), ("full", 4), ("shared", 12), ("shared", 3)]),
    ("gpt-oss-120b", [("sliding", 18), ("full", 18)]),
    ("deepseek-v3", [("full", 61)]),
])
def test_layer_counts_each_field_selects(preset, expected):
    assert kinds(load_model(preset)) == expected


def test_longcat_two_mla_caches_a_layer():
    m = load_model("longcat-flash-chat")  # num_layers 28, two MLA blocks a layer
    r = kv_report(m, 1, kv_dtype="bf16")
    assert m.num_hidden_layers == 28 and r.kv_layers == 56
    assert r.kv_bytes_per_token == 56 * (512 + 64) * 2
    assert params_total(m) / 1e9 == pytest.approx(560, rel=0.01)  # tech report: 560 B


def test_kimi_linear_is_mla_and_answers():
    m = load_model("kimi-linear-48b-a3b")
    r = kv_report(m, 1_048_576, kv_dtype="bf16")
    assert m.is_mla and r.kv_bytes_per_token == 7 * 1152
    # KDA: (K - 1) * 3 * h * d + h * d * d, h 32, d 128, K 4 -> 561,152 elements a layer.
    assert m.recurrent.elements() == 3 * 3 * 32 * 128 + 32 * 128 * 128
    # vLLM keeps KDA's recurrent state in float32 whatever the model dtype (MambaStateDtypeCalculator
    # .kda_state_dtype: conv at the model dtype, recurrent torch.float32): 36,864 conv elements x 2 B
    # + 524,288 recurrent elements x 4 B a layer (it was 561,152 x 2 B before the engines' rule).
    assert r.state_bytes_per_sequence == 20 * (3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4) == 43_417_600


def test_chunked_attention_caps_llama4_scout_at_1m():
    # The check: ignoring attention_chunk_size overstates Scout's cache at 1M tokens 3.9x.
    m = load_model("llama-4-scout-17b-16e-instruct")
    t = 1_000_000
    per_layer = 8 * 2 * 128 * 2
    assert kv_cache_bytes(m, t) == per_layer * (12 * t + 36 * 8192)
    assert 48 * t / (12 * t + 36 * 8192) == pytest.approx(3.9, abs=0.05)


def test_gemma3n_shared_layers_hold_nothing():
    m = load_model("gemma-3n-e4b-it")
    r = kv_report(m, 32768)
    assert r.kv_layers == 20 and 35 / r.kv_layers == 1.75  # the 1.75x
    assert not m.params_complete and any("Gemma-3n" in n for n in m.notes)


def test_minimax_m1_lightning_is_8x_smaller_than_all_attention():
    r = kv_report(load_model("minimax-m1-80k"), 131072, kv_dtype="bf16")
    assert r.all_full_attention_kv_bytes_per_token == 8 * r.kv_bytes_per_token
    assert r.state_bytes_per_sequence == 70 * 64 * 128 * 128 * 2  # n_h * d_h * d_h at bf16


def test_mtp_adds_one_latent_layer_to_deepseek_v3():
    base = load_model("deepseek-v3")
    m = with_draft_layers(base, base.num_nextn_predict_layers)
    r = kv_report(m, 131072, kv_dtype="bf16")
    assert r.kv_layers == 62 and r.kv_bytes_per_token == 62 * 1152 == 71_424
    assert [(g.kind, g.layers, g.draft) for g in r.layers] == [("full", 61, False), ("full", 1, True)]
    # The hub's 685 B = 671 B + the MTP module (its embedding and head are shared).
    assert params_total(m) / 1e9 == pytest.approx(685, rel=0.01)
    assert params_total(base) / 1e9 == pytest.approx(671, rel=0.005)


def test_gpt_oss_120b_mxfp4_fits_one_h100():
    # vllm#33155: vLLM loads gpt-oss-120b in 64.38 GiB on one H100 (mxfp4 experts). Costed at bf16
    # it was 217.6 GiB, "does not fit". The rest of vLLM's figure is engine-side, not modelled.
    m = load_model("gpt-oss-120b")
    assert m.default_weights_dtype == "mxfp4"
    w = weights_bytes(m, "mxfp4") / GiB
    assert 0.9 * 64.38 < w < 64.38
    assert weights_bytes(m, "bf16") / GiB == pytest.approx(217.6, abs=0.05)
    c = capacity(m, context=131072, gpu=load_gpu("h100-sxm"))
    assert c.weights_fit and c.max_concurrent_requests >= 1


def test_unknown_quant_method_is_counted_at_torch_dtype_with_a_note():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "quantization_config": {"quant_method": "awq"}}
    m = parse_config(cfg)
    assert m.default_weights_dtype == "bf16" and any("awq" in n for n in m.notes)


# --- capacity and the decode step count the state ---------------------------------------------------

def test_capacity_counts_state_per_request():
    m = load_model("qwen3-next-80b-a3b")
    c = capacity(m, context=262144, gpu=load_gpu("h200"), num_gpus=2, tp=2, kv_dtype="fp8")
    state = state_bytes_per_sequence(m, tp=2)
    assert c.state_bytes_per_request_per_gpu == state == 36 * 548_864
    assert c.request_bytes_per_gpu == c.kv_bytes_per_request_per_gpu + state
    assert c.max_concurrent_requests == c.replicas * (c.kv_budget_bytes_per_gpu // c.request_bytes_per_gpu)
    per_token = c.kv_bytes_per_token_per_gpu
    assert c.max_tokens_per_gpu == (c.kv_budget_bytes_per_gpu - state) // (16 * per_token) * 16


def test_roofline_reads_and_writes_the_state():
    m = load_model("nemotron-nano-9b-v2")
    r = roofline(m, load_gpu("h100-sxm"), context=8192, batch=4)
    assert r.state_bytes_per_step == 2 * 4 * state_bytes_per_sequence(m)
    assert r.state_flops == 4 * 27 * (4 * m.recurrent.ssm_elements() + 2 * m.recurrent.conv_elements())
    assert r.step_bytes == r.weights_bytes_per_step + r.attention_bytes + r.state_bytes_per_step


@pytest.mark.parametrize("preset", ["nemotron-nano-9b-v2", "deepseek-v3", "gpt-oss-120b", "qwen3-next-80b-a3b"])
def test_sweep_is_the_scalar_path(preset):
    m, gpu = load_model(preset), load_gpu("h200")
    batches = [1, 3, 64, 1000]
    s = decode_step_vs_batch(m, gpu, batches, context=32768, tp=8)
    for i, b in enumerate(batches):
        r = roofline(m, gpu, context=32768, batch=b, tp=8)
        assert s["step_time_s"][i] == pytest.approx(r.step_time_s, rel=1e-12)
        assert s["state_bytes_per_step"][i] == r.state_bytes_per_step


# --- properties ------------------------------------------------------------------------------------

HYBRIDS = ["qwen3-next-80b-a3b", "nemotron-nano-9b-v2", "kimi-linear-48b-a3b", "jamba-1.5-mini",
           "falcon-h1-7b-instruct", "minimax-m1-80k", "granite-4.0-h-small"]


@settings(max_examples=40, deadline=None)
@given(preset=st.sampled_from(HYBRIDS), t1=st.integers(1, 10**7), t2=st.integers(1, 10**7))
def test_state_does_not_grow_with_context(preset, t1, t2):
    m = load_model(preset)
    assert kv_report(m, t1).state_bytes_per_sequence == kv_report(m, t2).state_bytes_per_sequence > 0


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from(model_ids()), drop=st.integers(0, 200), t=st.integers(1, 10**6))
def test_removing_a_layer_never_increases_the_cache(preset, drop, t):
    from dataclasses import replace

    m = load_model(preset)
    i = drop % len(m.layers)
    smaller = replace(m, layers=m.layers[:i] + m.layers[i + 1:])
    a, b = kv_report(m, t), kv_report(smaller, t)
    assert b.cache_bytes <= a.cache_bytes and b.kv_bytes_per_token <= a.kv_bytes_per_token


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from(model_ids()), t=st.integers(1, 10**6), batch=st.integers(1, 64))
def test_all_full_attention_model_gives_the_plain_formula(preset, t, batch):
    from dataclasses import replace

    m = load_model(preset)
    full = replace(m, layers=(full_attention_layer(m.attention, m.indexer),) * m.num_hidden_layers)
    r = kv_report(full, t, batch)
    per_layer = r.kv_bytes_per_token_per_layer
    assert r.kv_cache_bytes == batch * m.num_hidden_layers * per_layer * t == r.cache_bytes
    assert r.kv_bytes_per_token == r.all_full_attention_kv_bytes_per_token
    assert not full.is_hybrid or m.is_mla is not None


def test_every_preset_with_a_published_total_is_counted_within_3_percent():
    for preset, entry in model_entries().items():
        published = entry["published"].get("params_total_B")
        if published:
            assert params_total(load_model(preset)) / 1e9 == pytest.approx(published, rel=0.03), preset


# --- the core's modules import on their own (no cycle between config and spec) ----------------------

CORE_MODULES = ["errors", "results", "units", "validate", "spec", "config", "kv", "params", "hardware", "capacity",
                "roofline", "presets", "sweeps", "claims", "cli"]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_imports_alone(module):
    out = subprocess.run([sys.executable, "-c", f"import mla_core.{module}"], capture_output=True, text=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr
    importlib.import_module(f"mla_core.{module}")


def test_spec_does_not_import_config():
    out = subprocess.run([sys.executable, "-c", "import sys, mla_core.spec; print('mla_core.config' in sys.modules)"],
                         capture_output=True, text=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.stdout.strip() == "False"


# --- the command line ------------------------------------------------------------------------------

def run_cli(*argv):
    import io
    import contextlib
    import json

    from mla_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, (json.loads(out.getvalue()) if rc == 0 and "--json" in argv else out.getvalue()), err.getvalue()


def test_cli_json_has_the_layer_groups_and_state():
    rc, r, _ = run_cli("kv", "--model", "qwen3-next-80b-a3b", "--context", "262144", "--kv-dtype", "bf16", "--json")
    assert rc == 0
    assert r["state_bytes_per_sequence"] == 39_518_208 and r["cache_bytes"] == r["kv_cache_bytes"] + r["state_bytes"]
    assert [(g["kind"], g["layers"], g["bytes_per_token_per_layer"], g["tokens_held"], g["state_bytes_per_layer"])
            for g in r["layers"]] == [("gdn", 36, 0, 0, 1_097_728), ("full", 12, 2048, 262144, 0)]


def test_cli_state_dtype_and_draft_layers():
    rc, r, _ = run_cli("kv", "--model", "nemotron-nano-9b-v2", "--context", "1024", "--state-dtype", "fp32", "--json")
    assert r["state_bytes_per_sequence"] == 27 * 1_347_584 * 4 and r["state_dtype"] == "fp32"
    rc, r, _ = run_cli("kv", "--model", "deepseek-v3", "--context", "1024", "--mtp", "--json")
    assert r["kv_bytes_per_token"] == 71_424 and r["draft_layers"] == 1
    rc, r, _ = run_cli("kv", "--model", "llama-3.1-8b", "--context", "1024", "--draft-layers", "2", "--json")
    assert r["kv_layers"] == 34
    rc, r, err = run_cli("kv", "--model", "llama-3.1-8b", "--context", "1024", "--mtp")
    assert rc == 2 and "num_nextn_predict_layers" in err and "\n" not in err.strip()
    rc, r, _ = run_cli("capacity", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--num-gpus", "2", "--tp", "2",
                       "--context", "262144", "--json")
    assert r["request_bytes_per_gpu"] == r["kv_bytes_per_request_per_gpu"] + 36 * 548_864
    rc, r, _ = run_cli("roofline", "--model", "nemotron-nano-9b-v2", "--gpu", "h200", "--context", "1024", "--json")
    assert r["state_bytes_per_step"] == 2 * 27 * 2_695_168


def test_readable_table_shows_the_groups():
    rc, text, _ = run_cli("kv", "--model", "qwen3-next-80b-a3b", "--context", "4096")
    assert rc == 0 and "36 x gdn" in text and "Gated DeltaNet state" in text and "recurrent state per sequence" in text


@pytest.mark.parametrize("preset", model_ids())
def test_a_link_carries_every_field_the_parser_reads(preset):
    # The app keeps an uploaded config in the link as its slimmed fields: they must read back the
    # same model (layer kinds, state shape, MoE, weights dtype), for every preset's real config.
    from ui.params import decode_config, encode_config

    cfg = model_entries()[preset]["config"]
    back = parse_config(decode_config(encode_config(cfg)), name=preset)
    assert back == parse_config(cfg, name=preset)


@pytest.mark.parametrize("extra, match", [
    ({"num_hidden_layers": 4, "num_kv_shared_layers": 4}, "no earlier layer"),
    ({"num_hidden_layers": 4, "hybrid_override_pattern": "----"}, "no layer of this config holds"),
    ({"num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 5, "mamba_d_state": 16, "mamba_d_conv": 4,
      "mamba_expand": 2}, "attn_layer_offset"),
    ({"num_hidden_layers": 4, "linear_attn_config": {"full_attn_layers": [1, 1, 2], "kda_layers": [3, 4],
                                                     "num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4}},
     "twice"),
    ({"num_hidden_layers": 4, "linear_attn_config": {"full_attn_layers": [1, 2], "kda_layers": [2, 3, 4],
                                                     "num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4}},
     "both"),
    ({"num_hidden_layers": 2, "hybrid_override_pattern": "M*", "mamba_num_heads": 8, "mamba_head_dim": 16,
      "n_groups": 3, "ssm_state_size": 16, "conv_kernel": 4}, "groups"),
])
def test_inconsistent_layer_fields_are_one_line_errors(extra, match):
    from mla_core.errors import ConfigError

    cfg = {"model_type": "x", "hidden_size": 64, "num_attention_heads": 4, **extra}
    with pytest.raises(ConfigError, match=match):
        parse_config(cfg)


def test_mtp_fields_of_other_families():
    # MiniMax-M2: use_mtp with num_mtp_modules x mtp_transformer_layers; Qwen3-Next: mtp_num_hidden_layers.
    assert load_model("minimax-m2").num_nextn_predict_layers == 3
    cfg = dict(model_entries()["qwen3-next-80b-a3b"]["config"], mtp_num_hidden_layers=1)
    assert parse_config(cfg).num_nextn_predict_layers == 1
