"""Kernel profiles: measured kernel tables kept in the history, for the serving estimate (no torch).

A profile is one device's measured latency of the ops of one model's steps at one split: the
GEMMs at their per-GPU shapes, attention decode and prefill per layer kind, the MoE grouped
GEMM, elementwise ops, collectives and recurrent layers (`profile.schema.json`; docs/model.md,
"Estimated step time"). `python -m mla_core bench --profile` measures one; the serving plan
reads it back. It is a run of kind "profile" in the same SQLite store as every other run
(mla_core.store.history): one transaction, the sha256 check, read-only and full-disk handling,
export and delete all apply.

    save_profile(table, *, label=None, meta) -> int      the run id
    load_profile(run_id) -> dict                          the stored table, checked again
    list_profiles() -> list[dict]                         newest first: id, saved_at, created,
                                                          device_name, device_kind, model, tp,
                                                          engine, label, n_ops, damaged

The table, as `save_profile` takes it (all sizes integers, latency_s in seconds > 0):

    {"kind": "profile", "device": {"kind": "cuda", "name": "NVIDIA H200", ...}, "model": "deepseek-v3",
     "tp": 8, "engine": None,
     "ops": {"gemm": [{"m", "n", "k", "dtype", "latency_s"}, ...],
             "attention_decode": [{"kind", "batch", "context", "num_heads", "num_kv_heads", "k_dim", "v_dim",
                                   "kv_dtype", "latency_s"}, ...],
             "attention_prefill": [{"kind", "tokens", "prefix", "num_heads", "num_kv_heads", "k_dim", "v_dim",
                                    "window", "dtype", "latency_s"}, ...],
             "moe": [{"tokens", "hidden", "inter", "topk", "num_experts", "experts_local", "dtype", "latency_s"}, ...],
             "elementwise": [{"bytes", "latency_s"}, ...],
             "collective": [{"op", "bytes", "ranks", "latency_s"}, ...],
             "recurrent": [{"kind", "batch", "tokens", "state_elements", "latency_s"}, ...]}}

Every op class is optional (a one-GPU profile has no collectives), but a profile holds at least
one row. `meta` (who measured it and how: torch_version, dtype, wall_s, command, notes) is stored
with it and shown, never used in arithmetic; `meta["created"]` (ISO 8601) dates the measurement,
else the time of saving does.

Errors (one line each): InvalidResult for a table that fails the schema (the first problem and
where), BenchError for an unknown id or a run of another kind ("run 3 is not a kernel profile
(it is an engine import)"), StoreFull / StoreReadOnly as for every save.
"""
from __future__ import annotations

import datetime as _dt

from . import history
from .errors import BenchError, InvalidResult
from .schema import kind_name, validate_result

KIND = "profile"
TOOL = "mla_core.store.profiles"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def save_profile(table: dict, *, label: str | None = None, meta: dict, path: str | None = None) -> int:
    """Check `table` against profile.schema.json and store it as a run of kind "profile"; returns
    its run id. `meta` is kept beside the table (a dict of scalars, and `notes`: a list of lines).

    Raises InvalidResult (one line) for a table or meta that fails the schema, BenchError for a
    bad label, StoreFull / StoreReadOnly when nothing could be saved."""
    if not isinstance(table, dict):
        raise InvalidResult(f"a kernel profile is a dict, got {type(table).__name__}")
    if not isinstance(meta, dict):
        raise InvalidResult(f"a kernel profile's meta is a dict, got {type(meta).__name__}")
    data = validate_result(profile_document(table, meta), kind=KIND)
    return history.save_run(data, source="local", label=label, path=path)


def profile_document(table: dict, meta: dict) -> dict:
    """The stored form of a profile table (`bench --profile`'s, mla_core.bench.profile_plan):
    the table with schema_version, tool, kind, created (the table's, else meta's, else now) and
    `meta` beside it. Raises InvalidResult for a table of another kind."""
    if table.get("kind", KIND) != KIND:
        raise InvalidResult(f"a kernel profile has kind 'profile', got {str(table.get('kind'))[:40]!r}")
    doc = {"schema_version": 1, "tool": TOOL, **table, "kind": KIND, "meta": dict(meta)}
    created = meta.get("created")
    doc["created"] = table.get("created") or (created if isinstance(created, str) else None) or _now()
    doc["meta"].pop("created", None)
    return doc


def validate_table(table) -> dict:
    """Check a profile table (a dict, before it is saved) against profile.schema.json as
    `save_profile` would store it; return the table. The one schema a profile has: the
    benchmark's writer (mla_core.bench.profile) checks its output here. Raises InvalidResult
    (one line naming the first problem and where)."""
    if not isinstance(table, dict):
        raise InvalidResult(f"a profile must be a JSON object, got {type(table).__name__}")
    validate_result(profile_document(table, {}), kind=KIND)
    return table


def load_profile(run_id: int, *, path: str | None = None) -> dict:
    """The stored profile `run_id` (the table with schema_version, created, meta), checked again
    against the schema. Raises BenchError for an unknown id, a damaged run, or a run of another
    kind."""
    run = history.get_run(run_id, path=path)
    found = run["result"].get("kind", "kernels") if isinstance(run["result"], dict) else "?"
    if found != KIND:
        raise BenchError(f"run {run_id} is not a kernel profile (it is {kind_name(found)}); "
                         "`bench history --kind profile` lists the profiles")
    return validate_result(run["result"], kind=KIND)


def list_profiles(*, path: str | None = None) -> list[dict]:
    """The stored profiles, newest first: id, saved_at, created, device_name, device_kind, model,
    tp, engine, label, n_ops (rows over every op class), damaged (None, or why the run cannot be
    trusted: its model and tp are then None). An absent store lists nothing (and creates none)."""
    import os

    if path is None and not os.path.exists(history.default_path()):
        return []
    out = []
    for r in history.list_runs(path=path, kind=KIND):
        row = {"id": r["id"], "saved_at": r["saved_at"], "created": r.get("created"),
               "device_name": r.get("device_name"), "device_kind": r.get("device_kind"), "model": None, "tp": None,
               "engine": None, "label": r.get("label"), "n_ops": r.get("n_results"), "damaged": r.get("damaged")}
        if row["damaged"] is None:
            try:
                body = history.get_run(r["id"], path=path)["result"]
                row.update(model=body.get("model"), tp=body.get("tp"), engine=body.get("engine"))
            except BenchError as e:
                row["damaged"] = str(e)
        out.append(row)
    return out

