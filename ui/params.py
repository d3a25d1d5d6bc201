"""The app's state, as URL query parameters: names, defaults and parsers (no streamlit here).

Names follow the command line's flags with underscores (`model`, `context`, `batch`,
`kv_dtype`, `gpu`, `tp`, ...). `parse_query(query)` turns a query mapping into values and a list of
warnings: a bad or unknown value falls back to its default with a message, never an exception.
Only `MLAError` is raised inside the parsers, and `parse_query` catches it.
"""
from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from mla_core.config import FIELD_ALIASES, FIELDS_READ
from mla_core.config import MAX_CONFIG_BYTES, TEXT_CONFIG_INHERITED, parse_config
from mla_core.errors import MLAError
from mla_core.presets import gpu_ids, model_ids
from mla_core.units import KV_DTYPES, WEIGHT_DTYPES
from mla_core.whatif import MAX_WHAT_IF_LAYERS, MAX_WHAT_IF_WIDTH, WHAT_IF_FIELDS

MAX_PARAM_CHARS = 8192  # a query value longer than this is refused outright
MAX_CONFIG_BYTES_UI = MAX_CONFIG_BYTES  # pasted config text (1 MiB, the core's limit)
# The paste box takes up to 4x that, so that an oversized paste reaches the server and is told
# its size (the browser would otherwise cut it at the limit without a word).
MAX_PASTE_CHARS = 4 * MAX_CONFIG_BYTES
MAX_UI_CONTEXT = 10**15  # exact in a browser (below 2**53)
MAX_UI_BATCH = 10**6  # the sidebar's batch input goes this far
CUSTOM = "custom"  # model set by hand on the KV page
UPLOAD = "upload"  # model from an uploaded or pasted config.json (kept in the `config` parameter)
CONFIG_FIELDS = (*FIELDS_READ, *(alias for names in FIELD_ALIASES.values() for alias in names))


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def int_parser(name: str, lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        t = text.strip().replace(",", "").replace("_", "")
        if not t or len(t) > 40 or not t.isascii() or not t.lstrip("+-").isdigit():
            raise MLAError(f"{name} must be a whole number, got {_short(text)}")
        v = int(t)
        if not lo <= v <= hi:
            raise MLAError(f"{name} must be between {lo:,} and {hi:,}, got {_short(text)}")
        return v

    return parse


def float_parser(name: str, lo: float, hi: float, exclusive_lo: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise MLAError(f"{name} must be a number, got {_short(text)}") from None
        if v != v or v in (float("inf"), float("-inf")) or v > hi or (v <= lo if exclusive_lo else v < lo):
            raise MLAError(f"{name} must be in {'(' if exclusive_lo else '['}{lo:g}, {hi:g}], got {_short(text)}")
        return v

    return parse


def choice_parser(name: str, options: Callable[[], list[str]] | tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        opts = options() if callable(options) else options
        t = text.strip().lower()
        if t not in opts:
            raise MLAError(f"unknown {name} {_short(text)}")
        return t

    return parse


def bool_parser(name: str) -> Callable[[str], bool]:
    def parse(text: str) -> bool:
        t = text.strip().lower()
        if t in ("1", "true", "yes", "on"):
            return True
        if t in ("0", "false", "no", "off", ""):
            return False
        raise MLAError(f"{name} must be 1 or 0, got {_short(text)}")

    return parse


def list_parser(name: str, options: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    """A comma-separated list of known values (an empty text is the empty list)."""
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        known = options()
        bad = [t for t in items if t not in known]
        if bad:
            raise MLAError(f"unknown {name} {_short(bad[0])}")
        return list(dict.fromkeys(items))

    return parse


def _claims_field(field: str) -> Callable[[], list[str]]:
    def options() -> list[str]:
        from mla_core.claims import load_claims

        values = [c["source"]["seed"] if field == "source" else c[field] for c in load_claims()]
        return sorted(set(values))

    return options


# The serving plan's choices, read from the core when a link is parsed (importing the serving
# package here would load numpy on every page's start).
def _engines() -> tuple[str, ...]:
    from mla_core.serving.engines import ENGINES

    return ENGINES


def _table_sources() -> tuple[str, ...]:
    from mla_core.serving.tables import TABLE_SOURCES

    return TABLE_SOURCES


def _traffic(name: str):
    import mla_core.views as views

    return getattr(views, name)


def _pp(text: str) -> int:
    from mla_core.serving.inputs import MAX_PP

    return int_parser("pp", 0, MAX_PP)(text)


def _num_prompts(text: str) -> int:
    return int_parser("num_prompts", 1, _traffic("TRAFFIC_MAX_PROMPTS"))(text)


def _rate(text: str) -> float:
    TRAFFIC_RATES = _traffic("TRAFFIC_RATES")
    v = float_parser("rate", 0, 1e6, exclusive_lo=True)(text)
    if v not in TRAFFIC_RATES:
        raise MLAError(f"rate must be one of the slider's values (1-2-5 steps from {TRAFFIC_RATES[0]:g} to "
                       f"{TRAFFIC_RATES[-1]:g} requests/s), got {_short(text)}")
    return v


def model_options() -> list[str]:
    return [*model_ids(), CUSTOM, UPLOAD]


def slim_config(cfg: dict) -> dict:
    """The fields of a config.json that the core reads, with `text_config` merged the way
    `parse_config` merges it (its fields win; the top level fills what it lacks)."""
    src = cfg
    if isinstance(cfg.get("text_config"), dict):
        src = {**{k: cfg[k] for k in TEXT_CONFIG_INHERITED if k in cfg}, **cfg["text_config"]}
    slim = {k: src[k] for k in CONFIG_FIELDS if k in src}
    qc = src.get("quantization_config")
    if isinstance(qc, dict) and isinstance(qc.get("quant_method"), str):
        slim["quantization_config"] = {k: qc[k] for k in ("quant_method", "modules_to_not_convert", "config_groups",
                                                          "ignore") if k in qc}
    return slim


def encode_config(cfg: dict) -> str:
    """A config's architecture fields as a URL-safe string (compressed JSON, base64)."""
    raw = json.dumps(slim_config(cfg), separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode_config(text: str) -> dict:
    """Inverse of `encode_config`, refusing anything that is not a small, valid config."""
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
        obj = zlib.decompressobj()
        data = obj.decompress(raw, MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES or obj.unconsumed_tail:
            raise MLAError("config in the link is too large")
        cfg = json.loads(data.decode("utf-8"))
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        raise MLAError("the link's config is not a valid encoded config.json") from None
    parse_config(cfg)  # validates; raises ConfigError (an MLAError)
    return cfg


@dataclass(frozen=True)
class Param:
    """One piece of state: its query/session key, default, parser and writer."""

    key: str
    default: Any
    parse: Callable[[str], Any]
    help: str = ""
    url: bool = True  # False: kept across pages in the session, never read from or written to a link

    def to_text(self, value) -> str:
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value)
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return repr(value)
        return str(value)


_P = [
    # shared (sidebar)
    Param("model", "deepseek-v3", choice_parser("model", model_options), "preset id, custom or upload"),
    Param("kv_dtype", "auto", choice_parser("kv_dtype", KV_DTYPES)),
    Param("context", 131072, int_parser("context", 1, MAX_UI_CONTEXT)),
    Param("batch", 1, int_parser("batch", 1, MAX_UI_BATCH)),
    Param("gpu", "h200", choice_parser("gpu", gpu_ids)),
    Param("present", False, bool_parser("present")),
    # model set by hand (model=custom)
    Param("attention", "mla", choice_parser("attention", ("mha", "gqa", "mqa", "mla"))),
    Param("layers", 61, int_parser("layers", 1, 1000)),
    Param("heads", 128, int_parser("heads", 1, 1024)),
    Param("kv_heads", 8, int_parser("kv_heads", 1, 1024)),
    Param("head_dim", 128, int_parser("head_dim", 1, 1024)),
    Param("kv_lora_rank", 512, int_parser("kv_lora_rank", 1, 16384)),
    Param("rope_dim", 64, int_parser("rope_dim", 1, 1024)),
    Param("config", "", lambda text: (decode_config(text), text)[1], "an uploaded config, encoded"),
    # what-if sliders (KV and Roofline pages): 0 / "" = the chosen model's own value
    *[Param(f"wi_{short}", 0, int_parser(f"wi_{short}", 0, MAX_WHAT_IF_LAYERS if short == "layers"
                                          else MAX_WHAT_IF_WIDTH), f"what-if {field}; 0: the model's own")
      for field, short, _, _ in WHAT_IF_FIELDS],
    Param("wi_kv_dtype", "", choice_parser("wi_kv_dtype", ("", *KV_DTYPES)), "what-if KV dtype; empty: the sidebar's"),
    # KV page
    Param("kv_model2", "", choice_parser("kv_model2", lambda: ["", *model_ids()]), "a second model beside the first"),
    Param("cache_layout", "latent", choice_parser("cache_layout", ("latent", "expanded"))),
    Param("block_size", 0, int_parser("block_size", 0, 1 << 20),
          "0: the page's default (KV page: no rounding; capacity: 64 for MLA, 16 otherwise)"),
    Param("gqa_groups", 0, int_parser("gqa_groups", 0, 1024), "0: the model's own, else 8"),
    Param("cmp_kv_lora_rank", 0, int_parser("cmp_kv_lora_rank", 0, 16384), "0: the model's own or 4 d_h"),
    Param("cmp_rope_dim", 0, int_parser("cmp_rope_dim", 0, 1024), "0: the model's own or d_h / 2"),
    # capacity and roofline
    Param("num_gpus", 8, int_parser("num_gpus", 1, 4096)),
    Param("tp", 8, int_parser("tp", 1, 4096)),
    Param("dp_attention", False, bool_parser("dp_attention")),
    Param("weights_dtype", "auto", choice_parser("weights_dtype", ("auto", *WEIGHT_DTYPES))),
    Param("gpu_memory_utilization", 0.9, float_parser("gpu_memory_utilization", 0, 1, exclusive_lo=True)),
    Param("gpu_memory_gib", 0.0, float_parser("gpu_memory_gib", 0, 1e6), "0: the preset's memory"),
    Param("reserve_gib", 0.0, float_parser("reserve_gib", 0, 1e6)),
    Param("mla_path", "absorbed", choice_parser("mla_path", ("absorbed", "recompute", "expanded"))),
    Param("roofline_profile", 0, int_parser("roofline_profile", 0, 2**31 - 1),
          "a stored kernel profile's run id whose decode points the Roofline page draws; 0: none"),
    Param("peak_tflops", 0.0, float_parser("peak_tflops", 0, 1e6),
          "typed dense bf16 peak (TFLOP/s) for a GPU with none published (Apple); 0: none"),
    # serving plan (the CLI's `plan` flags; 0 = not set for the SLOs and the price)
    Param("gpus_per_node", 8, int_parser("gpus_per_node", 1, 4096)),
    Param("input_len", 4096, int_parser("input_len", 1, 10**7)),
    Param("output_len", 1024, int_parser("output_len", 1, 10**7)),
    Param("prefix_hit", 0.0, float_parser("prefix_hit", 0, 0.99)),
    Param("spec_tokens", 0, int_parser("spec_tokens", 0, 16)),
    Param("acceptance", 0.0, float_parser("acceptance", 0, 0.99)),
    Param("ttft_ms", 2000.0, float_parser("ttft_ms", 0, 1e9), "0: no TTFT objective"),
    Param("tpot_ms", 50.0, float_parser("tpot_ms", 0, 1e9), "0: no TPOT objective"),
    Param("usd_per_gpu_hour", 0.0, float_parser("usd_per_gpu_hour", 0, 1e6), "0: no price (none is built in)"),
    Param("internode_gbps", 400.0, float_parser("internode_gbps", 1e-3, 1e7, exclusive_lo=False)),
    Param("engine", "vllm", choice_parser("engine", _engines), "the engine the estimate follows"),
    Param("kernel_tables", "auto", choice_parser("kernel_tables", _table_sources), "where op times come from"),
    Param("profile", 0, int_parser("profile", 0, 2**62), "a stored kernel profile's run id; 0: none"),
    Param("pp", 0, _pp, "pipeline stages; 0: every split searched"),
    Param("traffic", False, bool_parser("traffic"), "the traffic simulation is shown"),
    Param("traffic_mode", "rate", choice_parser("traffic_mode", lambda: _traffic("TRAFFIC_MODES"))),
    Param("rate", 1.0, lambda text: _rate(text), "requests/s, one of the slider's values"),
    Param("max_concurrency", 64, int_parser("max_concurrency", 1, 1 << 20)),
    Param("num_prompts", 300, _num_prompts),
    Param("disagg", False, bool_parser("disagg"), "prefill/decode disaggregation is shown"),
    Param("prefill_gpus", 0, int_parser("prefill_gpus", 0, 4096), "0 with decode_gpus 0: pool sizes searched"),
    Param("decode_gpus", 0, int_parser("decode_gpus", 0, 4096)),
    # published-figures filters
    Param("claims_topic", [], list_parser("claims_topic", _claims_field("topic"))),
    Param("claims_verdict", [], list_parser("claims_verdict", lambda: ["differs", "reproduced"])),
    Param("claims_source", [], list_parser("claims_source", _claims_field("source"))),
    # capacity comparison (configurations 2 and 3)
    *[p for i in (2, 3) for p in (
        Param(f"cmp{i}_model", "", choice_parser(f"cmp{i}_model", lambda: ["", *model_ids()])),
        Param(f"cmp{i}_gpu", "h200", choice_parser(f"cmp{i}_gpu", gpu_ids)),
        Param(f"cmp{i}_num_gpus", 8, int_parser(f"cmp{i}_num_gpus", 1, 4096)),
        Param(f"cmp{i}_tp", 8, int_parser(f"cmp{i}_tp", 1, 4096)),
        Param(f"cmp{i}_dp_attention", False, bool_parser(f"cmp{i}_dp_attention")),
        Param(f"cmp{i}_kv_dtype", "auto", choice_parser(f"cmp{i}_kv_dtype", KV_DTYPES)),
    )],
]
# Widget keys kept across pages for the session only (a run's settings, the shown run, a toggle):
# never in a link. Default None: not set until the page seeds it.
SESSION_KEYS = (
    "_bench_device", "_bench_dtype", "_bench_quick", "_bench_batch", "_bench_context", "_bench_heads", "_bench_gqa",
    "_bench_kernels", "_bench_reps", "_bench_stream_mib", "_bench_matmul_n", "_bench_budget_s", "_bench_label",
    "_bench_show", "_bench_compare", "_bench_cmp_by_shape", "_bench_cmp_metric", "_bench_selected",
    "_bench_import_label", "_measured_samples", "_step_variants", "_paste", "_own_model", "_bench_cmp_disturbed",
    "_bench_prof_tp", "_bench_prof_all", "_bench_prof_label",
)
_P += [Param(key, None, str, "session only", url=False) for key in SESSION_KEYS]
# Session keys whose widgets do not keep their value themselves (persist_state): the Benchmark
# page's (ui/bench_*.py); ui.state.init re-assigns them on every run.
REASSIGNED = tuple(k for k in SESSION_KEYS if k.startswith("_bench_"))
PARAMS: dict[str, Param] = {p.key: p for p in _P}


def defaults() -> dict[str, Any]:
    return {k: p.default for k, p in PARAMS.items()}


def parse_query(query) -> tuple[dict[str, Any], list[str]]:
    """Values for the keys present in `query` (a mapping of str to str or list of str), and the
    warnings for values that were refused (their defaults stand) or names that are unknown."""
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for raw_key in list(query.keys())[:200]:
        key = str(raw_key)
        raw = query[raw_key]
        if isinstance(raw, (list, tuple)):
            raw = raw[-1] if raw else ""
        text = str(raw)
        param = PARAMS.get(key)
        if param is None or not param.url:
            warnings.append(f"Ignored unknown link parameter {_short(key)}.")
            continue
        if len(text) > MAX_PARAM_CHARS:
            warnings.append(f"Link parameter {key} is {len(text):,} characters long; the default is used.")
            continue
        try:
            values[key] = param.parse(text)
        except MLAError as e:
            warnings.append(f"Link parameter {key}: {e}; the default ({param.to_text(param.default) or 'none'}) is used.")
    return values, warnings


def to_query(values: dict[str, Any]) -> dict[str, str]:
    """The state as query parameters: only the values that differ from their defaults, so a
    link says what was changed and opening it (every other value at its default) gives the
    same view."""
    out = {}
    for key, param in PARAMS.items():
        value = values.get(key, param.default)
        if not param.url or value == param.default or (isinstance(value, (list, tuple)) and list(value) == list(param.default or [])):
            continue
        out[key] = param.to_text(value)
    return out
