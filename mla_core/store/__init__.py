"""mla_core.store: what the benchmarks leave behind, read and written without torch.

The live measurement (`mla_core.bench`) needs torch; what it produces, and what users import,
does not: the serving plan, the pages and the command line read it here. This package never
imports `mla_core.bench` (a test holds it to that); `mla_core.bench` imports it.

Modules:
    history      the local SQLite store of runs of every kind (kernels, collectives, engine,
                 profile): save_run, list_runs, get_run, delete_run, export_json / export_csv,
                 notices, interrupted runs; its faults (a full disk, a read-only store, a changed
                 byte, a damaged file) each with their one-line message
    profiles     kernel profiles for the serving estimate: save_profile, load_profile,
                 list_profiles (profile.schema.json)
    profile_roofline  a profile's attention decode rows as roofline points (bytes, flops,
                 intensity, achieved FLOP/s), counted as the Roofline page's predictions
    schema       validate_result: the JSON Schemas beside this file (result, collectives,
                 engine, profile) and the checks JSON Schema cannot make; KERNELS
    engines      engine benchmark files imported (vLLM `bench serve --save-result`, SGLang's
                 bench_serving and bench_one_batch) and compared with the serving model;
                 `python -m mla_core bench import FILE`
    report       what the Benchmark page shows of a kernels result (ceilings, shares, rows)
    disturbance  whether a run was disturbed, with its evidence and thresholds
    runlock      one benchmark at a time on this machine (a lock file beside the history)
    paths        where the store is (MLA_EXPLORER_HISTORY, else var/history.sqlite3)
    files        --out checked before a run, result files written atomically
    errors       BenchError and the errors the store shares with every run
    cli          `python -m mla_core bench history`: the stored runs, as a table or JSON

Public names are imported lazily:
    save_profile(table, *, label=None, meta) -> int, load_profile(run_id) -> dict,
    list_profiles() -> list[dict], validate_result(obj, kind="kernels") -> dict
"""
from __future__ import annotations

_PUBLIC = {
    "save_profile": "profiles",
    "load_profile": "profiles",
    "list_profiles": "profiles",
    "validate_result": "schema",
    "BenchError": "errors",
    "InvalidResult": "errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    import importlib

    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'mla_core.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
