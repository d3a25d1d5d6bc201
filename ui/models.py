"""The model, GPU and settings the pages use, from the shared state (no arithmetic here)."""
from __future__ import annotations

import functools

import streamlit as st

from mla_core.config import parse_config
from mla_core.errors import MLAError
from mla_core.hardware import GPU, custom_gpu
from mla_core.presets import gpu_entries, load_gpu, load_model, model_entries
from mla_core.config import synthetic_model
from mla_core.spec import ModelSpec
from mla_core.views import kv_dtype_for  # noqa: F401  (the pages' import; the rule is the core's)

from . import params
from .text import escape_md


# The presets are files of the clone that never change while the server runs: plain
# functools caches, since a Streamlit cache hit (hashing the arguments, copying the result)
# costs about 0.1 ms and the sidebar asks for every preset's label on every rerun.
@functools.lru_cache(maxsize=None)
def preset(preset_id: str) -> ModelSpec:
    return load_model(preset_id)


@functools.lru_cache(maxsize=None)
def gpu_preset(gpu_id: str) -> GPU:
    return load_gpu(gpu_id)


@functools.lru_cache(maxsize=1)
def model_labels() -> dict[str, str]:
    out = {}
    for key, entry in model_entries().items():
        out[key] = f"{key} ({preset(key).kind.upper()})"
    out[params.CUSTOM] = "set by hand (KV page)"
    out[params.UPLOAD] = "uploaded config.json"
    return out


def model_label(key: str) -> str:
    """The sidebar's label of a model choice; an uploaded config shows its own name."""
    if key == params.UPLOAD:
        from .state import values

        try:
            return f"uploaded: {_from_config(values()['config']).name[:60]}"
        except MLAError:
            pass
    return model_labels().get(key, key)


def sidebar_labels(options: list[str]) -> dict[str, str]:
    """The sidebar's label of each model choice in `options` (model_label of each)."""
    labels = model_labels()
    return {k: (model_label(k) if k == params.UPLOAD else labels.get(k, k)) for k in options}


@functools.lru_cache(maxsize=1)
def gpu_labels() -> dict[str, str]:
    return {k: e["name"] for k, e in gpu_entries().items()}


@st.cache_resource(show_spinner=False)
def _from_config(encoded: str) -> ModelSpec:
    cfg = params.decode_config(encoded)
    name = cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"].strip() else None
    # Its own name, or the file name the upload gave it (pages/kv_cache.py); else its model_type.
    return parse_config(cfg, name=name[:80] if name else None)


def custom_model(v: dict) -> ModelSpec:
    kind = v["attention"]
    kw = dict(layers=v["layers"], heads=v["heads"], head_dim=v["head_dim"])
    if kind == "gqa":
        kw["kv_heads"] = v["kv_heads"]
    if kind == "mla":
        kw.update(kv_lora_rank=v["kv_lora_rank"], rope_dim=v["rope_dim"])
    return synthetic_model(kind, **kw)


def resolve_model(v: dict) -> tuple[ModelSpec, str | None]:
    """(model, error): the state's model, or the default preset with the reason it fell back."""
    choice = v["model"]
    try:
        if choice == params.CUSTOM:
            return custom_model(v), None
        if choice == params.UPLOAD:
            if not v.get("config"):
                raise MLAError("no config.json has been uploaded")
            return _from_config(v["config"]), None
        return preset(choice), None
    except MLAError as e:
        fallback = params.PARAMS["model"].default
        return preset(fallback), f"{e} - showing {fallback} instead."


def current_model() -> ModelSpec:
    """The shared model; shows an error and falls back to the default when it cannot be built."""
    from .state import values

    model, error = resolve_model(values())
    if error:
        st.error(escape_md(error, 400))
    return model


def current_gpu(v: dict | None = None) -> GPU:
    """The shared GPU preset, with the typed memory size when one is set (capacity page)."""
    from .state import values

    v = v or values()
    gpu = gpu_preset(v["gpu"])
    if v.get("gpu_memory_gib"):
        return custom_gpu(v["gpu_memory_gib"], base=gpu)
    return gpu
