"""mla_core: the analytic core of the MLA explorer (stdlib only; numpy only in `sweeps`).

How Multi-head Latent Attention (DeepSeek-V2/V3) changes the KV cache, the decode roofline and
the number of concurrent requests a GPU holds, against MHA, GQA and MQA. Every definition
follows docs/model.md.

Symbols (HF config.json names; DeepSeek-V3 values):

    l       num_hidden_layers       61      layers
    n_h     num_attention_heads     128     query heads
    n_kv    num_key_value_heads     128     KV heads (MHA: n_h, MQA: 1, GQA: groups; unused by MLA)
    d_h     head_dim                -       head dim of MHA/GQA/MQA (else hidden_size // n_h)
    d_c     kv_lora_rank            512     KV latent rank ("latent")
    d_r     qk_rope_head_dim        64      decoupled RoPE key width, shared by all heads
    d_nope  qk_nope_head_dim        128     per-head content q/k width
    d_v     v_head_dim              128     per-head value width
    d_q     q_lora_rank             1536    query latent rank (may be None)
    B       batch                   -       sequences in the batch
    T       context                 -       tokens of context held per sequence
    b       bytes per element       bf16: 2

Modules: `config` (read config.json), `spec` (frozen dataclasses, counterfactual variants),
`kv` (cache bytes), `capacity` (concurrency per GPU), `roofline` (decode step), `params`
(parameter counts), `presets` (data/), `units` (dtypes and formatting), `sweeps` (numpy arrays
for charts), `claims` (the seed documents' figures, recomputed), `bench` (torch; live
measurement). The command line is `python -m mla_core {kv,capacity,roofline,bench,presets}`.

Public names are imported lazily, so `python -m mla_core` pays only for what it uses.
"""
from __future__ import annotations

_PUBLIC = {
    "MLAError": "errors",
    "ConfigError": "errors",
    "AttentionSpec": "spec",
    "ModelSpec": "spec",
    "MoESpec": "spec",
    "IndexerSpec": "spec",
    "as_variant": "spec",
    "synthetic_model": "config",
    "load_config": "config",
    "loads_config": "config",
    "parse_config": "config",
    "kv_bytes_per_token": "kv",
    "kv_bytes_per_token_layer": "kv",
    "kv_cache_bytes": "kv",
    "kv_report": "kv",
    "compare_variants": "kv",
    "capacity": "capacity",
    "allocator_waste": "capacity",
    "roofline": "roofline",
    "decode_attention": "roofline",
    "params_total": "params",
    "param_breakdown": "params",
    "GPU": "hardware",
    "custom_gpu": "hardware",
    "load_model": "presets",
    "load_gpu": "presets",
    "model_ids": "presets",
    "gpu_ids": "presets",
    "format_bytes": "units",
    "format_tokens": "units",
    "format_tokens_exact": "units",
    "format_token_rate": "units",
    "short_tokens": "units",
    "token_label": "units",
    "TOKEN_RULE": "units",
    "format_count": "units",
    "format_rate": "units",
    "format_seconds": "units",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'mla_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
