"""Property tests (hypothesis) of the cache model and of the parser's error discipline."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mla_core.config import loads_config, parse_config
from mla_core.errors import ConfigError, MLAError
from mla_core.kv import kv_bytes_per_token, kv_cache_bytes
from mla_core.config import synthetic_model
from mla_core.spec import as_variant

small = st.integers(min_value=1, max_value=64)
dims = st.sampled_from([16, 32, 64, 96, 128, 192, 256])
contexts = st.integers(min_value=1, max_value=10**15)
dtypes = st.sampled_from(["bf16", "fp16", "fp32", "fp8", "q8_0", "q4_0", "fp4"])


@given(layers=small, heads=small, d=dims, t=contexts, dt=dtypes, window=st.none() | st.integers(1, 10**6))
def test_cache_grows_with_context_and_layers_until_a_window_caps_it(layers, heads, d, t, dt, window):
    cfg = {"num_hidden_layers": layers, "num_attention_heads": heads, "hidden_size": heads * d, "head_dim": d,
           "sliding_window": window}
    m = parse_config(cfg)
    more_layers = parse_config(dict(cfg, num_hidden_layers=layers + 1))
    a, b = kv_cache_bytes(m, t, 1, dt), kv_cache_bytes(m, t + 1, 1, dt)
    assert b >= a
    if window is None or t < window:
        assert b > a
    else:
        assert b == a  # capped
    assert kv_cache_bytes(more_layers, t, 1, dt) > a


@given(heads=small, more=small, layers=small, d_c=dims, d_r=dims, dt=dtypes)
def test_mla_latent_does_not_depend_on_heads(heads, more, layers, d_c, d_r, dt):
    a = synthetic_model("mla", layers=layers, heads=heads, kv_lora_rank=d_c, rope_dim=d_r)
    b = synthetic_model("mla", layers=layers, heads=heads + more, kv_lora_rank=d_c, rope_dim=d_r)
    assert kv_bytes_per_token(a, dt) == kv_bytes_per_token(b, dt)


@given(heads_pow=st.integers(0, 7), group_pow=st.integers(0, 7), layers=small, d=dims, dt=dtypes)
def test_mqa_le_gqa_le_mha_and_full_gqa_is_mha(heads_pow, group_pow, layers, d, dt):
    heads = 2**heads_pow
    groups = 2 ** min(group_pow, heads_pow)
    m = synthetic_model("mha", layers=layers, heads=heads, head_dim=d)
    mha, mqa = as_variant(m, "mha"), as_variant(m, "mqa")
    gqa = as_variant(m, "gqa", num_key_value_heads=groups)
    assert kv_bytes_per_token(mqa, dt) <= kv_bytes_per_token(gqa, dt) <= kv_bytes_per_token(mha, dt)
    full = as_variant(m, "gqa", num_key_value_heads=heads)
    assert kv_bytes_per_token(full, dt) == kv_bytes_per_token(mha, dt)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
FIELDS = ["num_hidden_layers", "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim",
          "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank", "sliding_window",
          "layer_types", "sliding_window_pattern", "use_sliding_window", "max_window_layers", "text_config",
          "n_routed_experts", "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
          "first_k_dense_replace", "moe_layer_freq", "mlp_only_layers", "decoder_sparse_step", "model_type",
          "torch_dtype", "quantization_config", "tie_word_embeddings", "index_head_dim", "index_n_heads",
          "multi_query", "intermediate_size", "vocab_size"]
plausible = st.one_of(st.integers(-3, 300), st.sampled_from([True, False, None, 1.5, "x", [], {}, ["sliding_attention"]]),
                      json_values)
BASES = [
    {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
     "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000},
    {"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
     "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
     "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "first_k_dense_replace": 1},
]
# Mostly valid configs with a few fields replaced by anything JSON can hold.
configs = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), plausible, max_size=len(FIELDS)),
    st.builds(lambda base, patch: {**base, **patch}, st.sampled_from(BASES),
              st.dictionaries(st.sampled_from(FIELDS), plausible, max_size=3)),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs)
def test_parser_raises_only_its_own_error(cfg):
    try:
        m = parse_config(cfg)
    except ConfigError:
        return
    kv_bytes_per_token(m, "bf16")  # a model that parsed is usable


@settings(max_examples=300)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_loader_raises_only_its_own_error(data):
    try:
        parse_config(loads_config(data))
    except ConfigError:
        pass


@settings(max_examples=200)
@given(obj=json_values)
def test_any_json_document(obj):
    try:
        parse_config(loads_config(json.dumps(obj)))
    except ConfigError:
        pass


def test_a_variant_asked_again_is_the_same_instance_and_the_memo_is_bounded():
    """as_variant keeps its variants on the model: a rerun gets the one it built (with its derived
    figures), equal to one built afresh; past VARIANT_MEMO distinct asks the oldest is dropped."""
    from mla_core import spec as spec_mod
    from mla_core.presets import load_model
    from mla_core.kv import kv_bytes_per_token

    m = load_model("deepseek-v3")
    first = as_variant(m, "mla", kv_lora_rank=256)
    assert as_variant(m, "mla", kv_lora_rank=256) is first
    fresh = spec_mod._as_variant(m, "mla", num_key_value_heads=None, kv_lora_rank=256, qk_rope_head_dim=None)
    assert fresh == first and kv_bytes_per_token(fresh, "bf16") == kv_bytes_per_token(first, "bf16")
    for d_c in range(1, spec_mod.VARIANT_MEMO + 2):
        as_variant(m, "mla", kv_lora_rank=d_c)
    assert len(m.__dict__["_memo"]["as_variant"]) == spec_mod.VARIANT_MEMO
    assert as_variant(m, "mla", kv_lora_rank=256) is not first  # dropped, built again
    with pytest.raises(MLAError):
        as_variant(m, "gqa", num_key_value_heads=7)
    for bad in (512.0, True):  # equal to an int the memo holds, refused all the same
        as_variant(m, "mla", kv_lora_rank=int(bad))
        with pytest.raises(MLAError):
            as_variant(m, "mla", kv_lora_rank=bad)
    with pytest.raises(MLAError):  # unhashable: no memo, the same refusal
        as_variant(m, "mla", kv_lora_rank=[256])
    assert as_variant(m, "mha", kv_lora_rank=[256]) == as_variant(m, "mha")  # ignored for MHA, as before
