"""What-if architectures and the stops of the app's sliders (stdlib only).

`what_if(model, **overrides)` is the chosen model with some attention or depth fields changed
(the KV and Roofline pages' what-if sliders): query heads, KV heads, head dim, the MLA latent
d_c and decoupled RoPE key d_r, and the layer count. Everything else (hidden size, MLP, MoE,
vocabulary, windows, indexer, dtypes) stays the model's. The result is a `ModelSpec` that every
core function takes, validated here so a page never builds one itself.

`what_if_controls(model, **overrides)` gives, for each field, the model's own value, the value
in use and the stops a slider offers (always including both), so the page holds no arithmetic.

`CONTEXT_STOPS` are the context sizes a context slider snaps to: powers of two from 1K (1,024)
to 1M (2^20 = 1,048,576) tokens, then 2M, 4M and 10M (10 x 2^20 = 10,485,760, Llama-4-Scout's
max_position_embeddings). `BATCH_STOPS` are the batch slider's: powers of two from 1 to 4,096.
Any other count is typed in the number box beside the slider.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace

from .errors import MLAError
from .kv import divisors, largest_divisor_up_to
from .spec import ModelSpec, with_attention
from .units import KV_BLOCK_FORMATS
from .validate import check_int

MAX_WHAT_IF_WIDTH = 1 << 14  # heads, head dims, ranks: beyond any published model, still exact
MAX_WHAT_IF_LAYERS = 1000

# (HF field, the app's/CLI's short name, symbol, label)
WHAT_IF_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("num_attention_heads", "heads", "n_h", "Query heads n_h"),
    ("num_key_value_heads", "kv_heads", "n_kv", "KV heads n_kv"),
    ("head_dim", "head_dim", "d_h", "Head dim d_h"),
    ("kv_lora_rank", "kv_lora_rank", "d_c", "MLA latent d_c (kv_lora_rank)"),
    ("qk_rope_head_dim", "rope_dim", "d_r", "Decoupled RoPE key d_r (qk_rope_head_dim)"),
    ("num_hidden_layers", "layers", "l", "Layers"),
)
FIELD_NAMES = tuple(f for f, *_ in WHAT_IF_FIELDS)
_MLA_ONLY = ("kv_lora_rank", "qk_rope_head_dim")

# Slider stops: sizes people use. A model's own value is always added to its field's stops.
_STOPS = {
    "num_attention_heads": (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 256),
    "head_dim": (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256),
    "kv_lora_rank": (64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048),
    "qk_rope_head_dim": (8, 16, 32, 48, 64, 96, 128),
}

CONTEXT_STOPS: tuple[int, ...] = (*(1 << k for k in range(10, 21)), 2 << 20, 4 << 20, 10 << 20)
BATCH_STOPS: tuple[int, ...] = tuple(1 << k for k in range(0, 13))  # 1, 2, 4, ... 4,096 sequences


def nearest_stop(value: int, stops: tuple[int, ...] = CONTEXT_STOPS, name: str = "context") -> int:
    """The stop nearest `value` on a log scale (a slider's position for a typed count; ties go
    to the smaller stop). Raises MLAError for a value that is not a positive whole number."""
    check_int(name, value, maximum=10**18)
    return min(stops, key=lambda s: (abs(math.log(value / s)), s))


def nearest_context_stop(context: int) -> int:
    """`nearest_stop` over CONTEXT_STOPS."""
    return nearest_stop(context, CONTEXT_STOPS)


def own_values(model: ModelSpec) -> dict[str, int | None]:
    """The model's value of each what-if field (None where it does not apply: n_kv of an MLA
    model, d_c and d_r of a model without MLA). For MLA, `head_dim` is qk_nope_head_dim (the
    DeepSeek-V2 paper's per-head d_h)."""
    a = model.attention
    return {
        "num_attention_heads": a.num_attention_heads,
        "num_key_value_heads": None if a.is_mla else a.num_key_value_heads,
        "head_dim": a.qk_nope_head_dim if a.is_mla else a.head_dim,
        "kv_lora_rank": a.kv_lora_rank,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "num_hidden_layers": model.num_hidden_layers,
    }


def _overrides(model: ModelSpec, overrides: dict) -> dict[str, int]:
    """The overrides that are set (not None, not the model's own value), checked."""
    unknown = sorted(set(overrides) - set(FIELD_NAMES))
    if unknown:
        raise MLAError(f"unknown what-if field {unknown[0]!r}; choose from {', '.join(FIELD_NAMES)}")
    own = own_values(model)
    out = {}
    for field, value in overrides.items():
        if value is None or value == own[field]:
            continue
        top = MAX_WHAT_IF_LAYERS if field == "num_hidden_layers" else MAX_WHAT_IF_WIDTH
        check_int(field, value, maximum=top)
        if field in _MLA_ONLY and not model.is_mla:
            raise MLAError(f"{field} sets the MLA latent; {model.name} has {model.kind.upper()} attention")
        if field == "num_key_value_heads" and model.is_mla:
            raise MLAError(f"{model.name} caches an MLA latent: num_key_value_heads does not apply")
        out[field] = value
    return out


def _stretch(seq: tuple, n: int) -> tuple:
    """Layer i of n takes layer floor(i * L / n) of the L given: the shares of sliding-window
    (or MoE) layers and the leading dense layers keep their proportion."""
    size = len(seq)
    return tuple(seq[i * size // n] for i in range(n))


def what_if(model: ModelSpec, **overrides: int | None) -> ModelSpec:
    """`model` with attention or depth fields changed; None or the model's own value leaves a
    field alone. Fields (HF names): num_attention_heads, num_key_value_heads, head_dim,
    kv_lora_rank, qk_rope_head_dim, num_hidden_layers.

    Rules: MHA stays MHA and MQA stays MQA when n_h changes; a GQA model keeps its KV heads, or
    the largest divisor of the new n_h below them (12 query heads take 6 of Llama's 8); KV heads
    given must divide n_h. For an MLA model, head_dim sets d_nope (and d_v when it
    equalled d_nope), n_kv does not apply. New layer counts stretch the per-layer pattern
    (windows, MoE layers) proportionally. The name says what changed
    ("DeepSeek-V3 (what-if: d_c 256)").
    Raises MLAError for an unknown field, a value out of range, an MLA field on a non-MLA model,
    or KV heads that do not divide the query heads.
    """
    changes = _overrides(model, overrides)
    if not changes:
        return model
    a = model.attention
    n_h = changes.get("num_attention_heads", a.num_attention_heads)
    att = a
    if a.is_mla:
        d_nope = changes.get("head_dim", a.qk_nope_head_dim)
        d_v = d_nope if a.v_head_dim == a.qk_nope_head_dim else a.v_head_dim
        att = replace(a, num_attention_heads=n_h, num_key_value_heads=n_h, head_dim=d_nope,
                      qk_nope_head_dim=d_nope, v_head_dim=d_v,
                      kv_lora_rank=changes.get("kv_lora_rank", a.kv_lora_rank),
                      qk_rope_head_dim=changes.get("qk_rope_head_dim", a.qk_rope_head_dim))
    else:
        if "num_key_value_heads" in changes:
            n_kv = changes["num_key_value_heads"]
        elif a.kind == "mha":
            n_kv = n_h
        elif a.kind == "mqa":
            n_kv = 1
        else:
            n_kv = largest_divisor_up_to(n_h, a.num_key_value_heads)
        if n_kv > n_h or n_h % n_kv:
            raise MLAError(f"num_key_value_heads ({n_kv}) must divide num_attention_heads ({n_h})")
        att = replace(a, num_attention_heads=n_h, num_key_value_heads=n_kv,
                      head_dim=changes.get("head_dim", a.head_dim))
    layers = changes.get("num_hidden_layers", model.num_hidden_layers)
    per_layer = {}
    if layers != model.num_hidden_layers:
        n0 = model.num_hidden_layers
        fields = {f.name for f in dataclasses.fields(model)}
        if "layers" in fields:  # one spec per layer: the decoder's stretch, draft layers follow as they are
            per_layer["layers"] = _stretch(model.layers[:n0], layers) + tuple(model.layers[n0:])
        else:
            per_layer["layer_windows"] = _stretch(model.layer_windows, layers)
        if getattr(model, "mlp_layers", None) is not None and len(model.mlp_layers) == n0:
            per_layer["mlp_layers"] = _stretch(model.mlp_layers, layers)
        if model.moe is not None and len(model.moe.moe_layers) == n0:
            per_layer["moe"] = replace(model.moe, moe_layers=_stretch(model.moe.moe_layers, layers))
    own = own_values(model)
    symbols = {f: s for f, _, s, _ in WHAT_IF_FIELDS}
    said = ", ".join(f"{symbols[f]} {v:,}" for f, v in changes.items() if v != own[f])
    return with_attention(model, att, num_hidden_layers=layers, name=f"{model.name} (what-if: {said})", **per_layer)


@dataclass(frozen=True)
class WhatIfControl:
    """One what-if slider: `field` (HF name), `key` (the app's short name), `symbol`, `label`,
    `own` (the model's value), `value` (in use), `options` (ascending stops, both included) and
    `enabled` (False where the field does not apply; `note` says why)."""

    field: str
    key: str
    symbol: str
    label: str
    own: int | None
    value: int | None
    options: tuple[int, ...]
    enabled: bool
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def what_if_controls(model: ModelSpec, **overrides: int | None) -> list[WhatIfControl]:
    """The sliders for `model` with `overrides` applied (see `what_if`): KV-head stops are the
    divisors of the query heads in use, layer stops run from 1 to max(128, 2 l). Overrides that
    do not apply (or that `what_if` refuses) are dropped to the model's value, so the controls
    can always be drawn. Raises MLAError only for an unknown field."""
    unknown = sorted(set(overrides) - set(FIELD_NAMES))
    if unknown:
        raise MLAError(f"unknown what-if field {unknown[0]!r}")
    own = own_values(model)
    value = dict(own)
    for field, v in overrides.items():
        try:
            _overrides(model, {field: v})
        except MLAError:
            continue
        if v is not None:
            value[field] = v
    out = []
    for field, key, symbol, label in WHAT_IF_FIELDS:
        enabled, note = own[field] is not None, ""
        if field == "num_key_value_heads":
            if not enabled:
                note = "an MLA latent has no KV heads"
                options: tuple[int, ...] = ()
            else:
                options = tuple(divisors(value["num_attention_heads"]))
                if value[field] not in options:
                    value[field] = max(d for d in options if d <= value[field])
        elif field in _MLA_ONLY and not enabled:
            note = "MLA models only"
            options = ()
        elif field == "num_hidden_layers":
            options = tuple(range(1, max(128, 2 * own[field], value[field]) + 1))
        else:
            options = tuple(sorted({*_STOPS[field], own[field], value[field]}))
        out.append(WhatIfControl(field, key, symbol, label, own[field], value[field] if enabled else None,
                                 options, enabled, note))
    return out


def bytes_per_value(kv_dtype: str) -> float:
    """Bytes per cached value of a plain or block KV dtype (q8_0: 34/32)."""
    n, b = KV_BLOCK_FORMATS[kv_dtype]
    return b / n


def what_if_kv_dtypes(model: ModelSpec) -> tuple[str, ...]:
    """The KV dtypes a dtype slider offers for `model`, widest first (fp32 ... fp4);
    fp8_ds_mla (FlashMLA's FP8 latent) only for an MLA model, between fp16 and the 1-byte
    formats: fp8 values plus fp32 scales plus a bf16 RoPE key (656 B per token per layer for
    576 values at d_c 512, d_r 64) is always between 1 and 2 bytes per value."""
    widths = {d: bytes_per_value(d) for d in KV_BLOCK_FORMATS}
    if model.is_mla:
        widths["fp8_ds_mla"] = 1.5
    return tuple(sorted(widths, key=lambda d: -widths[d]))


def kv_dtype_in_use(model: ModelSpec, shared: str, override: str = "") -> str:
    """The stored KV dtype a what-if costs: `override` when set and applicable, else the shared
    choice resolved (`auto` is the model's torch_dtype; fp8_ds_mla on a model without MLA is
    fp8, as `views.kv_dtype_for`). Raises MLAError for an unknown dtype."""
    from .kv import resolve_kv_dtype

    choice = override or shared
    if choice == "fp8_ds_mla" and not model.is_mla:
        choice = "fp8"
    return resolve_kv_dtype(model, choice)


@dataclass(frozen=True)
class WhatIfPanel:
    """What the what-if panel draws and hands on: `controls` (one per field), `kv_dtypes` and
    `kv_dtype` (the dtype slider's stops and value; `own_kv_dtype` without the override), `model` (the what-if model, or the chosen
    model when the overrides are refused: `error` says why), `changed` (HF field names whose
    value differs from the model's, plus 'kv_dtype' when the dtype is overridden)."""

    controls: tuple[WhatIfControl, ...]
    kv_dtypes: tuple[str, ...]
    kv_dtype: str
    model: ModelSpec
    changed: tuple[str, ...]
    own_kv_dtype: str = ""
    error: str | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["model"] = self.model.name
        return d


def what_if_panel(model: ModelSpec, kv_dtype: str = "auto", kv_dtype_override: str = "",
                  **overrides: int | None) -> WhatIfPanel:
    """Everything the KV and Roofline pages' what-if panel needs from one call: the sliders of
    `what_if_controls`, the dtype stops of `what_if_kv_dtypes`, and `what_if(model, **overrides)`.
    An override that `what_if` refuses leaves the chosen model, with the reason in `error`.
    A dtype override that does not apply to the model (fp8_ds_mla without MLA) is dropped."""
    controls = tuple(what_if_controls(model, **overrides))
    dtypes = what_if_kv_dtypes(model)
    override = kv_dtype_override if kv_dtype_override in dtypes else ""
    error = None
    try:
        new = what_if(model, **overrides)
    except MLAError as e:
        new, error = model, str(e)
    changed = tuple(f for f in FIELD_NAMES if new is not model and own_values(new)[f] != own_values(model)[f])
    if override:
        changed += ("kv_dtype",)
    return WhatIfPanel(controls, dtypes, kv_dtype_in_use(new, kv_dtype, override), new, changed,
                       kv_dtype_in_use(new, kv_dtype), error)


def hand_set_values(model: ModelSpec) -> dict[str, int | str]:
    """The KV page's "set by hand" fields for `model` (attention kind, layers, heads, head dim,
    KV heads, d_c, d_r), each within the form's bounds (layers <= 1000, widths <= 1024, d_c <=
    16384): the form starts from the current model. For MLA, head_dim is d_nope (the paper's d_h)."""
    own = own_values(model)
    out: dict[str, int | str] = {
        "attention": model.kind,
        "layers": min(own["num_hidden_layers"], 1000),
        "heads": min(own["num_attention_heads"], 1024),
        "head_dim": min(own["head_dim"], 1024),
    }
    if model.kind == "gqa":
        out["kv_heads"] = own["num_key_value_heads"]
    if model.is_mla:
        out.update(kv_lora_rank=min(own["kv_lora_rank"], 16384), rope_dim=min(own["qk_rope_head_dim"], 1024))
    return out
