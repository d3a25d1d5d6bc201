"""Capacity per GPU: pinned to engine logs and to docs/model.md's definitions."""
import pytest

from mla_core.capacity import allocator_waste, capacity, weights_bytes_per_gpu
from mla_core.config import load_config
from mla_core.errors import MLAError
from mla_core.params import attention_side_params, params_total
from mla_core.presets import load_gpu, load_model
from mla_core.units import gib_to_bytes

from conftest import case_config


def kimi():
    return load_config(case_config("kimi-k2.json"))


def test_kimi_k2_tp8_engine_log():
    # An engine recipe log: Kimi-K2, 8 GPUs, TP8, 46.80 GiB free for KV per GPU, 64-token blocks:
    # 715,072 tokens. The latent is replicated on every rank, so the deployment holds the same.
    r = capacity(kimi(), context=131072, num_gpus=8, tp=8, kv_budget_bytes=gib_to_bytes(46.80),
                 block_size=64, kv_dtype="bf16")
    assert r["kv_budget_bytes_per_gpu"] == 50251117363  # floor(46.80 * 2**30)
    assert r["kv_bytes_per_token_per_gpu"] == 70272
    assert r["max_tokens_per_gpu"] == 715072
    assert r["max_tokens_total"] == 715072
    assert r["max_concurrent_requests"] == 5


def test_kimi_k2_dp_attention_holds_8x_tokens():
    r = capacity(kimi(), context=131072, num_gpus=8, tp=8, dp_attention=True,
                 kv_budget_bytes=gib_to_bytes(46.80), block_size=64, kv_dtype="bf16")
    assert r["replicas"] == 8
    assert r["max_tokens_total"] == 5720576
    assert r["max_concurrent_requests"] == 40


def test_llama70b_tp4_shards_kv_heads():
    r = capacity(load_model("llama-3.1-70b"), context=32768, num_gpus=4, tp=4,
                 kv_budget_bytes=gib_to_bytes(20), block_size=16, kv_dtype="bf16")
    assert r["kv_bytes_per_token_per_gpu"] == 81920
    assert r["max_tokens_per_gpu"] == 262144
    assert r["max_tokens_total"] == 262144
    assert r["max_concurrent_requests"] == 8


def test_budget_from_gpu_memory_utilization():
    # kv budget = floor(gmu * memory) - weights - reserve; H200 memory = 141 * 2**30 (docs/model.md).
    m, gpu = load_model("deepseek-v3"), load_gpu("h200")
    assert gpu.memory_bytes == 141 * 2**30
    r = capacity(m, context=131072, gpu=gpu, num_gpus=8, tp=8, kv_dtype="fp8", reserve_bytes=2**30)
    weights = -(-params_total(m) // 8)  # fp8 weights (quantization_config), one byte each
    assert r["weights_dtype"] == "fp8"
    assert r["weights_bytes_per_gpu"] == weights
    assert r["kv_budget_bytes_per_gpu"] == (141 * 2**30 * 9) // 10 - weights - 2**30
    per_token = 61 * 576  # fp8 latent, replicated on every TP rank
    assert r["block_size"] == 64  # MLA default (FlashMLA's page)
    assert r["max_tokens_per_gpu"] == r["kv_budget_bytes_per_gpu"] // (64 * per_token) * 64
    assert r["max_concurrent_requests"] == r["kv_budget_bytes_per_gpu"] // (per_token * 131072)


def test_gmu_is_read_as_a_decimal():
    # 0.7 is 0.6999... in binary; floor(0.7 * 10 GiB) must still be 7516192768.
    m = load_model("llama-3.1-8b")
    from mla_core.hardware import custom_gpu

    r = capacity(m, context=1024, gpu=custom_gpu(10), gpu_memory_utilization=0.7, weights_dtype="fp8")
    assert r["usable_bytes_per_gpu"] == 7516192768


def test_weights_that_do_not_fit_give_zero_not_negative():
    r = capacity(load_model("llama-3.1-405b"), context=8192, gpu=load_gpu("rtx-4090"))
    assert r["weights_fit"] is False
    assert r["kv_budget_bytes_per_gpu"] == 0
    assert r["max_tokens_per_gpu"] == 0 and r["max_concurrent_requests"] == 0


def test_dp_attention_weights_split():
    # Attention weights whole on every GPU; everything else (experts) divided by num_gpus.
    m = load_model("deepseek-v3")
    attn = attention_side_params(m)
    got = weights_bytes_per_gpu(m, "fp8", tp=8, num_gpus=8, dp_attention=True)
    assert got == attn + -(-(params_total(m) - attn) // 8)
    assert got > weights_bytes_per_gpu(m, "fp8", tp=8)


def test_sliding_windows_use_real_request_size():
    # Mistral: the window caps each request at 4096 tokens, so 32K requests cost as much as 4K ones.
    m = load_model("mistral-7b-v0.1")
    r = capacity(m, context=32768, kv_budget_bytes=gib_to_bytes(16), block_size=16, kv_dtype="bf16")
    assert r["request_bytes_per_gpu"] == 131072 * 4096
    assert r["max_concurrent_requests"] == gib_to_bytes(16) // (131072 * 4096)
    # max_tokens_per_gpu uses the bytes per token before any cap (the worst case).
    assert r["max_tokens_per_gpu"] == gib_to_bytes(16) // (16 * 131072) * 16


def test_allocator_waste_factor():
    # An allocator that uses the per-head K/V formula for DeepSeek-V3 reserves the expanded cache:
    # 40,960 elements per layer against 576 -> 71.1x (single GPU).
    w = allocator_waste(load_model("deepseek-v3"), context=131072, kv_budget_bytes=gib_to_bytes(40), kv_dtype="bf16")
    assert w["waste_factor"] == pytest.approx(40960 / 576)
    assert w["expanded"]["max_concurrent_requests"] == 0 and w["latent"]["max_concurrent_requests"] == 4
    with pytest.raises(MLAError):
        allocator_waste(load_model("llama-3.1-8b"), context=10, kv_budget_bytes=1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_gpus=6, tp=4), "divide"),
    (dict(gpu_memory_utilization=0), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=float("nan")), "gpu_memory_utilization"),
    (dict(block_size=0), "block_size"),
    (dict(weights_dtype="int2"), "weights_dtype"),
])
def test_bad_capacity_inputs(kwargs, match):
    base = dict(context=1024, gpu=load_gpu("h100-sxm"))
    base.update(kwargs)
    with pytest.raises(MLAError, match=match):
        capacity(load_model("llama-3.1-8b"), **base)


def test_needs_gpu_or_budget():
    with pytest.raises(MLAError, match="GPU"):
        capacity(load_model("llama-3.1-8b"), context=1024)
