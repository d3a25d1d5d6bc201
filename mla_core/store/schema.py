"""Check a result JSON (one this project wrote, or one a user imports) against its schema.

Four kinds of result share this check, the history and schema_version 1, told apart by the
top-level `kind` field: "kernels" (the default when absent: the kernel benchmark,
`result.schema.json`), "collectives" (`collectives.schema.json`, torch.distributed bandwidth),
"engine" (`engine.schema.json`, an imported vLLM / SGLang benchmark) and "profile"
(`profile.schema.json`, a kernel table for the serving estimate; mla_core.store.profiles). The
schemas are beside this file (JSON Schema 2020-12, checked with the `jsonschema` library). On
top of them: at most 1 MiB (a profile: 8 MiB), no NaN or Infinity anywhere (JSON has none;
Python's json module would accept them), `min_s <= median_s`; a profile's MoE rows hold no
more local or routed experts than there are, and it holds at least one op. No torch here.
"""
from __future__ import annotations

import json
import math
import os

from .errors import InvalidResult

# The kernels a kernels result measures (result.schema.json's `kernel` enum), in the order every
# table lists them; the benchmark's configuration (mla_core.bench.config) runs these.
KERNELS: tuple[str, ...] = (
    "copy",  # dst.copy_(src): BabelStream Copy, counts read + write (2N bytes for N copied)
    "read",  # src.sum(): a read-only reduction, counts N bytes
    "matmul",  # C = A @ B, square n x n at the run dtype: 2 n^3 flops
    "mha_decode",  # SDPA, n_kv = n_h
    "gqa_decode",  # SDPA, n_kv = gqa_groups, K/V read once per group
    "mqa_decode",  # SDPA, n_kv = 1
    "mla_absorbed_decode",  # W_UK folded into the query, attention over the latent + RoPE key
    "mla_recompute_decode",  # per-head K and V rebuilt from the latent every step
)
DECODE_KERNELS = KERNELS[3:]

SCHEMA_VERSION = 1
MAX_RESULT_BYTES = 1 << 20  # 1 MiB: a 64-point sweep of every kernel is ~250 KiB
MAX_PROFILE_BYTES = 8 << 20  # 8 MiB: ~100 B a row, tens of thousands of op shapes
_HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.join(_HERE, "result.schema.json")
KINDS = ("kernels", "collectives", "engine", "profile")
SCHEMA_PATHS = {"kernels": SCHEMA_PATH, "collectives": os.path.join(_HERE, "collectives.schema.json"),
                "engine": os.path.join(_HERE, "engine.schema.json"),
                "profile": os.path.join(_HERE, "profile.schema.json")}
# Each kind in the words a message uses ("run 3 is not a collectives run (it is an engine import)").
KIND_NAMES = {"kernels": "a kernel benchmark run", "collectives": "a collectives run", "engine": "an engine import",
              "profile": "a kernel profile"}
PROFILE_OPS = ("gemm", "attention_decode", "attention_prefill", "moe", "elementwise", "collective", "recurrent")

_validators: dict = {}


def result_schema(kind: str = "kernels") -> dict:
    """The JSON Schema of a result kind as a dict (a fresh copy)."""
    with open(SCHEMA_PATHS[kind], encoding="utf-8") as f:
        return json.load(f)


def kind_name(kind) -> str:
    """`kind` in a message's words, with its article: 'an engine import'."""
    return KIND_NAMES.get(kind, f"a run of kind {str(kind)[:40]!r}")


def result_kind(data) -> str:
    """The kind of a result dict: its `kind` field, "kernels" when absent."""
    return data.get("kind", "kernels") if isinstance(data, dict) else "kernels"


def _get_validator(kind: str = "kernels"):
    if kind not in _validators:
        from jsonschema import Draft202012Validator

        schema = result_schema(kind)
        Draft202012Validator.check_schema(schema)
        _validators[kind] = Draft202012Validator(schema)
    return _validators[kind]


def _reject_constant(name: str):
    raise InvalidResult(f"result JSON holds {name}, which is not a number JSON allows")


def _no_dupes(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise InvalidResult(f"result JSON repeats the key {k[:40]!r}")
        out[k] = v
    return out


def validate_result(obj, kind: str | None = "kernels") -> dict:
    """Return `obj` (a dict, or JSON text as str/bytes) as a checked result dict.

    `kind`: the result kind required ("kernels", the default, what the kernel pages draw;
    "collectives"; "engine"; "profile"), or None for any of KINDS (the history stores all).

    Raises InvalidResult (a BenchError; one line naming the first problem and where it is):
    over 1 MiB (a profile: 8 MiB), not UTF-8, not JSON, NaN/Infinity, a negative or zero time,
    an unknown kernel, a wrong type, a missing or unknown field, `min_s` above `median_s`.
    """
    cap = MAX_RESULT_BYTES if kind not in (None, "profile") else MAX_PROFILE_BYTES
    size = None
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        size = len(raw)
        if size > cap:
            raise InvalidResult(f"result JSON is {size:,} bytes; the limit is {cap:,} ({_mib(cap)})")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidResult("result JSON is not UTF-8 text") from None
        obj = text
    if isinstance(obj, str):
        size = len(obj.encode("utf-8", "surrogatepass"))
        if size > cap:
            raise InvalidResult(f"result JSON is over {cap:,} bytes ({_mib(cap)})")
        if not obj.strip():
            raise InvalidResult("result file is empty: there is no JSON in it")
        try:
            data = json.loads(obj, parse_constant=_reject_constant, object_pairs_hook=_no_dupes)
        except InvalidResult:
            raise
        except (ValueError, RecursionError) as e:
            raise InvalidResult(f"result file is not JSON: {str(e).splitlines()[0][:120]}") from None
    elif isinstance(obj, dict):
        _check_finite(obj, "$")
        try:
            size = len(json.dumps(obj, allow_nan=False).encode("utf-8"))
        except (TypeError, ValueError) as e:
            raise InvalidResult(f"result is not JSON-able: {str(e)[:120]}") from None
        if size > cap:
            raise InvalidResult(f"result JSON is {size:,} bytes; the limit is {cap:,} ({_mib(cap)})")
        data = json.loads(json.dumps(obj))  # a private copy: the caller's dict is not kept
    else:
        raise InvalidResult(f"a result must be a JSON object (dict, str or bytes), got {type(obj).__name__}")
    if not isinstance(data, dict):
        raise InvalidResult(f"result JSON must be an object, got {type(data).__name__}")
    _check_finite(data, "$")
    found = data.get("kind", "kernels")
    if found not in KINDS:
        raise InvalidResult(f"result JSON, kind: {str(found)[:40]!r} is not one of {', '.join(KINDS)}")
    if kind is not None and found != kind:
        where = {"collectives": "the Collectives section", "engine": "the Engine runs section",
                 "kernels": "the kernel results", "profile": "the kernel profiles"}.get(found, "its own section")
        raise InvalidResult(f"this is a {found} result, not a {kind} result; import it in {where}")
    if found != "profile" and size is not None and size > MAX_RESULT_BYTES:
        raise InvalidResult(f"result JSON is {size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
    error = _first_error(data, found)
    if error is not None:
        raise InvalidResult(error)
    for i, r in enumerate(data.get("results") or []):
        if r["min_s"] > r["median_s"]:
            raise InvalidResult(f"results[{i}]: min_s {r['min_s']:g} is above median_s {r['median_s']:g}")
    if found == "profile":
        _check_profile(data)
    return data


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def _check_profile(data: dict) -> None:
    """What JSON Schema cannot say of a profile: some op measured; MoE experts consistent."""
    ops = data["ops"]
    if not any(ops.get(name) for name in PROFILE_OPS):
        raise InvalidResult("result JSON, ops: the profile holds no measured op")
    for i, r in enumerate(ops.get("moe") or []):
        for key in ("topk", "experts_local"):
            if r[key] > r["num_experts"]:
                raise InvalidResult(f"result JSON, ops.moe[{i}]: {key} {r[key]} is above num_experts "
                                    f"{r['num_experts']}")


MAX_INT = 2**63 - 1


def _check_finite(x, where: str, depth: int = 0) -> None:
    if depth > 32:
        raise InvalidResult(f"result JSON is nested too deeply at {where}")
    if isinstance(x, float):
        if not math.isfinite(x):
            raise InvalidResult(f"{where}: {x!r} is not a finite number")
    elif isinstance(x, int) and not isinstance(x, bool):
        if not -MAX_INT <= x <= MAX_INT:  # what SQLite stores, and far beyond any real figure
            raise InvalidResult(f"{where}: an integer of {len(str(abs(x)))} digits is out of range (at most 2^63 - 1)")
    elif isinstance(x, dict):
        for k, v in x.items():
            if not isinstance(k, str):
                raise InvalidResult(f"{where}: key {k!r} is not a string")
            _check_finite(v, f"{where}.{k[:40]}", depth + 1)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _check_finite(v, f"{where}[{i}]", depth + 1)


def _first_error(data: dict, kind: str = "kernels") -> str | None:
    from jsonschema.exceptions import best_match

    errors = list(_get_validator(kind).iter_errors(data))
    if not errors:
        return None
    err = best_match(errors)
    # Descend into oneOf/anyOf/if-then contexts to the most specific message.
    while err.context:
        err = best_match(err.context)
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".") or "top level"
    message = " ".join(err.message.split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"result JSON, {path}: {message}"
