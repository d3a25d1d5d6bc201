"""Model and GPU presets from `data/` (read once per process).

`data/models.json`: each entry's `config` holds Hugging Face config.json fields and is parsed
by `mla_core.config.parse_config`, exactly like an uploaded file; `published` holds the
authors' figures (total and active parameters); `source` says where each came from.
`data/gpus.json`: the GPU table of docs/model.md with a source and confidence per row.
Set MLA_EXPLORER_DATA to read presets from another folder; an installed copy reads the same
files from `mla_core/data`.
"""
from __future__ import annotations

import json
import os

from .errors import MLAError

# The model classes (and with them `dataclasses`) load with the first model, not with this module:
# `presets` lists ids without building a ModelSpec (the command line answers faster).


def _data_dir() -> str:
    """MLA_EXPLORER_DATA if set; else `mla_core/data` of an installed copy (pyproject.toml ships
    data/ there); else `data/` of the checkout beside this package."""
    env = os.environ.get("MLA_EXPLORER_DATA")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, "data")
    if os.path.exists(os.path.join(installed, "models.json")):
        return installed
    return os.path.join(os.path.dirname(here), "data")


DATA_DIR = _data_dir()

_cache: dict[str, dict] = {}


def _load(name: str) -> dict:
    if name not in _cache:
        path = os.path.join(DATA_DIR, name)
        try:
            with open(path, encoding="utf-8") as f:
                _cache[name] = json.load(f)
        except OSError as e:
            raise MLAError(f"cannot read presets {path}: {e.strerror or e}") from None
    return _cache[name]


def model_entries() -> dict[str, dict]:
    """{preset id: entry} in file order; an entry has id, hf_repo, source, published, config."""
    return {m["id"]: m for m in _load("models.json")["models"]}


def model_ids() -> list[str]:
    return list(model_entries())


def load_model(preset_id: str) -> "ModelSpec":  # noqa: F821 - mla_core.spec.ModelSpec
    """The ModelSpec of a preset id (e.g. 'deepseek-v3'). Raises MLAError for an unknown id."""
    from .config import parse_config

    entries = model_entries()
    key = preset_id.lower() if isinstance(preset_id, str) else preset_id
    if key not in entries:
        raise MLAError(f"unknown model preset {_short(preset_id)}{_suggest(key, entries)}; "
                       "`python -m mla_core presets` lists them")
    return parse_config(entries[key]["config"], name=key)


def gpu_entries() -> dict[str, dict]:
    return {g["id"]: g for g in _load("gpus.json")["gpus"]}


def gpu_ids() -> list[str]:
    return list(gpu_entries())


def load_gpu(gpu_id: str):
    """The `hardware.GPU` preset `gpu_id` (e.g. 'h200'). Raises MLAError for an unknown id."""
    from .hardware import GPU

    entries = gpu_entries()
    key = gpu_id.lower() if isinstance(gpu_id, str) else gpu_id
    if key not in entries:
        raise MLAError(f"unknown GPU {_short(gpu_id)}{_suggest(key, entries)}; known: {', '.join(entries)}")
    g = entries[key]
    return GPU(
        id=g["id"], name=g["name"], memory_GB=g["memory_GB"], bandwidth_TBps=g["bandwidth_TBps"],
        bf16_TFLOPS=g["bf16_TFLOPS"], fp8_TFLOPS=g["fp8_TFLOPS"], fp4_TFLOPS=g.get("fp4_TFLOPS"),
        vendor=g.get("vendor", ""),
        source=g.get("source", ""), confidence=g.get("confidence", ""), notes=g.get("notes", ""),
        link_GBps=g.get("link_GBps"), link_kind=g.get("link_kind", ""), link_domain_gpus=g.get("link_domain_gpus"),
        link_source=g.get("link_source", ""),
    )


def _suggest(key, known) -> str:
    """'; did you mean X?' for a near miss (a prefix, or a close spelling), else ''."""
    if not isinstance(key, str) or len(key) > 100:
        return ""
    hits = [k for k in known if k.startswith(key) or key.startswith(k)]
    if not hits:
        import difflib

        hits = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(hits[:3])}?" if hits else ""


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
