"""Read a Hugging Face `config.json` into a `ModelSpec`, with validation.

`load_config(path)` takes a file or a folder holding `config.json`; `parse_config(dict)` takes
the parsed object. Presets (data/models.json) go through `parse_config` too.

Rules (MODEL.md):
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

from .errors import ConfigError
from .spec import AttentionSpec, IndexerSpec, ModelSpec, MoESpec
from .units import TORCH_DTYPE_NAMES

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

# HF config classes whose `tie_word_embeddings` defaults to True when the field is absent.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "gpt2", "gpt3", "minicpm3"}
_UNGATED_MLP = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt"}
_LAYERNORM = {"falcon", "gpt2", "gpt3", "gpt_neox", "opt"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text"}
_QKV_BIAS_ALWAYS = {"qwen2", "qwen2_moe"}  # Qwen2 always has q/k/v biases, no o bias
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
    name = os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "config.json" else None
    return parse_config(loads_config(data, source=os.path.basename(p)),
                        name=name or os.path.splitext(os.path.basename(p))[0])


def loads_config(data: bytes | str, source: str = "config.json") -> dict:
    """Parse the bytes or text of a config.json into a dict, refusing what is not a JSON object.

    Refuses: over 1 MiB, non-UTF-8 bytes, invalid JSON, NaN/Infinity literals, numbers too large
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

    windows = _layer_windows(r, model_type, layers)
    moe = _moe(r, model_type, layers)

    intermediate = r.int_("intermediate_size")
    if intermediate is None and model_type in ("falcon", "gpt2", "gpt3"):
        intermediate = 4 * hidden
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
    if qc is not None:
        if not isinstance(qc, dict):
            raise ConfigError(f"quantization_config must be an object, not {_json_type(qc)}")
        qm = qc.get("quant_method")
        quant_method = qm if isinstance(qm, str) else None

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
        layer_windows=windows,
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
        num_nextn_predict_layers=r.int_("num_nextn_predict_layers", minimum=0, maximum=MAX_LAYERS) or 0,
        max_position_embeddings=mpe if type(mpe := cfg.get("max_position_embeddings")) is int and mpe > 0 else None,
        notes=tuple(notes),
    )


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


def _moe(r: _Reader, model_type: str, layers: int) -> MoESpec | None:
    cfg = r.cfg
    if cfg.get("n_routed_experts") is not None:  # DeepSeek, Kimi, GLM-MoE
        e = r.int_("n_routed_experts")
        first_dense = r.int_("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS) or 0
        freq = r.int_("moe_layer_freq") or 1
        moe_layers = tuple(i >= first_dense and i % freq == 0 for i in range(layers))
        inter = r.int_("moe_intermediate_size", required=True)
        shared = r.int_("n_shared_experts", minimum=0) or 0
        kwargs = dict(n_shared_experts=shared)
    elif cfg.get("num_experts") is not None and model_type not in ("gpt_oss",):  # Qwen-MoE
        e = r.int_("num_experts", minimum=0)
        if e == 0:
            return None
        step = r.int_("decoder_sparse_step") or 1
        dense_only = set(r.int_list("mlp_only_layers", layers - 1))
        moe_layers = tuple(i not in dense_only and (i + 1) % step == 0 for i in range(layers))
        inter = r.int_("moe_intermediate_size", required=True)
        shared_inter = r.int_("shared_expert_intermediate_size", minimum=0) or 0
        kwargs = dict(shared_expert_intermediate_size=shared_inter, shared_expert_gate=shared_inter > 0)
    elif cfg.get("num_local_experts") is not None:  # gpt-oss, Mixtral
        e = r.int_("num_local_experts")
        moe_layers = (True,) * layers
        inter = r.int_("intermediate_size", required=True)
        bias = model_type == "gpt_oss"
        kwargs = dict(router_bias=bias, expert_bias=bias)
    else:
        return None
    k = r.int_("num_experts_per_tok")
    if k is None:
        k = r.int_("experts_per_token", required=False)
    if k is None:
        raise ConfigError("MoE config is missing num_experts_per_tok")
    if k > e:
        raise ConfigError(f"num_experts_per_tok ({k}) exceeds the number of routed experts ({e})")
    return MoESpec(e, k, inter, moe_layers, **kwargs)
