"""KV-cache bytes pinned to published figures (sources in each test)."""
import pytest

from mla_core.config import load_config, parse_config
from mla_core.errors import MLAError
from mla_core.kv import compare_variants, kv_bytes_per_token, kv_bytes_per_token_layer, kv_cache_bytes
from mla_core.presets import load_model
from mla_core.config import synthetic_model

from conftest import case_config


def test_deepseek_v3_latent_bf16():
    # DeepSeek-V2 Table 1 MLA row, DeepSeek-V3 config: 61 * (512 + 64) * 2 B = 70,272 B = 68.6 KiB.
    m = load_config(case_config("deepseek-v3.json"))
    assert kv_bytes_per_token(m, "bf16") == 70272
    assert kv_cache_bytes(m, 131072, 1, "bf16") == 9210691584  # 8.58 GiB per 128K request


def test_preset_equals_config_file():
    # The preset goes through the same parser and must give the config file's numbers.
    a = load_model("deepseek-v3")
    b = load_config(case_config("deepseek-v3.json"))
    assert kv_bytes_per_token(a, "bf16") == kv_bytes_per_token(b, "bf16")
    assert a.attention == b.attention and a.layer_windows == b.layer_windows


def test_deepseek_v3_expanded_cache():
    # DeepSeek-V3 inference/model.py naive path: per-head K (128 + 64) and V (128):
    # 128 * 320 * 2 B * 61 layers = 4,997,120 B per token.
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token(m, "bf16", "expanded") == 4997120
    assert kv_cache_bytes(m, 65536, 1, "bf16", "expanded") == 327491256320


def test_fp8_ds_mla_is_656_bytes():
    # FlashMLA FP8 KV layout: 512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656 B per token per layer.
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token_layer(m, "fp8_ds_mla") == 656
    assert kv_bytes_per_token(m, "fp8_ds_mla") == 40016


def test_fp8_ds_mla_refused_where_it_does_not_exist():
    with pytest.raises(MLAError, match="fp8_ds_mla"):
        kv_bytes_per_token(load_model("llama-3.1-8b"), "fp8_ds_mla")
    with pytest.raises(MLAError, match="expanded"):
        kv_bytes_per_token(load_model("deepseek-v3"), "fp8_ds_mla", "expanded")


def test_deepseek_v32_indexer_adds_132_bytes_per_layer():
    # DeepSeek-V3.2-Exp inference/model.py Indexer: 128 fp8 + one fp32 scale = 132 B per token
    # per layer, whatever the KV dtype; reference/models.json: 48,068 B with fp8_ds_mla.
    m = load_model("deepseek-v3.2-exp")
    assert kv_bytes_per_token_layer(m, "bf16") == 1152 + 132
    assert kv_bytes_per_token(m, "fp8_ds_mla") == 48068


def test_flashmla_blog_128k_request_is_8_72_gib():
    # FlashMLA deep dive: 576 * 2 * 62 * 128 * 1024 B = 8.72 GiB (62 = 61 layers + the MTP layer).
    m = synthetic_model("mla", layers=62, heads=128, kv_lora_rank=512, rope_dim=64)
    nbytes = kv_cache_bytes(m, 131072, 1, "bf16")
    assert nbytes == 576 * 2 * 62 * 131072
    assert round(nbytes / 2**30, 2) == 8.72


def test_deepseek_v2_lite_32k_request():
    # An engine's log: one 32,768-token DeepSeek-V2-Lite request needs 0.95 GiB of KV cache.
    m = load_config(case_config("deepseek-v2-lite.json"))
    nbytes = kv_cache_bytes(m, 32768, 1, "bf16")
    assert nbytes == 1019215872
    assert round(nbytes / 2**30, 2) == 0.95


def test_llama31_8b_uses_kv_heads_not_query_heads():
    # 2 * 8 KV heads * 128 * 2 B * 32 layers = 131,072 B; with query heads it would be 4x.
    m = load_config(case_config("llama-3.1-8b.json"))
    assert kv_bytes_per_token(m, "bf16") == 131072
    assert kv_cache_bytes(m, 8192, 4, "bf16") == 4294967296


def test_llama2_7b_head_dim_derived():
    # No head_dim in the config: 4096 / 32 = 128; MHA 2 * 32 * 128 * 2 B * 32 layers.
    m = load_config(case_config("llama-2-7b.json"))
    assert m.attention.head_dim == 128
    assert kv_bytes_per_token(m, "fp16") == 524288
    assert kv_cache_bytes(m, 4096, 1, "fp16") == 2147483648


def test_mistral_window_caps_the_cache():
    # Mistral-7B-v0.1: 4096-token window on every layer.
    m = load_config(case_config("mistral-7b-v0.1.json"))
    assert kv_cache_bytes(m, 32768, 1, "bf16") == 131072 * 4096
    assert kv_cache_bytes(m, 4096, 1, "bf16") == kv_cache_bytes(m, 10**12, 1, "bf16")


def test_gemma2_even_layers_slide():
    # Gemma-2 (model_type gemma2): 0-based even layers keep 4096 tokens, odd layers are global.
    m = load_model("gemma-2-9b")
    assert m.layer_windows[:4] == (4096, None, 4096, None)
    per_layer = 2 * 8 * 256 * 2
    assert kv_cache_bytes(m, 8192, 1, "bf16") == per_layer * (21 * 8192 + 21 * 4096)


def test_gemma3_pattern_from_class_default():
    # gemma-3-27b-it's text_config has no sliding_window_pattern: Gemma3TextConfig's 6 applies,
    # layer i global when (i + 1) % 6 == 0 -> 10 global + 52 local (window 1024).
    m = load_model("gemma-3-27b")
    assert m.num_sliding_layers == 52
    assert m.layer_windows[5] is None and m.layer_windows[4] == 1024
    per_layer = 2 * 16 * 128 * 2
    assert kv_cache_bytes(m, 131072, 1, "bf16") == per_layer * (10 * 131072 + 52 * 1024)


def test_gpt_oss_layer_types():
    # gpt-oss-20b: layer_types alternate sliding (window 128) and full, starting with sliding.
    m = load_model("gpt-oss-20b")
    assert m.layer_windows[:2] == (128, None)
    per_layer = 2 * 8 * 64 * 2
    assert kv_cache_bytes(m, 131072, 1, "bf16") == per_layer * (12 * 131072 + 12 * 128)


def test_synthetic_table1_mla():
    # DeepSeek-V2 Table 1: (d_c + d_r) * l = 4.5 d_h l elements with d_c = 4 d_h, d_r = d_h / 2.
    m = synthetic_model("mla", layers=60, heads=128, kv_lora_rank=512, rope_dim=64)
    assert kv_bytes_per_token(m, "bf16") == 69120 == int(4.5 * 128 * 60 * 2)


def test_synthetic_mqa():
    m = synthetic_model("mqa", layers=32, heads=71, head_dim=64)
    assert kv_bytes_per_token(m, "bf16") == 8192
    assert kv_cache_bytes(m, 2048, 1, "bf16") == 16777216


@pytest.mark.parametrize("dtype, row", [("q8_0", 4 * 34), ("q4_0", 4 * 18), ("fp4", 8 * 9), ("fp8", 128),
                                         ("fp32", 512), ("fp16", 256)])
def test_block_formats_round_each_row(dtype, row):
    # docs/model.md: q8_0 34 B / 32 values, q4_0 18 B / 32, fp4 0.5 B + 1 B scale per 16; a K or V
    # row is d_h = 128 values per KV head.
    m = load_model("llama-3.1-8b")
    assert kv_bytes_per_token_layer(m, dtype) == 2 * 8 * row


def test_block_formats_round_up_partial_blocks():
    # The MLA latent row is 576 values = 18 q8_0 blocks; 100 values would be 4 blocks (rounded up).
    m = load_model("deepseek-v3")
    assert kv_bytes_per_token_layer(m, "q8_0") == 18 * 34
    s = synthetic_model("mqa", layers=1, heads=1, head_dim=100)
    assert kv_bytes_per_token_layer(s, "q4_0") == 2 * 4 * 18


def test_auto_follows_torch_dtype_not_fp8_weights():
    # DeepSeek-V3 ships fp8 weights, but `auto` KV follows torch_dtype (bf16).
    assert kv_bytes_per_token(load_model("deepseek-v3"), "auto") == 70272
    assert kv_bytes_per_token(load_model("llama-2-70b"), "auto") == 327680  # float16


def test_block_size_rounds_tokens_per_layer():
    m = load_model("deepseek-v3")
    assert kv_cache_bytes(m, 100, 1, "bf16", block_size=64) == 128 * 70272
    assert kv_cache_bytes(m, 128, 1, "bf16", block_size=64) == 128 * 70272


def test_tensor_parallel_shards_kv_heads_but_not_the_latent():
    llama = load_model("llama-3.1-70b")
    assert kv_bytes_per_token(llama, "bf16", tp=4) == 81920  # 8 KV heads over TP4 -> 2 per GPU
    assert kv_bytes_per_token(llama, "bf16", tp=16) == 40960  # never split below one head
    dsv3 = load_model("deepseek-v3")
    assert kv_bytes_per_token(dsv3, "bf16", tp=8) == 70272  # the latent has no head axis
    assert kv_bytes_per_token(dsv3, "bf16", "expanded", tp=8) == 4997120 // 8


def test_huge_contexts_stay_exact():
    # 10^15 tokens, batch 10^6: Python ints, no wrap-around.
    m = load_model("deepseek-v3")
    assert kv_cache_bytes(m, 10**15, 10**6, "bf16") == 70272 * 10**21


def test_compare_variants_deepseek_v3():
    # DeepSeek-V2 Table 1: MLA = GQA with 2.25 groups; against MHA of d_h = 128 (qk_nope_head_dim)
    # the latent is 32768 / 576 = 56.9x smaller.
    rows = {r["variant"]: r for r in compare_variants(load_model("deepseek-v3"), 131072, 1, "bf16")}
    assert rows["MLA (latent)"]["is_model"]
    assert rows["MLA (latent)"]["gqa_groups_equivalent"] == pytest.approx(2.25)
    assert rows["MLA (latent)"]["vs_mha"] == pytest.approx(32768 / 576)
    assert rows["MHA"]["kv_bytes_per_token"] == 2 * 128 * 128 * 2 * 61
    assert rows["MQA"]["kv_bytes_per_token"] == 2 * 128 * 2 * 61
    assert rows["GQA-8"]["kv_bytes_per_token"] == 8 * rows["MQA"]["kv_bytes_per_token"]
    assert rows["MLA expanded"]["kv_bytes_per_token"] == 4997120
    assert rows["MLA expanded"]["vs_mla_latent"] == pytest.approx(4997120 / 70272)  # 71.1x


def test_compare_variants_gqa_model_gets_table1_mla():
    rows = {r["variant"]: r for r in compare_variants(load_model("llama-3.1-8b"), 8192, 1, "bf16")}
    assert rows["GQA-8"]["is_model"]
    # Table 1 setting d_c = 4 d_h = 512, d_r = d_h / 2 = 64.
    assert rows["MLA (latent)"]["kv_bytes_per_token"] == 576 * 2 * 32


def test_compare_variants_rejects_bad_groups():
    with pytest.raises(MLAError, match="divisor"):
        compare_variants(load_model("llama-3.1-8b"), 10, gqa_groups=5)


def test_unknown_dtype_and_layout():
    m = load_model("deepseek-v3")
    with pytest.raises(MLAError, match="kv_dtype"):
        kv_bytes_per_token(m, "int3")
    with pytest.raises(MLAError, match="cache_layout"):
        kv_bytes_per_token(m, "bf16", "sideways")


@pytest.mark.parametrize("context", [0, -5, True, 1.5, "10"])
def test_bad_context(context):
    with pytest.raises(MLAError, match="context"):
        kv_cache_bytes(load_model("deepseek-v3"), context)


def test_minicpm3_latent_cache():
    # MiniCPM3-4B: (256 + 32) * 2 B * 62 layers = 35,712 B (reference/models.json, sglang's MLA view).
    assert kv_bytes_per_token(load_model("minicpm3-4b"), "bf16") == 35712


def test_falcon_multi_query_wins_over_serialized_num_kv_heads():
    # transformers modeling_falcon: multi_query without new_decoder_architecture caches one KV
    # head, whatever num_kv_heads a serialized FalconConfig writes (71).
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
           "num_kv_heads": 71, "multi_query": True, "new_decoder_architecture": False}
    assert kv_bytes_per_token(parse_config(cfg), "bf16") == 8192
    assert kv_bytes_per_token(load_model("falcon-7b"), "bf16") == 8192
