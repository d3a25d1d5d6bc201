"""Check a result JSON (one this package wrote, or one a user imports) against its schema.

Three kinds of result share this check, the history and schema_version 1, told apart by the
top-level `kind` field: "kernels" (the default when absent: the kernel benchmark,
`result.schema.json`), "collectives" (`collectives.schema.json`, torch.distributed bandwidth)
and "engine" (`engine.schema.json`, an imported vLLM / SGLang benchmark). The schemas are
beside this file (JSON Schema 2020-12, checked with the `jsonschema` library). On top of it: at most 1 MiB, no NaN or Infinity anywhere (JSON has
none; Python's json module would accept them), `min_s <= median_s`. No torch here.
"""
from __future__ import annotations

import json
import math
import os

from .errors import InvalidResult

SCHEMA_VERSION = 1
MAX_RESULT_BYTES = 1 << 20  # 1 MiB: a 64-point sweep of every kernel is ~250 KiB
_HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.join(_HERE, "result.schema.json")
KINDS = ("kernels", "collectives", "engine")
SCHEMA_PATHS = {"kernels": SCHEMA_PATH, "collectives": os.path.join(_HERE, "collectives.schema.json"),
                "engine": os.path.join(_HERE, "engine.schema.json")}

_validators: dict = {}


def result_schema(kind: str = "kernels") -> dict:
    """The JSON Schema of a result kind as a dict (a fresh copy)."""
    with open(SCHEMA_PATHS[kind], encoding="utf-8") as f:
        return json.load(f)


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
    "collectives"; "engine"), or None for any of KINDS (the history stores all three).

    Raises InvalidResult (a BenchError; one line naming the first problem and where it is):
    over 1 MiB, not UTF-8, not JSON, NaN/Infinity, a negative or zero time, an unknown kernel,
    a wrong type, a missing or unknown field, `min_s` above `median_s`.
    """
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        if len(raw) > MAX_RESULT_BYTES:
            raise InvalidResult(f"result JSON is {len(raw):,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidResult("result JSON is not UTF-8 text") from None
        obj = text
    if isinstance(obj, str):
        if len(obj.encode("utf-8", "surrogatepass")) > MAX_RESULT_BYTES:
            raise InvalidResult(f"result JSON is over {MAX_RESULT_BYTES:,} bytes (1 MiB)")
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
        if size > MAX_RESULT_BYTES:
            raise InvalidResult(f"result JSON is {size:,} bytes; the limit is {MAX_RESULT_BYTES:,} (1 MiB)")
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
                 "kernels": "the kernel results"}.get(found, "its own section")
        raise InvalidResult(f"this is a {found} result, not a {kind} result; import it in {where}")
    error = _first_error(data, found)
    if error is not None:
        raise InvalidResult(error)
    for i, r in enumerate(data.get("results") or []):
        if r["min_s"] > r["median_s"]:
            raise InvalidResult(f"results[{i}]: min_s {r['min_s']:g} is above median_s {r['median_s']:g}")
    return data


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
