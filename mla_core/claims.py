"""The seed documents' numeric claims, recomputed by the core (data/claims.json).

Each claim holds a paraphrase, the stated figure and its unit, and a computation written as a
small expression tree over the core's own functions:

    {"op": "kv_bytes_per_token", "model": M, "kv_dtype": "bf16", "layout": "latent"}
    {"op": "kv_cache_bytes", "model": M, "context": T, "batch": B, "kv_dtype": ..., "layout": ...}
    {"op": "attention_intensity", "model": M, "mla_path": "absorbed", "kv_dtype": "bf16"}
    {"op": "gqa_groups_equivalent", "model": M, "kv_dtype": "bf16"}
    {"op": "bandwidth", "gpu": "h100-sxm"}                       -> B/s of a GPU preset
    {"op": "mul" | "div" | "sub" | "add", "args": [E, E, ...]}   -> arithmetic on sub-expressions
    {"op": "reduction_pct", "args": [smaller, larger]}          -> 100 * (1 - smaller / larger)
    numbers stand for themselves.

M is a preset id ("deepseek-v3") or a hand-set architecture ({"attention": "mha", "layers": 60,
"heads": 128, "head_dim": 128}, the arguments of `spec.synthetic_model`).

`compute` is the figure under this tool's conventions (MODEL.md; "1M tokens" = 10**6; GB =
10**9 B, GiB = 2**30 B; an MLA model's MHA baseline uses d_h = qk_nope_head_dim, DeepSeek-V2
Table 1). Where the stated figure differs, `reason` says why and `as_claimed` recomputes the
claim under the convention (or slip) that reproduces it, so the explanation is itself checked.

Tolerance: a figure printed with n decimals matches within half a unit of its last digit (a
little slack for float rounding); an approximate figure ("about", "~") within 5 %.
"""
from __future__ import annotations

import json
import os

from .errors import MLAError

UNITS = {
    "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "s": 1, "ms": 1e-3,
    "x": 1, "%": 1, "flop/B": 1, "tokens/s": 1, "elements": 1, "groups": 1, "d_h*l": 1,
}
APPROX_REL = 0.05


def _model(spec):
    from .presets import load_model
    from .spec import synthetic_model

    if isinstance(spec, str):
        return load_model(spec)
    if isinstance(spec, dict):
        spec = dict(spec)
        return synthetic_model(spec.pop("attention"), **spec)
    raise MLAError(f"bad model in claim: {spec!r}")


def evaluate_expr(expr) -> float:
    """Evaluate a claim expression (see the module docstring) to a number in base units."""
    from .kv import compare_variants, kv_bytes_per_token, kv_cache_bytes
    from .presets import load_gpu
    from .roofline import decode_attention

    if isinstance(expr, bool) or expr is None:
        raise MLAError(f"bad claim expression {expr!r}")
    if isinstance(expr, (int, float)):
        return expr
    op = expr.get("op")
    args = [evaluate_expr(a) for a in expr.get("args", [])]
    if op == "mul":
        out = 1
        for a in args:
            out *= a
        return out
    if op == "add":
        return sum(args)
    if op == "sub":
        return args[0] - sum(args[1:])
    if op == "div":
        return args[0] / args[1]
    if op == "reduction_pct":
        return 100.0 * (1.0 - args[0] / args[1])
    if op == "bandwidth":
        return load_gpu(expr["gpu"]).bandwidth_Bps
    model = _model(expr.get("model"))
    dtype = expr.get("kv_dtype", "bf16")
    layout = expr.get("layout", "latent")
    if op == "kv_bytes_per_token":
        return kv_bytes_per_token(model, dtype, layout)
    if op == "kv_cache_bytes":
        return kv_cache_bytes(model, expr["context"], expr.get("batch", 1), dtype, layout)
    if op == "attention_intensity":
        r = decode_attention(model, expr.get("context", 4096), 1, dtype, expr.get("mla_path", "absorbed"))
        return r["attention_intensity_flop_per_byte"]
    if op == "gqa_groups_equivalent":
        rows = compare_variants(model, 1, 1, dtype)
        return next(r for r in rows if r["variant"] == "MLA (latent)")["gqa_groups_equivalent"]
    raise MLAError(f"unknown claim operation {op!r}")


def tolerance(stated: dict) -> tuple[float, float]:
    """(absolute, relative) tolerance for a stated figure: half a unit of its last printed
    digit, or 5 % when the document gives it as approximate."""
    text = str(stated.get("text", stated["value"]))
    decimals = len(text.split(".")[1]) if "." in text else 0
    absolute = 0.5 * 10.0 ** (-decimals) * 1.0001
    return absolute, (APPROX_REL if stated.get("approx") else 0.0)


def matches(value: float, stated: dict) -> bool:
    absolute, relative = tolerance(stated)
    want = stated["value"]
    return abs(value - want) <= max(absolute, relative * abs(want))


def in_unit(value: float, unit: str) -> float:
    try:
        return value / UNITS[unit]
    except KeyError:
        raise MLAError(f"unknown unit {unit!r} in claims") from None


def evaluate_claim(claim: dict) -> dict:
    """One claim recomputed: adds `computed` (in the stated unit), `verdict` ('reproduced' or
    'differs'), and for differing claims `as_claimed` (the slip or convention replayed) with
    `reason_confirmed` (True when that replay gives the stated figure)."""
    stated = claim["stated"]
    unit = stated["unit"]
    computed = in_unit(evaluate_expr(claim["compute"]), unit)
    out = dict(claim)
    out["computed"] = computed
    out["verdict"] = "reproduced" if matches(computed, stated) else "differs"
    if "as_claimed" in claim:
        replay = in_unit(evaluate_expr(claim["as_claimed"]), unit)
        out["as_claimed_value"] = replay
        out["reason_confirmed"] = matches(replay, stated)
    return out


def load_claims(path: str | None = None) -> list[dict]:
    """The claims of data/claims.json (or `path`)."""
    if path is None:
        from .presets import DATA_DIR

        path = os.path.join(DATA_DIR, "claims.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)["claims"]


def evaluate_all(path: str | None = None) -> list[dict]:
    """Every claim recomputed (see `evaluate_claim`)."""
    return [evaluate_claim(c) for c in load_claims(path)]
