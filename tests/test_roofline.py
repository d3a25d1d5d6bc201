"""Decode roofline: pinned figures and the identities of docs/model.md."""
import pytest

from mla_core.config import load_config
from mla_core.errors import MLAError
from mla_core.params import experts_touched
from mla_core.presets import load_gpu, load_model
from mla_core.roofline import attention_flops_per_token_layer, decode_attention, roofline
from mla_core.config import synthetic_model
from mla_core.spec import as_variant

from conftest import case_config


def test_llama31_8b_h100_step():
    # Llama-3.1-8B bf16 on an H100 SXM at 8K context: weights without the input embedding
    # (8,030,261,248 - 128,256 * 4096 params) * 2 B, KV 131,072 B * 8192 tokens;
    # (15,009,849,344 + 1,073,741,824) B / 3.35 TB/s = 4.80 ms -> 208.29 tokens/s, memory bound.
    r = roofline(load_config(case_config("llama-3.1-8b.json")), load_gpu("h100-sxm"),
                 context=8192, batch=1, kv_dtype="bf16", weights_dtype="bf16")
    assert r["params_total"] == 8030261248
    assert r["weights_bytes_per_step"] == 15009849344
    assert r["attention_bytes"] == 1073741824
    assert r["tokens_per_s"] == pytest.approx(208.29, rel=1e-4)
    assert r["bound"] == "memory"


def test_deepseek_v3_absorbed_intensity():
    # FlashMLA convention: 128 * (2 * 576 + 2 * 512) / 1152 = 241.8 flop/B at bf16.
    r = decode_attention(load_model("deepseek-v3"), 32768, 1, "bf16", "absorbed")
    assert r["attention_intensity_flop_per_byte"] == pytest.approx(128 * 2176 / 1152)
    assert r["attention_bytes"] == 2302672896


def test_mha_intensity_is_one_and_gqa_is_group_ratio():
    mha = synthetic_model("mha", layers=32, heads=32, head_dim=128)
    assert decode_attention(mha, 4096, 1, "bf16")["attention_intensity_flop_per_byte"] == pytest.approx(1.0)
    gqa = load_model("llama-3.1-8b")  # 32 query heads over 8 KV heads
    assert decode_attention(gqa, 4096, 1, "bf16")["attention_intensity_flop_per_byte"] == pytest.approx(4.0)
    mqa = as_variant(gqa, "mqa")
    assert decode_attention(mqa, 4096, 1, "bf16")["attention_intensity_flop_per_byte"] == pytest.approx(32.0)


def test_mla_path_flops():
    m = load_model("deepseek-v3")
    assert attention_flops_per_token_layer(m, "absorbed") == 128 * (2 * 576 + 2 * 512)
    assert attention_flops_per_token_layer(m, "expanded") == 128 * (2 * 192 + 2 * 128)
    assert attention_flops_per_token_layer(m, "recompute") == 128 * (2 * 192 + 2 * 128) + 2 * 512 * 128 * 256


def test_recompute_reads_the_latent_expanded_reads_the_expanded_cache():
    m = load_model("deepseek-v3")
    absorbed = decode_attention(m, 4096, 2, "bf16", "absorbed")
    recompute = decode_attention(m, 4096, 2, "bf16", "recompute")
    expanded = decode_attention(m, 4096, 2, "bf16", "expanded")
    assert recompute["attention_bytes"] == absorbed["attention_bytes"] == 2 * 4096 * 70272
    assert expanded["attention_bytes"] == 2 * 4096 * 4997120


def test_tp_divides_mla_intensity_dp_attention_keeps_it():
    # TP8: 16 query heads per GPU over the whole (replicated) latent -> 1/8 the intensity.
    m = load_model("deepseek-v3")
    full = decode_attention(m, 4096, 8, "bf16")["attention_intensity_flop_per_byte"]
    tp8 = decode_attention(m, 4096, 8, "bf16", tp=8)["attention_intensity_flop_per_byte"]
    dp = decode_attention(m, 4096, 1, "bf16", tp=8, dp_attention=True)["attention_intensity_flop_per_byte"]
    assert tp8 == pytest.approx(full / 8)
    assert dp == pytest.approx(full)


def test_moe_experts_touched_uniform_routing():
    m = load_model("deepseek-v3")  # E = 256, k = 8
    assert experts_touched(m, 1) == pytest.approx(8)
    assert experts_touched(m, 64) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64))
    assert experts_touched(m, 10**6) == pytest.approx(256)
    small = roofline(m, load_gpu("h200"), context=4096, batch=1)
    big = roofline(m, load_gpu("h200"), context=4096, batch=256)
    assert small["weights_bytes_per_step"] < big["weights_bytes_per_step"]


def test_fp8_weights_use_fp8_peak():
    gpu = load_gpu("h200")
    r = roofline(load_model("deepseek-v3"), gpu, context=4096, batch=1, weights_dtype="fp8")
    assert r["peak_flops"] == pytest.approx(1978.9e12)
    r = roofline(load_model("deepseek-v3"), gpu, context=4096, batch=1, weights_dtype="bf16")
    assert r["peak_flops"] == pytest.approx(989.4e12)
    a100 = load_gpu("a100-80gb")  # no fp8 units: the bf16 peak
    assert roofline(load_model("llama-3.1-8b"), a100, context=16, weights_dtype="fp8")["peak_flops"] == pytest.approx(312e12)


def test_large_batch_becomes_compute_bound():
    r = roofline(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), context=128, batch=4096)
    assert r["bound"] == "compute"
    assert r["step_time_s"] == pytest.approx(r["compute_time_s"])


def test_apple_parts_have_no_published_peak():
    with pytest.raises(MLAError, match="peak"):
        roofline(load_model("llama-3.1-8b"), load_gpu("apple-m2-ultra"), context=16)


def test_roofline_window_and_tp_share():
    m = load_model("mistral-7b-v0.1")
    r = roofline(m, load_gpu("h100-sxm"), context=32768, tp=2)
    assert r["attention_bytes"] == 4096 * 32 * 2 * 4 * 128 * 2  # 4 of 8 KV heads, window 4096
