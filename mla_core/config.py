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

from .errors import ConfigError, MLAError
from .spec import (ATTENTION_KINDS, AttentionSpec, IndexerSpec, LayerSpec, ModelSpec, MoESpec,
                   RecurrentSpec)
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
)

# HF config classes whose `tie_word_embeddings` defaults to True when the field is absent.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "gpt2", "gpt3", "minicpm3"}
_UNGATED_MLP = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt", "nemotron_h"}  # Nemotron-H: squared-ReLU up/down
_LAYERNORM = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text"}
_QKV_BIAS_ALWAYS = {"qwen2", "qwen2_moe"}  # Qwen2 always has q/k/v biases, no o bias
# Parts of an architecture the parameter count does not model (the cache answer is exact).
_PARAMS_NOT_MODELLED = {
    "gemma3n": "Gemma-3n's per-layer embeddings, AltUp and LAuReL blocks",
    "gemma3n_text": "Gemma-3n's per-layer embeddings, AltUp and LAuReL blocks",
}
# Dense MLPs a layer has beside its MoE block (LongCat-Flash's shortcut-connected MoE: two).
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

    # MLA fields: all or nothing.
    mla_fields = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
    present = [f for f in mla_fields if cfg.get(f) is not None]
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

    layer_specs, recurrent = _layer_plan(r, model_type, layers, attention, hidden, notes)
    params_complete = True
    try:
        moe = _moe(r, model_type, layers)
    except ConfigError as e:
        # Only the parameter count needs the MoE fields: the cache answer goes on without them.
        moe, params_complete = None, False
        notes.append(f"parameters: the MoE experts are not counted ({e})")

    try:
        intermediate = r.int_("intermediate_size")
        if model_type in ("llama4", "llama4_text") and cfg.get("intermediate_size_mlp") is not None:
            intermediate = r.int_("intermediate_size_mlp")  # Llama 4's dense layers; experts use intermediate_size
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
        if quant_method is not None and quant_method not in KNOWN_QUANT_METHODS:
            notes.append(f"quantization_config.quant_method {_short(quant_method)} is not modelled: weights "
                         f"counted at {torch_dtype} (set the weights dtype to change it)")

    indexer = None
    if cfg.get("index_head_dim") is not None:
        indexer = IndexerSpec(
            r.int_("index_head_dim"),
            r.int_("index_n_heads", required=True),
            r.int_("index_topk", maximum=MAX_WINDOW),
        )

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

    return ModelSpec(
        name=name,
        model_type=model_type,
        num_hidden_layers=layers,
        hidden_size=hidden,
        attention=attention,
        layers=layer_specs,
        recurrent=recurrent,
        intermediate_size=intermediate,
        vocab_size=vocab,
        tie_word_embeddings=tie,
        torch_dtype=torch_dtype,
        quant_method=quant_method,
        moe=moe,
        indexer=indexer,
        attention_bias=attention_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        mlp_gated=model_type not in _UNGATED_MLP,
        norm_with_bias=model_type in _LAYERNORM,
        norms_per_layer=norms_per_layer,
        qk_norm=qk_norm,
        attn_sinks=model_type == "gpt_oss",
        learned_pos_embeddings=(r.int_("max_position_embeddings", maximum=MAX_WINDOW) or 0) if model_type == "gpt3" else 0,
        num_nextn_predict_layers=_mtp_layers(r),
        max_position_embeddings=mpe if type(mpe := cfg.get("max_position_embeddings")) is int and mpe > 0 else None,
        quant_modules_not_converted=modules_not_converted,
        extra_dense_mlps=_EXTRA_DENSE_MLPS.get(model_type, 0),
        mlp_layers=_mlp_layers(cfg, layers),
        params_complete=params_complete,
        notes=tuple(notes),
    )


# `layer_types` values (docs/model.md, "Every layer its own cache"): attention kinds, and the two
# spellings of a recurrent layer whose kind depends on the model family.
_LAYER_TYPE_KINDS = {
    "full_attention": "full",
    "attention": "full",
    "global_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}
# What `linear_attention` means per model_type (and `mamba` always Mamba-2).
_LINEAR_ATTENTION_KIND = {"qwen3_next": "gdn", "kimi_linear": "kda", "minimax": "lightning",
                          "minimax_m1": "lightning", "minimax_text_01": "lightning"}
_HYBRID_PATTERN = {"*": ("full", False), "M": ("none", True), "-": ("none", False), "E": ("none", False)}


def _layer_plan(r: _Reader, model_type: str, n: int, attention: AttentionSpec, hidden: int,
                notes: list[str]) -> tuple[tuple[LayerSpec, ...], RecurrentSpec | None]:
    """What each of the `n` layers caches, by the first rule of docs/model.md's list that applies,
    then `num_kv_shared_layers`. Returns (layers, the recurrent state shape or None)."""
    cfg = r.cfg
    window = r.int_("sliding_window", maximum=MAX_WINDOW)
    chunk = r.int_("attention_chunk_size", maximum=MAX_WINDOW)
    rec_kind: str | None = None
    plan: list[tuple[str, bool]] | None = None  # (attention kind, holds recurrent state)
    kv_caches = 1

    def unknown(what: str, value) -> tuple[str, bool]:
        notes.append(f"{what} {_short(value)} is not a layer kind this tool knows: counted as full attention")
        return ("full", False)

    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ConfigError("layer_types must be a list of strings")
        if len(layer_types) != n:
            raise ConfigError(f"layer_types has {len(layer_types)} entries for {n} layers")
        plan, seen_unknown = [], set()
        for t in layer_types:
            if t in _LAYER_TYPE_KINDS:
                plan.append((_LAYER_TYPE_KINDS[t], False))
            elif t == "mamba":
                rec_kind = "mamba2"
                plan.append(("none", True))
            elif t == "linear_attention" and model_type in _LINEAR_ATTENTION_KIND:
                rec_kind = _LINEAR_ATTENTION_KIND[model_type]
                plan.append(("none", True))
            else:
                if t not in seen_unknown:
                    seen_unknown.add(t)
                    unknown("layer_types value", t)
                plan.append(("full", False))
    elif cfg.get("hybrid_override_pattern") is not None:
        pattern = cfg["hybrid_override_pattern"]
        if not isinstance(pattern, str) or len(pattern) != n:
            raise ConfigError(f"hybrid_override_pattern must be a string of one character per layer ({n})")
        plan = []
        for ch in pattern:
            if ch not in _HYBRID_PATTERN:
                plan.append(unknown("hybrid_override_pattern character", ch))
            else:
                plan.append(_HYBRID_PATTERN[ch])
        rec_kind = "mamba2" if "M" in pattern else None
    elif cfg.get("full_attention_interval") is not None:
        k = r.int_("full_attention_interval", maximum=MAX_LAYERS)
        plan = [("full", False) if (i + 1) % k == 0 else ("none", True) for i in range(n)]
        rec_kind = "gdn"
    elif cfg.get("linear_attn_config") is not None:
        lac = cfg["linear_attn_config"]
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
        plan = []
        for i in range(1, n + 1):
            if i in full:
                plan.append(("full", False))
            elif i in kda:
                plan.append(("none", True))
            else:
                plan.append(unknown("layer", f"{i} (in neither full_attn_layers nor kda_layers)"))
        rec_kind = "kda"
    elif cfg.get("attn_type_list") is not None:
        types = cfg["attn_type_list"]
        if not isinstance(types, list) or len(types) != n or any(t not in (0, 1) or isinstance(t, bool) for t in types):
            raise ConfigError(f"attn_type_list must list 0 (lightning) or 1 (softmax) for each of {n} layers")
        plan = [("full", False) if t == 1 else ("none", True) for t in types]
        rec_kind = "lightning"
    elif cfg.get("attn_layer_period") is not None:
        p = r.int_("attn_layer_period", maximum=MAX_LAYERS)
        o = r.int_("attn_layer_offset", minimum=0, maximum=MAX_LAYERS) or 0
        if o >= p:
            raise ConfigError(f"attn_layer_offset ({o}) must be below attn_layer_period ({p}): no layer would be attention")
        plan = [("full", False) if i % p == o else ("none", True) for i in range(n)]
        rec_kind = "mamba1"
    elif model_type == "falcon_h1":
        plan = [("full", True)] * n  # attention and Mamba-2 heads side by side in every layer
        rec_kind = "mamba2"
    elif model_type == "longcat_flash":
        plan = [("full", False)] * n
        kv_caches = 2  # two attention (MLA) blocks a layer, each with its own cache
    elif chunk is not None:
        no_rope = cfg.get("no_rope_layers") or None  # [] on the hub means "derive it" (transformers)
        if no_rope is not None:
            if not isinstance(no_rope, list) or len(no_rope) != n or any(v not in (0, 1) or isinstance(v, bool)
                                                                        for v in no_rope):
                raise ConfigError(f"no_rope_layers must list 0 or 1 for each of {n} layers")
            plan = [("chunked", False) if v == 1 else ("full", False) for v in no_rope]
        else:
            interval = r.int_("no_rope_layer_interval", maximum=MAX_LAYERS) or 4
            plan = [("full", False) if (i + 1) % interval == 0 else ("chunked", False) for i in range(n)]

    if plan is None:
        windows = _layer_windows(r, model_type, n)
        layers = [LayerSpec("sliding", w) if w is not None else LayerSpec() for w in windows]
    else:
        if any(kind == "sliding" for kind, _ in plan) and window is None:
            raise ConfigError("layer_types names sliding_attention layers but sliding_window is not set")
        if any(kind == "chunked" for kind, _ in plan) and chunk is None:
            raise ConfigError("layer_types names chunked_attention layers but attention_chunk_size is not set")
        layers = []
        for kind, rec in plan:
            w = window if kind == "sliding" else chunk if kind == "chunked" else None
            caches = kv_caches if kind in ("full", "sliding", "chunked") else 0
            layers.append(LayerSpec(kind, w, caches, rec))

    shared = r.int_("num_kv_shared_layers", minimum=0, maximum=MAX_LAYERS) or 0
    own = sum(1 for layer in layers[:n - shared] if layer.kv_caches)
    if shared and own == 0:
        raise ConfigError(f"num_kv_shared_layers ({shared}) leaves no earlier layer with a cache of its own to share "
                          f"(of {n} layers)")
    for i in range(n - shared, n):  # it still attends, over an earlier layer's cache, with its own kind's window
        w = layers[i].window if layers[i].attention in ("sliding", "chunked") else None
        layers[i] = LayerSpec("shared", w, 0, layers[i].recurrent)
    if not any(layer.kv_caches or layer.recurrent for layer in layers):
        raise ConfigError("no layer of this config holds a cache or a recurrent state (every layer is an MLP or "
                          "MoE block)")

    recurrent = _recurrent(r, rec_kind, attention, hidden) if rec_kind else None
    return tuple(layers), recurrent


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


def _mlp_layers(cfg: dict, n: int) -> tuple[bool, ...] | None:
    """Layers with an MLP or MoE block: Nemotron-H's `-` and `E` (its `*` and `M` blocks are
    attention or Mamba alone); None (every layer) elsewhere."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n:
        return tuple(ch in "-E" for ch in pattern)
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


def _recurrent(r: _Reader, kind: str, attention: AttentionSpec, hidden: int) -> RecurrentSpec:
    """The recurrent state shape of `kind` from its family's fields (docs/model.md), in the common
    (H, P, G, N, K) form of `spec.RecurrentSpec`."""
    if kind == "mamba1":  # Jamba
        expand = _first_int(r, ("mamba_expand",), "expansion factor")
        n_state = _first_int(r, ("mamba_d_state",), "state size")
        k = _first_int(r, ("mamba_d_conv",), "conv kernel")
        dt_rank = r.int_("mamba_dt_rank") or -(-hidden // 16)  # "auto": ceil(hidden / 16)
        return RecurrentSpec("mamba1", expand * hidden, 1, 0, n_state, k, dt_rank)
    if kind == "mamba2":  # Nemotron-H spellings first, then granite-4.0-h / Falcon-H1's
        h = _first_int(r, ("mamba_num_heads", "mamba_n_heads"), "heads")
        p = _first_int(r, ("mamba_head_dim", "mamba_d_head"), "head dim")
        g = _first_int(r, ("n_groups", "mamba_n_groups"), "groups")
        n_state = _first_int(r, ("ssm_state_size", "mamba_d_state"), "state size")
        k = _first_int(r, ("conv_kernel", "mamba_d_conv"), "conv kernel")
        if h % g:
            raise ConfigError(f"the {h} Mamba-2 heads do not divide into {g} groups")
        return RecurrentSpec("mamba2", h, p, g, n_state, k)
    if kind == "gdn":  # Qwen3-Next
        h_k = _first_int(r, ("linear_num_key_heads",), "key heads")
        h_v = _first_int(r, ("linear_num_value_heads",), "value heads")
        d_k = _first_int(r, ("linear_key_head_dim",), "key head dim")
        d_v = _first_int(r, ("linear_value_head_dim",), "value head dim")
        k = _first_int(r, ("linear_conv_kernel_dim",), "conv kernel")
        if h_v % h_k:
            raise ConfigError(f"linear_num_value_heads ({h_v}) is not a multiple of linear_num_key_heads ({h_k})")
        return RecurrentSpec("gdn", h_v, d_v, h_k, d_k, k)
    if kind == "kda":  # Kimi-Linear
        lac = _Reader(r.cfg["linear_attn_config"], "linear_attn_config")
        h = _first_int(lac, ("num_heads",), "heads")
        d = _first_int(lac, ("head_dim",), "head dim")
        k = _first_int(lac, ("short_conv_kernel_size",), "conv kernel")
        return RecurrentSpec("kda", h, d, h, d, k)
    if kind == "lightning":  # MiniMax: n_h x d_h x d_h, no conv
        d = attention.head_dim
        return RecurrentSpec("lightning", attention.num_attention_heads, d, 0, d, 1)
    raise ConfigError(f"recurrent kind {kind!r} has no state rule")


def _layer_windows(r: _Reader, model_type: str, layers: int) -> tuple[int | None, ...]:
    window = r.int_("sliding_window", maximum=MAX_WINDOW)
    layer_types = r.cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ConfigError("layer_types must be a list of strings")
        if len(layer_types) != layers:
            raise ConfigError(f"layer_types has {len(layer_types)} entries for {layers} layers")
        sliding = [t == "sliding_attention" for t in layer_types]
        if any(sliding) and window is None:
            raise ConfigError("layer_types names sliding_attention layers but sliding_window is not set")
        return tuple(window if s else None for s in sliding)
    if window is None:
        return (None,) * layers
    pattern = r.int_("sliding_window_pattern", maximum=MAX_LAYERS)
    if pattern is not None:
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(layers))
    if model_type == "gemma2":
        return tuple(window if i % 2 == 0 else None for i in range(layers))
    use = r.bool_("use_sliding_window", None)
    if use is False:
        return (None,) * layers
    max_window_layers = r.int_("max_window_layers", minimum=0, maximum=MAX_LAYERS)
    if use is True and max_window_layers is not None:
        return tuple(window if i >= max_window_layers else None for i in range(layers))
    return (window,) * layers


# Other spellings of the MoE fields (Kimi-Linear, LongCat-Flash, gpt-oss).
MOE_TOPK_FIELDS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_topk")
MOE_WIDTH_FIELDS = ("moe_intermediate_size", "expert_ffn_hidden_size")
MOE_SHARED_FIELDS = ("n_shared_experts", "num_shared_experts")


def _first_present(r: _Reader, names: tuple[str, ...], minimum: int = 1, required: bool = False):
    for key in names:
        if r.cfg.get(key) is not None:
            return r.int_(key, minimum=minimum)
    if required:
        raise ConfigError(f"MoE config is missing {names[0]}")
    return None


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
        freq = r.int_("moe_layer_freq") or 1
        moe_layers = tuple(i >= first_dense and i % freq == 0 for i in range(layers))
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
