"""Read a Hugging Face `config.json` into a `ModelSpec`, with validation.

`load_config(path)` takes a file or a folder holding `config.json`; `parse_config(dict)` takes
the parsed object. Presets (data/models.json) go through `parse_config` too.

Rules (docs/model.md):
- A multimodal config's language model is read from `text_config`.
- d_h is `head_dim` when present, else `hidden_size // num_attention_heads`.
- Sliding windows, in this order: `layer_types`; `sliding_window_pattern` P (layer i global
  when (i + 1) % P == 0); Gemma-2 (even layers slide); otherwise `sliding_window` on every
  layer unless it is null or `use_sliding_window` is false (Qwen2: with `use_sliding_window`
  true, layers from `max_window_layers` on slide).
- MLA when `kv_lora_rank` is set: needs `qk_rope_head_dim` and `qk_nope_head_dim`;
  `v_head_dim` defaults to `qk_nope_head_dim` (noted).
- MoE: DeepSeek/Kimi/GLM `n_routed_experts` with `first_k_dense_replace` / `moe_layer_freq`;
  Qwen-MoE `num_experts` with `decoder_sparse_step` / `mlp_only_layers`; gpt-oss and Mixtral
  `num_local_experts` (every layer, experts of `intermediate_size`).

Errors: `ConfigError` (a subclass of `MLAError`) with one line naming the field: missing or
non-positive sizes, booleans or floats where counts belong, heads not divisible by KV heads,
half-present MLA fields, non-objects, NaN/Infinity, files over 1 MiB, non-UTF-8 bytes.
Unknown fields are ignored.
"""
from __future__ import annotations

import json
import os
import stat

from dataclasses import dataclass, replace
from dataclasses import field as dc_field

from .errors import ConfigError, MLAError
from .layers import CompressedMLA, Indexer, LayerSpec, NoCache, RecurrentState, SharedKV, attention_cache
from .spec import ATTENTION_KINDS, AttentionSpec, ModelSpec, MoESpec
from .units import TORCH_DTYPE_NAMES

# quantization_config.quant_method values whose weight bytes are modelled (docs/model.md): fp8 at 1 B
# a weight; mxfp4 (gpt-oss) MoE experts at 4.25 bits. Any other method counts at torch_dtype.
KNOWN_QUANT_METHODS = ("fp8", "mxfp4")
MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: real configs are a few KiB
# Top-level fields a nested `text_config` inherits when it lacks them.
TEXT_CONFIG_INHERITED = ("model_type", "torch_dtype", "dtype", "quantization_config", "tie_word_embeddings",
                         "_name_or_path")

# Upper bounds that no real model approaches; past them the input is a typo or an attack.
MAX_LAYERS = 100_000
MAX_WIDTH = 1 << 24  # hidden size, heads, head dims, ranks, experts, windows' cap below
MAX_VOCAB = 1 << 27
MAX_WINDOW = 1 << 50

# Other spellings of the same fields (Falcon, GPT-2 style configs).
FIELD_ALIASES = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
}

# Every top-level field `parse_config` reads (besides FIELD_ALIASES' spellings and nested
# `text_config` / `quantization_config`): what a link must carry so the model reads back the same.
FIELDS_READ = (
    "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "intermediate_size",
    "intermediate_size_mlp", "moe_intermediate_size", "expert_ffn_hidden_size", "n_routed_experts",
    "n_shared_experts", "num_shared_experts", "num_experts", "num_local_experts", "num_experts_per_tok",
    "num_experts_per_token", "experts_per_token", "moe_topk", "zero_expert_num", "first_k_dense_replace",
    "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size",
    "shared_intermediate_size", "interleave_moe_layer_step", "expert_layer_period", "expert_layer_offset",
    "vocab_size", "tie_word_embeddings", "torch_dtype", "dtype",
    "sliding_window", "sliding_window_pattern", "use_sliding_window", "max_window_layers", "layer_types",
    "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval", "num_kv_shared_layers",
    "hybrid_override_pattern", "full_attention_interval", "linear_attn_config", "attn_type_list",
    "attn_layer_period", "attn_layer_offset",
    "mamba_num_heads", "mamba_n_heads", "mamba_head_dim", "mamba_d_head", "n_groups", "mamba_n_groups",
    "ssm_state_size", "mamba_d_state", "conv_kernel", "mamba_d_conv", "mamba_expand", "mamba_dt_rank",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "index_head_dim", "index_n_heads", "index_topk", "multi_query", "new_decoder_architecture", "parallel_attn",
    "bias", "attention_bias", "mlp_bias", "use_qk_norm", "num_nextn_predict_layers", "_name_or_path",
    "max_position_embeddings", "mtp_num_hidden_layers", "use_mtp", "num_mtp_modules", "mtp_transformer_layers",
    # Layouts of 2026 (docs/model.md)
    "compress_ratios", "layers_block_type", "hybrid_layer_pattern", "swa_num_attention_heads",
    "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim", "num_global_key_value_heads", "global_head_dim",
    "full_attn_idxs", "conv_L_cache", "conv_dim", "block_configs", "indexer_types", "sparse_attention_config",
    "mamba_ssm_cache_dtype", "mamba_ssm_dtype", "o_lora_rank", "o_groups", "mlp_layer_types", "top_k_experts",
    "attn_output_gate", "dense_intermediate_size", "block_ff_dim", "block_auto_adjust_ff_dim",
    "block_ffn_dim_multiplier", "block_multiple_of", "enable_moe_block", "expert_dtype",
)

# Keys known not to shape the cache (or the parameter count this tool makes): every other key of a
# config is read (FIELDS_READ) or unknown; an unknown key whose name suggests a cache layout gets a
# note on every surface (docs/model.md, "Fields the parser does not read").
KNOWN_NOT_CACHE = (
    "architectures", "auto_map", "transformers_version", "_attn_implementation_autoset", "_attn_implementation",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "unk_token_id", "decoder_start_token_id",
    "image_token_id", "video_token_id", "image_token_index", "boi_token_index", "eoi_token_index", "audio_token_id",
    "vision_start_token_id", "vision_end_token_id", "vision_token_id",
    "initializer_range", "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
    "hidden_act", "hidden_activation", "activation_function", "hidden_dropout", "attention_dropout",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout",
    "use_cache", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "router_z_loss_coef",
    "rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq", "rope_type", "partial_rotary_factor",
    "rotary_dim", "rotary_pct", "rotary_emb_base", "compress_rope_theta", "swa_rope_theta", "rope_interleave",
    "max_window_layers_unused", "original_max_position_embeddings", "seq_length", "max_seq_len",
    "quantization_config", "text_config", "vision_config", "audio_config", "vision_feature_layer",
    "vision_feature_select_strategy", "multi_modal_projector_bias", "projector_hidden_act", "is_encoder_decoder",
    "scoring_func", "topk_method", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group",
    "ep_size", "aux_loss_alpha", "seq_aux", "moe_router_enable_expert_bias", "use_routing_bias", "router_bias",
    "e_score_correction_bias", "num_hash_layers", "hc_mult", "hc_eps", "hc_sinkhorn_iters", "swiglu_limit",
    "swiglu_alpha", "final_logit_softcapping", "attn_logit_softcapping", "query_pre_attn_scalar",
    "logits_scaling", "embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_soft_cap",
    "tie_encoder_decoder", "torchscript", "return_dict", "output_hidden_states", "output_attentions", "pretraining_tp",
    "qk_norm_type", "use_gemma_norm", "postnorm", "shared_moe_mode", "layernorm_full_attention_alpha",
    "layernorm_full_attention_beta", "layernorm_linear_attention_alpha", "layernorm_linear_attention_beta",
    "layernorm_mlp_alpha", "layernorm_mlp_beta", "for_llm_compressor", "altup_active_idx", "altup_coef_clip",
    "altup_correct_scale", "altup_lr_multiplier", "altup_num_inputs", "laurel_rank", "hidden_size_per_layer_input",
    "vocab_size_per_layer_input", "activation_sparsity_pattern", "zero_expert_type", "attention_method",
    "mla_scale_q_lora", "mla_scale_kv_lora", "ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "num_experts_per_tok_unused", "use_sliding_window_unused", "attention_k_eq_v", "attention_value_scale",
    "add_full_attention_sink_bias", "add_swa_attention_sink_bias", "attention_projection_layout",
    "attention_sink_bias", "sliding_window_size", "prefill_chunk_size", "tensor_parallel_shards",
    "conv_bias", "block_dim", "num_heads_unused", "mamba_conv_bias", "mamba_proj_bias", "mamba_chunk_size",
    "mamba_hidden_act", "mamba_dt_min", "mamba_dt_max", "mamba_dt_limit", "mamba_dt_init_floor", "mamba_inner_layernorms",
    "use_mamba_kernels", "time_step_min", "time_step_max", "time_step_floor", "time_step_limit", "time_step_rank",
    "chunk_size", "use_conv_bias", "residual_in_fp32", "rescale_prenorm_residual", "use_bias", "mlp_hidden_act",
    "expand", "head_dim_unused", "moe_latent_size", "moe_router_topk_scaling_factor", "num_logits_to_keep",
    "linear_attn_type_unused", "full_attn_type_unused", "model_max_length", "keys_to_ignore_at_inference",
    "apply_residual_connection_post_layernorm", "mamba_d_ssm",  # Falcon-H1: d_ssm = heads x head dim, as read
    "block_mlp_init_scale", "block_norm_eps", "block_out_init_scale", "block_use_swiglu", "block_use_xavier_init",
    "conv_dim_out", "conv_use_xavier_init", "layernorm_epsilon", "indexer_rope_interleave", "qk_head_dim",
    "moe_shared_expert_overlap", "chunk_size_feed_forward", "pruned_heads", "index_share_for_mtp_iteration",
    "index_skip_topk_offset", "index_topk_freq", "index_topk_pattern", "activation_situ_linear_beta",
    "attn_res_block_size",
)
LAYOUT_WORDS = ("layer", "pattern", "window", "attn", "kv", "head", "state", "conv", "ssm", "mamba", "index",
                "compress", "sparse", "block", "hybrid", "linear", "chunk", "share")

# HF config classes whose `tie_word_embeddings` defaults to True when the field is absent.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "gpt2", "gpt3", "minicpm3", "lfm2"}
_UNGATED_MLP = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt", "nemotron_h"}  # Nemotron-H: squared-ReLU up/down
_LAYERNORM = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text"}
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "gemma4", "gemma4_text"}
_QKV_BIAS_ALWAYS = {"qwen2", "qwen2_moe"}  # Qwen2 always has q/k/v biases, no o bias
# Parts of an architecture the parameter count does not model (the cache answer is exact).
_PARAMS_NOT_MODELLED = {
    "gemma3n": "Gemma-3n's per-layer embeddings, AltUp and LAuReL blocks",
    "gemma3n_text": "Gemma-3n's per-layer embeddings, AltUp and LAuReL blocks",
}
# Dense MLPs a layer has beside its MoE block (LongCat-Flash's shortcut-connected MoE: two; Gemma-4
# with `enable_moe_block`: its MLP and the MoE block side by side, one).
_EXTRA_DENSE_MLPS = {"longcat_flash": 2}
_MODEL_TYPE_ALIASES = {"RefinedWebModel": "falcon", "RefinedWeb": "falcon"}  # Falcon's legacy custom code
# Config-class defaults that real config.json files leave out (transformers configuration_*.py):
# Gemma-3's text_config carries no sliding_window_pattern, vocab_size or tie_word_embeddings.
_CLASS_DEFAULTS = {
    "gemma3_text": {"sliding_window_pattern": 6, "vocab_size": 262208, "sliding_window": 4096},
}
_CLASS_DEFAULTS["gemma3"] = _CLASS_DEFAULTS["gemma3_text"]


def load_config(path) -> ModelSpec:
    """Read `path` (a `config.json`, or a folder holding one) and parse it.

    Refuses before reading: a missing path, a folder without `config.json`, anything that is
    not a regular file, a file over 1 MiB. Raises ConfigError with one line.
    """
    try:
        p = os.fspath(path)
    except TypeError:
        raise ConfigError(f"config path must be a string, got {type(path).__name__}") from None
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            folder, p = p, os.path.join(p, "config.json")
            try:
                st = os.stat(p)
            except FileNotFoundError:
                raise ConfigError(f"folder {folder!r} has no config.json") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{p!r} is not a regular file")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{p!r} is {st.st_size:,} bytes; a config.json must be at most 1 MiB")
        with open(p, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"no such file: {p!r}") from None
    except PermissionError:
        raise ConfigError(f"cannot read {p!r}: permission denied") from None
    except OSError as e:
        raise ConfigError(f"cannot read {p!r}: {e.strerror or e}") from None
    cfg = loads_config(data, source=os.path.basename(p))
    if isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"].strip():
        return parse_config(cfg)  # the config's own name (parse_config reads `_name_or_path`)
    name = os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "config.json" else None
    return parse_config(cfg, name=name or os.path.splitext(os.path.basename(p))[0])


def loads_config(data: bytes | str, source: str = "config.json") -> dict:
    """Parse the bytes or text of a config.json into a dict, refusing what is not a JSON object.

    Refuses: over 1 MiB, non-UTF-8 bytes, empty text, invalid JSON, NaN/Infinity literals, numbers too large
    for a float, nesting too deep for the parser, and any top level other than an object.
    `source` names the input in messages (a file name).
    """
    source = str(source)[:80]
    if isinstance(data, str):
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{source} must be at most 1 MiB")
        text = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{source} must be at most 1 MiB")
        try:
            text = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{source} is not UTF-8 text (bad byte at offset {e.start})") from None
    else:
        raise ConfigError(f"config must be bytes or text, got {type(data).__name__}")
    if not text.strip():
        raise ConfigError(f"{source} is empty: there is no JSON in it (a config.json holds one object)")
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_parse_float)
    except ConfigError:
        raise
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal with more digits than Python converts
        raise ConfigError(f"{source} has a number that cannot be read: {str(e)[:80]}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{source} must hold a JSON object, not {_json_type(obj)}")
    return obj


def _reject_constant(name: str):
    raise ConfigError(f"config.json contains {name}, which is not a number JSON allows")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ConfigError(f"config.json has a number too large for a float: {text[:40]}")
    return value


def _json_type(v) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


class _Reader:
    """Typed field access over one config dict, with the messages users see."""

    def __init__(self, cfg: dict, where: str = "config.json"):
        self.cfg = cfg
        self.where = where

    def raw(self, field: str):
        for key in FIELD_ALIASES.get(field, (field,)):
            if key in self.cfg and self.cfg[key] is not None:
                return key, self.cfg[key]
        return field, None

    def int_(self, field: str, *, required: bool = False, minimum: int = 1, maximum: int = MAX_WIDTH):
        key, v = self.raw(field)
        if v is None:
            if required:
                raise ConfigError(f"{self.where} is missing {field}")
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{key} must be an integer, got {_json_type(v)} {_short(v)}")
        if v < minimum:
            what = "positive" if minimum == 1 else f"at least {minimum}"
            raise ConfigError(f"{key} must be {what}, got {v}")
        if v > maximum:
            raise ConfigError(f"{key} = {_short(v)} is larger than any model this tool accepts (max {maximum:,})")
        return v

    def bool_(self, field: str, default: bool | None = None):
        v = self.cfg.get(field)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"{field} must be true or false, got {_json_type(v)} {_short(v)}")
        return v

    def str_(self, field: str):
        v = self.cfg.get(field)
        if v is None:
            return None
        if not isinstance(v, str):
            raise ConfigError(f"{field} must be a string, got {_json_type(v)} {_short(v)}")
        return v

    def int_list(self, field: str, maximum: int):
        v = self.cfg.get(field)
        if v is None:
            return ()
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise ConfigError(f"{field} must be a list of integers")
        if any(x < 0 or x > maximum for x in v):
            raise ConfigError(f"{field} holds a layer index outside 0..{maximum}")
        return tuple(v)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def unmodelled_fields(cfg: dict, nested: dict | None = None) -> list[str]:
    """Keys of `cfg` (and of its layout sub-objects) that are neither read nor known not to shape
    the cache and whose name suggests a cache layout (LAYOUT_WORDS), sorted: each gets the note
    "field X is not modelled: the figures may be wrong" (docs/model.md)."""
    read = set(FIELDS_READ) | {a for names in FIELD_ALIASES.values() for a in names} | set(KNOWN_NOT_CACHE)
    out = []
    for key, value in cfg.items():
        if key in read or not isinstance(key, str) or value is None:  # a null is a field left unset
            continue
        low = key.lower()
        if any(w in low for w in LAYOUT_WORDS):
            out.append(key)
    for parent, allowed in (nested or {}).items():
        sub = cfg.get(parent)
        if isinstance(sub, dict):
            out += [f"{parent}.{k}" for k in sub if k not in allowed and any(w in str(k).lower() for w in LAYOUT_WORDS)]
    return sorted(out)


# Keys read inside the layout sub-objects (the rest of such an object is checked like top-level keys).
_NESTED_READ = {
    "linear_attn_config": ("full_attn_layers", "kda_layers", "num_heads", "head_dim", "short_conv_kernel_size",
                           "head_k_dim", "head_v_dim"),
    "sparse_attention_config": ("use_sparse_attention", "sparse_attention_freq", "sparse_index_dim",
                                "sparse_num_index_heads", "sparse_disable_index_value", "sparse_topk_blocks",
                                "sparse_block_size", "sparse_score_type", "sparse_init_block", "sparse_local_block"),
}


def parse_config(cfg, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed `config.json` object (see the module docstring).

    Raises ConfigError (one line) for anything that is not a usable decoder config.
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"config must be a JSON object, not {_json_type(cfg)}")
    top = cfg
    if "text_config" in cfg and cfg["text_config"] is not None:
        text_cfg = cfg["text_config"]
        if not isinstance(text_cfg, dict):
            raise ConfigError(f"text_config must be an object, not {_json_type(text_cfg)}")
        merged = dict(text_cfg)
        for key in TEXT_CONFIG_INHERITED:
            if key not in merged and key in top:
                merged[key] = top[key]
        cfg = merged
    where = "config.json's text_config" if cfg is not top else "config.json"
    r = _Reader(cfg, where)
    notes: list[str] = []

    model_type = r.str_("model_type") or "unknown"
    if len(model_type) > 100:
        raise ConfigError("model_type is longer than 100 characters")
    model_type = _MODEL_TYPE_ALIASES.get(model_type, model_type)
    missing = {
        key: value for key, value in _CLASS_DEFAULTS.get(model_type, {}).items()
        if cfg.get(key) is None and not (key == "sliding_window_pattern" and cfg.get("layer_types") is not None)
    }
    if missing:
        cfg = {**cfg, **missing}
        r = _Reader(cfg, where)
        notes += [f"{key} absent: {model_type}'s default {value} used" for key, value in missing.items()]
    if name is None:
        name_or_path = cfg.get("_name_or_path")
        name = name_or_path if isinstance(name_or_path, str) and name_or_path else model_type
    name = str(name)[:200]

    layers = r.int_("num_hidden_layers", required=True, maximum=MAX_LAYERS)
    n_h = r.int_("num_attention_heads", required=True)
    hidden = r.int_("hidden_size", required=True)

    # KV heads: num_key_value_heads, else MHA. Falcon's multi_query (without the new decoder
    # architecture) caches one KV head whatever num_kv_heads says (transformers modeling_falcon).
    n_kv = r.int_("num_key_value_heads")
    if r.bool_("multi_query") and not r.bool_("new_decoder_architecture", False):
        n_kv = 1
    elif n_kv is None:
        n_kv = n_h
    if n_kv > n_h:
        raise ConfigError(f"num_key_value_heads ({n_kv}) exceeds num_attention_heads ({n_h})")
    if n_h % n_kv:
        raise ConfigError(f"num_attention_heads ({n_h}) is not divisible by num_key_value_heads ({n_kv})")

    # DeepSeek-V4: one latent of head_dim a token (its last qk_rope_head_dim dims RoPE), shared by
    # the heads; costed as MLA with d_c = head_dim - d_r, d_r (docs/model.md "Layouts of 2026").
    is_v4 = model_type == "deepseek_v4" or cfg.get("compress_ratios") is not None
    # MLA fields: all or nothing.
    mla_fields = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
    present = [] if is_v4 else [f for f in mla_fields if cfg.get(f) is not None]
    if present and "kv_lora_rank" not in present and "qk_rope_head_dim" not in present:
        present = []  # a lone qk_nope_head_dim is not MLA
    if present:
        missing = [f for f in mla_fields if f not in present]
        if missing:
            raise ConfigError(
                f"MLA config is incomplete: has {', '.join(present)} but not {', '.join(missing)}"
            )
        d_c = r.int_("kv_lora_rank")
        d_r = r.int_("qk_rope_head_dim")
        d_nope = r.int_("qk_nope_head_dim")
        d_v = r.int_("v_head_dim")
        if d_v is None:
            d_v = d_nope
            notes.append("v_head_dim absent: taken as qk_nope_head_dim")
        d_q = r.int_("q_lora_rank")
        attention = AttentionSpec(n_h, n_kv, d_nope, d_c, d_r, d_nope, d_v, d_q)
    elif is_v4:
        d = r.int_("head_dim")
        d_r = r.int_("qk_rope_head_dim")
        for key, v in (("head_dim", d), ("qk_rope_head_dim", d_r)):
            if v is None:
                raise ConfigError(f"DeepSeek-V4 compressed attention (compress_ratios) needs {key}")
        if d_r >= d:
            raise ConfigError(f"qk_rope_head_dim ({d_r}) must be below head_dim ({d}) in DeepSeek-V4's latent")
        attention = AttentionSpec(n_h, n_kv, d - d_r, d - d_r, d_r, d - d_r, d, r.int_("q_lora_rank"))
    else:
        d_h = r.int_("head_dim")
        if d_h is None:
            if hidden % n_h:
                raise ConfigError(
                    f"config.json has no head_dim and hidden_size ({hidden}) is not divisible by "
                    f"num_attention_heads ({n_h})"
                )
            d_h = hidden // n_h
        attention = AttentionSpec(n_h, n_kv, d_h)

    indexer = None
    if cfg.get("index_head_dim") is not None:
        indexer = Indexer(r.int_("index_head_dim"), r.int_("index_n_heads", required=True),
                          r.int_("index_topk", maximum=MAX_WINDOW))
    plan, layer_specs, mtp_layer = _layer_plan(r, model_type, layers, attention, hidden, notes, indexer)
    notes += [f"field {key} is not modelled: the figures may be wrong" for key in unmodelled_fields(cfg, _NESTED_READ)]
    attention = plan.attention or attention
    params_complete = True
    try:
        moe = _moe(r, model_type, layers)
        if moe is not None and plan.moe_layers is not None:
            moe = replace(moe, moe_layers=plan.moe_layers)  # the layout says which blocks are MoE
    except ConfigError as e:
        # Only the parameter count needs the MoE fields: the cache answer goes on without them.
        moe, params_complete = None, False
        notes.append(f"parameters: the MoE experts are not counted ({e})")

    try:
        intermediate = r.int_("intermediate_size")
        if model_type in ("llama4", "llama4_text") and cfg.get("intermediate_size_mlp") is not None:
            intermediate = r.int_("intermediate_size_mlp")  # Llama 4's dense layers; experts use intermediate_size
        if cfg.get("dense_intermediate_size") is not None:
            intermediate = r.int_("dense_intermediate_size")  # MiniMax-M3's dense layers; experts use intermediate_size
        if intermediate is None and cfg.get("block_ff_dim") is not None:
            intermediate = _lfm2_ffn_width(r)
    except ConfigError as e:  # e.g. Gemma-3n's per-layer list: only the parameter count needs it
        intermediate, params_complete = None, False
        notes.append(f"parameters: the dense MLP is not counted ({e})")
    if intermediate is None and model_type in ("falcon", "gpt2", "gpt3"):
        intermediate = 4 * hidden
    if model_type in _PARAMS_NOT_MODELLED:
        params_complete = False
        notes.append(f"parameters: {_PARAMS_NOT_MODELLED[model_type]} are not counted")
    vocab = r.int_("vocab_size", maximum=MAX_VOCAB)

    tie = r.bool_("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)

    dtype_key = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    raw_dtype = r.str_(dtype_key)
    if raw_dtype is None:
        torch_dtype = "bf16"
    elif raw_dtype.lower() in TORCH_DTYPE_NAMES:
        torch_dtype = TORCH_DTYPE_NAMES[raw_dtype.lower()]
    else:
        torch_dtype = "bf16"
        notes.append(f"{dtype_key} {_short(raw_dtype)} not recognised: bf16 assumed")

    qc = cfg.get("quantization_config")
    quant_method = None
    modules_not_converted: tuple[str, ...] = ()
    if qc is not None:
        if not isinstance(qc, dict):
            raise ConfigError(f"quantization_config must be an object, not {_json_type(qc)}")
        qm = qc.get("quant_method")
        quant_method = qm if isinstance(qm, str) else None
        mods = qc.get("modules_to_not_convert")
        if isinstance(mods, list):
            modules_not_converted = tuple(str(m)[:200] for m in mods[:10_000] if isinstance(m, str))
        expert_dtype = _compressed_tensors_experts(qc, notes) if quant_method == "compressed-tensors" else None
        if quant_method is not None and quant_method not in KNOWN_QUANT_METHODS and expert_dtype is None:
            notes.append(f"quantization_config.quant_method {_short(quant_method)} is not modelled: weights "
                         f"counted at {torch_dtype} (set the weights dtype to change it)")
    else:
        expert_dtype = None
    if cfg.get("expert_dtype") is not None:  # DeepSeek-V4: "fp4" routed experts (MXFP4: E2M1 + a ue8m0 scale per 32)
        raw = r.str_("expert_dtype")
        if raw.lower() in ("fp4", "mxfp4"):
            expert_dtype = "mxfp4"
        else:
            notes.append(f"expert_dtype {_short(raw)} is not modelled: the experts are counted with the other weights")


    attention_bias = r.bool_("attention_bias", None)
    if attention_bias is None:
        attention_bias = model_type in _QKV_BIAS_ALWAYS or model_type == "gpt3" or bool(r.bool_("bias", False))
    if model_type in _QKV_BIAS_ALWAYS or model_type == "glm4_moe":
        o_bias = False
    else:
        o_bias = attention_bias
    mlp_bias = bool(r.bool_("mlp_bias", model_type == "gpt3"))
    if model_type == "falcon":
        mlp_bias = bool(r.bool_("bias", False))
    norms_per_layer = 4 if model_type in _FOUR_NORMS else 2
    if model_type == "falcon" and r.bool_("parallel_attn", True) and not r.bool_("new_decoder_architecture", False):
        norms_per_layer = 1
    qk_norm = model_type in _QK_NORM or bool(r.bool_("use_qk_norm", False))
    output_gate = bool(r.bool_("attn_output_gate", False))

    return ModelSpec(
        name=name,
        model_type=model_type,
        num_hidden_layers=layers,
        hidden_size=hidden,
        attention=attention,
        layers=layer_specs,
        intermediate_size=intermediate,
        vocab_size=vocab,
        tie_word_embeddings=tie,
        torch_dtype=torch_dtype,
        quant_method=quant_method,
        expert_weights_dtype=expert_dtype,
        moe=moe,
        indexer=indexer,
        attention_bias=attention_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        mlp_gated=model_type not in _UNGATED_MLP,
        norm_with_bias=model_type in _LAYERNORM,
        norms_per_layer=norms_per_layer,
        qk_norm=qk_norm,
        attn_output_gate=output_gate,
        attn_sinks=model_type == "gpt_oss",
        learned_pos_embeddings=(r.int_("max_position_embeddings", maximum=MAX_WINDOW) or 0) if model_type == "gpt3" else 0,
        num_nextn_predict_layers=_mtp_layers(r),
        max_position_embeddings=mpe if type(mpe := cfg.get("max_position_embeddings")) is int and mpe > 0 else None,
        quant_modules_not_converted=modules_not_converted,
        extra_dense_mlps=_EXTRA_DENSE_MLPS.get(model_type, 0) or (1 if r.bool_("enable_moe_block", False) else 0),
        mlp_layers=plan.mlp_layers,
        mlp_widths=plan.mlp_widths,
        ssm_state_dtype=_ssm_state_dtype(r, notes),
        mtp_layer=mtp_layer,
        params_complete=params_complete,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------
# Which layer holds which cache: one table of layout rules (docs/model.md, "Every layer its own
# cache" and "Layouts of 2026"), tried in order of precedence; the first that applies decides.
# A rule returns a `_Plan`: per decoder layer its slots ("full", "sliding", "chunked", "none",
# "rec", or ("compressed", r)), the recurrent kind, and the shapes of kinds that carry their own
# heads or widths. `_build_layers` turns a plan into typed caches (mla_core/layers.py). A new
# layout is one rule here and, if its cache is new, one class there.

@dataclass
class _Plan:
    """What a layout rule decides (see the comment above)."""

    slots: list  # per layer: a tuple of slot names (or ("compressed", r) for DeepSeek-V4)
    rec_kind: str | None = None
    shapes: dict = dc_field(default_factory=dict)  # slot -> AttentionSpec with the kind's own heads / widths
    per_layer: list | None = None  # per layer: an AttentionSpec overriding the slot's shape (DeciLM)
    attention: AttentionSpec | None = None  # the model-wide shape, when the rule sets it
    mlp_widths: tuple | None = None  # per-layer dense MLP widths (DeciLM ffn_mult)
    mlp_layers: tuple | None = None  # per-layer: has an MLP / MoE block
    moe_layers: tuple | None = None  # per-layer: the block is MoE (Nemotron-H `E`, layers_block_type `moe`)
    rule: str = ""


# `layer_types` values: attention kinds, and the spellings of a recurrent layer whose kind depends
# on the model family.
_LAYER_TYPE_KINDS = {
    "full_attention": "full",
    "attention": "full",
    "global_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}
# What `linear_attention` means per model_type (and `mamba` always Mamba-2, `conv` LFM2's short conv).
_LINEAR_ATTENTION_KIND = {"qwen3_next": "gdn", "qwen3_5": "gdn", "qwen3_5_moe": "gdn", "qwen3_5_text": "gdn",
                          "qwen3_5_moe_text": "gdn", "qwen3_6": "gdn", "qwen3_6_moe": "gdn",
                          "kimi_linear": "kda", "kimi_k3": "kda", "minimax": "lightning",
                          "minimax_m1": "lightning", "minimax_text_01": "lightning"}
_HYBRID_PATTERN = {"*": ("full",), "M": ("rec",), "-": ("none",), "E": ("none",)}
_BLOCK_TYPES = {"attention": ("full",), "mamba": ("rec",), "moe": ("none",), "mlp": ("none",)}


def _unknown(notes: list, what: str, value) -> tuple:
    notes.append(f"{what} {_short(value)} is not a layer kind this tool knows: counted as full attention "
                 "(the figures may be wrong)")
    return ("full",)


def _rule_compressed(r: _Reader, ctx: dict) -> _Plan | None:
    """DeepSeek-V4: `compress_ratios[i]` per layer (0: the window only), the trailing entry the MTP
    layer's."""
    cfg, n = r.cfg, ctx["n"]
    if cfg.get("compress_ratios") is None and ctx["model_type"] != "deepseek_v4":
        return None
    ratios = cfg.get("compress_ratios")
    if ratios is None:
        raise ConfigError("DeepSeek-V4 compressed attention needs compress_ratios (one ratio a layer)")
    if not isinstance(ratios, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in ratios):
        raise ConfigError("compress_ratios must be a list of whole numbers (0: no compression)")
    if len(ratios) not in (n, n + 1):
        raise ConfigError(f"compress_ratios has {len(ratios)} entries for {n} layers (and at most one MTP layer)")
    if r.cfg.get("sliding_window") is None:
        raise ConfigError("DeepSeek-V4 compressed attention (compress_ratios) needs sliding_window")
    return _Plan([(("compressed", x),) for x in ratios[:n]], rule="compress_ratios")


def _rule_layer_types(r: _Reader, ctx: dict) -> _Plan | None:
    layer_types, n, notes = r.cfg.get("layer_types"), ctx["n"], ctx["notes"]
    if layer_types is None:
        return None
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        raise ConfigError("layer_types must be a list of strings")
    if len(layer_types) != n:
        raise ConfigError(f"layer_types has {len(layer_types)} entries for {n} layers")
    slots, rec_kind, seen = [], None, set()
    model_type = ctx["model_type"]
    for t in layer_types:
        if t in _LAYER_TYPE_KINDS:
            slots.append((_LAYER_TYPE_KINDS[t],))
        elif t == "mamba":
            rec_kind = "mamba2"
            slots.append(("rec",))
        elif t == "linear_attention" and model_type in _LINEAR_ATTENTION_KIND:
            rec_kind = _LINEAR_ATTENTION_KIND[model_type]
            slots.append(("rec",))
        elif t == "conv" and model_type.startswith("lfm2"):
            rec_kind = "shortconv"
            slots.append(("rec",))
        else:
            if t not in seen:
                seen.add(t)
                _unknown(notes, "layer_types value", t)
            slots.append(("full",))
    return _Plan(slots, rec_kind, _global_shape(r, ctx), rule="layer_types")


def _global_shape(r: _Reader, ctx: dict) -> dict:
    """Gemma-4: full (global) layers use `num_global_key_value_heads` x `global_head_dim` (K and V
    still two caches under `attention_k_eq_v`), the sliding layers the plain fields."""
    cfg, att = r.cfg, ctx["attention"]
    if cfg.get("num_global_key_value_heads") is None and cfg.get("global_head_dim") is None:
        return {}
    n_kv = r.int_("num_global_key_value_heads") or att.num_key_value_heads
    d = r.int_("global_head_dim") or att.head_dim
    if att.num_attention_heads % n_kv:
        raise ConfigError(f"num_attention_heads ({att.num_attention_heads}) is not divisible by "
                          f"num_global_key_value_heads ({n_kv})")
    return {"full": AttentionSpec(att.num_attention_heads, n_kv, d)}


def _rule_hybrid_override_pattern(r: _Reader, ctx: dict) -> _Plan | None:
    pattern, n = r.cfg.get("hybrid_override_pattern"), ctx["n"]
    if pattern is None:
        return None
    if not isinstance(pattern, str) or len(pattern) != n:
        raise ConfigError(f"hybrid_override_pattern must be a string of one character per layer ({n})")
    slots = [_HYBRID_PATTERN[ch] if ch in _HYBRID_PATTERN else _unknown(ctx["notes"], "hybrid_override_pattern "
                                                                          "character", ch) for ch in pattern]
    return _Plan(slots, "mamba2" if "M" in pattern else None, rule="hybrid_override_pattern",
                 mlp_layers=tuple(ch in "-E" for ch in pattern), moe_layers=tuple(ch == "E" for ch in pattern))


def _rule_layers_block_type(r: _Reader, ctx: dict) -> _Plan | None:
    """Nemotron-3.5 (`layers_block_type`, a list): attention, mamba (Mamba-2), moe, mlp a layer."""
    types, n = r.cfg.get("layers_block_type"), ctx["n"]
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"layers_block_type must list one block type per layer ({n})")
    slots = [_BLOCK_TYPES[t] if t in _BLOCK_TYPES else _unknown(ctx["notes"], "layers_block_type value", t)
             for t in types]
    return _Plan(slots, "mamba2" if "mamba" in types else None, rule="layers_block_type",
                 mlp_layers=tuple(t in ("moe", "mlp") for t in types), moe_layers=tuple(t == "moe" for t in types))


def _rule_hybrid_layer_pattern(r: _Reader, ctx: dict) -> _Plan | None:
    """MiMo-V2: 0 = full attention with `num_key_value_heads` x `head_dim` K and `v_head_dim` V;
    1 = sliding (`sliding_window`) with `swa_num_key_value_heads`, `swa_head_dim` K and
    `swa_v_head_dim` V (its `attention_chunk_size` is not Llama-4 chunking)."""
    pattern, n, att = r.cfg.get("hybrid_layer_pattern"), ctx["n"], ctx["attention"]
    if pattern is None:
        return None
    if not isinstance(pattern, list) or len(pattern) != n or any(v not in (0, 1) or isinstance(v, bool)
                                                                for v in pattern):
        raise ConfigError(f"hybrid_layer_pattern must list 0 (full) or 1 (sliding) for each of {n} layers")
    if 1 in pattern and r.cfg.get("sliding_window") is None:
        raise ConfigError("MiMo's hybrid_layer_pattern (1 = sliding) needs sliding_window")
    d_v = r.int_("v_head_dim") or att.head_dim
    full = AttentionSpec(att.num_attention_heads, att.num_key_value_heads, att.head_dim, v_head_dim=d_v)
    n_h = r.int_("swa_num_attention_heads") or att.num_attention_heads
    n_kv = r.int_("swa_num_key_value_heads") or att.num_key_value_heads
    d_k = r.int_("swa_head_dim") or att.head_dim
    swa = AttentionSpec(n_h, n_kv, d_k, v_head_dim=r.int_("swa_v_head_dim") or d_k)
    if n_h % n_kv:
        raise ConfigError(f"swa_num_attention_heads ({n_h}) is not divisible by swa_num_key_value_heads ({n_kv})")
    return _Plan([("full",) if v == 0 else ("sliding",) for v in pattern], shapes={"full": full, "sliding": swa},
                 rule="hybrid_layer_pattern")


def _rule_full_attention_interval(r: _Reader, ctx: dict) -> _Plan | None:
    if r.cfg.get("full_attention_interval") is None:
        return None
    k = r.int_("full_attention_interval", maximum=MAX_LAYERS)
    return _Plan([("full",) if (i + 1) % k == 0 else ("rec",) for i in range(ctx["n"])], "gdn",
                 rule="full_attention_interval")


def _rule_linear_attn_config(r: _Reader, ctx: dict) -> _Plan | None:
    lac, n = r.cfg.get("linear_attn_config"), ctx["n"]
    if lac is None:
        return None
    if not isinstance(lac, dict):
        raise ConfigError("linear_attn_config must be an object")
    sub = _Reader(lac, "linear_attn_config")
    full_list, kda_list = sub.int_list("full_attn_layers", n), sub.int_list("kda_layers", n)
    full, kda = set(full_list), set(kda_list)
    if 0 in full or 0 in kda:
        raise ConfigError("linear_attn_config lists layers from 1 (1-based); 0 is not a layer")
    if len(full) != len(full_list) or len(kda) != len(kda_list):
        raise ConfigError("linear_attn_config lists a layer twice")
    if full & kda:
        raise ConfigError(f"linear_attn_config puts layer {min(full & kda)} in both full_attn_layers and kda_layers")
    slots = [("full",) if i in full else ("rec",) if i in kda
             else _unknown(ctx["notes"], "layer", f"{i} (in neither full_attn_layers nor kda_layers)")
             for i in range(1, n + 1)]
    return _Plan(slots, "kda", rule="linear_attn_config")


def _rule_attn_type_list(r: _Reader, ctx: dict) -> _Plan | None:
    types, n = r.cfg.get("attn_type_list"), ctx["n"]
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n or any(t not in (0, 1) or isinstance(t, bool) for t in types):
        raise ConfigError(f"attn_type_list must list 0 (lightning) or 1 (softmax) for each of {n} layers")
    return _Plan([("full",) if t == 1 else ("rec",) for t in types], "lightning", rule="attn_type_list")


def _rule_attn_layer_period(r: _Reader, ctx: dict) -> _Plan | None:
    if r.cfg.get("attn_layer_period") is None:
        return None
    p = r.int_("attn_layer_period", maximum=MAX_LAYERS)
    o = r.int_("attn_layer_offset", minimum=0, maximum=MAX_LAYERS) or 0
    if o >= p:
        raise ConfigError(f"attn_layer_offset ({o}) must be below attn_layer_period ({p}): no layer would be attention")
    return _Plan([("full",) if i % p == o else ("rec",) for i in range(ctx["n"])], "mamba1", rule="attn_layer_period")


def _rule_falcon_h1(r: _Reader, ctx: dict) -> _Plan | None:
    if ctx["model_type"] != "falcon_h1":
        return None
    return _Plan([("full", "rec")] * ctx["n"], "mamba2", rule="falcon_h1")  # attention and Mamba-2 side by side


def _rule_longcat(r: _Reader, ctx: dict) -> _Plan | None:
    if ctx["model_type"] != "longcat_flash":
        return None
    return _Plan([("full", "full")] * ctx["n"], rule="longcat_flash")  # two MLA blocks a layer, a cache each


def _rule_full_attn_idxs(r: _Reader, ctx: dict) -> _Plan | None:
    """LFM2: `full_attn_idxs` are GQA layers, the others short convolutions."""
    if r.cfg.get("full_attn_idxs") is None:
        return None
    n = ctx["n"]
    idxs = set(r.int_list("full_attn_idxs", n - 1))
    return _Plan([("full",) if i in idxs else ("rec",) for i in range(n)], "shortconv", rule="full_attn_idxs")


def _rule_block_configs(r: _Reader, ctx: dict) -> _Plan | None:
    """DeciLM / nemotron-nas (`block_configs`): a block whose attention is `no_op` (or
    `replace_with_linear`) holds no cache; otherwise its KV heads are
    num_attention_heads // attention.n_heads_in_group (vLLM and SGLang read it so). Its FFN's
    width is DeciLM's `ffn_mult` rule (parameters only)."""
    blocks, n, att = r.cfg.get("block_configs"), ctx["n"], ctx["attention"]
    if blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) != n or not all(isinstance(b, dict) for b in blocks):
        raise ConfigError(f"block_configs must list one object per layer ({n})")
    slots, per_layer, widths, has_mlp = [], [], [], []
    for i, b in enumerate(blocks):
        a = b.get("attention") or {}
        f = b.get("ffn") or {}
        if not isinstance(a, dict) or not isinstance(f, dict):
            raise ConfigError(f"block_configs[{i}].attention and .ffn must be objects")
        sub = _Reader(a, f"block_configs[{i}].attention")
        if sub.bool_("no_op", False) or sub.bool_("replace_with_linear", False):
            slots.append(("none",))
            per_layer.append(None)
        else:
            group = sub.int_("n_heads_in_group")
            if group is None:
                raise ConfigError(f"block_configs[{i}].attention needs n_heads_in_group (DeciLM's KV groups)")
            if att.num_attention_heads % group:
                raise ConfigError(f"block_configs[{i}]: n_heads_in_group {group} does not divide "
                                  f"{att.num_attention_heads} heads")
            slots.append(("full",))
            per_layer.append(AttentionSpec(att.num_attention_heads, att.num_attention_heads // group, att.head_dim))
        fr = _Reader(f, f"block_configs[{i}].ffn")
        if fr.bool_("no_op", False) or fr.bool_("replace_with_linear", False):
            widths.append(None)
            has_mlp.append(False)
        else:
            mult = f.get("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or mult <= 0:
                raise ConfigError(f"block_configs[{i}].ffn needs a positive ffn_mult")
            widths.append(_decilm_ffn_width(mult, ctx["hidden"]))
            has_mlp.append(True)
    shapes = [s for s in per_layer if s is not None]
    common = max(set(shapes), key=shapes.count) if shapes else att
    return _Plan(slots, per_layer=per_layer, attention=common, mlp_widths=tuple(widths), mlp_layers=tuple(has_mlp),
                 rule="block_configs")


def _decilm_ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's `_ffn_mult_to_intermediate_size`: int(2 ffn_mult hidden / 3) rounded up to 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def _rule_chunked(r: _Reader, ctx: dict) -> _Plan | None:
    """Llama 4: `no_rope_layers[i] == 1` marks a chunked (RoPE) layer, 0 a global one; without the
    list, layer i is global when (i + 1) % no_rope_layer_interval == 0 (default 4)."""
    if r.cfg.get("attention_chunk_size") is None:
        return None
    n = ctx["n"]
    no_rope = r.cfg.get("no_rope_layers") or None  # [] on the hub means "derive it" (transformers)
    if no_rope is not None:
        if not isinstance(no_rope, list) or len(no_rope) != n or any(v not in (0, 1) or isinstance(v, bool)
                                                                    for v in no_rope):
            raise ConfigError(f"no_rope_layers must list 0 or 1 for each of {n} layers")
        return _Plan([("chunked",) if v == 1 else ("full",) for v in no_rope], rule="attention_chunk_size")
    interval = r.int_("no_rope_layer_interval", maximum=MAX_LAYERS) or 4
    return _Plan([("full",) if (i + 1) % interval == 0 else ("chunked",) for i in range(n)],
                 rule="attention_chunk_size")


def _rule_windows(r: _Reader, ctx: dict) -> _Plan:
    """The window rules: `sliding_window_pattern` P (layer i global when (i + 1) % P == 0);
    Gemma-2 (even layers slide); otherwise `sliding_window` on every layer unless it is null or
    `use_sliding_window` is false (Qwen2: with it true, layers from `max_window_layers` on slide)."""
    n = ctx["n"]
    window = r.int_("sliding_window", maximum=MAX_WINDOW)
    full, slide = ("full",), ("sliding",)
    if window is None:
        return _Plan([full] * n, rule="")
    pattern = r.int_("sliding_window_pattern", maximum=MAX_LAYERS)
    if pattern is not None:
        return _Plan([full if (i + 1) % pattern == 0 else slide for i in range(n)], rule="sliding_window_pattern")
    if ctx["model_type"] == "gemma2":
        return _Plan([slide if i % 2 == 0 else full for i in range(n)], rule="gemma2")
    use = r.bool_("use_sliding_window", None)
    if use is False:
        return _Plan([full] * n, rule="use_sliding_window")
    max_window_layers = r.int_("max_window_layers", minimum=0, maximum=MAX_LAYERS)
    if use is True and max_window_layers is not None:
        return _Plan([slide if i >= max_window_layers else full for i in range(n)], rule="max_window_layers")
    return _Plan([slide] * n, rule="sliding_window")


# The table, in docs/model.md's order of precedence.
LAYOUT_RULES = (
    ("compress_ratios", _rule_compressed),
    ("layer_types", _rule_layer_types),
    ("hybrid_override_pattern", _rule_hybrid_override_pattern),
    ("layers_block_type", _rule_layers_block_type),
    ("hybrid_layer_pattern", _rule_hybrid_layer_pattern),
    ("full_attention_interval", _rule_full_attention_interval),
    ("linear_attn_config", _rule_linear_attn_config),
    ("attn_type_list", _rule_attn_type_list),
    ("attn_layer_period", _rule_attn_layer_period),
    ("falcon_h1", _rule_falcon_h1),
    ("longcat_flash", _rule_longcat),
    ("full_attn_idxs", _rule_full_attn_idxs),
    ("block_configs", _rule_block_configs),
    ("attention_chunk_size", _rule_chunked),
)


def _layer_plan(r: _Reader, model_type: str, n: int, attention: AttentionSpec, hidden: int,
                notes: list[str], indexer: Indexer | None) -> tuple[_Plan, tuple[LayerSpec, ...], LayerSpec | None]:
    """What each of the `n` layers caches, by the first rule of LAYOUT_RULES that applies (else the
    window rules), then `num_kv_shared_layers` and the sparse-attention indexers. Returns
    (the plan, the layers, what one MTP draft layer holds or None for the default)."""
    ctx = {"n": n, "model_type": model_type, "attention": attention, "hidden": hidden, "notes": notes}
    plan = next((p for _, rule in LAYOUT_RULES if (p := rule(r, ctx)) is not None), None) or _rule_windows(r, ctx)
    att = plan.attention or attention
    window = r.int_("sliding_window", maximum=MAX_WINDOW)
    chunk = r.int_("attention_chunk_size", maximum=MAX_WINDOW)
    kinds = {k for slots in plan.slots for k in slots if isinstance(k, str)}
    if "sliding" in kinds and window is None:
        raise ConfigError(f"{plan.rule or 'the config'} names sliding_attention layers but sliding_window is not set")
    if "chunked" in kinds and chunk is None:
        raise ConfigError(f"{plan.rule} names chunked_attention layers but attention_chunk_size is not set")
    recurrent = _recurrent(r, plan.rec_kind, att, hidden) if plan.rec_kind else None
    if "rec" in kinds and recurrent is None:
        raise ConfigError(f"{plan.rule} names recurrent layers but the model's recurrent kind is not known")
    index_on = _indexed_layers(r, n, model_type, indexer, notes)

    def cache(slot, i: int):
        if isinstance(slot, tuple):  # ("compressed", r): DeepSeek-V4
            return _v4_cache(r, att, window, slot[1])
        if slot == "rec":
            return recurrent
        if slot == "none":
            return NoCache()
        shape = (plan.per_layer[i] if plan.per_layer else None) or plan.shapes.get(slot) or att
        ix = index_on(i)
        c = attention_cache(shape, window if slot == "sliding" else None, chunk if slot == "chunked" else None, ix)
        own = shape is not att and shape != att
        return replace(c, own_shape=True) if own else c

    layers = [LayerSpec(tuple(cache(s, i) for s in slots)) for i, slots in enumerate(plan.slots)]

    shared = r.int_("num_kv_shared_layers", minimum=0, maximum=MAX_LAYERS) or 0
    own = sum(1 for layer in layers[:n - shared] if layer.kv_caches)
    if shared and own == 0:
        raise ConfigError(f"num_kv_shared_layers ({shared}) leaves no earlier layer with a cache of its own to share "
                          f"(of {n} layers)")
    for i in range(n - shared, n):  # it still attends, over an earlier layer's cache, with its own kind's window
        src = next((c for c in layers[i].caches if c.holds_kv), attention_cache(att))
        rec = tuple(c for c in layers[i].caches if c is recurrent)
        layers[i] = LayerSpec((SharedKV(src, layers[i].window),) + rec)
    if not any(layer.kv_caches or layer.recurrent for layer in layers):
        raise ConfigError("no layer of this config holds a cache or a recurrent state (every layer is an MLP or "
                          "MoE block)")
    mtp = None
    ratios = r.cfg.get("compress_ratios")
    if plan.rule == "compress_ratios" and isinstance(ratios, list) and len(ratios) == n + 1:
        mtp = LayerSpec((_v4_cache(r, att, window, ratios[n]),), True)
    elif r.cfg.get("indexer_types") is not None and indexer is not None:
        mtp = LayerSpec((attention_cache(att, indexer=indexer),), True)  # GLM-5.2: MTP layers always index
    return plan, tuple(layers), mtp


def _v4_cache(r: _Reader, att: AttentionSpec, window: int, ratio: int) -> CompressedMLA:
    d = att.kv_lora_rank + att.qk_rope_head_dim
    ix = None
    if ratio == 4:
        dim = r.int_("index_head_dim")
        if dim is None:
            raise ConfigError("DeepSeek-V4's ratio-4 layers need index_head_dim (their indexer key)")
        ix = Indexer(dim, r.int_("index_n_heads") or 0, r.int_("index_topk", maximum=MAX_WINDOW), "kv")
    return CompressedMLA(att.num_attention_heads, d, att.qk_rope_head_dim, window, ratio, ix,
                         q_lora_rank=att.q_lora_rank or 0, o_lora_rank=r.int_("o_lora_rank") or 0,
                         o_groups=r.int_("o_groups") or 1)


def _indexed_layers(r: _Reader, n: int, model_type: str, indexer: Indexer | None, notes: list[str]):
    """Which layers hold a sparse-attention index key: every attention layer with `index_head_dim`
    (DeepSeek-V3.2); only those `indexer_types` marks `full` (GLM-5.2); MiniMax-M3's sparse layers
    (`sparse_attention_config.sparse_attention_freq`), one index key head of `sparse_index_dim` at
    the KV dtype (SGLang's index_dtype default), K only where `sparse_disable_index_value`.
    Returns layer -> Indexer or None."""
    types = r.cfg.get("indexer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n or not all(isinstance(t, str) for t in types):
            raise ConfigError(f"indexer_types must list one string per layer ({n})")
        if indexer is None:
            raise ConfigError("indexer_types needs index_head_dim (the indexer key's width)")
        return lambda i: indexer if types[i] == "full" else None
    sac = r.cfg.get("sparse_attention_config")
    if sac is not None:
        if not isinstance(sac, dict):
            raise ConfigError("sparse_attention_config must be an object")
        sub = _Reader(sac, "sparse_attention_config")
        freq = sac.get("sparse_attention_freq")
        if sub.bool_("use_sparse_attention", True) is False or freq is None:
            return lambda i: None
        if not isinstance(freq, list) or len(freq) != n:
            raise ConfigError(f"sparse_attention_config.sparse_attention_freq must list one flag per layer ({n})")
        dim = sub.int_("sparse_index_dim")
        if dim is None:
            raise ConfigError("MiniMax sparse attention (sparse_attention_config) needs sparse_index_dim")
        heads = sub.int_("sparse_num_index_heads") or 0
        no_value = sac.get("sparse_disable_index_value") or [0] * n
        if not isinstance(no_value, list) or len(no_value) != n:
            raise ConfigError(f"sparse_attention_config.sparse_disable_index_value must list one flag per layer ({n})")
        k_only = Indexer(dim, heads, None, "key")
        kv = Indexer(dim, heads, None, "key_value")
        return lambda i: (k_only if no_value[i] else kv) if freq[i] else None
    return lambda i: indexer

def _mtp_layers(r: _Reader) -> int:
    """Multi-token-prediction draft layers the checkpoint ships: DeepSeek / GLM
    `num_nextn_predict_layers`, Qwen3-Next `mtp_num_hidden_layers`, MiniMax-M2 `use_mtp` with
    `num_mtp_modules` x `mtp_transformer_layers`."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if r.cfg.get(key) is not None:
            return r.int_(key, minimum=0, maximum=MAX_LAYERS) or 0
    if r.bool_("use_mtp", False) and r.cfg.get("num_mtp_modules") is not None:
        modules = r.int_("num_mtp_modules", minimum=0, maximum=MAX_LAYERS) or 0
        return modules * (r.int_("mtp_transformer_layers", maximum=MAX_LAYERS) or 1)
    return 0


def _compressed_tensors_experts(qc: dict, notes: list[str]) -> str | None:
    """A compressed-tensors `quantization_config` whose one config group stores int4 weights in
    groups of 32 and whose `ignore` list leaves attention, shared experts and dense MLPs out
    (Kimi-K2.5): the routed experts at int4 (4.5 bits with their scales), the rest at torch_dtype.
    None for any other scheme (it is then counted at torch_dtype, with the usual note)."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        return None
    w = next(iter(groups.values())) or {}
    w = w.get("weights") if isinstance(w, dict) else None
    if not isinstance(w, dict) or w.get("num_bits") != 4 or w.get("type") != "int" or w.get("group_size") != 32:
        return None
    ignore = " ".join(str(x) for x in qc.get("ignore") or [])
    if "self_attn" not in ignore or "shared_experts" not in ignore:
        return None
    notes.append("weights: the routed experts at int4 in groups of 32 (compressed-tensors), the rest at torch_dtype")
    return "int4"


def _ssm_state_dtype(r: _Reader, notes: list[str]) -> str | None:
    """The recurrent state's dtype the config declares, as vLLM reads it: Nemotron-H's
    `mamba_ssm_cache_dtype`, Qwen3.5's `text_config.mamba_ssm_dtype` (vLLM's
    mamba_ssm_cache_dtype). None when neither is set (the model's torch_dtype)."""
    for key in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        raw = r.str_(key)
        if raw is None:
            continue
        if raw.lower() in TORCH_DTYPE_NAMES:
            return TORCH_DTYPE_NAMES[raw.lower()]
        notes.append(f"{key} {_short(raw)} not recognised: the state dtype is taken as torch_dtype")
        return None
    return None


def _first_int(r: _Reader, names: tuple[str, ...], what: str, default: int | None = None,
               notes: list[str] | None = None) -> int:
    """The first of `names` present (typed check), else `default` (noted), else a ConfigError."""
    for key in names:
        if r.cfg.get(key) is not None:
            return r.int_(key)
    if default is None:
        raise ConfigError(f"{r.where} is missing {names[0]} ({what} of the recurrent state)")
    if notes is not None:
        notes.append(f"{names[0]} absent: {default} assumed")
    return default


def _recurrent(r: _Reader, kind: str, attention: AttentionSpec, hidden: int) -> RecurrentState:
    """The recurrent state shape of `kind` from its family's fields (docs/model.md), in the common
    (H, P, G, N, K) form of `layers.RecurrentState`."""
    if kind == "mamba1":  # Jamba
        expand = _first_int(r, ("mamba_expand",), "expansion factor")
        n_state = _first_int(r, ("mamba_d_state",), "state size")
        k = _first_int(r, ("mamba_d_conv",), "conv kernel")
        dt_rank = r.int_("mamba_dt_rank") or -(-hidden // 16)  # "auto": ceil(hidden / 16)
        return RecurrentState("mamba1", expand * hidden, 1, 0, n_state, k, dt_rank)
    if kind == "mamba2":  # Nemotron-H spellings first, then granite-4.0-h / Falcon-H1's
        h = _first_int(r, ("mamba_num_heads", "mamba_n_heads"), "heads")
        p = _first_int(r, ("mamba_head_dim", "mamba_d_head"), "head dim")
        g = _first_int(r, ("n_groups", "mamba_n_groups"), "groups")
        n_state = _first_int(r, ("ssm_state_size", "mamba_d_state"), "state size")
        k = _first_int(r, ("conv_kernel", "mamba_d_conv"), "conv kernel")
        if h % g:
            raise ConfigError(f"the {h} Mamba-2 heads do not divide into {g} groups")
        return RecurrentState("mamba2", h, p, g, n_state, k)
    if kind == "gdn":  # Qwen3-Next, Qwen3.5
        h_k = _first_int(r, ("linear_num_key_heads",), "key heads")
        h_v = _first_int(r, ("linear_num_value_heads",), "value heads")
        d_k = _first_int(r, ("linear_key_head_dim",), "key head dim")
        d_v = _first_int(r, ("linear_value_head_dim",), "value head dim")
        k = _first_int(r, ("linear_conv_kernel_dim",), "conv kernel")
        if h_v % h_k:
            raise ConfigError(f"linear_num_value_heads ({h_v}) is not a multiple of linear_num_key_heads ({h_k})")
        return RecurrentState("gdn", h_v, d_v, h_k, d_k, k)
    if kind == "kda":  # Kimi-Linear
        lac = r.cfg.get("linear_attn_config")
        if not isinstance(lac, dict):
            raise ConfigError(f"{r.where} is missing linear_attn_config (the KDA layers' heads and conv kernel)")
        lr = _Reader(lac, "linear_attn_config")
        h = _first_int(lr, ("num_heads",), "heads")
        d = _first_int(lr, ("head_dim",), "head dim")
        k = _first_int(lr, ("short_conv_kernel_size",), "conv kernel")
        return RecurrentState("kda", h, d, h, d, k)
    if kind == "lightning":  # MiniMax: n_h x d_h x d_h, no conv
        d = attention.head_dim
        return RecurrentState("lightning", attention.num_attention_heads, d, 0, d, 1)
    if kind == "shortconv":  # LFM2: (conv_L_cache - 1) x conv_dim (vLLM short_conv_state_shape)
        k = _first_int(r, ("conv_L_cache",), "conv kernel (the LFM2 short convolution)")
        dim = r.int_("conv_dim") or hidden
        return RecurrentState("shortconv", dim, 1, 0, 0, k)
    raise ConfigError(f"recurrent kind {kind!r} has no state rule")


# Other spellings of the MoE fields (Kimi-Linear, LongCat-Flash, gpt-oss).
MOE_TOPK_FIELDS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_topk", "top_k_experts")
MOE_WIDTH_FIELDS = ("moe_intermediate_size", "expert_ffn_hidden_size")
MOE_SHARED_FIELDS = ("n_shared_experts", "num_shared_experts")


def _first_present(r: _Reader, names: tuple[str, ...], minimum: int = 1, required: bool = False):
    for key in names:
        if r.cfg.get(key) is not None:
            return r.int_(key, minimum=minimum)
    if required:
        raise ConfigError(f"MoE config is missing {names[0]}")
    return None


def _lfm2_ffn_width(r: _Reader) -> int:
    """LFM2's feed-forward width (transformers Lfm2MLP): `block_ff_dim`, with
    `block_auto_adjust_ff_dim` int(2 d / 3), times `block_ffn_dim_multiplier`, rounded up to
    `block_multiple_of`."""
    width = r.int_("block_ff_dim")
    if r.bool_("block_auto_adjust_ff_dim", False):
        width = int(2 * width / 3)
        mult = r.cfg.get("block_ffn_dim_multiplier")
        if isinstance(mult, (int, float)) and not isinstance(mult, bool) and mult > 0:
            width = int(mult * width)
        multiple = r.int_("block_multiple_of") or 256
        width = -(-width // multiple) * multiple
    return width


def _moe_layer_flags(r: _Reader, layers: int, first_dense: int) -> tuple[bool, ...]:
    """MoE layers of a DeepSeek-style config: `moe_layer_freq` an int f (layer i >= first_k_dense_replace
    with i % f == 0), or a list of one 0/1 flag a layer (MiMo-V2, MiniMax-M3)."""
    types = r.cfg.get("mlp_layer_types")  # GLM-5.2: "dense" / "sparse" a layer
    if isinstance(types, list) and len(types) == layers:
        return tuple(t in ("sparse", "moe") for t in types)
    freq = r.cfg.get("moe_layer_freq")
    if isinstance(freq, list):
        if len(freq) != layers or any(v not in (0, 1) for v in freq):
            raise ConfigError(f"moe_layer_freq must list 0 or 1 for each of {layers} layers")
        return tuple(bool(v) for v in freq)
    f = r.int_("moe_layer_freq") or 1
    return tuple(i >= first_dense and i % f == 0 for i in range(layers))


def _moe(r: _Reader, model_type: str, layers: int) -> MoESpec | None:
    """The MoE structure, by family: DeepSeek-style (`n_routed_experts`, or Kimi's `num_experts`
    with `first_k_dense_replace`; LongCat's zero experts), Jamba (`expert_layer_period`),
    Qwen-MoE (`num_experts`), and `num_local_experts` (gpt-oss, Mixtral, MiniMax, granite,
    Llama 4's `interleave_moe_layer_step`). Only the parameter count needs it."""
    cfg = r.cfg
    kwargs: dict = {}
    if cfg.get("n_routed_experts") is not None or (
            cfg.get("num_experts") is not None and cfg.get("first_k_dense_replace") is not None):
        # DeepSeek, Kimi, GLM-MoE, LongCat-Flash
        e = r.int_("n_routed_experts") if cfg.get("n_routed_experts") is not None else r.int_("num_experts")
        first_dense = r.int_("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS) or 0
        moe_layers = _moe_layer_flags(r, layers, first_dense)
        inter = _first_present(r, MOE_WIDTH_FIELDS, required=True)
        kwargs = dict(n_shared_experts=_first_present(r, MOE_SHARED_FIELDS, minimum=0) or 0,
                      zero_experts=r.int_("zero_expert_num", minimum=0) or 0)
    elif cfg.get("num_experts") is not None and cfg.get("expert_layer_period") is not None:  # Jamba
        e = r.int_("num_experts")
        period = r.int_("expert_layer_period", maximum=MAX_LAYERS)
        offset = r.int_("expert_layer_offset", minimum=0, maximum=MAX_LAYERS) or 0
        moe_layers = tuple(i % period == offset for i in range(layers))
        inter = r.int_("intermediate_size", required=True)
    elif cfg.get("num_experts") is not None and model_type not in ("gpt_oss",):  # Qwen-MoE
        e = r.int_("num_experts", minimum=0)
        if e == 0:
            return None
        step = r.int_("decoder_sparse_step") or 1
        dense_only = set(r.int_list("mlp_only_layers", layers - 1))
        moe_layers = tuple(i not in dense_only and (i + 1) % step == 0 for i in range(layers))
        inter = _first_present(r, MOE_WIDTH_FIELDS, required=True)
        shared_inter = r.int_("shared_expert_intermediate_size", minimum=0) or 0
        kwargs = dict(shared_expert_intermediate_size=shared_inter, shared_expert_gate=shared_inter > 0)
    elif cfg.get("num_local_experts") is not None:  # gpt-oss, Mixtral, MiniMax, granite, Llama 4
        e = r.int_("num_local_experts")
        step = r.int_("interleave_moe_layer_step", maximum=MAX_LAYERS) or 1
        moe_layers = tuple((i + 1) % step == 0 for i in range(layers))
        if isinstance(cfg.get("moe_layer_freq"), list):  # MiniMax-M3: one 0/1 flag a layer
            moe_layers = _moe_layer_flags(r, layers, 0)
        inter = r.int_("intermediate_size", required=True)
        bias = model_type == "gpt_oss"
        kwargs = dict(router_bias=bias, expert_bias=bias)
        if model_type in ("llama4", "llama4_text"):
            kwargs["n_shared_experts"] = 1  # one shared expert of the routed width (transformers Llama4TextMoe)
        shared_inter = r.int_("shared_intermediate_size", minimum=0) or 0
        if shared_inter:  # granite-4.0-h, MiniMax: one shared MLP beside the experts
            kwargs["shared_expert_intermediate_size"] = shared_inter
    else:
        return None
    k = _first_present(r, MOE_TOPK_FIELDS)
    if k is None:
        raise ConfigError("MoE config is missing num_experts_per_tok")
    if k > e + kwargs.get("zero_experts", 0):
        raise ConfigError(f"num_experts_per_tok ({k}) exceeds the number of routed experts ({e})")
    return MoESpec(e, k, inter, moe_layers, **kwargs)
# ---------------------------------------------------------------------------------------------
# Hand-set architectures (CLI `--attention ...`, the KV page's manual mode), built through the parser.

def synthetic_model(
    attention: str,
    *,
    layers: int,
    heads: int,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    kv_lora_rank: int | None = None,
    rope_dim: int | None = None,
    nope_dim: int | None = None,
    v_dim: int | None = None,
    hidden_size: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int | None = None,
    torch_dtype: str = "bf16",
) -> ModelSpec:
    """A hand-set architecture (CLI `--attention ...`, the KV page's manual mode).

    Defaults: head_dim 128; MLA d_c = 4 d_h, d_r = d_h / 2, d_nope = d_h, d_v = d_nope
    (DeepSeek-V2 Table 1); hidden size = heads * head_dim. Counts what it is given: attention
    projections always, the MLP only with `intermediate_size`, embeddings only with
    `vocab_size` (docs/model.md, "Synthetic models"). Built through `parse_config`, so the same
    validation applies. Raises MLAError on bad or inconsistent sizes.
    """
    if attention not in ATTENTION_KINDS:
        raise MLAError(f"unknown --attention {attention!r}; choose one of {', '.join(ATTENTION_KINDS)}")
    if attention != "mla":
        given = [n for n, x in (("kv_lora_rank", kv_lora_rank), ("rope_dim", rope_dim), ("nope_dim", nope_dim),
                                ("v_dim", v_dim)) if x is not None]
        if given:
            raise MLAError(f"{', '.join(given)} set the MLA latent: use them with --attention mla, not {attention}")
    for n, x in (("heads", heads), ("head_dim", head_dim)):
        if isinstance(x, int) and not isinstance(x, bool) and x > MAX_WIDTH:
            raise MLAError(f"{n} = {x:,} is larger than any model this tool accepts (max {MAX_WIDTH:,})")
    d_h = head_dim if head_dim is not None else 128
    cfg: dict = {
        "model_type": f"synthetic_{attention}",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "head_dim": d_h,
        "hidden_size": hidden_size if hidden_size is not None else _mul(heads, d_h),
        "torch_dtype": torch_dtype,
    }
    if attention == "mha":
        if kv_heads is not None and kv_heads != heads:
            raise MLAError(f"MHA has as many KV heads as heads ({heads}); got --kv-heads {kv_heads}")
        cfg["num_key_value_heads"] = heads
    elif attention == "mqa":
        if kv_heads is not None and kv_heads != 1:
            raise MLAError(f"MQA has one KV head; got --kv-heads {kv_heads}")
        cfg["num_key_value_heads"] = 1
    elif attention == "gqa":
        if kv_heads is None:
            raise MLAError("GQA needs --kv-heads (the number of KV groups)")
        cfg["num_key_value_heads"] = kv_heads
    else:
        nope = nope_dim if nope_dim is not None else d_h
        cfg.update(
            num_key_value_heads=heads,
            kv_lora_rank=kv_lora_rank if kv_lora_rank is not None else _mul(4, d_h),
            qk_rope_head_dim=rope_dim if rope_dim is not None else (d_h // 2 if isinstance(d_h, int) else d_h),
            qk_nope_head_dim=nope,
            v_head_dim=v_dim if v_dim is not None else nope,
        )
        cfg.pop("head_dim")
    if intermediate_size is not None:
        cfg["intermediate_size"] = intermediate_size
    if vocab_size is not None:
        cfg["vocab_size"] = vocab_size
    name = f"synthetic {attention.upper()}"
    return parse_config(cfg, name=name)


def _mul(a, b):
    # Multiply only well-typed ints; leave anything else for the parser to reject by name.
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a * b
    return None
