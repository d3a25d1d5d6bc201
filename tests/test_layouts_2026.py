"""The layouts of 2026 (docs/model.md, "Layouts of 2026"), each preset pinned to an engine's own
figure where one is public (allocation logs in issues, the engines' code), with the source
beside the number; and nothing silent: unknown layout fields carry a note on every surface, a
known layout missing a field is refused naming it.

The configs are real copies of the hub files (tests/fixtures/configs, sources in SOURCES.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mla_core.capacity import capacity
from mla_core.config import load_config, parse_config
from mla_core.errors import ConfigError
from mla_core.kv import kv_bytes_per_token, kv_cache_bytes, kv_report, layer_groups, state_bytes_per_sequence
from mla_core.params import params_total
from mla_core.presets import load_gpu, load_model, model_entries
from mla_core.roofline import roofline
from mla_core.serving import Workload, search

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
GiB = 1 << 30
M = 1 << 20  # 1,048,576 tokens

NEW_PRESETS = ("deepseek-v4-flash", "deepseek-v4-pro", "qwen3.5-27b", "qwen3.5-397b-a17b", "glm-5", "mimo-v2-flash",
               "gemma-4-26b-a4b", "lfm2-1.2b", "nemotron-3-nano-30b-a3b", "llama-3.3-nemotron-super-49b",
               "minimax-m3", "kimi-k2.5")


def _fixture(name: str):
    return load_config(CONFIGS / f"{name}.json")


@pytest.mark.parametrize("preset", NEW_PRESETS)
def test_each_preset_is_its_fixture(preset):
    # The preset in data/models.json is the real config.json kept in tests/fixtures/configs.
    assert kv_report(load_model(preset), 131072, kv_dtype="bf16").to_dict() == \
        kv_report(_fixture(preset), 131072, kv_dtype="bf16").to_dict() | {"model": preset}


# --- DeepSeek-V4: window + compressed latents + indexer + float32 compressor state -----------------

def test_deepseek_v4_pro_at_1m_in_fp8_ds_mla_is_what_the_engines_allocate():
    m = load_model("deepseek-v4-pro")
    # 30 ratio-4 layers: 128 window entries of 584 B (SGLang DeepSeekV4SingleKVPool asserts
    # 448 + 64 x 2 + 8 = 584) + 2^20 / 4 compressed entries of 584 B + an fp8 index key of 132 B
    # (SGLang get_dsv4_indexer_bytes_per_token: 128 + 4); 31 ratio-128 layers: 128 + 8,192 entries.
    want = 30 * (128 * 584 + (M // 4) * (584 + 132)) + 31 * (128 * 584 + (M // 128) * 584)
    assert kv_cache_bytes(m, M, 1, "fp8_ds_mla") == want == 5_783_720_960
    # The float32 compressor state (vLLM CompressorStateCache: state_dim 2 coff head_dim, window
    # coff r; coff 2 at r = 4): 2.2.4.2.512.4 + the indexer's 2.2.4.2.128.4 a ratio-4 layer,
    # 2.1.128.1.512.4 a ratio-128 layer.
    assert state_bytes_per_sequence(m) == 30 * (65_536 + 16_384) + 31 * 524_288 == 18_710_528
    r = kv_report(m, M, kv_dtype="fp8_ds_mla")
    assert r.cache_bytes == 5_783_720_960 + 18_710_528
    # The V4 report's "9.62 GiB per sequence at 1M tokens in bf16" (its index key at bf16 too).
    assert kv_cache_bytes(m, M, 1, "bf16") / GiB == pytest.approx(9.625, abs=0.001)


def test_deepseek_v4_pro_holds_about_a_tenth_of_v32_at_1m():
    # DeepSeek-V4 model card: "KV cache 10% of V3.2 at 1M"; V3.2 in fp8_ds_mla (656 B) + 132 B index.
    v4 = kv_cache_bytes(load_model("deepseek-v4-pro"), M, 1, "fp8_ds_mla")
    v32 = kv_cache_bytes(load_model("deepseek-v3.2-exp"), M, 1, "fp8_ds_mla")
    assert v32 == 61 * (656 + 132) * M
    assert v4 / v32 == pytest.approx(0.1147, abs=0.0005)


def test_deepseek_v4_flash_matches_the_case_and_its_mtp_layer():
    m = load_model("deepseek-v4-flash")
    assert kv_cache_bytes(m, 65536, 1, "bf16") == 456_523_776  # ../shared/cases/layers.json (window-only 2 + 21 + 20)
    assert state_bytes_per_sequence(m) == 21 * 81_920 + 20 * 524_288 == 12_206_080
    assert kv_cache_bytes(m, M, 1, "fp8_ds_mla") == 4_040_494_080
    # compress_ratios' trailing 0 is the MTP layer: with --mtp one window-only layer more.
    r = kv_report(load_model("deepseek-v4-flash"), 4096, kv_dtype="bf16")
    from mla_core.spec import with_draft_layers

    mtp = kv_report(with_draft_layers(m, 1), 4096, kv_dtype="bf16")
    assert mtp.kv_cache_bytes - r.kv_cache_bytes == 128 * 1024 and mtp.state_bytes_per_sequence == r.state_bytes_per_sequence


# --- per-kind heads and widths -------------------------------------------------------------------

def test_mimo_v2_flash_full_and_sliding_pools_as_sglang_logs_them():
    m = load_model("mimo-v2-flash")
    g = {x.kind: x for x in layer_groups(m, 1, "bf16", tp=4)}
    # sgl-project/sglang#15464 (TP4, "#tokens: 1496958", buffers hold size + 1 rows, GB = GiB):
    # full pool K 9 layers x 1 head x 192 x 2 B: "K size: 4.82 GB", V x 128: "3.21 GB";
    # SWA pool 39 layers x 2 heads x 192 K / 128 V: "K size: 41.76 GB", "V size: 27.84 GB".
    assert (g["full"].layers, g["sliding"].layers) == (9, 39)
    assert g["full"].bytes_per_token_per_layer == 1 * (192 + 128) * 2
    assert g["sliding"].bytes_per_token_per_layer == 2 * (192 + 128) * 2
    rows = 1_496_958 + 1
    assert round(9 * rows * 192 * 2 / GiB, 2) == 4.82 and round(9 * rows * 128 * 2 / GiB, 2) == 3.21
    assert round(39 * rows * 2 * 192 * 2 / GiB, 2) == 41.76 and round(39 * rows * 2 * 128 * 2 / GiB, 2) == 27.84
    # Its attention_chunk_size (128) is not Llama-4 chunking: the 39 layers slide over 128 tokens.
    assert g["sliding"].shape["window"] == 128 and "chunk" not in g["sliding"].shape
    # At 131,072 tokens the old reading (attention_chunk_size as Llama-4 chunking: 12 global layers,
    # 36 chunked to 128 tokens, the plain 4 heads x 192 for K and V) was 1.6x (the figure).
    old = 12 * 4 * 2 * 192 * 2 * 131072 + 36 * 4 * 2 * 192 * 2 * 128
    assert kv_cache_bytes(m, 131072, 1, "bf16") == 3_045_457_920
    assert old / 3_045_457_920 == pytest.approx(1.6, abs=0.05)


def test_gemma_4_global_layers_use_their_own_heads_and_width():
    m = load_model("gemma-4-26b-a4b")
    g = {x.kind: x for x in layer_groups(m, 131072, "bf16")}
    # Full (global) layers: num_global_key_value_heads 2 x global_head_dim 512, K and V two caches
    # (transformers modeling_gemma4 uses the global heads on non-sliding attention_k_eq_v layers).
    assert g["full"].layers == 5 and g["full"].bytes_per_token_per_layer == 2 * 2 * 512 * 2
    assert g["sliding"].layers == 25 and g["sliding"].bytes_per_token_per_layer == 8 * 2 * 256 * 2
    assert kv_cache_bytes(m, 131072, 1, "bf16") == 2_894_069_760
    plain = 5 * 8 * 2 * 256 * 2 * 131072 + 25 * 8 * 2 * 256 * 2 * 1024  # the plain fields on every layer
    assert plain / 2_894_069_760 == pytest.approx(1.93, abs=0.01)  # the "1.9x at 131K"


def test_lfm2_full_attn_idxs_and_its_short_convolution_state():
    m = load_model("lfm2-1.2b")
    r = kv_report(m, 4096, kv_dtype="bf16")
    # 6 GQA layers (full_attn_idxs) of 8 KV heads x 64; 10 short convolutions of (conv_L_cache - 1)
    # x conv_dim = 2 x 2048 elements (vLLM MambaStateShapeCalculator.short_conv_state_shape).
    assert r.kv_bytes_per_token == 6 * 8 * 2 * 64 * 2 == 12_288
    assert r.state_bytes_per_sequence == 10 * 2 * 2048 * 2 == 81_920
    assert 16 * 8 * 2 * 64 * 2 / r.kv_bytes_per_token == pytest.approx(2.67, abs=0.01)  # the 2.7x
    assert not [n for n in m.notes if "not modelled" in n or "counted as full" in n]


def test_decilm_block_configs():
    m = load_model("llama-3.3-nemotron-super-49b")
    r = kv_report(m, 4096, kv_dtype="bf16")
    # 49 blocks with attention (64 heads // n_heads_in_group 8 = 8 KV heads x 128), 31 no_op
    # (vLLM nemotron_nas.py reads them so).
    assert r.kv_layers == 49 and r.kv_bytes_per_token == 49 * 8 * 2 * 128 * 2 == 200_704
    assert 80 * 64 * 2 * 128 * 2 / r.kv_bytes_per_token == pytest.approx(13.06, abs=0.01)  # the 13x


def test_glm_indexer_types_and_minimax_m3_index_keys():
    glm5 = load_model("glm-5")
    assert kv_bytes_per_token(glm5, "bf16") == 78 * (1152 + 132) == 100_152
    assert kv_bytes_per_token(glm5, "fp8_ds_mla") == 78 * (656 + 132) == 61_464
    # GLM-5.2: indexer_types marks 21 of 78 layers `full` (the others share an earlier index).
    glm52 = _fixture("glm-5.2")
    assert kv_bytes_per_token(glm52, "bf16") == 78 * 1152 + 21 * 132 == 92_628
    # MiniMax-M3: 57 sparse layers add one index key head of 128 (K only: sparse_disable_index_value),
    # SGLang MiniMaxSparseKVPool's MHATokenToKOnlyPool(head_num=1) at the KV dtype.
    m3 = load_model("minimax-m3")
    assert kv_bytes_per_token(m3, "bf16") == 60 * 4 * 2 * 128 * 2 + 57 * 128 * 2 == 137_472
    assert kv_bytes_per_token(m3, "fp8") == 60 * 4 * 2 * 128 + 57 * 128 == 68_736


# --- recurrent state at the engines' dtypes -------------------------------------------------------

def test_qwen35_gated_deltanet_in_text_config_with_a_float32_ssm_state():
    # layer_types linear_attention under text_config = Gated DeltaNet; text_config.mamba_ssm_dtype
    # float32 (vLLM reads it into mamba_ssm_cache_dtype; vllm-ascend#7393 logs a 4-byte SSM page).
    m = load_model("qwen3.5-27b")
    r = kv_report(m, 262144, kv_dtype="bf16")
    assert r.kv_bytes_per_token == 16 * 4 * 2 * 256 * 2 == 65_536
    assert r.state_bytes_per_sequence == 48 * (3 * (2 * 16 * 128 + 48 * 128) * 2 + 48 * 128 * 128 * 4) == 153_944_064
    assert (r.state_dtype, r.ssm_state_dtype) == ("bf16", "fp32")
    big = kv_report(load_model("qwen3.5-397b-a17b"), 262144, kv_dtype="bf16")
    assert big.kv_bytes_per_token == 30_720 and big.state_bytes_per_sequence == 192_061_440
    # --ssm-state-dtype bf16 halves the recurrent part; --state-dtype bf16 sets both parts.
    assert state_bytes_per_sequence(m, ssm_state_dtype="bf16") == 48 * (30_720 * 2 + 786_432 * 2)
    assert state_bytes_per_sequence(m, "bf16") == state_bytes_per_sequence(m, ssm_state_dtype="bf16")


def test_nemotron_3_nano_float32_ssm_cache():
    # mamba_ssm_cache_dtype float32 (vLLM PR #22913: FP32 mamba cache for NemotronH).
    m = load_model("nemotron-3-nano-30b-a3b")
    assert state_bytes_per_sequence(m) == 23 * (3 * (64 * 64 + 2 * 8 * 128) * 2 + 64 * 64 * 128 * 4) == 49_082_368
    assert kv_bytes_per_token(m, "bf16") == 6 * 2 * 2 * 128 * 2 == 6_144


def test_layers_block_type_and_kda_in_float32():
    n35 = _fixture("nemotron-3.5-lightning-30b-a3b")
    assert kv_bytes_per_token(n35, "bf16") == 6_144  # 6 attention layers of 52, not 52 (the 8.7x)
    assert 52 * 2 * 2 * 128 * 2 / 6_144 == pytest.approx(8.67, abs=0.01)
    k3 = _fixture("kimi-k3")
    # vLLM keeps KDA's recurrent state in float32 (kda_state_dtype): 69 layers x (110,592 conv x 2 B
    # + 1,572,864 recurrent x 4 B).
    assert state_bytes_per_sequence(k3) == 69 * (110_592 * 2 + 1_572_864 * 4) == 449_372_160


@pytest.mark.parametrize("preset,published_b", [
    ("deepseek-v4-flash", 284), ("deepseek-v4-pro", 1600), ("qwen3.5-27b", 27), ("qwen3.5-397b-a17b", 397),
    ("glm-5", 744), ("mimo-v2-flash", 309), ("gemma-4-26b-a4b", 25.2), ("lfm2-1.2b", 1.170340608),
    ("nemotron-3-nano-30b-a3b", 31.6), ("llama-3.3-nemotron-super-49b", 49.9), ("minimax-m3", 428),
    ("kimi-k2.5", 1040),
])
def test_parameters_within_2_percent_of_the_published_totals(preset, published_b):
    # Published totals (data/models.json `published`: model cards; LFM2's exact 1,170,340,608;
    # Kimi-K2.5's card rounds to "1T", third-party summaries quote 1.04T; Super-49B's card 49.9B).
    assert params_total(load_model(preset)) / 1e9 == pytest.approx(published_b, rel=0.02)


@pytest.mark.parametrize("preset", NEW_PRESETS)
def test_every_new_preset_answers_capacity_roofline_and_plan(preset):
    m, gpu = load_model(preset), load_gpu("h200")
    plan = search(m, gpu, num_gpus=16, workload=Workload(2048, 256))
    assert plan.best is not None and plan.vllm_command and plan.sglang_command
    best = plan.best
    cap = capacity(m, context=2048 + 256, gpu=gpu, num_gpus=16, tp=best.tp, dp_attention=best.dp_attention)
    assert cap.max_concurrent_requests > 0
    assert roofline(m, gpu, context=32768, batch=8, tp=best.tp).step_time_s > 0


# --- nothing silent --------------------------------------------------------------------------------

INVENTED = dict(json.loads((CONFIGS / "llama-3.1-8b.json").read_text()), moe_block_pattern=[1, 2], kv_share_every=3)


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "mla_core", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [
    ["kv", "--context", "4096"],
    ["capacity", "--gpu", "h200", "--context", "4096"],
    ["roofline", "--gpu", "h200", "--context", "4096"],
    ["plan", "--gpu", "h200", "--input-len", "1024", "--output-len", "128"],
])
def test_an_invented_layout_field_gets_a_note_in_text_and_json(tmp_path, command):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(INVENTED))
    text = _cli(*command, "--config", str(path))
    js = _cli(*command, "--config", str(path), "--json")
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    notes = json.loads(js.stdout)["notes"]
    for field in ("kv_share_every", "moe_block_pattern"):
        note = f"field {field} is not modelled: the figures may be wrong"
        assert note in notes and f"note: {note}" in text.stdout


def test_an_unknown_layer_kind_is_noted_and_keys_known_not_to_matter_are_quiet():
    cfg = dict(INVENTED, layer_types=["full_attention"] * 31 + ["ring_attention"], rope_theta=1e6, bos_token_id=1)
    m = parse_config(cfg)
    assert any("'ring_attention'" in n and "counted as full attention" in n for n in m.notes)
    assert not any("rope_theta" in n or "bos_token_id" in n for n in m.notes)
    # Every preset's own keys are read or known not to shape the cache: no preset carries such a note.
    for name in NEW_PRESETS:
        assert not [n for n in load_model(name).notes if "is not modelled: the figures" in n], name


@pytest.mark.parametrize("change,field,layout", [
    (lambda c: c.pop("compress_ratios"), "compress_ratios", "DeepSeek-V4"),
    (lambda c: c.pop("sliding_window"), "sliding_window", "DeepSeek-V4"),
    (lambda c: c.pop("index_head_dim"), "index_head_dim", "DeepSeek-V4"),
    (lambda c: c.pop("head_dim"), "head_dim", "DeepSeek-V4"),
])
def test_a_known_layout_missing_a_field_is_refused_naming_both(change, field, layout):
    cfg = json.loads((CONFIGS / "deepseek-v4-pro.json").read_text())
    change(cfg)
    if field == "compress_ratios":
        cfg["model_type"] = "deepseek_v4"
    with pytest.raises(ConfigError, match=f"(?=.*{field})(?=.*{layout})"):
        parse_config(cfg)


def test_missing_fields_of_other_layouts_name_the_field_and_the_layout(tmp_path):
    mimo = json.loads((CONFIGS / "mimo-v2-flash.json").read_text())
    mimo.pop("sliding_window")
    with pytest.raises(ConfigError, match="(?=.*hybrid_layer_pattern)(?=.*sliding_window)"):
        parse_config(mimo)
    nas = json.loads((CONFIGS / "llama-3.3-nemotron-super-49b.json").read_text())
    next(b for b in nas["block_configs"] if not b["attention"].get("no_op"))["attention"].pop("n_heads_in_group")
    with pytest.raises(ConfigError, match="(?=.*n_heads_in_group)(?=.*DeciLM)"):
        parse_config(nas)
    # Through the CLI: exit status 2, one line, no traceback.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mimo))
    out = _cli("kv", "--config", str(path), "--context", "1024")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "sliding_window" in out.stderr


def test_the_kv_page_shows_v4_pro_against_v32_at_1m():
    from tests.apptest_util import metric, no_exceptions, run_page
    from mla_core.units import format_bytes

    at = run_page("pages/kv_cache.py", model="deepseek-v4-pro", kv_model2="deepseek-v3.2-exp", context="1048576",
                  kv_dtype="fp8_ds_mla")
    no_exceptions(at)
    v4 = kv_report(load_model("deepseek-v4-pro"), M, kv_dtype="fp8_ds_mla")
    v32 = kv_report(load_model("deepseek-v3.2-exp"), M, kv_dtype="fp8_ds_mla")
    assert metric(at, "Per sequence") == format_bytes(v4.kv_cache_bytes_per_sequence) == format_bytes(5_783_720_960)
    assert metric(at, "Per sequence, second model") == format_bytes(v32.kv_cache_bytes_per_sequence)
    assert metric(at, "State, one sequence") == format_bytes(18_710_528)
