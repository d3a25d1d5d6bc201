"""Reading config.json: real layouts, and every hostile input refused with one clear line."""
import json
import os

import pytest

from mla_core.config import MAX_CONFIG_BYTES, load_config, loads_config, parse_config
from mla_core.errors import ConfigError, MLAError

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
MLA = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
       "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def write(tmp_path, data, name="config.json"):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return p


def test_file_and_folder(tmp_path):
    write(tmp_path, LLAMA)
    a = load_config(tmp_path / "config.json")
    b = load_config(tmp_path)
    assert a.attention == b.attention and a.attention.head_dim == 128


def test_text_config_is_read(tmp_path):
    cfg = {"model_type": "llava", "text_config": dict(LLAMA), "torch_dtype": "float16"}
    m = parse_config(cfg)
    assert m.num_hidden_layers == 32 and m.torch_dtype == "fp16"


def test_head_dim_field_wins_over_hidden_over_heads():
    m = parse_config(dict(LLAMA, head_dim=96))
    assert m.attention.head_dim == 96


def test_window_precedence():
    base = dict(LLAMA, num_hidden_layers=6, sliding_window=100)
    assert parse_config(base).layer_windows == (100,) * 6
    assert parse_config(dict(base, use_sliding_window=False)).layer_windows == (None,) * 6
    assert parse_config(dict(base, sliding_window_pattern=3)).layer_windows == (100, 100, None, 100, 100, None)
    lt = ["sliding_attention", "full_attention", "chunked_attention", "sliding_attention", "x", "full_attention"]
    m = parse_config(dict(base, layer_types=lt, sliding_window_pattern=3, attention_chunk_size=50))
    assert m.layer_windows == (100, None, 50, 100, None, None)
    # An unknown layer kind is counted as full attention, never silently: a note names it.
    assert [layer.kind for layer in m.layers] == ["sliding", "full", "chunked", "sliding", "full", "full"]
    assert any("'x'" in n and "full attention" in n for n in m.notes)
    qwen = dict(base, model_type="qwen2", use_sliding_window=True, max_window_layers=4)
    assert parse_config(qwen).layer_windows == (None,) * 4 + (100, 100)
    qwen_off = dict(qwen, use_sliding_window=False)
    assert parse_config(qwen_off).layer_windows == (None,) * 6  # max_window_layers ignored
    assert parse_config(dict(base, sliding_window=None)).layer_windows == (None,) * 6


def test_all_full_layer_types_need_no_window():
    # Newer Qwen3 configs list layer_types all "full_attention" with sliding_window null.
    m = parse_config(dict(LLAMA, num_hidden_layers=2, layer_types=["full_attention"] * 2, sliding_window=None))
    assert m.layer_windows == (None, None)


def test_mla_and_moe_fields():
    m = parse_config(dict(MLA, n_routed_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048,
                          first_k_dense_replace=3, n_shared_experts=1))
    assert m.is_mla and m.attention.head_dim == 128
    assert m.moe.num_moe_layers == 58


def test_v_head_dim_default_is_noted():
    cfg = dict(MLA)
    del cfg["v_head_dim"]
    m = parse_config(cfg)
    assert m.attention.v_head_dim == 128 and any("v_head_dim" in n for n in m.notes)


def test_unknown_fields_ignored():
    assert parse_config(dict(LLAMA, whatever={"deep": [1, 2]}, rope_theta=1e6)).num_hidden_layers == 32


# --- hostile input: each must raise ConfigError with a clear message ----------------------------

@pytest.mark.parametrize("cfg, match", [
    ([1, 2, 3], "object"),
    (5, "object"),
    ("text", "object"),
    (None, "object"),
    ({}, "num_hidden_layers"),
    (dict(LLAMA, num_hidden_layers=0), "num_hidden_layers"),
    (dict(LLAMA, num_hidden_layers=-3), "num_hidden_layers"),
    (dict(LLAMA, num_attention_heads=True), "integer"),
    (dict(LLAMA, num_attention_heads=32.0), "integer"),
    (dict(LLAMA, num_attention_heads="32"), "integer"),
    (dict(LLAMA, hidden_size=10**30), "larger"),
    (dict(LLAMA, num_hidden_layers=10**9), "larger"),
    (dict(LLAMA, num_key_value_heads=5), "divisible"),
    (dict(LLAMA, num_key_value_heads=64), "exceeds"),
    (dict(LLAMA, head_dim=None, hidden_size=4097), "divisible"),
    ({k: v for k, v in MLA.items() if k != "qk_rope_head_dim"}, "qk_rope_head_dim"),
    ({k: v for k, v in MLA.items() if k != "kv_lora_rank"}, "kv_lora_rank"),
    (dict(LLAMA, text_config=[1]), "text_config"),
    (dict(LLAMA, text_config="x"), "text_config"),
    (dict(LLAMA, layer_types=["sliding_attention"] * 32), "sliding_window"),
    (dict(LLAMA, layer_types=["full_attention"] * 3), "entries"),
    (dict(LLAMA, layer_types="sliding"), "layer_types"),
    (dict(LLAMA, tie_word_embeddings="yes"), "true or false"),
    (dict(LLAMA, quantization_config=[1]), "quantization_config"),
    (dict(LLAMA, model_type=7), "model_type"),
    (dict(LLAMA, layer_types=["chunked_attention"] * 32), "attention_chunk_size"),
    (dict(LLAMA, sliding_window=-1), "sliding_window"),
])
def test_hostile_dicts(cfg, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(cfg)


@pytest.mark.parametrize("cfg, match", [
    (dict(LLAMA, num_experts=8), "moe_intermediate_size"),
    (dict(LLAMA, num_experts=8, moe_intermediate_size=64), "num_experts_per_tok"),
    (dict(LLAMA, num_local_experts=8, num_experts_per_tok=9), "exceeds"),
])
def test_moe_fields_only_stop_the_parameter_count(cfg, match):
    # docs/model.md: a field only the parameter count needs never stops the cache answer; the note names it.
    m = parse_config(cfg)
    assert m.moe is None and not m.params_complete
    assert any(match in n and "parameters" in n for n in m.notes)
    assert m.kv_layers == 32


def _unused(cfg, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(cfg)


@pytest.mark.parametrize("data, match", [
    (b'{"num_hidden_layers": NaN}', "NaN"),
    (b'{"num_hidden_layers": Infinity}', "Infinity"),
    (b'{"num_hidden_layers": -Infinity}', "Infinity"),
    (b'{"hidden_size": 1e400}', "too large"),
    (b"\xff\xfe\x00\x01binary", "UTF-8"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "UTF-8|JSON"),
    (b"[" * 100000 + b"]" * 100000, "nested|JSON"),
    (b"{" * 5000, "JSON|nested"),
    (b'{"a": 1', "JSON"),
    (b"", "JSON"),
    (b'{"num_hidden_layers": ' + b"9" * 5000 + b"}", "number"),
    (b"[]", "object"),
    (b"42", "object"),
    (b'"config"', "object"),
])
def test_hostile_bytes(data, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(loads_config(data))


def test_big_integer_beyond_float_range_is_refused_not_wrapped():
    with pytest.raises(ConfigError, match="larger"):
        parse_config(loads_config(json.dumps(dict(LLAMA, hidden_size=2**1100))))


def test_over_1_mib_refused_before_reading(tmp_path, monkeypatch):
    p = write(tmp_path, b" " * (MAX_CONFIG_BYTES + 1))
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    with pytest.raises(ConfigError, match="1 MiB"):
        load_config(p)
    assert not opened


def test_missing_paths(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="regular file"):
        load_config(fifo)


def test_error_is_one_line():
    from mla_core.presets import load_model

    with pytest.raises(MLAError) as e:
        load_model("x\ny\n" * 1000)
    assert "\n" not in str(e.value) and len(str(e.value)) <= 400
    assert "\n" not in str(MLAError("first\nsecond"))
