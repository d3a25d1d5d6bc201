"""The vectorised sweeps equal the scalar core point by point, and never wrap around."""
import numpy as np
import pytest

from mla_core.capacity import capacity
from mla_core.kv import kv_cache_bytes
from mla_core.presets import load_gpu, load_model
from mla_core.roofline import roofline
from mla_core.sweeps import (concurrent_requests_vs_context, decode_step_vs_batch, kv_budget_bytes_per_gpu,
                             kv_cache_bytes_vs_context, log_contexts)

MODELS = ["deepseek-v3", "llama-3.1-70b", "gemma-3-27b", "gpt-oss-20b", "mistral-7b-v0.1", "deepseek-v3.2-exp"]


@pytest.mark.parametrize("preset", MODELS)
def test_kv_sweep_equals_scalar(preset):
    m = load_model(preset)
    ts = [1, 100, 4096, 131072, 10**6]
    got = kv_cache_bytes_vs_context(m, ts, 3, "bf16", block_size=16)
    assert [int(x) for x in got] == [kv_cache_bytes(m, t, 3, "bf16", block_size=16) for t in ts]


@pytest.mark.parametrize("preset", MODELS)
def test_capacity_sweep_equals_scalar(preset):
    m, gpu = load_model(preset), load_gpu("h200")
    budget = kv_budget_bytes_per_gpu(m, gpu.memory_bytes, tp=8, num_gpus=8)
    ts = log_contexts(1024, 1 << 20, 16)
    got = concurrent_requests_vs_context(m, ts, budget, replicas=1, tp=8)
    want = [capacity(m, context=int(t), gpu=gpu, num_gpus=8, tp=8)["max_concurrent_requests"] for t in ts]
    assert [int(x) for x in got] == want


@pytest.mark.parametrize("preset", ["deepseek-v3", "llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-9b"])
def test_batch_sweep_equals_scalar(preset):
    m, gpu = load_model(preset), load_gpu("h100-sxm")
    bs = [1, 2, 7, 64, 1024]
    got = decode_step_vs_batch(m, gpu, bs, context=8192, tp=2)
    for i, b in enumerate(bs):
        r = roofline(m, gpu, context=8192, batch=b, tp=2)
        assert got["weights_bytes_per_step"][i] == pytest.approx(r["weights_bytes_per_step"], rel=1e-12)
        assert got["attention_bytes"][i] == r["attention_bytes"]
        assert got["step_time_s"][i] == pytest.approx(r["step_time_s"], rel=1e-12)
        assert got["tokens_per_s"][i] == pytest.approx(r["tokens_per_s"], rel=1e-12)
        assert bool(got["compute_bound"][i]) == (r["bound"] == "compute")


def test_huge_values_switch_to_exact_ints():
    m = load_model("deepseek-v3")
    got = kv_cache_bytes_vs_context(m, [10**15], 10**6, "bf16")
    assert got.dtype == object and got[0] == 70272 * 10**21
    small = kv_cache_bytes_vs_context(m, [131072], 1, "bf16")
    assert small.dtype == np.int64


def test_log_contexts():
    ts = log_contexts(1024, 1 << 20, 256)
    assert ts[0] == 1024 and ts[-1] == 1 << 20 and np.all(np.diff(ts) > 0)
