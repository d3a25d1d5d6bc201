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

`compute` is the figure under this tool's conventions (docs/model.md; a document's "million tokens" = 10**6; GB =
10**9 B, GiB = 2**30 B; an MLA model's MHA baseline uses d_h = qk_nope_head_dim, DeepSeek-V2
Table 1). Where the stated figure differs, `reason` says why and `as_claimed` recomputes the
claim under the convention (or slip) that reproduces it, so the explanation is itself checked.

Tolerance: a figure printed with n decimals matches within half a unit of its last digit (a
little slack for float rounding); an approximate figure ("about", "~") within 5 %.
"""
from __future__ import annotations

import json
import math
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
    from .config import synthetic_model

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


# ---------------------------------------------------------------------------------------------
# For the claims page: counts, the figures as text, and the computation written out.

def summarize(evaluated: list[dict]) -> dict:
    """Counts over `evaluate_claim` results: `total`, `reproduced`, `differs`, `replayed`
    (differing claims that carry an `as_claimed` replay), `reason_confirmed` (replays that give
    the stated figure), and `by_topic` / `by_source`: lists of {`topic` or `source`, `claims`,
    `reproduced`, `differs`} in order of first appearance."""
    def grouped(key) -> list[dict]:
        groups: dict[str, dict] = {}
        for c in evaluated:
            name = key(c)
            g = groups.setdefault(name, {"claims": 0, "reproduced": 0, "differs": 0})
            g["claims"] += 1
            g[c["verdict"]] += 1
        return [{"name": k, **v} for k, v in groups.items()]

    return {
        "total": len(evaluated),
        "reproduced": sum(c["verdict"] == "reproduced" for c in evaluated),
        "differs": sum(c["verdict"] == "differs" for c in evaluated),
        "replayed": sum("as_claimed_value" in c for c in evaluated),
        "reason_confirmed": sum(bool(c.get("reason_confirmed")) for c in evaluated),
        "by_topic": [{"topic": g.pop("name"), **g} for g in grouped(lambda c: c["topic"])],
        "by_source": [{"source": g.pop("name"), **g} for g in grouped(lambda c: c["source"]["seed"])],
    }


def _unit_suffix(text: str, unit: str) -> str:
    return f"{text}{unit}" if unit in ("x", "%") else f"{text} {unit}"


def format_figure(value: float, unit: str, digits: int = 4) -> str:
    """A recomputed figure in a claim's unit, `digits` significant digits, thousands separated:
    (241.7778, 'flop/B') -> '241.8 flop/B', (56.889, 'x') -> '56.89x', (35136.0, 'elements')
    -> '35,136 elements'. NaN and infinities print as 'n/a'."""
    if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        return "n/a"
    a = abs(value)
    if a == 0:
        text = "0"
    elif a >= 10 ** (digits - 1):
        text = f"{value:,.0f}"
    else:
        decimals = digits - 1 - math.floor(math.log10(a))
        text = f"{value:,.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    return _unit_suffix(text, unit)


def format_stated(stated: dict) -> str:
    """A stated figure as the document prints it, with its unit and '~' when approximate:
    {'value': 44, 'text': '44', 'unit': 'x', 'approx': True} -> '~44x'."""
    text = str(stated.get("text", stated["value"]))
    decimals = len(text.split(".")[1]) if "." in text else 0
    shown = f"{float(stated['value']):,.{decimals}f}"
    return ("~" if stated.get("approx") else "") + _unit_suffix(shown, stated["unit"])


_INFIX = {"mul": " * ", "add": " + ", "sub": " - ", "div": " / "}


def _describe_model(spec) -> str:
    if isinstance(spec, dict):
        rest = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "attention")
        return f"{str(spec.get('attention', '?')).upper()}({rest})"
    return str(spec)


def describe_expr(expr) -> str:
    """A claim's computation written out (module docstring's operations), e.g.
    'kv_bytes_per_token(deepseek-v3, bf16, latent) / 2'. Numbers print with thousands
    separators; arithmetic sub-expressions are parenthesised."""
    if isinstance(expr, bool) or expr is None:
        return repr(expr)
    if isinstance(expr, int):
        return f"{expr:,}"
    if isinstance(expr, float):
        return f"{expr:,.0f}" if expr.is_integer() else f"{expr:g}"
    if not isinstance(expr, dict):
        return repr(expr)
    op = expr.get("op")

    def sub(e) -> str:
        text = describe_expr(e)
        return f"({text})" if isinstance(e, dict) and e.get("op") in _INFIX else text

    args = expr.get("args", [])
    if op in _INFIX:
        return _INFIX[op].join(sub(a) for a in args)
    if op == "reduction_pct":
        return f"100 * (1 - {sub(args[0])} / {sub(args[1])})"
    if op == "bandwidth":
        return f"bandwidth({expr.get('gpu')})"
    model = _describe_model(expr.get("model"))
    dtype = expr.get("kv_dtype", "bf16")
    if op == "kv_bytes_per_token":
        return f"kv_bytes_per_token({model}, {dtype}, {expr.get('layout', 'latent')})"
    if op == "kv_cache_bytes":
        return (f"kv_cache_bytes({model}, T={expr.get('context', 0):,}, B={expr.get('batch', 1):,}, {dtype}, "
                f"{expr.get('layout', 'latent')})")
    if op == "attention_intensity":
        path = f", {expr['mla_path']}" if expr.get("mla_path") else ""
        return f"attention_intensity({model}{path}, {dtype})"
    if op == "gqa_groups_equivalent":
        return f"gqa_groups_equivalent({model}, {dtype})"
    return f"{op}(...)"
